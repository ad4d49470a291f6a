"""The server's guard (`lmlab.inference.guard`) before any route runs: the Host must name the server, an
API key is checked as a bearer token, and a body over the limit or too slow is refused with OpenAI's
error object, whatever the route; `HeaderDeadlineProtocol` closes a connection whose headers never end."""

import json
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from lmlab.inference.guard import LOCAL_HOSTS, Access, RequestGuard, access_for, body_limit
from lmlab.inference.protocol import HeaderDeadlineProtocol
from served import served


async def echo(scope, receive, send):
    """An ASGI app answering with the size of the body it received."""
    message = await receive()
    body = json.dumps({"bytes": len(message["body"]), "more": message.get("more_body", False)}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def guarded(access: Access = Access(), max_body_bytes: int = 1000, body_seconds: float = 0.5) -> RequestGuard:
    return RequestGuard(echo, access, max_body_bytes=max_body_bytes, body_seconds=body_seconds)


def error_of(response: httpx.Response) -> tuple[int, str]:
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return response.status_code, error["code"]


def test_only_the_servers_own_names_are_served():
    with served(guarded()) as url:
        port = url.rsplit(":", 1)[1]
        for host in ("127.0.0.1", f"localhost:{port}", f"LocalHost.:{port}", f"[::1]:{port}"):
            assert httpx.get(url + "/x", headers={"Host": host}).status_code == 200, host
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "[::2]", ""):
            assert error_of(httpx.get(url + "/x", headers={"Host": host})) == (400, "invalid_host"), host


def test_the_hosts_follow_the_bound_address():
    assert access_for("127.0.0.1").hosts == LOCAL_HOSTS
    assert access_for("192.168.1.5", ("Box.lan",)).hosts == LOCAL_HOSTS | {"192.168.1.5", "box.lan"}
    assert access_for("0.0.0.0").hosts is None  # every interface: any name (the key is what protects it)
    assert access_for("0.0.0.0", ("box.lan",)).hosts == LOCAL_HOSTS | {"box.lan"}


def test_an_api_key_is_needed_everywhere_but_health_and_the_page():
    with served(guarded(Access(api_key="k3y"))) as url:
        for authorization in (None, "Bearer wrong", "k3y", "Basic k3y"):
            headers = {"Authorization": authorization} if authorization else {}
            response = httpx.post(url + "/v1/completions", headers=headers)
            assert error_of(response) == (401, "invalid_api_key") and response.headers["www-authenticate"] == "Bearer"
        assert httpx.post(url + "/v1/completions", headers={"Authorization": "Bearer k3y"}).status_code == 200
        assert httpx.get(url + "/health").status_code == httpx.get(url + "/").status_code == 200


def test_a_body_over_the_limit_is_refused_by_its_length_or_as_it_streams():
    with served(guarded()) as url:
        assert httpx.post(url + "/x", content=b"x" * 1000).json() == {"bytes": 1000, "more": False}
        assert error_of(httpx.post(url + "/x", content=b"x" * 1001)) == (413, "request_too_large")
        chunked = httpx.post(url + "/x", content=iter([b"x" * 600, b"x" * 600]))  # no Content-Length
        assert error_of(chunked) == (413, "request_too_large")


def test_a_body_that_does_not_arrive_in_time_is_refused_and_its_connection_closed():
    with served(guarded()) as url:
        host, port = url[len("http://"):].split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n12345")
            start = time.perf_counter()
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer
        assert time.perf_counter() - start < 3


def test_the_body_limit_holds_a_whole_context():
    assert body_limit(64) == 1 << 20 and body_limit(16384) == 2 << 20 and body_limit(1 << 20) == 8 << 20


@contextmanager
def deadline_server(seconds: float, max_body_bytes: int = 1000):
    """`echo` under uvicorn with HeaderDeadlineProtocol's deadline set to `seconds`; yields the port."""
    protocol = type("ShortDeadline", (HeaderDeadlineProtocol,), {"header_seconds": seconds})
    server = uvicorn.Server(uvicorn.Config(guarded(max_body_bytes=max_body_bytes), host="127.0.0.1", port=0,
                                           http=protocol, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)


def closed_after(s: socket.socket) -> float:
    """Seconds until the server closes `s` (reading whatever it sends)."""
    start = time.perf_counter()
    while s.recv(4096):
        pass
    return time.perf_counter() - start


@pytest.mark.parametrize("sent", [b"", b"GET /x HTTP/1.1\r\nHost: 127.", b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n"],
                         ids=["nothing", "mid-line", "no-blank-line"])
def test_a_connection_whose_headers_never_end_is_closed(sent):
    with deadline_server(0.5) as port, socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(sent)
        assert closed_after(s) < 2


def test_a_kept_alive_connection_gets_the_deadline_again_and_a_prompt_client_is_served():
    with deadline_server(0.5) as port, socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /x HTTP/1.1\r\nHost: 127")  # the next request stalls mid-header
        assert closed_after(s) < 2


def test_a_refused_client_may_go_on_sending_while_it_reads_the_refusal():
    """A 413 is sent while the client is still sending its body (httpx sends it whole before it reads).
    A socket closed with the client's bytes unread, or reached by more of them, is reset by the kernel, and
    a reset can destroy the answer before the client reads it (httpx: "peer closed connection without
    sending complete message body", seen under load). So the server closes lingering: its answer and the
    end of its stream go out, and it reads and drops what still comes, instead of resetting."""
    with deadline_server(5, max_body_bytes=1 << 20) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12000000\r\n\r\n" + b"x" * 100_000)
        answer = b""
        while chunk := s.recv(65536):  # the answer, then the end of the server's stream
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413") and json.loads(body)["error"]["code"] == "request_too_large"
        for _ in range(5):  # the rest of the body is still welcome (a closed socket: "Broken pipe")
            s.sendall(b"x" * 100_000)
            time.sleep(0.05)
