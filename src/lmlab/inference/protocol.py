"""uvicorn's HTTP/1.1 protocol with a deadline for a request's headers, so a slow client cannot hold a
connection open forever.

uvicorn times out an idle kept-alive connection, but not one that has sent part of a request's headers
(or nothing at all since it opened): a hundred such clients stay open for as long as they like. Here
each connection must complete a request's headers within HEADER_SECONDS of opening, or of its previous
response; otherwise it is closed. (The body has its own limit, `guard.BODY_SECONDS`.)
"""

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_SECONDS = 10.0


class HeaderDeadlineProtocol(H11Protocol):
    """H11Protocol closing a connection whose next request's headers are not complete in HEADER_SECONDS."""

    header_seconds = HEADER_SECONDS
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
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
