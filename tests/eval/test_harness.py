"""lmlab's lm-evaluation-harness model against lm-eval's own `hf` model on the same tiny random weights
(Llama and GPT-2, saved as HF directories with a tokenizer both read): same per-example
log-likelihoods (within 1e-4), same accuracy, same rolling log-likelihoods, same greedy generations;
the tasks are the YAMLs and JSONL under tests/data/harness (our own text), read offline."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from conftest import lmlab, one_line_error
from lmlab.errors import LmlabError
from lmlab.modules.quantized import QuantizedLinear

lm_eval = pytest.importorskip("lm_eval")
transformers = pytest.importorskip("transformers")
from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window  # noqa: E402

from lm_eval_reference import write_bpe_tokenizer  # noqa: E402
from lmlab.eval import harness  # noqa: E402
from lmlab.eval.task_files import task_code  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread", "quiet_lm_eval")]

TASKS_DIR = Path(__file__).parents[1] / "data" / "harness"
TASKS = ["lmlab_choices", "lmlab_text", "lmlab_sequences"]
WINDOW = 48  # the tiny models' context: the few-shot prompts and the paragraphs need several windows


@pytest.fixture(scope="module")
def quiet_lm_eval():
    """Offline, and without the environment report simple_evaluate collects after every run (pip and
    GPU queries in subprocesses: seconds, and nothing these tests read)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_DATASETS_OFFLINE", "1")
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setattr(lm_eval.evaluator, "add_env_info", lambda results: None)
        yield


def write_tokenizer(directory: Path) -> int:
    """A byte-level BPE trained on the task data, with <|endoftext|> as bos and eos; its vocab size."""
    texts = [line for f in sorted(TASKS_DIR.glob("*.jsonl")) for line in f.read_text().splitlines()]
    return write_bpe_tokenizer(directory, texts, 400)


def write_model(directory: Path, family: str) -> Path:
    """A tiny random HF model of `family` with its tokenizer, saved as HF saves it."""
    directory.mkdir()
    vocab = write_tokenizer(directory)
    if family == "llama":
        config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=WINDOW,
                                          bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=WINDOW,
                                         bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
    torch.manual_seed(0)
    with torch.no_grad():  # large random weights: sharp, varied predictions that tell models apart
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def manager():
    return TaskManager(include_path=str(TASKS_DIR), include_defaults=False)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def runs(request, tmp_path_factory, manager, quiet_lm_eval):
    """Both backends' results with every sample logged: (hf, lmlab), zero-shot over the three tasks and
    2-shot on the multiple-choice task (prompts longer than the window: truncated like hf truncates)."""
    directory = write_model(tmp_path_factory.mktemp("harness") / request.param, request.param)
    harness.register()
    models = {"hf": f"pretrained={directory},dtype=float32,device=cpu", "lmlab": f"pretrained={directory}"}
    return {name: [simple_evaluate(model=name, model_args=args, tasks=tasks, num_fewshot=shots, task_manager=manager,
                                   log_samples=True, bootstrap_iters=0)
                   for tasks, shots in ((TASKS, None), (["lmlab_choices"], 2))]
            for name, args in models.items()}


def samples(runs, backend: str, task: str, run: int = 0) -> list[dict]:
    return sorted(runs[backend][run]["samples"][task], key=lambda s: s["doc_id"])


@pytest.mark.parametrize("run", [0, 1], ids=["zero-shot", "2-shot"])
def test_same_choice_loglikelihoods_and_accuracy_as_hf(runs, run):
    ours, theirs = samples(runs, "lmlab", "lmlab_choices", run), samples(runs, "hf", "lmlab_choices", run)
    assert len(ours) == len(theirs) == 20
    for a, b in zip(ours, theirs):
        assert [r[0][1] for r in a["resps"]] == [r[0][1] for r in b["resps"]]  # is-greedy flags
        assert max(abs(x[0][0] - y[0][0]) for x, y in zip(a["resps"], b["resps"])) <= 1e-4
        assert (a["acc"], a["acc_norm"]) == (b["acc"], b["acc_norm"])
    ours, theirs = runs["lmlab"][run]["results"]["lmlab_choices"], runs["hf"][run]["results"]["lmlab_choices"]
    assert (ours["acc,none"], ours["acc_norm,none"]) == (theirs["acc,none"], theirs["acc_norm,none"])


