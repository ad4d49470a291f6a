"""Several LoRA adapters on one base in `lmlab serve`: each request's `model` picks the base or an adapter,
its reply is what that adapter alone gives, requests to different adapters decode in one batch, and the
base's weights are shared, not copied."""

import concurrent.futures
import json
import warnings

import openai
import pytest
import torch
import transformers

from chat_models import tiny_chat_model
from lmlab.cli.main import main
from lmlab.errors import LmlabError
from lmlab.generation.config import GenerationConfig
from lmlab.inference.adapters import attach_adapters
from lmlab.inference.engine import Engine
from lmlab.inference.server import create_app
from lmlab.models.load import load
from lmlab.models.peft_files import base_fingerprint, load_peft, save_peft
from lmlab.modules.peft import apply_peft, peft_parameters
from lmlab.modules.peft.multi_lora import BASE, MultiLoRALinear
from lmlab.tokenizers.chat import chat_prompt
from served import lmlab_serve, served

BASE_NAME = "tiny-chat"
# name -> LoRA settings: the two adapt different layers with different ranks and scales (the LM head tied).
ADAPTERS = {"math": {"rank": 4, "alpha": 8.0, "targets": ["qkv", "out"]},
            "chat": {"rank": 2, "alpha": 5.0, "targets": ["gate_up", "down", "lm_head"]}}
PROMPTS = ["1+2", "3+4=", "9+9", "2+"]


def save_adapter(base_dir, directory, method: str, seed: int, **settings):
    """A trained-looking adapter of the base model: random PEFT parameters, saved by save_peft."""
    model, _ = load(base_dir)
    apply_peft(model, method, **settings)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in peft_parameters(model).values():
            p.copy_(torch.randn_like(p) * 0.5)
    return save_peft(model, directory, method, settings, base_fingerprint(model))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    base = tiny_chat_model(root / "base", context_length=128)
    dirs = {name: save_adapter(base, root / name / "adapter", "lora", i, **s) for i, (name, s) in
            enumerate(ADAPTERS.items())}
    dirs["math"] = root / "math"  # a run directory: its adapter/ is read
    return base, dirs


@pytest.fixture(scope="module")
def references(files):
    """The base model, and each adapter loaded alone onto a base of its own (as `lmlab generate` runs it)."""
    base, dirs = files
    models = {BASE_NAME: load(base)[0].eval()}
    for name, directory in dirs.items():
        models[name] = load_peft(load(base)[0], directory / "adapter" if name == "math" else directory).eval()
    return models


@pytest.fixture(scope="module")
def server(files):
    base, dirs = files
    model, tokenizer = load(base)
    rows = attach_adapters(model, list(dirs.items()))
    with Engine(model, tokenizer, slots=4, adapters=rows) as engine:
        with served(create_app(engine, tokenizer, BASE_NAME, model.config.context_length,
                               adapter_names=tuple(dirs))) as url:
            yield openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60), tokenizer


@torch.no_grad()
def greedy(model, prompt: list[int], steps: int, stop_ids=()) -> list[int]:
    """The greedy continuation of `prompt` by whole forward passes, up to a stop id (left out)."""
    ids = []
    for _ in range(steps):
        token = int(model(torch.tensor([prompt + ids]))[0, -1].argmax())
        if token in stop_ids:
            break
        ids.append(token)
    return ids


def test_models_lists_the_base_and_each_adapter(server):
    client, _ = server
    assert [m.id for m in client.models.list()] == [BASE_NAME, "math", "chat"]
    assert client.models.retrieve("chat").id == "chat"


@pytest.mark.parametrize("name", [BASE_NAME, "math", "chat"])
def test_each_model_replies_as_it_does_alone(server, references, name):
    client, tokenizer = server
    prompt = tokenizer.encode("1+2")
    r = client.completions.create(model=name, prompt=prompt, max_tokens=8, temperature=0)
    assert r.model == name
    assert r.choices[0].text == tokenizer.decode(greedy(references[name], prompt, 8))

    messages = [{"role": "user", "content": "3+4?"}]
    chat = client.chat.completions.create(model=name, messages=messages, max_tokens=8, temperature=0)
    expected = greedy(references[name], tokenizer.encode(chat_prompt(tokenizer, messages)), 8, tokenizer.stop_ids)
    assert chat.choices[0].message.content == tokenizer.decode(expected).lstrip()


