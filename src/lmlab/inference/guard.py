"""What the server checks before a request reaches a route: who asks, and how much and how slowly they send.

- The Host header must name this server (`Access.hosts`): a web page elsewhere cannot reach a local
  server through a DNS name it points at 127.0.0.1 (DNS rebinding), since the browser sends that name.
- With an API key, every route but /health and the chat page needs `Authorization: Bearer KEY`, as
  OpenAI's clients send it (`api_key=`); the key is compared in constant time.
- The body is read here, whole, before the route runs: at most `body_limit(context)` bytes (refused by
  its Content-Length before a byte is read, or as soon as a streamed body grows past it) and within
  BODY_SECONDS, so a client that sends slowly, or too much, holds no route and no memory; and parsing
  what is read stays short (a megabyte of small JSON objects takes pydantic a fifth of a second).

Refusals are OpenAI's error object (400 bad Host, 401 key, 408 slow body, 413 large body) and close the
connection, whose body may still be on its way. `protocol.py` bounds the time to send the headers.
"""

import asyncio
import json
import secrets
from dataclasses import dataclass

from lmlab.inference.openai_api import ApiError

BODY_BYTES_PER_TOKEN = 128  # a token's share of a body holding a whole context (as text escaped as \uXXXX, or ids)
MIN_BODY_BYTES, MAX_BODY_BYTES = 1 << 20, 8 << 20  # 1 to 8 MiB, whatever the context
BODY_SECONDS = 10.0  # from a request's headers to its body's last byte
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})  # --host values that listen on every interface
OPEN_PATHS = frozenset({"/", "/health"})  # answered without the API key: the chat page asks for it itself


@dataclass(frozen=True)
class Access:
    """Who may use the server: a Host header naming one of `hosts` (None: any name), and, with an
    `api_key`, the key as a bearer token."""

    hosts: frozenset[str] | None = LOCAL_HOSTS
    api_key: str | None = None


def body_limit(context_length: int) -> int:
    """The largest body a server for this context reads: room for a whole context, 1 to 8 MiB."""
    return min(MAX_BODY_BYTES, max(MIN_BODY_BYTES, context_length * BODY_BYTES_PER_TOKEN))


def access_for(bind_host: str, allowed_hosts: tuple[str, ...] = (), api_key: str | None = None) -> Access:
    """The Access of a server listening on `bind_host`: the local names and that address, plus
    `allowed_hosts`; a server on every interface (0.0.0.0) takes any Host unless `allowed_hosts` names some."""
    if bind_host in ANY_ADDRESS and not allowed_hosts:
        return Access(None, api_key)
    names = {_host_name(h) for h in (bind_host, *allowed_hosts) if h not in ANY_ADDRESS}
    return Access(LOCAL_HOSTS | names, api_key)


class RequestGuard:
    """ASGI middleware: checks the Host and the API key, then reads the body within its size and time
    limits and hands it on to `app` (which sees the client's own messages after it, e.g. a disconnect)."""

    def __init__(self, app, access: Access, max_body_bytes: int, body_seconds: float = BODY_SECONDS):
        self.app = app
        self.access = access
        self.max_body_bytes = max_body_bytes
        self.body_seconds = body_seconds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        refusal = self._refusal(scope["path"], headers)
        if refusal is not None:
            await _refuse(send, refusal)
            return
        try:
            body = await self._read_body(receive)
        except ApiError as error:
            await _refuse(send, error)
            return
        if body is None:  # the client left
            return
        replayed = False

        async def receive_after_body():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, receive_after_body, send)

    def _refusal(self, path: str, headers: dict[str, str]) -> ApiError | None:
        """Why this request is refused before its body is read (None: it is not)."""
        hosts = self.access.hosts
        if hosts is not None and _host_name(headers.get("host", "")) not in hosts:
            shown = json.dumps(headers.get("host", "")[:100])
            return ApiError(400, f"the Host header {shown} does not name this server ({', '.join(sorted(hosts))}); "
                                 "start it with --allowed-host NAME to serve another name", code="invalid_host")
        key = self.access.api_key
        if key is not None and path not in OPEN_PATHS:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), key.encode()):
                return ApiError(401, "a missing or wrong API key: send the server's --api-key as "
                                     "'Authorization: Bearer KEY' (OpenAI clients: api_key=KEY)",
                                code="invalid_api_key")
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body_bytes:
            return _too_large(int(length), self.max_body_bytes)
        return None

    async def _read_body(self, receive) -> bytes | None:
        """The whole body (None if the client disconnected); an ApiError past the size or time limit."""
        try:
            return await asyncio.wait_for(self._read_all(receive), self.body_seconds)
        except asyncio.TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {self.body_seconds:g} s; send it at once",
                           code="request_timeout") from None

    async def _read_all(self, receive) -> bytes | None:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _too_large(size, self.max_body_bytes)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _too_large(size: int, limit: int) -> ApiError:
    return ApiError(413, f"the request body has {size:,} bytes; this server reads at most {limit:,} (room for the "
                         "model's whole context)", code="request_too_large")


def _host_name(host: str) -> str:
    """The name in a Host header or --host value, without port, brackets, trailing dot or case:
    "LocalHost:8000" -> "localhost", "[::1]:8000" -> "::1"."""
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


async def _refuse(send, error: ApiError) -> None:
    """Answer with `error`'s object and close the connection (the body may still be on its way)."""
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    if error.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
