"""Fuzz: a real `lmlab serve` (a subprocess on 127.0.0.1) under clients that send too much, too slowly, or
from the wrong place: bodies over the limit (by Content-Length and chunked), giant stop lists and stop
strings, a chat template that renders a huge text, a prompt of megabytes, an embedding input of a
megabyte, a hundred clients that stop mid-header or mid-body, a foreign Host, a missing or wrong API
key; and `lmlab serve` itself with an absurd --slots or a port in use.

Every request must be refused with OpenAI's error object (or answered), while /health and a concurrent
5-token completion each keep answering within MAX_LATENCY (on a busy machine: within SLOWER times what
they take right after the case); the slow clients must all be closed by the server within SLOW_CLIENT_LIMIT.
"""

import json
import select
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import openai
import pytest

from chat_models import CHATML, tiny_chat_model
from encoder_data import tiny_encoder_dir
from fuzz.oracle import Outcome, classify, run_cli
from fuzz.record import check, fuzz_report, probe  # noqa: F401 (fuzz_report: the session's report)
from served import free_port, lmlab_serve

FAMILY = "server_limits"
MODEL = "tiny-chat"
KEY = "test-key-123"
MAX_LATENCY = 1.0  # seconds any /health or 5-token request may take while a case runs (on a quiet machine)
SLOWER = 20  # ...or this many times as long as it takes right after the case, when the machine is busy
SLOW_CLIENTS = 100
SLOW_CLIENT_LIMIT = 15.0  # seconds within which the server must close every slow client
# A template that, for the message "huge", renders 700,000 characters before the chat (the model's own data).
HUGE_TEMPLATE = "{% if messages[0]['content'] == 'huge' %}{% for i in range(100000) %}xxxxxxx{% endfor %}{% endif %}"


class Served:
    """The server's URL and an httpx client that sends the key; `watch()` measures the latency of
    /health and of a 5-token completion while a case runs."""

    def __init__(self, port: int):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.auth = {"Authorization": f"Bearer {KEY}"}

    def post(self, path: str, body, **kwargs) -> httpx.Response:
        return httpx.post(self.url + path, content=body if isinstance(body, (str, bytes)) else json.dumps(body),
                          headers={"Content-Type": "application/json", **self.auth, **kwargs.pop("headers", {})},
                          timeout=60, **kwargs)

    @contextmanager
    def watch(self):
        """Yields a dict that holds, after the block, the slowest /health and 5-token request it saw, and
        (`quiet`) the fastest of three of each right after the block: what this machine takes now."""
        worst = {"health": 0.0, "completion": 0.0}
        stop = threading.Event()

        def poll(name, call):
            while not stop.is_set():
                start = time.perf_counter()
                try:
                    call()
                except httpx.HTTPError:
                    worst[name] = float("inf")
                worst[name] = max(worst[name], time.perf_counter() - start)
                stop.wait(0.05)

        small = {"model": MODEL, "prompt": "1+", "max_tokens": 5, "temperature": 0}
        calls = {"health": lambda: httpx.get(self.url + "/health", timeout=30).raise_for_status(),
                 "completion": lambda: self.post("/v1/completions", small).raise_for_status()}
        pollers = [threading.Thread(target=poll, args=item) for item in calls.items()]
        for p in pollers:
            p.start()
        try:
            yield worst
        finally:
            stop.set()
            for p in pollers:
                p.join(60)
            worst["quiet"] = {name: min(_seconds(call) for _ in range(3)) for name, call in calls.items()}


def _seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("server_limits")
    chat = tiny_chat_model(root / "chat", context_length=2048)
    config_path = chat / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "chat_template": HUGE_TEMPLATE + CHATML}))
    return chat, tiny_encoder_dir(root / "encoder")


@pytest.fixture(scope="module")
def server(model_dirs):
    chat, encoder = model_dirs
    with lmlab_serve(["--model", chat, "--name", MODEL, "--embedding-model", encoder, "--slots", "4"],
                     env={"LMLAB_API_KEY": KEY}) as port:
        yield Served(port)


def refused(response: httpx.Response, status: int, param: str | None = None, code: str | None = None) -> Outcome:
    """clean_error when `response` is OpenAI's error object with `status` (and `param`, `code` if given)."""
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return Outcome("messy_error", f"{response.status_code}: not OpenAI's error object: {response.text[:300]!r}")
    if response.status_code != status or set(error) != {"message", "type", "param", "code"}:
        return Outcome("wrong_refusal" if response.status_code < 300 else "messy_error",
                       f"{response.status_code} {error}")
    if (param or error["param"]) != error["param"] or (code or error["code"]) != error["code"]:
        return Outcome("messy_error", f"expected param {param}, code {code}: {error}")
    return Outcome("clean_error", f"{status}: {error['message'][:200]}")


