"""The ASGI layer outside every other: what every answer carries, errors included: the security headers and the
request id (the client's X-Request-Id when it is a plain id, else a new one; every log line written while
answering carries it too), and the request's count and latency in /metrics; and HEAD, answered as GET without
its body (RFC 9110, 9.3.2), for every GET route. Plain ASGI: no task or stream per request."""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.docs import DOCS_PAGES
from service.api.metrics import RequestMetrics
from service.logs import REQUEST_ID, request_id

CSP = b"default-src 'self'; frame-ancestors 'none'"
# The /docs and /redoc pages (service.api.docs) load Swagger UI or ReDoc from this server and start them with an
# inline script; ReDoc styles inline and runs a worker from a blob.
DOCS_CSP = (
    b"default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    b"img-src 'self' data:; worker-src 'self' blob:; frame-ancestors 'none'"
)
HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY")]


class Envelope:
    def __init__(self, app: ASGIApp, metrics: RequestMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500
        csp = DOCS_CSP if scope["path"] in DOCS_PAGES else CSP
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), None)
        rid = request_id(given)
        REQUEST_ID.set(rid)  # this request's log lines carry it (the task's own context)
        head = scope["method"] == "HEAD"
        inner = {**scope, "method": "GET"} if head else scope  # the server's own scope still says HEAD

        async def send_enveloped(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                extra = [(b"content-security-policy", csp), *HEADERS, (b"x-request-id", rid.encode())]
                message["headers"] = [*message.get("headers", []), *extra]
            elif head and message["type"] == "http.response.body":
                message = {**message, "body": b""}  # GET's headers (its Content-Length too), no body
            await send(message)

        try:
            await self.app(inner, receive, send_enveloped)
        finally:
            path = getattr(inner.get("route"), "path", "other")
            self.metrics.observe(path, status, time.perf_counter() - start)