def test_the_adapters_change_the_reply(references, server):
    _, tokenizer = server
    prompt = tokenizer.encode("1+2")
    replies = {name: tuple(greedy(model, prompt, 8)) for name, model in references.items()}
    assert len(set(replies.values())) == 3


def test_requests_to_different_adapters_decode_in_one_batch(files, references):
    base, dirs = files
    model, tokenizer = load(base)
    engine = Engine(model, tokenizer, slots=len(PROMPTS) * 3, adapters=attach_adapters(model, list(dirs.items())))
    names = [BASE_NAME, *dirs]
    asked = [(tokenizer.encode(p), k) for p in PROMPTS for k in range(BASE, len(dirs))]
    requests = [engine.submit(ids, GenerationConfig(max_new_tokens=6), adapter=k) for ids, k in asked]
    with engine:  # every request is waiting when the thread starts: they all take a slot at once
        replies = [[t for chunk in request for t in chunk.token_ids] for request in requests]
    assert engine.stats()["steps"] == 5  # one step per token after the prefill's, all 12 rows together
    assert replies == [greedy(references[names[k + 1]], ids, 6) for ids, k in asked]


def test_concurrent_requests_get_what_they_get_alone(server):
    client, _ = server
    asked = [(name, p) for p in PROMPTS for name in (BASE_NAME, "math", "chat")]

    def reply(i: int) -> str:
        name, prompt = asked[i]
        return client.completions.create(model=name, prompt=prompt, max_tokens=6, temperature=0).choices[0].text

    alone = [reply(i) for i in range(len(asked))]
    with concurrent.futures.ThreadPoolExecutor(len(asked)) as pool:
        assert list(pool.map(reply, range(len(asked)))) == alone


def test_the_base_weights_are_shared_not_copied(files):
    base, dirs = files
    model, _ = load(base)
    before = {id(p): p.data_ptr() for p in model.parameters()}
    attach_adapters(model, list(dirs.items()))
    assert {id(p): p.data_ptr() for p in model.parameters()} == before  # the same tensors, no new parameter
    wrapped = [m for m in model.modules() if isinstance(m, MultiLoRALinear)]
    assert len(wrapped) == 2 * 4 + 1  # qkv and out (math), gate_up and down (chat) in 2 blocks, the LM head
    assert model.lm_head.base.weight is model.token_embedding.weight  # still tied
    added = sum(t.numel() for m in wrapped for a, b, _ in m.updates.values() for t in (a, b))
    assert added < 0.2 * sum(p.numel() for p in model.parameters())


def test_an_unknown_model_is_a_404_for_that_request_alone(server):
    client, _ = server
    stream = client.completions.create(model="math", prompt="1+", max_tokens=30, temperature=0, stream=True)
    with pytest.raises(openai.NotFoundError, match="'nope' does not exist here.*tiny-chat, math, chat"):
        client.completions.create(model="nope", prompt="1+", max_tokens=3)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    events = list(stream)
    assert events[-1].choices[0].finish_reason == "length"


def test_lmlab_serve_serves_the_adapters_it_is_given(files, references):
    base, dirs = files
    _, tokenizer = load(base)
    args = ["--model", base, "--adapter", f"sums={dirs['math']}", "--adapter", dirs["chat"], "--slots", "2"]
    with lmlab_serve(args, env={"OMP_NUM_THREADS": "1"}) as port:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=60)
        assert [m.id for m in client.models.list()] == ["base", "sums", "chat"]  # chat/adapter: named by its run
        prompt = tokenizer.encode("2+")
        for name, reference in (("sums", "math"), ("chat", "chat")):
            text = client.completions.create(model=name, prompt=prompt, max_tokens=6, temperature=0).choices[0].text
            assert text == tokenizer.decode(greedy(references[reference], prompt, 6))


def test_an_adapter_other_than_lora_is_refused(files, tmp_path):
    base, _ = files
    prefix = save_adapter(base, tmp_path / "prefix", "prefix", 0, n_prefix=3)
    model, _ = load(base)
    with pytest.raises(LmlabError, match="only LoRA adapters share one base.*--model RUN_DIR"):
        attach_adapters(model, [("p", prefix)])


