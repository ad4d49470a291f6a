"""`lmlab serve --speculate`: served for real by uvicorn and driven with the official `openai` client, a speculating
server answers concurrent chat and text completions, streamed or not, with stop strings and logprobs, exactly as a
plain server does (greedy), and /metrics counts the drafted and accepted tokens; the command takes the flags and
refuses bad ones in one line before anything loads."""

import argparse
import concurrent.futures

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chat_models import tiny_chat_model
from conftest import lmlab, one_line_error
from lmlab.cli.serve import speculation
from lmlab.inference.engine import Engine
from lmlab.inference.server import create_app
from lmlab.inference.speculation import Speculation
from lmlab.models.load import load
from served import lmlab_serve, served

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = "tiny-chat"
ASKS = ["1+2? 1+2? 1+2?", "hello there, hello there", "7 + 7 is", "a b a b a b", "what is 3 + 4"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_chat_model(tmp_path_factory.mktemp("chat"), context_length=256)


@pytest.fixture(scope="module")
def clients(model_dir):
    """(plain client, speculating client, the speculating engine): two servers of the same model."""
    model, tokenizer = load(model_dir)
    with Engine(model, tokenizer, slots=3) as plain, \
            Engine(model, tokenizer, slots=3, speculation=Speculation(4, max_running=3)) as speculating:
        with served(create_app(plain, tokenizer, MODEL, 256)) as plain_url, \
                served(create_app(speculating, tokenizer, MODEL, 256)) as url:
            yield (openai.OpenAI(base_url=f"{plain_url}/v1", api_key="x", max_retries=0, timeout=60),
                   openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60), speculating, url)


def ask(client, i: int, stream: bool, kind: str):
    """Request i (its own prompt, length, stop string), as a chat or a text completion, streamed or not:
    (text, finish reason, the logprobs' tokens and values)."""
    settings = {"model": MODEL, "max_tokens": 10 + 9 * i, "temperature": 0, "stop": ["eee", "bbb"] if i % 2 else None}
    if kind == "chat":
        settings.update(messages=[{"role": "user", "content": ASKS[i]}], logprobs=True, top_logprobs=2)
        create = client.chat.completions.create
    else:
        settings.update(prompt=ASKS[i], logprobs=2)
        create = client.completions.create
    if not stream:
        choice = create(**settings).choices[0]
        return (choice.message.content if kind == "chat" else choice.text), choice.finish_reason, logprobs(choice)
    events = [e for e in create(stream=True, **settings) if e.choices]
    text = "".join((e.choices[0].delta.content or "") if kind == "chat" else e.choices[0].text for e in events)
    tokens = [t for e in events for t in logprobs(e.choices[0])]
    return text, events[-1].choices[0].finish_reason, tokens


def logprobs(choice) -> list[tuple[str, float]]:
    if choice.logprobs is None:
        return []
    if hasattr(choice.logprobs, "content"):
        return [(t.token, round(t.logprob, 3)) for t in choice.logprobs.content or []]
    return list(zip(choice.logprobs.tokens, [round(v, 3) for v in choice.logprobs.token_logprobs]))


@pytest.mark.parametrize("kind", ["chat", "text"])
def test_concurrent_requests_get_the_plain_servers_answers(clients, kind):
    plain, speculating, engine, _ = clients
    jobs = [(i, stream) for i in range(len(ASKS)) for stream in (False, True)]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        got = list(pool.map(lambda job: ask(speculating, *job, kind), jobs))
    expected = [ask(plain, *job, kind) for job in jobs]
    assert got == expected
    assert kind == "chat" or {finish for _, finish, _ in got} == {"stop", "length"}
    assert engine.stats()["tokens_accepted"] > 0


def test_metrics_count_drafted_and_accepted_tokens(clients):
    plain, speculating, engine, url = clients
    ask(speculating, 0, False, "chat")
    samples = {s.name: s.value for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)
               for s in family.samples}
    assert 0 < samples["lmlab_engine_tokens_accepted"] <= samples["lmlab_engine_tokens_drafted"]


def test_the_flags_make_the_engines_speculation(model_dir, capsys):
    model, tokenizer = load(model_dir)
    args = argparse.Namespace(model=str(model_dir), speculate="lookup", draft_tokens=None, dtype=None,
                              activations="fp32")
    assert speculation(args, model, tokenizer) == Speculation(5)
    args.speculate, args.draft_tokens = str(model_dir), 2
    drafting = speculation(args, model, tokenizer)
    assert drafting.draft_tokens == 2 and drafting.draft.config == model.config
    assert "drafts up to 2 tokens a step by " in capsys.readouterr().err
    args.speculate, args.draft_tokens = None, None
    assert speculation(args, model, tokenizer) is None


@pytest.mark.slow  # a process starting: ~10 s
def test_lmlab_serve_speculates(model_dir):
    flags = ["--model", model_dir, "--speculate", "lookup", "--draft-tokens", "3", "--slots", "2", "--name", "chat"]
    with lmlab_serve(flags) as port:
        r = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60,
                       json={"model": "chat", "prompt": ASKS[0], "max_tokens": 20, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 20
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert "lmlab_engine_tokens_drafted" in metrics


@pytest.mark.parametrize("flags, fragment", [
    (["--draft-tokens", "3"], "add --speculate lookup or MODEL"),
    (["--speculate", "lookup", "--draft-tokens", "0"], "--draft-tokens 0 must be in 1..64"),
])
def test_bad_speculation_flags_are_one_line(flags, fragment, capsys):
    assert lmlab("serve", "--model", "nowhere", *flags) == 2
    one_line_error(capsys, fragment)