def within(outcome: Outcome, worst: dict) -> Outcome:
    """`outcome`, unless /health or the small completion was slower meanwhile than MAX_LATENCY and than
    SLOWER times its time right after (a hang, or a server the case held up, on a quiet or a busy machine)."""
    slow = {name: round(worst[name], 2) for name, quiet in worst["quiet"].items()
            if worst[name] > max(MAX_LATENCY, SLOWER * quiet)}
    if slow:
        return Outcome("hang", f"other requests slowed to {slow} s; {outcome.detail}")
    return Outcome(outcome.kind, f"{outcome.detail} (meanwhile /health <= {worst['health']:.2f} s, a 5-token "
                                 f"completion <= {worst['completion']:.2f} s)")


def raw_response(port: int, head: bytes, body_chunks=(), timeout: float = 30) -> tuple[bytes, float]:
    """Send `head` then `body_chunks` on a raw socket (stopping when the server closes it); what came back
    before the server closed the connection, and when (seconds)."""
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(head)
            for chunk in body_chunks:
                s.sendall(chunk)
        except OSError:  # the server answered and closed while we were still sending
            pass
        received = b""
        while True:
            try:
                data = s.recv(65536)
            except OSError:
                break
            if not data:
                break
            received += data
    return received, time.perf_counter() - start


def status_of(response: bytes) -> tuple[int, dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
    try:
        return status, json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return status, {}


def test_a_body_over_the_limit_by_content_length_is_refused_before_it_is_sent(server):
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {64 << 20}\r\n\r\n").encode()
    with server.watch() as worst:
        response, seconds = raw_response(server.port, head)
    status, error = status_of(response)
    outcome = Outcome("clean_error", f"413 in {seconds:.2f} s") if status == 413 and error.get("code") else \
        Outcome("messy_error", f"{status} after {seconds:.1f} s: {response[:300]!r}")
    check(FAMILY, "body_content_length_64MB", within(outcome, worst))


def test_a_chunked_body_over_the_limit_is_refused_as_it_grows(server):
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    megabyte = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
    with server.watch() as worst:
        response, seconds = raw_response(server.port, head, [megabyte] * 32 + [b"0\r\n\r\n"])
    status, error = status_of(response)
    outcome = Outcome("clean_error", f"413 in {seconds:.2f} s") if status == 413 and error.get("code") else \
        Outcome("messy_error", f"{status} after {seconds:.1f} s: {response[:300]!r}")
    check(FAMILY, "body_chunked_32MB", within(outcome, worst))


GENERATION_CASES = {  # case: (path, body, status, param, code)
    "stop_list_1M": ("/v1/completions", {"model": MODEL, "prompt": "1+", "max_tokens": 5,
                                         "stop": ["stop me"] * 1_000_000},
                     413, None, "request_too_large"),  # 11 MB of JSON: over the limit before any parsing
    "stop_list_150k": ("/v1/completions", {"model": MODEL, "prompt": "1+", "max_tokens": 5, "stop": ["a"] * 150_000},
                       400, "stop", None),  # 750 kB: under the body limit
    "stop_list_17": ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "1+2?"}],
                                              "stop": [str(i) for i in range(17)]}, 400, "stop", None),
    "stop_string_100k_chars": ("/v1/completions", {"model": MODEL, "prompt": "1+", "stop": "x" * 100_000}, 400, "stop",
                               None),
    "template_renders_700k_chars": ("/v1/chat/completions",
                                    {"model": MODEL, "messages": [{"role": "user", "content": "huge"}]}, 400,
                                    "messages", "context_length_exceeded"),
    "prompt_6MB": ("/v1/completions", {"model": MODEL, "prompt": "1+2=3 " * 1_000_000}, 413, None,
                   "request_too_large"),
    "prompt_900kB": ("/v1/completions", {"model": MODEL, "prompt": "1+2=3 " * 150_000}, 400, "prompt",
                     "context_length_exceeded"),
    "prompt_ids_120k": ("/v1/completions", {"model": MODEL, "prompt": [5] * 120_000}, 400, "prompt",
                        "context_length_exceeded"),
    "messages_25k": ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "a"}] * 25_000},
                     400, "messages", "context_length_exceeded"),
    "messages_100k": ("/v1/chat/completions",
                      {"model": MODEL, "messages": [{"role": "user", "content": "a"}] * 100_000},
                      413, None, "request_too_large"),
    "embedding_input_1MB": ("/v1/embeddings", {"model": "encoder", "input": "the cat sat on a mat . " * 45_000}, 400,
                            "input", None),
    "embedding_inputs_2049": ("/v1/embeddings", {"model": "encoder", "input": ["the cat"] * 2049}, 400, "input",
                              None),
    "embedding_one_long_of_three": ("/v1/embeddings", {"model": "encoder", "input": ["a", "the cat " * 100, "b"]},
                                    400, "input", None),
}


