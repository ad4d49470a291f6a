"""`lmlab serve`'s HTTP API, served for real by uvicorn and driven with the official `openai` client:
streamed and whole answers agree, logprobs are the model's, stop strings and seeds hold, every bad
request gets OpenAI's error object with its 4xx status, a client that goes away frees its slot,
/metrics counts, and concurrent requests are all answered as they would be alone."""

import base64
import concurrent.futures
import json
import time

import httpx
import numpy as np
import openai
import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families

from chat_models import tiny_chat_model
from encoder_data import tiny_encoder_dir
from lmlab.inference.embeddings import sentence_embeddings
from lmlab.inference.engine import Engine
from lmlab.inference.request import Request
from lmlab.inference.server import Embedder, create_app
from lmlab.models.load import load, load_encoder
from served import served

MODEL = "tiny-chat"
LONG = 2000  # tokens of a reply long enough to be cut off mid-stream (the model's context is 2048)
ASK = [{"role": "user", "content": "1+2?"}]


class Server:
    def __init__(self, url: str, engine: Engine, model, tokenizer, encoder, encoder_tokenizer):
        self.url, self.engine, self.model, self.tokenizer = url, engine, model, tokenizer
        self.encoder, self.encoder_tokenizer = encoder, encoder_tokenizer
        self.client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=60)

    def post(self, path: str, body) -> httpx.Response:
        content = body if isinstance(body, str) else json.dumps(body)
        return httpx.post(self.url + path, content=content, headers={"Content-Type": "application/json"},
                          timeout=60)

    def metrics(self) -> dict[tuple[str, tuple], float]:
        text = httpx.get(self.url + "/metrics").text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    model, tokenizer = load(tiny_chat_model(root / "chat", context_length=2048))
    encoder, encoder_tokenizer = load_encoder(tiny_encoder_dir(root / "encoder"))
    embedder = Embedder("tiny-encoder", encoder.eval(), encoder_tokenizer)
    with Engine(model, tokenizer, slots=4) as engine:
        app = create_app(engine, tokenizer, MODEL, model.config.context_length, embedder)
        with served(app) as url:
            yield Server(url, engine, model, tokenizer, encoder, encoder_tokenizer)


def chat(server, stream=False, **settings):
    """(text, finish_reason, usage) of a chat completion, streamed or not."""
    settings = {"model": MODEL, "messages": ASK, "max_tokens": 12, "temperature": 0, **settings}
    if not stream:
        r = server.client.chat.completions.create(**settings)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage
    events = list(server.client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                        **settings))
    assert events[0].choices[0].delta.role == "assistant"
    text = "".join(e.choices[0].delta.content or "" for e in events if e.choices)
    [finish] = [e.choices[0].finish_reason for e in events if e.choices and e.choices[0].finish_reason]
    assert not events[-1].choices
    return text, finish, events[-1].usage


def complete(server, stream=False, **settings):
    """(text, finish_reason) of a text completion, streamed or not."""
    settings = {"model": MODEL, "prompt": "1+2", "max_tokens": 12, "temperature": 0, **settings}
    if not stream:
        r = server.client.completions.create(**settings)
        return r.choices[0].text, r.choices[0].finish_reason
    events = list(server.client.completions.create(stream=True, **settings))
    return "".join(e.choices[0].text for e in events), events[-1].choices[0].finish_reason


def test_models_lists_the_model_and_the_encoder(server):
    assert [m.id for m in server.client.models.list()] == [MODEL, "tiny-encoder"]
    assert server.client.models.retrieve(MODEL).id == MODEL
    assert httpx.get(server.url + "/health").json()["status"] == "ok"


@pytest.mark.parametrize("settings", [{}, {"temperature": 0.9, "top_p": 0.9, "seed": 7}], ids=["greedy", "seeded"])
def test_chat_streamed_equals_not_streamed(server, settings):
    text, finish, usage = chat(server, **settings)
    assert chat(server, stream=True, **settings) == (text, finish, usage)
    assert usage.prompt_tokens == len(server.tokenizer.encode(
        "<|im_start|>user\n1+2?<|im_end|>\n<|im_start|>assistant\n"))
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


