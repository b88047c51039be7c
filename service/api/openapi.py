"""The OpenAPI document as this deployment answers: FastAPI's, with what the settings decide written in. An
operation needs `Authorization` only where a key is asked for (none when TRANSFORMER_API_KEYS is empty), answers
401 and a key's 429 only then, and every list, text and beam is bounded by the limits set, not the schema's
largest."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from service.api.access import Access
from service.settings import ServiceSettings

SCHEME = "HTTPBearer"  # the API key as a bearer token (service.api.access.bearer_token)
TEXT_FIELDS = {"q", "texts"}  # one text or a list of them


def install_openapi(app: FastAPI, settings: ServiceSettings, access: Access) -> None:
    """app.openapi() answers the document for these settings, built once."""
    built: dict[str, Any] = {}

    def document() -> dict[str, Any]:
        if not built:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            built.update(for_deployment(doc, settings, access))
        return built

    app.openapi = document  # type: ignore[method-assign]


def for_deployment(doc: dict[str, Any], settings: ServiceSettings, access: Access) -> dict[str, Any]:
    """doc with security, statuses and limits as these settings make them."""
    for path, methods in doc["paths"].items():
        for op in methods.values():
            responses = op.setdefault("responses", {})
            if access.needs_key(path.split("{")[0]):
                op["security"] = [{SCHEME: []}]
                responses.setdefault("401", {"description": "a missing or wrong API key"})
                responses.setdefault("429", {"description": "too many requests for this key, or wrong keys"})
            else:
                op.pop("security", None)
                if not access.keys:
                    responses.pop("401", None)
            if "requestBody" in op:
                responses.setdefault("415", {"description": "a compressed body, or one in a Content-Type not listed"})
                responses.setdefault("501", {"description": "a body in a transfer coding other than chunked"})
            if settings.hosts():
                responses.setdefault("400", {"description": "a Host header not in TRANSFORMER_ALLOWED_HOSTS"})
            for param in op.get("parameters", []):
                if path == "/jobs/{job_id}" and param["name"] == "limit":
                    param["schema"] = limited(param["schema"], maximum=settings.max_job_page)
    if access.keys:  # written here, not by a dependency: one fewer to solve on every request
        doc.setdefault("components", {}).setdefault("securitySchemes", {})[SCHEME] = {
            "type": "http",
            "scheme": "bearer",
        }
    for name, schema in doc.get("components", {}).get("schemas", {}).items():
        props = schema.get("properties", {})
        for field in TEXT_FIELDS & props.keys():
            most = settings.max_job_texts if name == "JobRequest" else settings.max_texts
            props[field] = texts_schema(props[field], settings.max_chars, most)
        for field in ("beam_size", "n_best"):
            if field in props:
                props[field] = {**props[field], "maximum": settings.max_beam_size}
    return doc


def limited(schema: dict[str, Any], **bounds: int) -> dict[str, Any]:
    """schema, or each branch of its anyOf, with these bounds."""
    if "anyOf" in schema:
        return {**schema, "anyOf": [b if b.get("type") == "null" else {**b, **bounds} for b in schema["anyOf"]]}
    return {**schema, **bounds}


def texts_schema(schema: dict[str, Any], max_chars: int, max_texts: int) -> dict[str, Any]:
    """A text field's schema (a string, a list of them, or either) with the settings' limits."""
    if "oneOf" in schema:
        return {**schema, "oneOf": [texts_schema(s, max_chars, max_texts) for s in schema["oneOf"]]}
    if schema.get("type") == "array":
        items = texts_schema(schema["items"], max_chars, max_texts)
        return {**schema, "items": items, "maxItems": max_texts, "minItems": 1}
    return {**schema, "maxLength": max_chars}