def test_same_rolling_loglikelihoods_as_hf(runs):
    ours, theirs = samples(runs, "lmlab", "lmlab_text"), samples(runs, "hf", "lmlab_text")
    assert len(ours) == 6
    for a, b in zip(ours, theirs):
        assert abs(a["resps"][0][0] - b["resps"][0][0]) <= 1e-4
    assert math.isclose(runs["lmlab"][0]["results"]["lmlab_text"]["bits_per_byte,none"],
                        runs["hf"][0]["results"]["lmlab_text"]["bits_per_byte,none"], rel_tol=1e-6)


def test_same_greedy_generations_as_hf(runs):
    ours, theirs = samples(runs, "lmlab", "lmlab_sequences"), samples(runs, "hf", "lmlab_sequences")
    assert len(ours) == 10
    assert [s["resps"] for s in ours] == [s["resps"] for s in theirs]
    assert any(s["resps"][0][0] for s in ours)  # something was generated, not ten empty strings


def test_the_paragraphs_span_several_windows(tmp_path):
    """The rolling test means something only if some text is longer than one window."""
    write_tokenizer(tmp_path)
    tokenizer = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    lengths = [len(tokenizer.encode(json.loads(line)["text"]).ids)
               for line in (TASKS_DIR / "text.jsonl").read_text().splitlines()]
    assert max(lengths) > 2 * WINDOW


@pytest.mark.parametrize("length,window", [(1, 4), (4, 4), (5, 4), (9, 4), (17, 5), (3, 8)])
def test_rolling_windows_are_lm_evals(length, window):
    tokens = list(range(100, 100 + length))
    expected = [make_disjoint_window(w) for w in get_rolling_token_windows(tokens, 0, window, 1)]
    assert harness.rolling_windows(tokens, 0, window) == [(list(a), list(b)) for a, b in expected]


def test_shared_context_scores_equal_scoring_each_alone(tmp_path):
    scorer = harness.load_scorer(str(write_model(tmp_path / "m", "llama")))
    context, continuations = [5, 17, 33, 2, 9], [[40], [41, 42, 43], [7, 7]]
    shared = scorer._score_group(context, continuations)
    alone = [scorer._score_alone(context, c) for c in continuations]
    assert [g for _, g in shared] == [g for _, g in alone]
    assert max(abs(a - b) for (a, _), (b, _) in zip(shared, alone)) <= 1e-5


def test_empty_context_scores_after_the_prefix_token(tmp_path):
    scorer = harness.load_scorer(str(write_model(tmp_path / "m", "gpt2")))
    assert scorer.encode_pair("", " honey") == ([scorer.prefix_id], scorer.tokenizer.encode(" honey"))
    context, continuation = scorer.encode_pair("Answer:\n ", "honey")
    assert scorer.tokenizer.decode(context) == "Answer:"  # trailing whitespace, newline too, moves on


def test_task_yamls_that_run_code_need_trust(tmp_path, capsys):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "plain.yaml").write_text("task: plain\ndataset_path: json\n")
    assert task_code(tasks, {"acc"}) == {}
    (tasks / "sly.yaml").write_text("task: sly\nprocess_docs: !fun%63tion utils.process\n")
    assert list(task_code(tasks, {"acc"})) == [tasks / "sly.yaml"]
    assert lmlab("eval", "harness", "--model", "nowhere", "--tasks", "sly", "--include-path", tasks) == 2
    one_line_error(capsys, "sly.yaml", "!function at line 2", "--trust-task-code")


