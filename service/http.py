"""uvicorn's HTTP protocol with limits on receiving each request: a deadline for the whole request, headers and
body, and a most size for its request line and headers; and the body of a request that asks to upgrade the
connection kept.

uvicorn times only the idle time between two requests of a connection (timeout_keep_alive), and resets it on every
byte: a client that connects and sends nothing, or sends its headers a byte at a time (Slowloris), holds its
connection, and a file descriptor, for as long as it likes. Nor does it bound a request's headers: one connection
sending header lines without end grew the server by 4 GiB in 20 s. ASGI middleware cannot help with either: it
runs once the headers are in. Both are answered here, in the service's error shape, and the connection closed.

Java's HttpClient (HTTP/2 by default) and `curl --http2` ask to upgrade a cleartext connection to HTTP/2
(`Connection: Upgrade, HTTP2-Settings` and `Upgrade: h2c`), body and all. A server may ignore that (RFC 9110
§7.8), but httptools then takes the body for the new protocol's bytes, and the app read an empty one ("body:
Field required"; uvicorn's issue 2722, open). This service upgrades to nothing (no WebSockets either), so each
head is parsed without the upgrade option in its Connection header: the request is answered in HTTP/1.1."""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.api.envelope import CSP, HEADERS
from service.api.handlers import error_response
from service.errors import BadRequest, HeadersTooLarge, ServiceError, SlowRequest
from service.logs import REQUEST_ID, request_id
from service.settings import ServiceSettings

log = logging.getLogger("service")
CONNECTION = re.compile(rb"(?im)^(connection:)([^\r\n]*)")  # a Connection header line: its name, its options
UPGRADE = re.compile(rb"(?i)upgrade")


def without_upgrade(head: bytes) -> bytes:
    """A request's line and headers with the "upgrade" option taken out of its Connection headers, so that the
    parser reads the body that follows as the request's (the Upgrade header itself stays, and means nothing
    without it)."""
    if UPGRADE.search(head) is None:
        return head

    def options(m: re.Match[bytes]) -> bytes:
        kept = [o for o in m.group(2).split(b",") if o.strip().lower() != b"upgrade"]
        return m.group(1) + b",".join(kept)

    return CONNECTION.sub(options, head)


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
    part of the request reached the app, else (a body too slow) closed, which the app reads as a disconnect.
    A request's head is held until it is all in, and parsed without the upgrade option (without_upgrade)."""

    read_timeout_s = 60.0
    max_head_bytes = 64 * 1024
    deadline: asyncio.TimerHandle | None = None
    in_head = True  # the bytes coming in are a request line and headers
    begun = False  # the parser has begun the request (on_message_begin): its head is no longer held
    held: bytearray | None = None  # the head so far, until it is all in
    head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.deadline is None:  # the first bytes of the next request on a kept-alive connection
            self._arm()
        if self.in_head and not self.begun:
            head = self._whole_head(data)
            if head is None:
                return
            data = head
        elif self.in_head:  # a pipelined request's head, begun by the parser in an earlier chunk
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

    def _whole_head(self, data: bytes) -> bytes | None:
        """data with the head held before it, once the head is all in, and without its upgrade option
        (without_upgrade); None while it is not all in, or when it passes max_head_bytes (refused)."""
        start = 0
        buffer: bytes | bytearray = data
        if self.held:  # the head began in an earlier chunk
            start = len(self.held) - 3  # its end may straddle the two
            self.held += data
            buffer = self.held
        end = buffer.find(b"\r\n\r\n", max(0, start))
        if end < 0 and len(buffer) <= self.max_head_bytes:  # more to come
            if buffer is data:  # the head's first chunk
                self.held = bytearray(data)
            self._unset_keepalive_if_required()  # bytes came: uvicorn's idle timer stops, as when it parses them
            return None
        whole, self.held = bytes(buffer), None
        if end < 0 or end + 4 > self.max_head_bytes:
            self._refuse_head()
            return None
        self.head_bytes = end + 4
        head = whole[: end + 4]
        plain = without_upgrade(head)
        return whole if plain is head else plain + whole[end + 4 :]

    def on_message_begin(self) -> None:
        self.begun = True
        super().on_message_begin()

    def _refuse_head(self) -> None:
        message = f"request line and headers over the limit of {self.max_head_bytes} bytes"
        self._refuse(HeadersTooLarge(f"{message} (TRANSFORMER_MAX_HEADER_BYTES)"), answer=True)

    def on_headers_complete(self) -> None:
        self.in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()
        self.in_head, self.begun, self.head_bytes = True, False, 0  # whatever comes next is the next request's head

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


def uvicorn_options(settings: ServiceSettings) -> dict[str, Any]:
    """What uvicorn takes from the settings: the HTTP protocol (limited_protocol), the proxies it believes and how
    long it keeps an idle connection."""
    return {
        "http": limited_protocol(settings),
        "proxy_headers": True,
        "forwarded_allow_ips": settings.proxies(),
        "timeout_keep_alive": settings.keep_alive_s,
    }


def limited_protocol(settings: ServiceSettings) -> type[LimitedProtocol]:
    """LimitedProtocol with the settings' limits, as uvicorn's `http` setting takes it (a class)."""
    limits = {"read_timeout_s": settings.request_read_timeout_s, "max_head_bytes": settings.max_header_bytes}
    return type("LimitedProtocol", (LimitedProtocol,), limits)
