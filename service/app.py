"""The FastAPI application factory; nothing is built at import time."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service import api, ops
from service.errors import error_body, install_error_handlers
from service.settings import ServiceSettings
from service.state import ServiceState

STATIC = Path(__file__).parent / "static"


class LimitAndMeasure:
    """Refuses bodies over max_body_bytes (413) before they are read, and records every answer's route,
    status and latency. Plain ASGI: it adds no task or stream per request, as Starlette's
    BaseHTTPMiddleware does."""

    def __init__(self, app: ASGIApp, state: ServiceState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500
        limit = self.state.settings.max_body_bytes
        length = dict(scope["headers"]).get(b"content-length")

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if length is not None and (not length.isdigit() or int(length) > limit):
                too_large = JSONResponse(error_body("payload_too_large", f"request body over {limit} bytes"), 413)
                await too_large(scope, receive, send_status)
            else:
                await self.app(scope, receive, send_status)
        finally:
            path = getattr(scope.get("route"), "path", "other")
            self.state.metrics.observe(path, status, time.perf_counter() - start)


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    """The API (and, without REDIS_URL, the embedded queue and worker) for the models in settings.models_dir."""
    settings = settings or ServiceSettings()
    state = ServiceState(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        state.start()
        yield
        await state.close()

    otel = settings.opentelemetry
    app = FastAPI(title="Transformer translation and summarization service", version="0.1.0", lifespan=lifespan,
                  description="Dynamic batched beam search over the paper's Transformer (Vaswani et al., 2017).",
                  telemetry={"tracing": otel, "metrics": otel, "logs": otel})
    app.state.service = state
    install_error_handlers(app)
    app.include_router(ops.router)
    app.include_router(api.router)

    app.add_middleware(LimitAndMeasure, state=state)

    if (STATIC / "index.html").is_file():  # the browser demo
        @app.get("/", include_in_schema=False)
        async def index() -> FileResponse:
            return FileResponse(STATIC / "index.html")
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
