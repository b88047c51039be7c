"""The service's exceptions, each with its HTTP status and code: the one mapping of errors to HTTP (the API answers
them all in one shape, service.api.handlers)."""

from __future__ import annotations

from typing import Any


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
    """A request that does not validate: its fields, each with what is wrong with it."""

    status, code = 422, "invalid_request"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", details=[{"field": field, "message": message}])

    @classmethod
    def of(cls, details: list[dict[str, str]], more: int = 0) -> InvalidRequest:
        """Several fields' errors (details: field and message each), and a count of those left out."""
        e = cls(details[0]["field"], details[0]["message"])
        e.message = "; ".join(f"{d['field']}: {d['message']}" for d in details)
        e.message += f"; and {more} more errors" if more else ""
        e.details = details
        return e


class MalformedJson(ServiceError):
    status, code = 422, "malformed_json"

    def __init__(self, reason: str) -> None:
        super().__init__(f"the request body is not valid JSON: {reason}", [{"field": "body", "message": reason}])


class Unauthorized(ServiceError):
    status, code = 401, "unauthorized"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class NotFound(ServiceError):
    status, code = 404, "not_found"


class MethodNotAllowed(ServiceError):
    status, code = 405, "method_not_allowed"


class ModelNotFound(NotFound):
    code = "model_not_found"

    def __init__(self, message: str, available: list[str], kind: str = "models") -> None:
        """available: the ids of the models of this kind ("summarization models": those of the task asked for)."""
        shown = ", ".join(available) if available else "none"
        super().__init__(f"{message}; available {kind}: {shown}", details={"available": available})


class PayloadTooLarge(ServiceError):
    status, code = 413, "payload_too_large"


class UnsupportedMediaType(ServiceError):
    """A body in a Content-Type or Content-Encoding its path does not read (service.api.body.media_error)."""

    status, code = 415, "unsupported_media_type"


class UnsupportedTransferCoding(ServiceError):
    """A body sent in a transfer coding other than chunked (RFC 9112 §6.1: 501 for a coding the server does not
    implement; service.api.body.media_error)."""

    status, code = 501, "unsupported_transfer_coding"


class TooCostly(ServiceError):
    """A request over one of the cost limits (TRANSFORMER_MAX_REQUEST_COST and the like)."""

    status, code = 413, "too_costly"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", details=[{"field": field, "message": message}])


class TooManyRequests(ServiceError):
    status, code = 429, "too_many_requests"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class TooManyKept(TooManyRequests):
    """An API key keeps as many background jobs and files, or bytes of them, as it may."""

    code = "too_many_kept"


class NotReady(ServiceError):
    """A file asked for before its job is done."""

    status, code = 409, "not_ready"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class QueueFull(TooManyRequests):
    code = "queue_full"


class Unavailable(ServiceError):
    status, code = 503, "unavailable"

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after)})


class RequestTimeout(ServiceError):
    status, code = 504, "timeout"


class SlowRequest(ServiceError):
    """A connection that did not deliver a whole request in time (service.http); answered by the server itself."""

    status, code = 408, "request_read_timeout"


class HeadersTooLarge(ServiceError):
    """A request line and headers over their limit (service.http); answered by the server itself."""

    status, code = 431, "headers_too_large"


class ClientClosed(ServiceError):
    """The client closed its connection before its answer (nginx's 499): nobody reads this one, but the request
    metrics count it."""

    status, code = 499, "client_closed_request"


class JobFailed(ServiceError):
    """Decoding failed on the worker (a bug or a crash loop), not because of the input."""

    status, code = 500, "job_failed"


class ResultTooLarge(ServiceError):
    """The answer would be more than the queue carries (TRANSFORMER_MAX_RESULT_BYTES)."""

    status, code = 413, "result_too_large"
