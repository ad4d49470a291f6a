"""Fuzz: bad requests sent to a real `lmlab serve` (a process on 127.0.0.1) while three long greedy
requests are being decoded. Sampling settings at their extremes (temperatures that overflow float32,
top_p that rounds to 0, seeds past 64 bits), sizes of 10^30, lone surrogates in every string field, and
fields of the wrong shape: each gets OpenAI's error object with a 4xx naming the field within two
seconds, or, if valid, its answer; and the requests in flight finish with exactly the text they give
alone. So do they when a request fails inside the engine (its sampling raises, by a patch that needs
the server in this process: uvicorn in a thread): that request alone gets the error, a 500 or a
stream's last event, at once.

The cases are sent four at a time while the three long requests run (each is sent again as soon as it
ends, until the cases are done, so they overlap however fast or loaded the machine is); every request has
a timeout, and the module sends a bounded number of them.
"""

import concurrent.futures
import json
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from chat_models import tiny_chat_model
from encoder_data import tiny_encoder_dir
from fuzz.oracle import Outcome
from fuzz.record import check, fuzz_report  # noqa: F401 (fuzz_report: the session's report)
from lmlab.inference import engine as engine_module
from lmlab.inference.engine import Engine
from lmlab.inference.server import Embedder, create_app
from lmlab.models.load import load, load_encoder
from served import lmlab_serve, served

pytestmark = pytest.mark.usefixtures("one_thread")

FAMILY = "server_requests"
MODEL, ENCODER = "tiny-chat", "tiny-encoder"
ANSWER_SECONDS = 2.0  # a bad request's answer comes within this, even while others decode
TIMEOUT = 60.0  # any request's limit: past it the case is a hang
LONG = 1000  # tokens of each in-flight request (~3 s on 2 cores; each is sent again until the cases end)
SENDERS = 4  # cases sent at once
COMPLETE, CHAT, EMBED = "/v1/completions", "/v1/chat/completions", "/v1/embeddings"
PROMPT = {"model": MODEL, "prompt": "1+2", "max_tokens": 4}
ASK = {"model": MODEL, "messages": [{"role": "user", "content": "1+2?"}], "max_tokens": 4}
S = "ba\ud800"  # sent as JSON's "ba\ud800" escape: a lone surrogate, no character
BIG = 10**30


def raw(fields: dict, **literals: str) -> str:
    """`fields` as JSON, with each of `literals` (name=JSON text such as NaN) added as written."""
    text = json.dumps(fields)
    extra = "".join(f', "{name}": {value}' for name, value in literals.items())
    return text[:-1] + extra + "}"


