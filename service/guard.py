"""The ASGI layer every request passes first, in this order: security headers on every answer, the Host
check, the API key (before a byte of the body is read, unless the key comes in the body as LibreTranslate's
clients send it), the body limit for any transfer encoding, a bound on the JSON values a body may hold, form
bodies turned into JSON (LibreTranslate's clients); and request metrics. Plain ASGI: no task or stream per
request."""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.access import bearer_token
from service.errors import BadRequest, PayloadTooLarge, ServiceError, error_response
from service.jsonscan import too_many_values
from service.libre import FORM, body_api_key, content_type, form_to_json
from service.logs import REQUEST_ID, request_id
from service.state import ServiceState

CSP = b"default-src 'self'; frame-ancestors 'none'"
# FastAPI's /docs and /redoc pages load Swagger UI or ReDoc from a CDN and start them with an inline script.
DOCS_CSP = (
    b"default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
    b"style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net https://fonts.googleapis.com; "
    b"img-src 'self' data: https://fastapi.tiangolo.com https://cdn.redoc.ly; "
    b"font-src 'self' https://fonts.gstatic.com; worker-src blob:; frame-ancestors 'none'"
)
HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]
PROBES = ("/healthz", "/readyz")
FORM_PATHS = frozenset({"/translate", "/summarize", "/detect", "/languages"})  # LibreTranslate's clients post forms
SCAN_FROM_BYTES = 64 * 1024  # smaller bodies parse in a few milliseconds whatever they hold
# Without an Authorization header, a body announced (Content-Length) at most this large is read for an api_key
# field (LibreTranslate's clients); larger or chunked bodies are refused unread, as before.
BODY_KEY_BYTES = 64 * 1024


class Guard:
    def __init__(self, app: ASGIApp, state: ServiceState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500
        csp = DOCS_CSP if scope["path"] in ("/docs", "/redoc") else CSP
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), None)
        rid = request_id(given)
        REQUEST_ID.set(rid)  # this request's log lines carry it (the task's own context)

        async def send_guarded(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"content-security-policy", csp),
                    *HEADERS,
                    (b"x-request-id", rid.encode()),
                ]
            await send(message)

        try:
            await self.admit(scope, receive, send_guarded)
        finally:
            path = getattr(scope.get("route"), "path", "other")
            self.state.metrics.observe(path, status, time.perf_counter() - start)

    async def admit(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse the request with the one error shape, or pass it on with its body read."""
        try:
            self.check_host(scope)
            client = scope.get("client")
            path, headers, access = scope["path"], scope["headers"], self.state.access
            body, key = None, ""
            if (
                scope["method"] == "POST"
                and access.needs_key(path)
                and not bearer_token(headers)
                and announced_length(headers) <= BODY_KEY_BYTES
            ):
                body = await self.read_body(scope, receive)  # the key may be its api_key field
                key = body_api_key(body, content_type(headers))
            owner = await access.check(path, headers, client[0] if client else "", key)
            scope.setdefault("state", {})["owner"] = owner
            if body is None:
                body = await self.read_body(scope, receive)
            if content_type(headers) == FORM and path in FORM_PATHS:
                body = as_json(scope, body)
        except ServiceError as e:
            response = error_response(e)
            if e.status == 413 or e.status == 401 or e.status == 429:
                response.headers["connection"] = "close"  # the rest of the body is not worth reading
            await response(scope, receive, send)
            return
        await self.app(scope, replay(body, receive), send)

    def check_host(self, scope: Scope) -> None:
        """TRANSFORMER_ALLOWED_HOSTS, except for the probes: orchestrators ask those by address."""
        allowed = self.state.settings.hosts()
        if not allowed or scope["path"] in PROBES:
            return
        name = host_name(next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), ""))
        if not any(name == h or (h.startswith("*.") and name.endswith(h[1:])) for h in allowed):
            raise BadRequest("this Host is not served here (TRANSFORMER_ALLOWED_HOSTS)")

    async def read_body(self, scope: Scope, receive: Receive) -> bytes:
        """The whole body, refused as soon as it passes max_body_bytes, whether or not a Content-Length
        announced it; a large one must also not hold more JSON values than the largest legal request."""
        s = self.state.settings
        limit = s.max_body_bytes
        length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if length is not None and (not length.isdigit() or int(length) > limit):
            raise PayloadTooLarge(f"request body over the limit of {limit} bytes (TRANSFORMER_MAX_BODY_BYTES)")
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"request body over the limit of {limit} bytes (TRANSFORMER_MAX_BODY_BYTES)")
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        values = max(s.max_texts, s.max_job_texts) + 1000  # texts, options and some slack
        if len(body) > SCAN_FROM_BYTES and await asyncio.to_thread(too_many_values, body, values):
            raise PayloadTooLarge(f"the request body holds more than {values} JSON values")
        return body


def announced_length(headers: list[tuple[bytes, bytes]]) -> float:
    """The Content-Length a request announced; infinity when none (chunked) or not a number."""
    length = next((v for k, v in headers if k == b"content-length"), b"")
    return int(length) if length.isdigit() else float("inf")


def as_json(scope: Scope, body: bytes) -> bytes:
    """A form body as JSON, the scope's Content-Type changed to match (LibreTranslate's clients post forms)."""
    try:
        converted = form_to_json(body)
    except UnicodeDecodeError:
        raise BadRequest("the form body is not UTF-8") from None
    scope["headers"] = [(k, v) for k, v in scope["headers"] if k not in (b"content-type", b"content-length")] + [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(converted)).encode()),
    ]
    return converted


def host_name(host: str) -> str:
    """The name of a Host header, without its port: example.com:8000 -> example.com, [::1]:8000 -> ::1."""
    if host.startswith("["):
        return host[1 : host.find("]")].lower()
    return (host.rsplit(":", 1)[0] if host.count(":") == 1 else host).lower()


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the body read already as one message, then waits for the client as before."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again
