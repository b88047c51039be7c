"""A request's body read once, within limits, before the route sees it: at most max_body_bytes whatever the
transfer encoding, and, when large, no more JSON values than the largest legal request holds (jsonscan)."""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Scope

from service.api.jsonscan import too_many_values
from service.errors import PayloadTooLarge
from service.settings import ServiceSettings

SCAN_FROM_BYTES = 64 * 1024  # smaller bodies parse in a few milliseconds whatever they hold


def announced_length(headers: list[tuple[bytes, bytes]]) -> float:
    """The Content-Length a request announced; infinity when none (chunked) or not a number."""
    length = next((v for k, v in headers if k == b"content-length"), b"")
    return int(length) if length.isdigit() else float("inf")


async def read_body(scope: Scope, receive: Receive, settings: ServiceSettings) -> bytes:
    """The whole body, refused as soon as it passes max_body_bytes, whether or not a Content-Length announced
    it; a large one must also not hold more JSON values than the largest legal request."""
    limit = settings.max_body_bytes
    too_large = f"request body over the limit of {limit} bytes (TRANSFORMER_MAX_BODY_BYTES)"
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
    if len(body) > SCAN_FROM_BYTES and await asyncio.to_thread(too_many_values, body, values):
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