@pytest.mark.parametrize("settings", [{}, {"temperature": 1.2, "seed": 3}], ids=["greedy", "seeded"])
def test_completion_streamed_equals_not_streamed(server, settings):
    text, finish = complete(server, **settings)
    assert complete(server, stream=True, **settings) == (text, finish)
    assert text and finish == "length"


def test_a_seed_gives_the_same_sample_and_another_seed_another(server):
    settings = {"temperature": 1.5, "max_tokens": 24, "prompt": "1+"}
    first = complete(server, seed=1, **settings)
    assert complete(server, seed=1, **settings) == first
    assert any(complete(server, seed=s, **settings) != first for s in (2, 3, 4))


@torch.no_grad()
def greedy(model, prompt: list[int], steps: int) -> tuple[list[int], torch.Tensor]:
    """The greedy continuation of `prompt` by whole forward passes, and each step's log_softmax (steps, V)."""
    ids, logprobs = [], []
    for _ in range(steps):
        logprobs.append(model(torch.tensor([prompt + ids]))[0, -1].float().log_softmax(-1))
        ids.append(int(logprobs[-1].argmax()))
    return ids, torch.stack(logprobs)


def test_greedy_logprobs_are_the_models_log_softmax(server):
    prompt = server.tokenizer.encode("1+2")
    r = server.client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    ids, expected = greedy(server.model, prompt, 5)
    assert lp.tokens == [server.tokenizer.decode([i]) for i in ids]
    assert lp.token_logprobs == pytest.approx(expected.gather(1, torch.tensor(ids)[:, None])[:, 0].tolist(), abs=1e-4)
    for step, top in enumerate(lp.top_logprobs):  # keyed by text: tokens that decode alike share an entry
        assert 1 <= len(top) <= 3 and max(top.values()) == pytest.approx(lp.token_logprobs[step])
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(5)]


def test_chat_logprobs_give_each_token_and_its_alternatives(server):
    r = server.client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=6, temperature=0, logprobs=True,
                                              top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 6
    prompt = server.tokenizer.encode("<|im_start|>user\n1+2?<|im_end|>\n<|im_start|>assistant\n")
    ids, expected = greedy(server.model, prompt, 6)
    assert [t.token for t in content] == [server.tokenizer.decode([i]) for i in ids]
    for step, token in enumerate(content):
        assert len(token.top_logprobs) == 2 and token.top_logprobs[0].logprob == pytest.approx(token.logprob)
        assert [t.logprob for t in token.top_logprobs] == pytest.approx(expected[step].topk(2).values.tolist(),
                                                                         abs=1e-4)
        assert bytes(token.bytes).decode() == token.token
    streamed = server.client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=6, temperature=0,
                                                     logprobs=True, top_logprobs=2, stream=True)
    tokens = [t for e in streamed if e.choices and e.choices[0].logprobs for t in e.choices[0].logprobs.content]
    assert [(t.token, t.logprob) for t in tokens] == [(t.token, t.logprob) for t in content]
    plain = server.client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=6, temperature=0)
    assert plain.choices[0].logprobs is None


def test_a_stop_string_ends_the_text_before_it(server):
    text, _ = complete(server, max_tokens=20, temperature=1.0, seed=5, prompt="1+")
    stop = text[4:6]
    assert len(stop) == 2
    cut = text[:text.index(stop)]
    assert complete(server, max_tokens=20, temperature=1.0, seed=5, prompt="1+", stop=[stop, "never seen"]) == \
        (cut, "stop")
    assert complete(server, stream=True, max_tokens=20, temperature=1.0, seed=5, prompt="1+", stop=stop) == \
        (cut, "stop")


def test_concurrent_requests_are_all_answered_as_alone(server):
    prompts = [f"{a}+{b}" for a in range(3) for b in range(3)]
    alone = [complete(server, prompt=p, temperature=0.8, seed=i) for i, p in enumerate(prompts)]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda i: complete(server, stream=i % 2 == 1, prompt=prompts[i], temperature=0.8,
                                                    seed=i), range(len(prompts))))
    assert together == alone


