"""LibreTranslate's API beside ours (its published request and answer shapes), so that its clients work unchanged:
form-encoded bodies, `api_key` in the body, `format: html`, `alternatives`, `source: "auto"`, GET /languages and
POST /detect (service.detect)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import parse_qsl

from starlette.types import Scope

from service.errors import BadRequest

FORM = b"application/x-www-form-urlencoded"
MULTIPART = b"multipart/form-data"  # LibreTranslate's own page posts its fields as a FormData
FORM_PATHS = frozenset(
    {"/translate", "/summarize", "/detect", "/languages"}
)  # where LibreTranslate's clients post forms
LIST_FIELDS = ("q",)  # LibreTranslate's form bodies repeat q for a list of texts
LANGUAGE_NAMES = {
    "ar": "Arabic",
    "bg": "Bulgarian",
    "ca": "Catalan",
    "cs": "Czech",
    "da": "Danish",
    "de": "German",
    "el": "Greek",
    "en": "English",
    "es": "Spanish",
    "et": "Estonian",
    "fa": "Persian",
    "fi": "Finnish",
    "fr": "French",
    "ga": "Irish",
    "he": "Hebrew",
    "hi": "Hindi",
    "hu": "Hungarian",
    "id": "Indonesian",
    "it": "Italian",
    "ja": "Japanese",
    "ko": "Korean",
    "lt": "Lithuanian",
    "lv": "Latvian",
    "nl": "Dutch",
    "no": "Norwegian",
    "pl": "Polish",
    "pt": "Portuguese",
    "ro": "Romanian",
    "ru": "Russian",
    "sk": "Slovak",
    "sl": "Slovenian",
    "sv": "Swedish",
    "th": "Thai",
    "tr": "Turkish",
    "uk": "Ukrainian",
    "vi": "Vietnamese",
    "zh": "Chinese",
}


def content_type(headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    return next((v.split(b";")[0].strip().lower() for k, v in headers if k == b"content-type"), b"")


def fields_to_json(fields: Iterable[tuple[str, str]]) -> bytes:
    """A form's fields as the JSON object our endpoints read: repeated `q` fields make a list."""
    out: dict[str, object] = {}
    for name, value in fields:
        if name in LIST_FIELDS and name in out:
            previous = out[name]
            out[name] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            out[name] = value
    return json.dumps(out, ensure_ascii=False).encode()


def form_to_json(body: bytes) -> bytes:
    """A form-encoded body as JSON (fields_to_json). Its bytes and what its %-escapes stand for must be UTF-8
    (UnicodeDecodeError), as a JSON body's."""
    return fields_to_json(parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict"))


def form_as_json(scope: Scope, body: bytes) -> bytes:
    """A form body as JSON (form_to_json), the scope's Content-Type changed to match."""
    try:
        converted = form_to_json(body)
    except UnicodeDecodeError:
        raise BadRequest("the form body is not UTF-8") from None
    return as_json(scope, converted)


def as_json(scope: Scope, converted: bytes) -> bytes:
    """converted, a form body made JSON, with the scope's Content-Type and Content-Length changed to match."""
    scope["headers"] = [(k, v) for k, v in scope["headers"] if k not in (b"content-type", b"content-length")] + [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(converted)).encode()),
    ]
    return converted


def body_api_key(body: bytes, media_type: bytes) -> str:
    """The `api_key` field of a JSON or form body (LibreTranslate's way to send a key), or ''."""
    try:
        if media_type == FORM:
            return next((v for k, v in parse_qsl(body.decode("utf-8"), errors="strict") if k == "api_key"), "")
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        return ""
    key = data.get("api_key") if isinstance(data, dict) else None
    return key if isinstance(key, str) else ""


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code.split("-")[0].lower(), code)
