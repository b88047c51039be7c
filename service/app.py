"""The FastAPI application factory; nothing is built at import time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from service import api, ops
from service.errors import install_error_handlers
from service.guard import Guard
from service.settings import ServiceSettings
from service.state import ServiceState

STATIC = Path(__file__).parent / "static"


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
    app = FastAPI(
        title="Transformer translation and summarization service",
        version="0.1.0",
        lifespan=lifespan,
        description="Dynamic batched beam search over the paper's Transformer (Vaswani et al., 2017).",
        telemetry={"tracing": otel, "metrics": otel, "logs": otel},
    )
    app.state.service = state
    install_error_handlers(app)
    app.include_router(ops.router)
    app.include_router(api.router)

    app.add_middleware(Guard, state=state)

    if (STATIC / "index.html").is_file():  # the browser demo

        @app.get("/", include_in_schema=False)
        async def index() -> FileResponse:
            return FileResponse(STATIC / "index.html")

        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
