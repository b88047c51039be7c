"""The ASGI layer every request passes before its route, in this order: the Host check, the API key (before a
byte of the body is read, unless the key comes in the body as LibreTranslate's clients send it), the body read
within its limits, and form bodies turned into JSON (LibreTranslate's clients). A request it refuses is answered
in the one error shape. Plain ASGI: no task or stream per request."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.access import Access, bearer_token
from service.api.body import FILE_PATHS, announced_length, body_limit, read_body, replay
from service.api.handlers import error_response
from service.api.libre import FORM, FORM_PATHS, body_api_key, content_type, form_as_json
from service.errors import ServiceError
from service.settings import ServiceSettings

# Without an Authorization header, a body announced (Content-Length) at most this large is read for an api_key
# field (LibreTranslate's clients); larger or chunked bodies are refused unread.
BODY_KEY_BYTES = 64 * 1024
CLOSE_AFTER = (401, 413, 429)  # refusals after which the rest of the body is not worth reading


class Guard:
    def __init__(self, app: ASGIApp, settings: ServiceSettings, access: Access) -> None:
        self.app = app
        self.settings = settings
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            body = await self.admit(scope, receive)
        except ServiceError as e:
            response = error_response(e)
            if e.status in CLOSE_AFTER:
                response.headers["connection"] = "close"
            await response(scope, receive, send)
            return
        await self.app(scope, replay(body, receive), send)

    async def admit(self, scope: Scope, receive: Receive) -> bytes:
        """The request's body once its Host and key pass (its owner in scope["state"]), or a ServiceError."""
        path, headers = scope["path"], scope["headers"]
        self.access.check_host(path, headers)
        body, key = None, ""
        if scope["method"] == "POST" and self.access.needs_key(path) and not bearer_token(headers):
            if path in FILE_PATHS and announced_length(headers) <= body_limit(path, self.settings)[0]:
                body = await read_body(scope, receive, self.settings)  # a file's form: its api_key field
                key = await form_api_key(scope, body)
            elif announced_length(headers) <= BODY_KEY_BYTES:
                body = await read_body(scope, receive, self.settings)  # the key may be its api_key field
                key = body_api_key(body, content_type(headers))
        client = scope.get("client")
        scope.setdefault("state", {})["owner"] = await self.access.check(
            path, headers, client[0] if client else "", key
        )
        if body is None:
            body = await read_body(scope, receive, self.settings)
        if content_type(headers) == FORM and path in FORM_PATHS:
            body = form_as_json(scope, body)
        return body


async def form_api_key(scope: Scope, body: bytes) -> str:
    """The api_key field of a multipart form body (LibreTranslate's /translate_file clients), or ''."""
    received = False

    async def once() -> dict[str, object]:
        nonlocal received
        if received:
            return {"type": "http.disconnect"}
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        async with Request(scope, once).form() as form:
            key = form.get("api_key")
    except HTTPException:  # not a form we can read: the route answers what is wrong with it
        return ""
    return key if isinstance(key, str) else ""
