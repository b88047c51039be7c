"""uvicorn's HTTP protocol with limits on receiving each request: a deadline for the whole request, headers and
body, and a most size for its request line and headers.

uvicorn times only the idle time between two requests of a connection (timeout_keep_alive), and resets it on every
byte: a client that connects and sends nothing, or sends its headers a byte at a time (Slowloris), holds its
connection, and a file descriptor, for as long as it likes. Nor does it bound a request's headers: one connection
sending header lines without end grew the server by 4 GiB in 20 s. ASGI middleware cannot help with either: it
runs once the headers are in. Both are answered here, in the service's error shape, and the connection closed."""

from __future__ import annotations

import asyncio
import logging
import sys
from http import HTTPStatus

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.api.envelope import CSP, HEADERS
from service.api.handlers import error_response
from service.errors import BadRequest, HeadersTooLarge, ServiceError, SlowRequest
from service.logs import REQUEST_ID, request_id
from service.settings import ServiceSettings

log = logging.getLogger("service")


def raw_answer(e: ServiceError, rid: str) -> bytes:
    """e as a whole HTTP/1.1 response that closes the connection, its body the API's error shape, with the headers
    every answer of the app carries (service.api.envelope) and request id rid."""
    body = bytes(error_response(e).body)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"content-security-policy", CSP),
        *HEADERS,
        (b"x-request-id", rid.encode()),
    ]
    status = f"HTTP/1.1 {e.status} {HTTPStatus(e.status).phrase}\r\n".encode("latin-1")
    return status + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n" + body


class LimitedProtocol(HttpToolsProtocol):
    """HttpToolsProtocol that closes a connection whose request is not all in within read_timeout_s seconds of its
    first byte (or of connecting), or whose request line and headers pass max_head_bytes: with 408 or 431 when no
    part of the request reached the app, else (a body too slow) closed, which the app reads as a disconnect."""

    read_timeout_s = 60.0
    max_head_bytes = 64 * 1024
    deadline: asyncio.TimerHandle | None = None
    in_head = True  # the bytes coming in are a request line and headers
    head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.deadline is None:  # the first bytes of the next request on a kept-alive connection
            self._arm()
        if self.in_head:
            end = data.find(b"\r\n\r\n")  # where the head ends, when it ends in this chunk: exactly its size
            self.head_bytes += len(data) if end < 0 else end + 4
            if end >= 0 and self.head_bytes > self.max_head_bytes:
                self._refuse_head()
                return
        super().data_received(data)
        # No end in the chunk: the head goes on past it, or its end straddled two chunks, in which case the parser
        # has ended in_head and nothing is refused.
        if self.in_head and self.head_bytes > self.max_head_bytes and not self.transport.is_closing():
            self._refuse_head()

    def _refuse_head(self) -> None:
        message = f"request line and headers over the limit of {self.max_head_bytes} bytes"
        self._refuse(HeadersTooLarge(f"{message} (TRANSFORMER_MAX_HEADER_BYTES)"), answer=True)

    def on_headers_complete(self) -> None:
        self.in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()
        self.in_head, self.head_bytes = True, 0  # whatever comes next is the next request's head

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
        if not self.transport.is_closing():
            message = f"no whole request within {self.read_timeout_s:g} s (TRANSFORMER_REQUEST_READ_TIMEOUT_S)"
            self._refuse(SlowRequest(message), answer=self.in_head)  # a body too slow: the app reads a disconnect

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes its parser refuses (a request line or header that does not parse, a Content-Length
        beside a Transfer-Encoding, a bad chunk size): a plain-text "Invalid HTTP request received.". Answered in the
        service's error shape instead, with the parser's reason: uvicorn calls this while it handles the error."""
        reason = sys.exc_info()[1]
        e = BadRequest(f"not a valid HTTP/1.1 request: {str(reason).rstrip('.') if reason else msg}")
        self._refuse(e, answer=True)  # as uvicorn does, whether or not the app has begun on the request

    def _refuse(self, e: ServiceError, answer: bool) -> None:
        """Log e and close the connection, answering e first if answer (when the app has not begun to answer)."""
        rid = request_id(None)  # the client's id is in headers that were not read, or not all
        token = REQUEST_ID.set(rid)
        log.warning("closed a connection: %s", e.message)
        REQUEST_ID.reset(token)
        if answer:
            self.transport.write(raw_answer(e, rid))
        self.transport.close()


def limited_protocol(settings: ServiceSettings) -> type[LimitedProtocol]:
    """LimitedProtocol with the settings' limits, as uvicorn's `http` setting takes it (a class)."""
    limits = {"read_timeout_s": settings.request_read_timeout_s, "max_head_bytes": settings.max_header_bytes}
    return type("LimitedProtocol", (LimitedProtocol,), limits)