def peft_adapter(base_dir, directory, modules: list[str], seed: int):
    """A LoRA adapter of the base written by HF peft itself (random B), and the PeftModel that wrote it."""
    peft = pytest.importorskip("peft")
    reference = transformers.AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="eager").eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a tied lm_head
        tuned = peft.get_peft_model(reference, peft.LoraConfig(r=3, lora_alpha=7, target_modules=modules)).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in tuned.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    tuned.save_pretrained(directory)
    return tuned


@torch.no_grad()
def greedy_logprobs(forward, prompt: list[int], steps: int) -> list[tuple[int, float]]:
    """Each step's greedy token and its log-probability, by whole forward passes of `forward` (ids -> logits)."""
    chosen = []
    for _ in range(steps):
        logprob, token = forward(torch.tensor([prompt + [t for t, _ in chosen]]))[0, -1].log_softmax(-1).max(-1)
        chosen.append((int(token), float(logprob)))
    return chosen


@pytest.mark.parity
def test_adapters_peft_wrote_decode_in_one_batch_as_peft_runs_them(files, tmp_path):
    base, _ = files
    tuned = {"qv": peft_adapter(base, tmp_path / "qv", ["q_proj", "v_proj"], 1),
             "mlp": peft_adapter(base, tmp_path / "mlp", ["o_proj", "up_proj", "down_proj"], 2)}
    model, tokenizer = load(base)
    engine = Engine(model, tokenizer, slots=4, adapters=attach_adapters(model, [(n, tmp_path / n) for n in tuned]))
    prompts = [tokenizer.encode(p) for p in ("1+2", "3+4=")]
    asked = [(ids, k) for ids in prompts for k in range(len(tuned))]
    requests = [engine.submit(ids, GenerationConfig(max_new_tokens=5), 0, adapter=k) for ids, k in asked]
    with engine:  # all four in one batch
        got = [[(p.token_id, p.logprob) for c in request for p in c.logprobs] for request in requests]
    assert got[0] != got[1]  # the same prompt, another adapter
    for (ids, k), replies in zip(asked, got):
        expected = greedy_logprobs(lambda x, k=k: list(tuned.values())[k](x).logits, ids, 5)
        assert [t for t, _ in replies] == [t for t, _ in expected]
        assert [lp for _, lp in replies] == pytest.approx([lp for _, lp in expected], abs=1e-4)


@pytest.mark.parametrize("method, settings", [("prefix", {"n_prefix": 3}), ("prompt", {"n_tokens": 3})])
def test_a_prefix_or_prompt_run_is_served_alone_with_model_run_dir(files, tmp_path, method, settings):
    base, _ = files
    save_adapter(base, tmp_path / "run" / "adapter", method, 0, **settings)
    (tmp_path / "run" / "run.json").write_text(json.dumps({"base_model": str(base)}))
    model, tokenizer = load(str(tmp_path / "run"))
    prompt = tokenizer.encode("1+2")
    expected = greedy_logprobs(model, prompt, 6)
    with Engine(model, tokenizer, slots=2) as engine:  # its decoding steps run on the model's decoding view
        got = [(p.token_id, p.logprob) for c in engine.submit(prompt, GenerationConfig(max_new_tokens=6), 0)
               for p in c.logprobs]
    assert [t for t, _ in got] == [t for t, _ in expected]
    assert [lp for _, lp in got] == pytest.approx([lp for _, lp in expected], abs=1e-4)


@pytest.mark.parametrize("flags, message", [
    (["--adapter", "a=A", "--adapter", "a=B"], "'a' is already served"),
    (["--adapter", "base=A"], "'base' is already served"),
    (["--adapter", "math=MATH", "--dtype", "int8"], "this model is quantized"),
])
def test_serve_refuses_bad_adapters_in_one_line(files, capsys, flags, message):
    base, dirs = files
    flags = [f.replace("MATH", str(dirs["math"])) for f in flags]
    assert main(["serve", "--model", str(base), "--port", "0", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lmlab: error:") and message in err and err.count("\n") == 1
