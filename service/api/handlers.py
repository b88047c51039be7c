"""Every exception answered in one shape, {"error": {"code", "message", "details"}}, with the status its type
has (service.errors): ours, the framework's validation and routing errors, and any other as a 500."""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from python_multipart.exceptions import FormParserError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException

from service.api.libre import content_type
from service.api.schemas import UNION_TAGS
from service.errors import BadRequest, InvalidRequest, MalformedJson, MethodNotAllowed, NotFound, ServiceError, shown

log = logging.getLogger("service")
MAX_ERRORS = 10  # validation errors listed in one answer; the rest are counted


def error_response(e: ServiceError) -> JSONResponse:
    body = {"error": {"code": e.code, "message": e.message, "details": e.details}}
    return JSONResponse(body, e.status, headers=e.headers)


def _field(loc: tuple[Any, ...]) -> str:
    """A validation error's location, without union labels; a client's own key (an unknown field) escaped."""
    parts = [
        p
        if isinstance(p, str) and p.isidentifier() and len(p) <= 40
        else str(p)
        if isinstance(p, int)
        else shown(p, 40)
        for p in loc
        if p != "body" and p not in UNION_TAGS
    ]
    return ".".join(str(p) for p in parts) if parts else "body"


def _message(error: Any) -> str:
    if error["type"] == "string_unicode":
        return "invalid Unicode (a lone surrogate, such as \\ud800); send UTF-8 text"
    if error["type"] == "value_error" and "Expected UploadFile" in str(error["msg"]):  # FastAPI's own words
        return "not a file: a form field without a filename where a file part was expected (multipart/form-data)"
    return str(error["msg"])


def validation_error(e: RequestValidationError) -> ServiceError:
    """The request's validation errors: malformed JSON, or each invalid field (never the values: they may be
    huge), at most MAX_ERRORS of them."""
    errors = e.errors()
    bad_json = [err for err in errors if err["type"] == "json_invalid"]
    if bad_json:
        return MalformedJson(str(bad_json[0].get("ctx", {}).get("error", "JSON decode error")))
    details = [{"field": _field(err["loc"]), "message": _message(err)} for err in errors[:MAX_ERRORS]]
    return InvalidRequest.of(details, more=max(0, len(errors) - MAX_ERRORS))


def allowed_methods(app: FastAPI, path: str) -> str:
    """Every method the OpenAPI document gives this path (the router's own 405 names only one route's)."""
    methods: set[str] = set()
    for template, operations in app.openapi()["paths"].items():
        if re.fullmatch(re.sub(r"\\\{[^}]*\\\}", "[^/]+", re.escape(template)), path):
            methods |= {m.upper() for m in operations}
    return ", ".join(sorted(methods | ({"HEAD"} if "GET" in methods else set())))


def unreadable_body(e: StarletteHTTPException, media_type: bytes) -> MalformedJson | None:
    """FastAPI's 400 for a JSON body (media_type: the request's, libre.content_type) that json.loads fails on
    with something other than a JSONDecodeError, its cause: bytes that are not UTF-8, or a number too long for
    int() (over 4300 digits)."""
    cause = e.__cause__
    json_body = media_type == b"application/json" or media_type.endswith(b"+json")
    if e.status_code != 400 or not json_body or not isinstance(cause, ValueError):
        return None
    if isinstance(cause, UnicodeDecodeError):
        return MalformedJson(f"not UTF-8 (byte {cause.start} is {cause.object[cause.start : cause.start + 1]!r})")
    return MalformedJson(str(cause).split(";")[0])


def unparsed_form(e: StarletteHTTPException) -> BadRequest | None:
    """Starlette's 400 for a multipart body its parser refused: its words are "Invalid multipart data." whatever
    the parser found (a part's header over 4 KB, such as a long file name, or a broken boundary); the parser's
    own words say which."""
    form_error = e.__context__
    if e.status_code != 400 or not isinstance(form_error, MultiPartException):
        return None
    cause = form_error.__cause__
    reason = (str(cause) if isinstance(cause, FormParserError) else form_error.message).rstrip(".")
    if "header size" in reason:
        reason += " (a part's headers, its file name among them, take about 4 KB at most)"
    return BadRequest(f"invalid multipart/form-data body: {reason}")


def http_error(e: StarletteHTTPException, allow: str | None = None, media_type: bytes = b"") -> ServiceError:
    """The router's own errors (an unknown path, a method a path does not take: allow names the ones it does),
    and FastAPI's for a body of this media type that it could not read (unreadable_body, unparsed_form)."""
    unreadable = unreadable_body(e, media_type) or unparsed_form(e)
    if unreadable is not None:
        return unreadable
    kinds: dict[int, type[ServiceError]] = {404: NotFound, 405: MethodNotAllowed}
    headers = {**(getattr(e, "headers", None) or {}), **({"Allow": allow} if allow else {})}
    error = kinds.get(e.status_code, ServiceError)(str(e.detail), headers=headers or None)
    if e.status_code not in kinds:
        error.status, error.code = e.status_code, "http_error"
    return error


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def service_error(_: Request, e: ServiceError) -> JSONResponse:
        return error_response(e)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(e))

    @app.exception_handler(StarletteHTTPException)
    async def routing(request: Request, e: StarletteHTTPException) -> JSONResponse:
        allow = allowed_methods(app, request.url.path) if e.status_code == 405 else None
        return error_response(http_error(e, allow, content_type(request.scope["headers"])))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return error_response(ServiceError(f"internal error: {type(e).__name__}"))
