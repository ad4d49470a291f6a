"""uvicorn's HTTP/1.1 protocol with a deadline for a request's headers, so a slow client cannot hold a
connection open forever, and a lingering close, so a refused client still reads its answer.

uvicorn times out an idle kept-alive connection, but not one that has sent part of a request's headers
(or nothing at all since it opened): a hundred such clients stay open for as long as they like. Here
each connection must complete a request's headers within HEADER_SECONDS of opening, or of its previous
response; otherwise it is closed. (The body has its own limit, `guard.BODY_SECONDS`.)

A request refused before its body is read (413 for a body over the limit) is answered while the client
is still sending. Closing a socket that holds unread bytes makes the kernel send a reset, which can
destroy the answer in the client's buffers before the client reads it (it sees "connection reset"
instead of the 413). So a close first ends the writing side (the answer is sent, then the end of the
stream) and reads and drops what the client still sends, for at most LINGER_SECONDS, as web servers do.
"""

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_SECONDS = 10.0
LINGER_SECONDS = 2.0  # after closing, how long what the client still sends is read and dropped


class _LingeringTransport:
    """A transport whose `close()` is a lingering close: the writing side ends (once the answer is
    flushed), what arrives is dropped (`lingering`), and the socket closes when the client closes its
    side or after `seconds`. Every other call goes to the transport itself."""

    def __init__(self, transport, loop: asyncio.AbstractEventLoop, seconds: float):
        self._transport = transport
        self._loop = loop
        self._seconds = seconds
        self.lingering = False

    def close(self) -> None:
        if self.lingering or self._transport.is_closing() or not self._transport.can_write_eof():
            self._transport.close()
            return
        self.lingering = True
        self._transport.write_eof()
        self._transport.resume_reading()  # flow control may have paused it: the rest must be read to be dropped
        self._loop.call_later(self._seconds, self._transport.close)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class HeaderDeadlineProtocol(H11Protocol):
    """H11Protocol closing a connection whose next request's headers are not complete in HEADER_SECONDS,
    and closing every connection lingering (`_LingeringTransport`)."""

    header_seconds = HEADER_SECONDS
    linger_seconds = LINGER_SECONDS
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(_LingeringTransport(transport, self.loop, self.linger_seconds))
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.transport.lingering:  # the rest of a refused request: dropped
            return
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # a request's headers are in: its body has its own limit
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()