def test_embeddings_are_the_sentence_embeddings(server):
    texts = ["the cat sat on a mat .", "paris is in france"]
    expected = sentence_embeddings(server.encoder, server.encoder_tokenizer, texts).numpy()
    r = server.client.embeddings.create(model="tiny-encoder", input=texts, encoding_format="float")
    assert np.allclose([d.embedding for d in r.data], expected, atol=1e-6)
    assert r.usage.prompt_tokens == sum(len(server.encoder_tokenizer.encode(t).ids) for t in texts)
    one = server.post("/v1/embeddings", {"model": "tiny-encoder", "input": texts[1], "encoding_format": "base64"})
    vector = np.frombuffer(base64.b64decode(one.json()["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(vector, expected[1], atol=1e-6)


CHAT = {"model": MODEL, "messages": ASK}
TOO_LONG = "1+2=3 " * 1000  # well over the 2048-token context
BAD_REQUESTS = {  # name: (path, body, status, param, code)
    "bad JSON": ("/v1/chat/completions", '{"model": "tiny-chat", "messages": [', 400, None, None),
    "body not an object": ("/v1/chat/completions", "[1, 2]", 400, None, None),
    "unknown model": ("/v1/chat/completions", {**CHAT, "model": "gpt-9"}, 404, "model", "model_not_found"),
    "no model": ("/v1/completions", {"prompt": "1+"}, 400, "model", None),
    "prompt over the context": ("/v1/completions", {"model": MODEL, "prompt": TOO_LONG}, 400, "prompt",
                                "context_length_exceeded"),
    "chat over the context": ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": TOO_LONG}]},
                              400, "messages", "context_length_exceeded"),
    "max_tokens over the context": ("/v1/chat/completions", {**CHAT, "max_tokens": 5000}, 400, "max_tokens",
                                    "context_length_exceeded"),
    "negative temperature": ("/v1/chat/completions", {**CHAT, "temperature": -0.5}, 400, "temperature", None),
    "top_p zero": ("/v1/chat/completions", {**CHAT, "top_p": 0}, 400, "top_p", None),
    "top_p over one": ("/v1/completions", {"model": MODEL, "prompt": "1", "top_p": 1.5}, 400, "top_p", None),
    "max_tokens zero": ("/v1/completions", {"model": MODEL, "prompt": "1", "max_tokens": 0}, 400, "max_tokens", None),
    "max_completion_tokens zero": ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 0}, 400,
                                   "max_completion_tokens", None),
    "unknown role": ("/v1/chat/completions", {**CHAT, "messages": [{"role": "wizard", "content": "hi"}]}, 400,
                     "messages[0].role", None),
    "no messages": ("/v1/chat/completions", {**CHAT, "messages": []}, 400, "messages", None),
    "image content": ("/v1/chat/completions", {**CHAT, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
        "messages[0].content", None),
    "n of two": ("/v1/chat/completions", {**CHAT, "n": 2}, 400, "n", None),
    "empty stop": ("/v1/completions", {"model": MODEL, "prompt": "1", "stop": ""}, 400, "stop", None),
    "top_logprobs without logprobs": ("/v1/chat/completions", {**CHAT, "top_logprobs": 2}, 400, "top_logprobs", None),
    "too many logprobs": ("/v1/completions", {"model": MODEL, "prompt": "1", "logprobs": 21}, 400, "logprobs", None),
    "token id outside the vocabulary": ("/v1/completions", {"model": MODEL, "prompt": [1, 10 ** 6]}, 400, "prompt",
                                        None),
    "two prompts": ("/v1/completions", {"model": MODEL, "prompt": ["1", "2"]}, 400, "prompt", None),
    "empty prompt": ("/v1/completions", {"model": MODEL, "prompt": ""}, 400, "prompt", None),
    "penalty": ("/v1/completions", {"model": MODEL, "prompt": "1", "frequency_penalty": 0.5}, 400,
                "frequency_penalty", None),
    "embeddings of the chat model": ("/v1/embeddings", {"model": MODEL, "input": "hi"}, 404, "model",
                                     "model_not_found"),
    "empty embedding input": ("/v1/embeddings", {"model": "tiny-encoder", "input": []}, 400, "input", None),
    "unknown encoding format": ("/v1/embeddings", {"model": "tiny-encoder", "input": "a", "encoding_format": "hex"},
                                400, "encoding_format", None),
    "seventeen stop strings": ("/v1/completions", {"model": MODEL, "prompt": "1", "stop": list("abcdefghijklmnopq")},
                               400, "stop", None),
    "a stop string of 1001 characters": ("/v1/chat/completions", {**CHAT, "stop": "x" * 1001}, 400, "stop", None),
    "more messages than the context": ("/v1/chat/completions", {**CHAT, "messages": ASK * 2049}, 400, "messages",
                                       "context_length_exceeded"),
    "an embedding input over the encoder's context": ("/v1/embeddings", {"model": "tiny-encoder",
                                                                         "input": ["a", "the cat " * 100]},
                                                      400, "input", None),
    "2049 embedding inputs": ("/v1/embeddings", {"model": "tiny-encoder", "input": ["a"] * 2049}, 400, "input", None),
    "a body over the limit": ("/v1/completions", {"model": MODEL, "prompt": "x" * (1 << 20)}, 413, None,
                              "request_too_large"),
}


@pytest.mark.parametrize("name", BAD_REQUESTS)
def test_a_bad_request_gets_openais_error_object(server, name):
    path, body, status, param, code = BAD_REQUESTS[name]
    r = server.post(path, body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    if param:
        assert param.split("[")[0] in error["message"] or code


def test_the_openai_client_raises_its_own_errors(server):
    with pytest.raises(openai.NotFoundError, match="gpt-9"):
        server.client.chat.completions.create(model="gpt-9", messages=ASK)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        server.client.chat.completions.create(model=MODEL, messages=ASK, temperature=-1)
    assert httpx.get(server.url + "/no/such/page").json()["error"]["code"] == "not_found"


def test_an_engine_failure_is_a_500_or_a_last_error_event(server, monkeypatch):
    def failing_submit(prompt_ids, config, top_logprobs=None, adapter=-1):
        request = Request(prompt_ids, config, top_logprobs, adapter)
        request.put(RuntimeError("the engine broke"))
        return request

    monkeypatch.setattr(server.engine, "submit", failing_submit)
    r = server.post("/v1/chat/completions", CHAT)
    assert r.status_code == 500 and "the engine broke" in r.json()["error"]["message"]
    assert r.json()["error"]["type"] == "server_error"
    with pytest.raises(openai.APIError, match="the engine broke"):
        list(server.client.chat.completions.create(model=MODEL, messages=ASK, stream=True))


def wait_until_idle(engine: Engine) -> None:
    deadline = time.monotonic() + 10
    while engine.stats()["running"] or engine.stats()["waiting"]:
        assert time.monotonic() < deadline, "an abandoned request still holds its slot"
        time.sleep(0.02)


def test_a_client_that_leaves_mid_stream_frees_its_slot(server):
    before = server.engine.stats()["tokens_generated"]
    body = {"model": MODEL, "prompt": "1+2", "max_tokens": LONG, "temperature": 0, "stream": True}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
        assert next(line for line in r.iter_lines() if line.startswith("data:"))
    wait_until_idle(server.engine)
    assert server.engine.stats()["tokens_generated"] - before < LONG / 2  # cancelled, not run to its end


def test_a_client_that_leaves_before_a_whole_answer_frees_its_slot(server):
    before = server.engine.stats()["tokens_generated"]
    body = {"model": MODEL, "prompt": "1+2", "max_tokens": LONG, "temperature": 0}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server.url + "/v1/completions", json=body, timeout=0.3)
    wait_until_idle(server.engine)
    assert server.engine.stats()["tokens_generated"] - before < LONG / 2


def test_metrics_count_requests_tokens_and_latency(server):
    before = server.metrics()
    text, _, usage = chat(server, max_tokens=5)
    server.post("/v1/chat/completions", {**CHAT, "temperature": -1})
    after = server.metrics()

    def moved(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert moved("lmlab_requests_total", endpoint="/v1/chat/completions", status="200") == 1
    assert moved("lmlab_requests_total", endpoint="/v1/chat/completions", status="400") == 1
    assert moved("lmlab_generated_tokens_total") == usage.completion_tokens == 5
    assert moved("lmlab_prompt_tokens_total") == usage.prompt_tokens
    assert moved("lmlab_time_to_first_token_seconds_count") == 1
    assert moved("lmlab_request_duration_seconds_count", endpoint="/v1/chat/completions") == 2
    assert after[("lmlab_engine_running", ())] == 0 and after[("lmlab_engine_slots", ())] == 4


def test_the_web_chat_is_served_at_the_root(server):
    r = httpx.get(server.url + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "/v1/chat/completions" in r.text and "AbortController" in r.text
