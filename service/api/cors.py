"""Cross-origin requests from browsers (CORS), for pages on other origins that call the API, as LibreTranslate's
browser clients do: Starlette's CORSMiddleware, on only when TRANSFORMER_CORS_ORIGINS names origins. It runs
before the guard, so that a preflight (which carries no key) is answered, and the guard's refusals carry the
headers a page needs to read them. A refused preflight is answered in the service's error shape."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp

from service.api.handlers import error_response
from service.errors import BadRequest

METHODS = ["GET", "HEAD", "POST", "DELETE"]  # the API's methods
HEADERS = ["Authorization", "Content-Type", "X-Request-Id"]  # what a page may send beyond the simple ones
EXPOSED = ["X-Request-Id", "Retry-After", "Location", "Content-Disposition"]  # what a page may read beyond those


class Cors(CORSMiddleware):
    def __init__(self, app: ASGIApp, origins: list[str]) -> None:
        # allow_private_network: a named public page may call a service on a private network or this machine
        # (Chromium asks a preflight for it: Private Network Access), as a LibreTranslate in one's network is.
        super().__init__(
            app,
            allow_origins=origins,
            allow_methods=METHODS,
            allow_headers=HEADERS,
            expose_headers=EXPOSED,
            allow_private_network=True,
        )

    def preflight_response(self, request_headers: Headers) -> Response:
        answer = super().preflight_response(request_headers)
        if answer.status_code != 400:
            return answer
        refused = bytes(answer.body).decode()  # "Disallowed CORS origin, method" and the like
        origin = request_headers.get("origin", "")
        e = BadRequest(
            f"{refused}: this service answers cross-origin requests from TRANSFORMER_CORS_ORIGINS only, with the "
            f"methods {', '.join(METHODS)} and the headers {', '.join(HEADERS)} (origin {origin[:100]!r})"
        )
        out = error_response(e)
        for name, value in answer.headers.items():
            if name.startswith("access-control-") or name == "vary":
                out.headers[name] = value
        return out
