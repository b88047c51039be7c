"""The service's exceptions and their one mapping to HTTP responses: every error has the same JSON shape,
{"error": {"code", "message", "details"}}."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.schemas import UNION_TAGS

log = logging.getLogger("service")


class ServiceError(Exception):
    """An error answered to the client; subclasses fix the status and code."""

    status = 500
    code = "internal"

    def __init__(self, message: str, details: Any = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        self.headers = headers or {}


def shown(value: object, limit: int = 80) -> str:
    """A client's value as an error message may echo it: quoted, escaped (repr), and cut to limit characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class BadRequest(ServiceError):
    status, code = 400, "bad_request"


class InvalidRequest(ServiceError):
    status, code = 422, "invalid_request"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", details=[{"field": field, "message": message}])


class Unauthorized(ServiceError):
    status, code = 401, "unauthorized"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class NotFound(ServiceError):
    status, code = 404, "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"

    def __init__(self, message: str, available: list[str]) -> None:
        shown = ", ".join(available) if available else "none"
        super().__init__(f"{message}; available models: {shown}", details={"available": available})


class PayloadTooLarge(ServiceError):
    status, code = 413, "payload_too_large"


class TooCostly(ServiceError):
    """A request over one of the cost limits (TRANSFORMER_MAX_REQUEST_COST and the like)."""

    status, code = 413, "too_costly"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", details=[{"field": field, "message": message}])


class TooManyRequests(ServiceError):
    status, code = 429, "too_many_requests"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class QueueFull(TooManyRequests):
    code = "queue_full"


class Unavailable(ServiceError):
    status, code = 503, "unavailable"

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class NotImplementedHere(ServiceError):
    status, code = 501, "not_implemented"


class RequestTimeout(ServiceError):
    status, code = 504, "timeout"


class ClientClosed(ServiceError):
    """The client closed its connection before its answer (nginx's 499): nobody reads this one, but the request
    metrics count it."""

    status, code = 499, "client_closed_request"


class TaskFailed(ServiceError):
    """Decoding failed on the worker (a bug or a crash loop), not because of the input."""

    status, code = 500, "task_failed"


class ResultTooLarge(ServiceError):
    """The answer would be more than the queue carries (TRANSFORMER_MAX_RESULT_BYTES)."""

    status, code = 413, "result_too_large"


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}}


def error_response(e: ServiceError) -> JSONResponse:
    return JSONResponse(error_body(e.code, e.message, e.details), e.status, headers=e.headers)


MAX_ERRORS = 10  # validation errors listed in one answer; the rest are counted


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
    return str(error["msg"])


def install_error_handlers(app: FastAPI) -> None:
    """The one place where exceptions become HTTP status codes."""

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, e: ServiceError) -> JSONResponse:
        return error_response(e)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        bad_json = [err for err in errors if err["type"] == "json_invalid"]
        if bad_json:
            reason = str(bad_json[0].get("ctx", {}).get("error", "JSON decode error"))
            return JSONResponse(
                error_body(
                    "malformed_json",
                    f"the request body is not valid JSON: {reason}",
                    [{"field": "body", "message": reason}],
                ),
                422,
            )
        # Only the messages go back, never the input values (they may be huge); at most MAX_ERRORS of them.
        details = [{"field": _field(err["loc"]), "message": _message(err)} for err in errors[:MAX_ERRORS]]
        message = "; ".join(f"{d['field']}: {d['message']}" for d in details)
        if len(errors) > MAX_ERRORS:
            message += f"; and {len(errors) - MAX_ERRORS} more errors"
        return JSONResponse(error_body("invalid_request", message, details), 422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        return JSONResponse(error_body(code, str(e.detail)), e.status_code, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(error_body("internal", f"internal error: {type(e).__name__}"), 500)
