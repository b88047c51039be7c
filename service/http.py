"""uvicorn's HTTP protocol with a deadline for receiving each request whole, headers and body.

uvicorn times only the idle time between two requests of a connection (timeout_keep_alive), and resets it on every
byte: a client that connects and sends nothing, or sends its headers a byte at a time (Slowloris), holds its
connection, and a file descriptor, for as long as it likes, and a few thousand such clients hold them all. ASGI
middleware cannot help: it runs once the headers are in. Here each connection must deliver each request within
the deadline, from its first byte (or from connecting); the answer's time is the request's own
(ServiceSettings.request_timeout_s)."""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("service")
TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class DeadlineProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that closes a connection whose request is not all in within read_timeout_s seconds of
    its first byte, or of connecting (408 when no part of the request reached the app)."""

    read_timeout_s = 60.0
    deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.deadline is None:  # the first bytes of the next request on a kept-alive connection
            self._arm()
        super().data_received(data)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self.deadline = self.loop.call_later(self.read_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _expired(self) -> None:
        self.deadline = None
        if self.transport.is_closing():
            return
        log.warning("closed a connection that sent no whole request within %g s", self.read_timeout_s)
        if self.cycle is None or self.cycle.response_complete:  # headers not all in: the app never saw it
            self.transport.write(TIMED_OUT)
        self.transport.close()


def deadline_protocol(read_timeout_s: float) -> type[DeadlineProtocol]:
    """DeadlineProtocol with this deadline, as uvicorn's `http` setting takes it (a class)."""
    return type("DeadlineProtocol", (DeadlineProtocol,), {"read_timeout_s": read_timeout_s})
