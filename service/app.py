"""The FastAPI application factory; nothing is built at import time."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from service import api, ops
from service.errors import error_body, install_error_handlers
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

    app = FastAPI(title="Transformer translation and summarization service", version="0.1.0", lifespan=lifespan,
                  description="Dynamic batched beam search over the paper's Transformer (Vaswani et al., 2017).")
    app.state.service = state
    install_error_handlers(app)
    app.include_router(ops.router)
    app.include_router(api.router)

    @app.middleware("http")
    async def limit_and_measure(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > settings.max_body_bytes):
            response: Response = JSONResponse(error_body(
                "payload_too_large", f"request body over {settings.max_body_bytes} bytes"), 413)
        else:
            response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "other")
        state.metrics.observe(path, response.status_code, time.perf_counter() - start)
        return response

    if (STATIC / "index.html").is_file():  # the browser demo
        @app.get("/", include_in_schema=False)
        async def index() -> FileResponse:
            return FileResponse(STATIC / "index.html")
        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
