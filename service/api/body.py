"""A request's body read once, within limits, before the route sees it: at most max_body_bytes whatever the
transfer encoding, and, when large, no more JSON values than the largest legal request holds (jsonscan)."""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Scope

from service.api.jsonscan import too_many_values
from service.api.libre import FORM, FORM_PATHS, MULTIPART
from service.errors import PayloadTooLarge, UnsupportedMediaType, UnsupportedTransferCoding
from service.settings import ServiceSettings

SCAN_FROM_BYTES = 64 * 1024  # smaller bodies parse in a few milliseconds whatever they hold


def announced_length(headers: list[tuple[bytes, bytes]]) -> float:
    """The Content-Length a request announced; infinity when none (chunked) or not a number."""
    length = next((v for k, v in headers if k == b"content-length"), b"")
    return int(length) if length.isdigit() else float("inf")


FILE_PATHS = frozenset({"/translate_file"})  # multipart bodies holding a file, up to max_file_bytes
FORM_SLACK = 64 * 1024  # a file's multipart body: the file and at most this much of other fields and boundaries


def body_limit(path: str, settings: ServiceSettings) -> tuple[int, str]:
    """The most bytes a request's body may have on this path, and the setting that says so."""
    if path in FILE_PATHS:
        return settings.max_file_bytes + FORM_SLACK, "TRANSFORMER_MAX_FILE_BYTES"
    return settings.max_body_bytes, "TRANSFORMER_MAX_BODY_BYTES"


JSON_PATHS = frozenset({"/translate", "/summarize", "/detect", "/attention", "/jobs"})  # routes that read JSON


def media_error(
    path: str, headers: list[tuple[bytes, bytes]], body: bytes, media: bytes
) -> UnsupportedMediaType | UnsupportedTransferCoding | None:
    """Why a body cannot be read as its path reads bodies, or None: a compressed body (its bytes went on to the
    JSON parser, which named a byte that is not UTF-8), by Content-Encoding or by a transfer coding before
    `chunked` (the HTTP parser takes off the chunks and leaves the rest); a JSON body sent as a form (`curl -d`
    without a Content-Type sends one, and the form's one field was its whole text); or another type (text/plain
    said "Input should be a valid dictionary"). media: the request's media type (libre.content_type)."""
    if not body:
        return None
    coded = transfer_codings(headers)
    if coded:
        shown = ", ".join(c.decode("latin-1") for c in coded)
        return UnsupportedTransferCoding(f"Transfer-Encoding {shown!r} is not supported: send the body chunked alone")
    encoding = next((v.strip().lower() for k, v in headers if k == b"content-encoding"), b"identity")
    if encoding not in (b"", b"identity"):
        shown = encoding.decode("latin-1")
        return UnsupportedMediaType(f"Content-Encoding {shown!r} is not supported: send the body uncompressed")
    if path not in JSON_PATHS:
        return None
    if media == MULTIPART and path in FORM_PATHS:
        return None
    if media == FORM and path in FORM_PATHS:
        if body.lstrip()[:1] not in (b"{", b"["):
            return None
        return UnsupportedMediaType(
            "the body is JSON but its Content-Type says a form (application/x-www-form-urlencoded, what `curl -d` "
            "sends unless told otherwise): send it with Content-Type: application/json"
        )
    if media == b"application/json" or media.endswith(b"+json"):
        return None
    form = " or a form (application/x-www-form-urlencoded or multipart/form-data)" if path in FORM_PATHS else ""
    sent = repr(media.decode("latin-1")) if media else "a body without a Content-Type"
    return UnsupportedMediaType(f"{path} reads application/json{form}, not {sent}")


def transfer_codings(headers: list[tuple[bytes, bytes]]) -> list[bytes]:
    """The request's transfer codings other than chunked (the HTTP parser refuses a request whose last coding is
    not chunked, and takes off the chunks of the others)."""
    codings = [c.strip().lower() for k, v in headers if k == b"transfer-encoding" for c in v.split(b",")]
    return [c for c in codings if c and c != b"chunked"]


async def read_body(scope: Scope, receive: Receive, settings: ServiceSettings) -> bytes:
    """The whole body, refused as soon as it passes its limit (body_limit), whether or not a Content-Length
    announced it; a large JSON one must also not hold more JSON values than the largest legal request."""
    limit, setting = body_limit(scope["path"], settings)
    too_large = f"request body over the limit of {limit} bytes ({setting})"
    length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
    if length is not None and (not length.isdigit() or int(length) > limit):
        raise PayloadTooLarge(too_large)
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(too_large)
        chunks.append(chunk)
        more = message.get("more_body", False)
    body = b"".join(chunks)
    values = max(settings.max_texts, settings.max_job_texts) + 1000  # texts, options and some slack
    if (
        len(body) > SCAN_FROM_BYTES
        and scope["path"] not in FILE_PATHS
        and await asyncio.to_thread(too_many_values, body, values)
    ):
        raise PayloadTooLarge(f"the request body holds more than {values} JSON values")
    return body


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