@pytest.mark.parametrize("case", GENERATION_CASES)
def test_a_request_too_big_for_the_server_is_refused_and_slows_nothing(server, case):
    path, body, status, param, code = GENERATION_CASES[case]
    with server.watch() as worst:
        response = server.post(path, body)
    check(FAMILY, case, within(refused(response, status, param, code), worst))


def test_a_hundred_slow_clients_are_all_closed_and_slow_nothing(server):
    heads = [b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty",  # stops mid-header
             b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + KEY.encode() +
             b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\": "]  # stops mid-body
    clients = []
    with server.watch() as worst:
        start = time.monotonic()
        for i in range(SLOW_CLIENTS):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            s.sendall(heads[i % 2])
            clients.append(s)
        open_ = set(clients)
        while open_ and time.monotonic() - start < SLOW_CLIENT_LIMIT + 5:
            readable, _, _ = select.select(list(open_), [], [], 0.5)
            for s in readable:
                try:
                    if not s.recv(65536):
                        open_.discard(s)
                except OSError:
                    open_.discard(s)
        seconds = time.monotonic() - start
    for s in clients:
        s.close()
    if open_:
        outcome = Outcome("hang", f"{len(open_)} of {SLOW_CLIENTS} slow clients still open after {seconds:.0f} s")
    elif seconds > SLOW_CLIENT_LIMIT:
        outcome = Outcome("hang", f"the slow clients were closed only after {seconds:.1f} s")
    else:
        outcome = Outcome("clean_error", f"all {SLOW_CLIENTS} closed within {seconds:.1f} s")
    check(FAMILY, "slow_clients_100", within(outcome, worst))


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1.evil.example", ""])
def test_a_foreign_host_is_refused(server, host):
    response = httpx.get(server.url + "/v1/models", headers={**server.auth, "Host": host}, timeout=10)
    check(FAMILY, f"host_{host or 'empty'}", refused(response, 400, None, "invalid_host"))


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost:{port}", "LOCALHOST.:{port}", "[::1]:{port}"])
def test_a_local_host_is_served(server, host):
    response = httpx.get(server.url + "/v1/models", headers={**server.auth, "Host": host.format(port=server.port)},
                         timeout=10)
    outcome = Outcome("handled", "200") if response.status_code == 200 else \
        Outcome("wrong_refusal", f"{response.status_code}: {response.text[:200]}")
    check(FAMILY, f"host_ok_{host.split(':')[0].strip('[]') or 'ipv6'}", outcome)


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {KEY}", f"Bearer {KEY}x", "Bearer"])
def test_a_missing_or_wrong_api_key_is_refused(server, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    response = httpx.post(server.url + "/v1/completions", json={"model": MODEL, "prompt": "1+"}, headers=headers,
                          timeout=10)
    check(FAMILY, f"api_key_{(authorization or 'missing').replace(' ', '_')}", refused(response, 401, None,
                                                                                        "invalid_api_key"))


def test_the_openai_client_works_with_the_key_and_fails_without(server):
    good = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=30)
    text = good.completions.create(model=MODEL, prompt="1+", max_tokens=3, temperature=0).choices[0].text
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0, timeout=30)
    with pytest.raises(openai.AuthenticationError, match="API key"):
        bad.models.list()
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200  # open without the key
    assert httpx.get(server.url + "/", timeout=10).status_code == 200  # the page asks for the key itself
    check(FAMILY, "api_key_openai_client", Outcome("handled", f"answered {text!r} with the key"))


def test_absurd_slots_are_refused_before_the_model_loads(model_dirs):
    chat, _ = model_dirs
    probe(FAMILY, "slots_1e9", ["serve", "--model", chat, "--slots", "1000000000", "--port", free_port()], None)
    probe(FAMILY, "slots_0", ["serve", "--model", chat, "--slots", "0", "--port", free_port()], None)


def test_a_port_in_use_is_refused_before_the_model_loads(model_dirs):
    chat, _ = model_dirs
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        run = run_cli(["serve", "--model", chat, "--port", taken.getsockname()[1]])
    outcome = classify(run, None, may_change=False)
    if outcome.kind == "clean_error" and ("--port" not in run.err or run.seconds > 2):
        outcome = Outcome("messy_error", f"after {run.seconds:.1f} s: {run.err.strip()}")
    check(FAMILY, "port_in_use", outcome)
    probe(FAMILY, "port_out_of_range", ["serve", "--model", chat, "--port", 70000], None)
    probe(FAMILY, "host_not_here", ["serve", "--model", chat, "--host", "192.0.2.1", "--port", 0], None)