# case: (path, body (dict, or JSON text), the `param` a 4xx must name; None: the request is valid and answered)
CASES = {
    # sampling settings at and past their extremes
    "temperature_1e-45": (COMPLETE, {**PROMPT, "temperature": 1e-45}, "temperature"),
    "temperature_1e-310": (COMPLETE, {**PROMPT, "temperature": 1e-310}, "temperature"),
    "temperature_below_min_chat": (CHAT, {**ASK, "temperature": 0.005}, "temperature"),
    "temperature_1e-45_streamed": (COMPLETE, {**PROMPT, "temperature": 1e-45, "stream": True}, "temperature"),
    "temperature_nan": (COMPLETE, raw(PROMPT, temperature="NaN"), "temperature"),
    "temperature_infinity": (CHAT, raw(ASK, temperature="Infinity"), "temperature"),
    "temperature_1e400": (COMPLETE, raw(PROMPT, temperature="1e400"), "temperature"),
    "temperature_1e308": (COMPLETE, {**PROMPT, "temperature": 1e308, "seed": 1}, None),
    "temperature_min": (CHAT, {**ASK, "temperature": 0.01, "seed": 1}, None),
    "top_p_1e-300": (COMPLETE, {**PROMPT, "temperature": 1, "top_p": 1e-300}, None),
    "top_p_5e-324_streamed": (CHAT, {**ASK, "temperature": 1, "top_p": 5e-324, "stream": True}, None),
    "top_p_negative_tiny": (COMPLETE, {**PROMPT, "temperature": 1, "top_p": -1e-300}, "top_p"),
    "top_p_nan": (CHAT, raw(ASK, top_p="NaN"), "top_p"),
    "seed_2**64": (COMPLETE, {**PROMPT, "temperature": 1, "seed": 2**64}, "seed"),
    "seed_10**30": (CHAT, {**ASK, "temperature": 1, "seed": BIG}, "seed"),
    "seed_-2**63-1": (COMPLETE, {**PROMPT, "temperature": 1, "seed": -2**63 - 1}, "seed"),
    "seed_2**64_streamed": (COMPLETE, {**PROMPT, "temperature": 1, "seed": 2**64, "stream": True}, "seed"),
    "seed_2**64-1": (COMPLETE, {**PROMPT, "temperature": 1, "seed": 2**64 - 1}, None),
    "seed_-2**63": (CHAT, {**ASK, "temperature": 1, "seed": -2**63}, None),
    "seed_fraction": (COMPLETE, {**PROMPT, "seed": 1.5}, "seed"),
    "presence_penalty_infinity": (COMPLETE, raw(PROMPT, presence_penalty="-Infinity"), "presence_penalty"),
    # sizes of 10^30
    "max_tokens_10**30": (COMPLETE, {**PROMPT, "max_tokens": BIG}, "max_tokens"),
    "max_tokens_over_the_context": (COMPLETE, {**PROMPT, "max_tokens": 5000}, "max_tokens"),
    "max_tokens_10**30_chat": (CHAT, {**ASK, "max_tokens": BIG}, "max_tokens"),
    "max_completion_tokens_10**30": (CHAT, {**ASK, "max_completion_tokens": BIG}, "max_completion_tokens"),
    "logprobs_10**30": (COMPLETE, {**PROMPT, "logprobs": BIG}, "logprobs"),
    "top_logprobs_10**30": (CHAT, {**ASK, "logprobs": True, "top_logprobs": BIG}, "top_logprobs"),
    "n_10**30": (CHAT, {**ASK, "n": BIG}, "n"),
    "token_id_10**30": (COMPLETE, {**PROMPT, "prompt": [1, BIG]}, "prompt"),
    # a lone surrogate in each string field
    "surrogate_prompt": (COMPLETE, {**PROMPT, "prompt": S}, "prompt"),
    "surrogate_prompt_in_a_list": (COMPLETE, {**PROMPT, "prompt": [S]}, "prompt"),
    "surrogate_model": (COMPLETE, {**PROMPT, "model": S}, "model"),
    "surrogate_model_chat": (CHAT, {**ASK, "model": S}, "model"),
    "surrogate_stop": (COMPLETE, {**PROMPT, "stop": ["x", S]}, "stop"),
    "surrogate_user": (CHAT, {**ASK, "user": S}, "user"),
    "surrogate_chat_content": (CHAT, {**ASK, "messages": [{"role": "user", "content": S}]}, "messages"),
    "surrogate_chat_content_part": (CHAT, {**ASK, "messages": [{"role": "user", "content": [
        {"type": "text", "text": S}]}]}, "messages"),
    "surrogate_chat_role": (CHAT, {**ASK, "messages": [{"role": S, "content": "hi"}]}, "messages"),
    "surrogate_chat_streamed": (CHAT, {**ASK, "stream": True, "messages": [{"role": "user", "content": S}]},
                                "messages"),
    "surrogate_logit_bias_key": (COMPLETE, {**PROMPT, "logit_bias": {S: 1}}, "logit_bias"),
    "surrogate_embedding_input": (EMBED, {"model": ENCODER, "input": S}, "input"),
    "surrogate_embedding_inputs": (EMBED, {"model": ENCODER, "input": ["a", S]}, "input"),
    "surrogate_embedding_model": (EMBED, {"model": S, "input": "a"}, "model"),
    # fields of the wrong shape
    "messages_an_object": (CHAT, {**ASK, "messages": {"a": [1]}}, "messages"),
    "messages_nested_lists": (CHAT, {**ASK, "messages": [[[[]]]]}, "messages[0]"),
    "content_a_number": (CHAT, {**ASK, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    "prompt_an_object": (COMPLETE, {**PROMPT, "prompt": {"x": 1}}, "prompt"),
    "temperature_a_list": (COMPLETE, {**PROMPT, "temperature": [1]}, "temperature"),
    "seed_an_object": (CHAT, {**ASK, "seed": {"a": 1}}, "seed"),
    "stream_options_text": (CHAT, {**ASK, "stream": True, "stream_options": "yes"}, "stream_options"),
    "logit_bias_a_list": (COMPLETE, {**PROMPT, "logit_bias": [1]}, "logit_bias"),
    "embedding_input_numbers": (EMBED, {"model": ENCODER, "input": {"a": 1}}, "input"),
}


class Server:
    """A server's URL and how many requests its engine is decoding (`running()`)."""

    def __init__(self, url: str, running: Callable[[], int]):
        self.url, self.running = url, running

    def send(self, path: str, body) -> tuple[int | None, dict | str, float]:
        """(status, the JSON answer or a stream's text, seconds): a streamed request is read to its end
        (its text, or the error object of its last event); status None when it timed out."""
        content = body if isinstance(body, str) else json.dumps(body)
        streamed = '"stream": true' in content
        start = time.perf_counter()
        try:
            with httpx.stream("POST", self.url + path, content=content, timeout=TIMEOUT,
                              headers={"Content-Type": "application/json"}) as r:
                answer = _events(r) if streamed and r.status_code == 200 else json.loads(r.read())
                return r.status_code, answer, time.perf_counter() - start
        except httpx.HTTPError as e:
            return None, f"{type(e).__name__}: {e}", time.perf_counter() - start


def _events(response) -> dict | str:
    """A stream's text, or the error object its last event holds."""
    pieces = []
    for line in response.iter_lines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        data = json.loads(line[6:])
        if "error" in data:
            return data
        for choice in data["choices"]:
            pieces.append(choice.get("text") or choice.get("delta", {}).get("content") or "")
    return "".join(pieces)


# the requests in flight: greedy, long, streamed and not (the tiny model's chat replies are blank: completions)
IN_FLIGHT = [(COMPLETE, {"model": MODEL, "prompt": "1+2", "max_tokens": LONG, "temperature": 0}),
             (COMPLETE, {"model": MODEL, "prompt": "3+4=", "max_tokens": LONG, "temperature": 0, "stream": True}),
             (COMPLETE, {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": LONG, "temperature": 0, "stream": True})]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple:
    root = tmp_path_factory.mktemp("served")
    return tiny_chat_model(root / "chat", context_length=2048), tiny_encoder_dir(root / "encoder")


@pytest.fixture(scope="module")
def command_server(models):
    """`lmlab serve` in its own process, as users run it."""
    chat, encoder = models
    with lmlab_serve(["--model", chat, "--name", MODEL, "--embedding-model", encoder, "--slots", "8",
                      "--threads", "1"]) as port:  # one thread, as the thread server decodes here
        url = f"http://127.0.0.1:{port}"
        yield Server(url, lambda: _gauge(url, "lmlab_engine_running"))


@pytest.fixture(scope="module")
def thread_server(models):
    """The same app under uvicorn in a thread of this process, so a test can patch the engine."""
    chat, encoder = models
    model, tokenizer = load(chat)
    encoder, encoder_tokenizer = load_encoder(encoder)
    embedder = Embedder(ENCODER, encoder.eval(), encoder_tokenizer)
    with Engine(model, tokenizer, slots=8) as engine:
        with served(create_app(engine, tokenizer, MODEL, model.config.context_length, embedder)) as url:
            yield Server(url, lambda: engine.stats()["running"])


@pytest.fixture(scope="module")
def alone(command_server) -> list[str]:
    """Each in-flight request's text when it runs alone."""
    texts = []
    for path, body in IN_FLIGHT:
        status, answer, _ = command_server.send(path, body)
        assert status == 200 and _reply_text(answer), answer
        texts.append(_reply_text(answer))
    return texts


def _gauge(url: str, name: str) -> int:
    """The value of the gauge `name` in the server's /metrics."""
    for line in httpx.get(url + "/metrics", timeout=TIMEOUT).text.splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise AssertionError(f"/metrics has no {name}")


def _reply_text(answer: dict | str) -> str | None:
    """The text of a whole answer, or of a stream (already text); None for an error object."""
    if isinstance(answer, str) or "choices" not in answer:
        return answer if isinstance(answer, str) else None
    choice = answer["choices"][0]
    return choice["text"] if "text" in choice else choice["message"]["content"]


def outcome(status, answer, seconds: float, param: str | None) -> Outcome:
    """The case's outcome: a 4xx error object naming `param` in time, or (param None) a 200 with text."""
    if status is None:
        return Outcome("hang", f"no answer: {answer} after {seconds:.1f} s")
    error = answer.get("error") if isinstance(answer, dict) else None
    if param is None:
        if error is None:
            return Outcome("handled", f"{status} in {seconds:.2f} s")
        return Outcome("traceback" if error.get("type") == "server_error" else "wrong_refusal", f"{status}: {error}")
    if error is None:
        return Outcome("silent_wrong", f"{status}, answered as if valid: {str(answer)[:300]}")
    if status >= 500 or error.get("type") == "server_error":
        return Outcome("traceback", f"{status}: {error}")
    if status == 200:
        return Outcome("messy_error", f"refused mid-stream, not at the door: {error}")
    if set(error) != {"message", "type", "param", "code"} or error["param"] != param or not error["message"]:
        return Outcome("messy_error", f"{status}, param {error.get('param')!r} (want {param!r}): {error}")
    if seconds > ANSWER_SECONDS:
        return Outcome("hang", f"{status} after {seconds:.1f} s (limit {ANSWER_SECONDS} s)")
    return Outcome("clean_error", f"{status} {error['param']}: {error['message'][:200]}")


def while_in_flight(server, alone: list[str], send) -> dict:
    """Start the three long requests, call `send()` once all three decode, and return its result. Each
    long request is sent again as soon as it ends until `send()` has returned, so the cases overlap
    decoding whatever the machine's speed; every answer is recorded (same_output when each of a long
    request's answers is the text it gives alone)."""
    cases_done = threading.Event()

    def keep_sending(path: str, body: dict) -> list[tuple]:
        answers = [server.send(path, body)]
        while not cases_done.is_set():
            answers.append(server.send(path, body))
        return answers

    with concurrent.futures.ThreadPoolExecutor(len(IN_FLIGHT)) as pool:
        flying = [pool.submit(keep_sending, path, body) for path, body in IN_FLIGHT]
        try:
            deadline = time.monotonic() + TIMEOUT
            while server.running() < len(IN_FLIGHT):  # all three are decoding
                assert time.monotonic() < deadline and not any(f.done() for f in flying), "the long requests never ran"
                time.sleep(0.01)
            sent = send()
        finally:
            cases_done.set()
        results = [f.result() for f in flying]
    record_all({f"in_flight_{i}_{send.__name__}": _same_every_time(answers, expected)
                for i, (answers, expected) in enumerate(zip(results, alone))})
    return sent


def _same_every_time(answers: list[tuple], expected: str) -> Outcome:
    """same_output when every (status, answer, seconds) of a long request is a 200 with the text `expected`."""
    for status, answer, _ in answers:
        if status != 200 or _reply_text(answer) != expected:
            return Outcome("silent_wrong", f"{status}: {str(answer)[:300]}")
    return Outcome("same_output", f"{len(answers)} answers, the last in {answers[-1][2]:.1f} s")


def record_all(outcomes: dict[str, Outcome]) -> None:
    """Record every case, then fail listing every failure."""
    failures = []
    for case, result in outcomes.items():
        try:
            check(FAMILY, case, result)
        except AssertionError as e:
            failures.append(str(e))
    assert not failures, "\n".join(failures)


def test_bad_requests_fail_alone_while_others_decode(command_server, alone):
    def bad_requests():
        with concurrent.futures.ThreadPoolExecutor(SENDERS) as senders:
            return dict(zip(CASES, senders.map(lambda case: command_server.send(*CASES[case][:2]), CASES)))

    answers = while_in_flight(command_server, alone, bad_requests)
    record_all({case: outcome(*answer, CASES[case][2]) for case, answer in answers.items()})


POISONED_SEED = 666  # requests with this seed fail inside the engine, at their third token
FAILING = {
    "engine_failure": (COMPLETE, {**PROMPT, "max_tokens": 20, "temperature": 1, "seed": POISONED_SEED}),
    "engine_failure_streamed": (COMPLETE, {**PROMPT, "max_tokens": 20, "temperature": 1, "seed": POISONED_SEED,
                                           "stream": True}),
    "engine_failure_chat_streamed": (CHAT, {**ASK, "max_tokens": 20, "temperature": 1, "seed": POISONED_SEED,
                                            "stream": True}),
}


def test_a_request_failing_inside_the_engine_fails_alone(thread_server, alone, monkeypatch):
    calls: dict[int, int] = {}

    def next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        if generator is not None and generator.initial_seed() == POISONED_SEED:
            calls[id(generator)] = calls.get(id(generator), 0) + 1
            if calls[id(generator)] == 3:
                raise RuntimeError("sampling broke")
        return real_next_token(logits, temperature, top_k, top_p, generator)

    real_next_token = engine_module.next_token
    monkeypatch.setattr(engine_module, "next_token", next_token)

    def failing_requests():
        with concurrent.futures.ThreadPoolExecutor(len(FAILING)) as senders:
            return dict(zip(FAILING, senders.map(lambda case: thread_server.send(*FAILING[case]), FAILING)))

    answers = while_in_flight(thread_server, alone, failing_requests)
    outcomes = {}
    for case, (status, answer, seconds) in answers.items():
        error = answer.get("error") if isinstance(answer, dict) else None
        streamed = FAILING[case][1].get("stream", False)
        if status is None or seconds > ANSWER_SECONDS:
            outcomes[case] = Outcome("hang", f"{status} after {seconds:.1f} s")
        elif error and error["type"] == "server_error" and "sampling broke" in error["message"] and \
                status == (200 if streamed else 500):
            outcomes[case] = Outcome("handled", f"{status}, this request's own error in {seconds:.2f} s")
        else:
            outcomes[case] = Outcome("silent_wrong", f"{status}: {str(answer)[:300]}")
    record_all(outcomes)