def test_datasets_that_run_loading_scripts_need_trust(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys.modules["datasets"], "__version__", "3.6.0")
    assert lmlab("eval", "harness", "--model", "nowhere", "--tasks", "lmlab_text", "--include-path", tmp_path) == 2
    one_line_error(capsys, "datasets 3.6.0", "loading script", "--trust-task-code")


def test_cli_prints_each_tasks_metrics_as_json(tmp_path, capsys):
    directory = write_model(tmp_path / "m", "llama")
    assert lmlab("eval", "harness", "--model", directory, "--tasks", "lmlab_choices,lmlab_sequences",
                 "--include-path", TASKS_DIR, "--limit", 3, "--trust-task-code", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"lmlab_choices", "lmlab_sequences"}
    assert result["lmlab_choices"]["samples"] == 3 and 0 <= result["lmlab_choices"]["acc"] <= 1
    assert set(result["lmlab_sequences"]) == {"exact_match", "samples"}


def test_dtype_loads_the_model_quantized(tmp_path, capsys):
    directory = write_model(tmp_path / "m", "llama")
    scorer = harness.load_scorer(str(directory), dtype="int8")
    assert any(isinstance(m, QuantizedLinear) for m in scorer.model.modules())
    assert lmlab("eval", "harness", "--model", directory, "--dtype", "int8", "--tasks", "lmlab_choices",
                 "--include-path", TASKS_DIR, "--limit", 3, "--trust-task-code", "--json") == 0
    assert json.loads(capsys.readouterr().out)["lmlab_choices"]["samples"] == 3


def test_cli_unknown_task_names_the_include_path_flag(capsys):
    assert lmlab("eval", "harness", "--model", "nowhere", "--tasks", "no_such_task", "--include-path",
                 TASKS_DIR, "--trust-task-code") == 2
    one_line_error(capsys, "no_such_task", "--include-path")


def test_cli_without_lm_eval_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    monkeypatch.setitem(sys.modules, "lm_eval.api.model", None)
    assert lmlab("eval", "harness", "--model", "nowhere", "--tasks", "lmlab_choices") == 2
    one_line_error(capsys, "pip install 'lmlab[eval]'")


def test_unsupported_generation_setting_is_one_error():
    with pytest.raises(LmlabError, match="num_beams"):
        harness._sampling_settings({"num_beams": 4})


@pytest.mark.slow
def test_real_smollm2_gives_hfs_loglikelihoods_and_generations(monkeypatch):
    from real_models import models_root, real_model

    gguf = real_model("smollm2-135m-instruct")
    monkeypatch.setenv("LMLAB_CACHE", models_root())
    harness.register()
    manager = TaskManager(include_path=str(TASKS_DIR), include_defaults=False)
    models = {"hf": f"pretrained={gguf.parent},gguf_file={gguf.name},dtype=float32,device=cpu",
              "lmlab": f"pretrained={gguf},activations=fp32"}  # int4 weights, fp32 products: HF's numbers
    runs = {name: [simple_evaluate(model=name, model_args=args, tasks=tasks, num_fewshot=shots, limit=5,
                                   task_manager=manager, log_samples=True, bootstrap_iters=0)
                   for tasks, shots in ((["lmlab_choices"], 3), (["lmlab_sequences"], None))]
            for name, args in models.items()}
    ours, theirs = samples(runs, "lmlab", "lmlab_choices"), samples(runs, "hf", "lmlab_choices")
    for a, b in zip(ours, theirs):
        assert max(abs(x[0][0] - y[0][0]) for x, y in zip(a["resps"], b["resps"])) <= 1e-4
        assert (a["acc"], a["acc_norm"]) == (b["acc"], b["acc_norm"])
    assert ([s["resps"] for s in samples(runs, "lmlab", "lmlab_sequences", 1)]
            == [s["resps"] for s in samples(runs, "hf", "lmlab_sequences", 1)])
