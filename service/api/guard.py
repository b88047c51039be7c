"""The ASGI layer every request passes before its route, in this order: the Host check, the API key (before a
byte of the body is read, unless the key comes in the body as LibreTranslate's clients send it), the body read
within its limits and in a form its path reads (service.api.body.media_error), and form bodies, form-encoded or
multipart, turned into JSON (LibreTranslate's clients and page). A request it refuses is answered in the one error
shape. Plain ASGI: no task or stream per request."""

from __future__ import annotations

from python_multipart.multipart import parse_options_header
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.access import Access, bearer_token
from service.api.body import FILE_PATHS, announced_length, body_limit, media_error, read_body, replay
from service.api.handlers import error_response, unparsed_form
from service.api.libre import (
    FORM,
    FORM_PATHS,
    MULTIPART,
    as_json,
    body_api_key,
    content_type,
    fields_to_json,
    form_as_json,
)
from service.errors import BadRequest, InvalidRequest, ServiceError
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
        media = content_type(headers)  # before form bodies become JSON
        self.access.check_host(path, headers)
        body, key = None, ""
        if scope["method"] == "POST" and self.access.needs_key(path) and not bearer_token(headers):
            if path in FILE_PATHS and announced_length(headers) <= body_limit(path, self.settings)[0]:
                body = await read_body(scope, receive, self.settings)  # a file's form: its api_key field
                key = await form_api_key(scope, body)
            elif announced_length(headers) <= BODY_KEY_BYTES:
                body = await read_body(scope, receive, self.settings)  # the key may be its api_key field
                key = await form_api_key(scope, body) if media == MULTIPART else body_api_key(body, media)
        client = scope.get("client")
        scope.setdefault("state", {})["owner"] = await self.access.check(
            path, headers, client[0] if client else "", key
        )
        if body is None:
            body = await read_body(scope, receive, self.settings)
        unreadable = media_error(path, headers, body, media)
        if unreadable is not None:
            raise unreadable
        if path in FORM_PATHS and media == FORM:
            body = form_as_json(scope, body)
        elif path in FORM_PATHS and media == MULTIPART and body:
            body = await multipart_as_json(scope, body)
        return body


async def form_fields(scope: Scope, body: bytes) -> list[tuple[str, str | UploadFile]]:
    """A multipart form body's fields, in order, as Starlette's parser reads them; HTTPException where it cannot."""
    received = False

    async def once() -> dict[str, object]:
        nonlocal received
        if received:
            return {"type": "http.disconnect"}
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async with Request(scope, once).form() as form:
        return form.multi_items()


async def form_api_key(scope: Scope, body: bytes) -> str:
    """The api_key field of a multipart form body (LibreTranslate's page and /translate_file clients), or ''."""
    try:
        fields = await form_fields(scope, body)
    except HTTPException:  # not a form we can read: the route answers what is wrong with it
        return ""
    key = next((value for name, value in fields if name == "api_key"), "")
    return key if isinstance(key, str) else ""


async def multipart_as_json(scope: Scope, body: bytes) -> bytes:
    """A multipart form of text fields (LibreTranslate's page posts a FormData to /translate) as JSON, the scope's
    Content-Type changed to match; a file in it is refused (files go to /translate_file)."""
    try:
        fields = await form_fields(scope, body)
    except HTTPException as e:
        raise unparsed_form(e) or BadRequest(f"invalid multipart/form-data body: {e.detail}") from None
    texts: list[tuple[str, str]] = []
    for name, value in fields:
        if not isinstance(value, str):
            raise InvalidRequest(name, f"a file, where {scope['path']} takes text fields (files go to /translate_file)")
        texts.append((name, value))
    if utf8_form(scope["headers"]) and not is_utf8(body):  # the parser read its fields as Latin-1 then
        raise BadRequest("the form body is not UTF-8 (its Content-Type names no other charset)")
    return as_json(scope, fields_to_json(texts))


def utf8_form(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a multipart body's text fields are UTF-8: its Content-Type names no charset, or names UTF-8."""
    value = next((v for k, v in headers if k == b"content-type"), b"")
    charset = parse_options_header(value)[1].get(b"charset", b"utf-8")
    return charset.strip().lower().replace(b"_", b"-") in (b"utf-8", b"utf8")


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
