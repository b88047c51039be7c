"""The FastAPI application factory; nothing is built at import time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from service.api import files, jobs, ops, text
from service.api.cors import Cors
from service.api.docs import install_docs
from service.api.envelope import Envelope
from service.api.guard import Guard
from service.api.handlers import install_error_handlers
from service.api.openapi import install_openapi
from service.api.runtime import Service
from service.demo import STATIC
from service.settings import ServiceSettings


def create_app(settings: ServiceSettings | None = None) -> FastAPI:
    """The API (and, without REDIS_URL, the embedded queue and worker) for the models in settings.models_dir."""
    settings = settings or ServiceSettings()
    service = Service(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.start()
        yield
        await service.close()

    otel = settings.opentelemetry
    app = FastAPI(
        title="Transformer translation and summarization service",
        version="0.1.0",
        lifespan=lifespan,
        description="Dynamic batched beam search over the paper's Transformer (Vaswani et al., 2017).",
        telemetry={"tracing": otel, "metrics": otel, "logs": otel},
        docs_url=None,  # service.api.docs serves both pages with their assets from the package: no CDN
        redoc_url=None,
    )
    app.state.service = service
    install_error_handlers(app)
    # Each module's routes go into the app's own router as they are, the busiest first (a request is matched
    # against them in order). include_router would wrap each module's router in a layer that every request walks
    # through, about 5% of a request's CPU here (benchmarks/README), to apply prefixes, tags or dependencies at
    # inclusion, which these routers do not use: their tags and responses are set on the routers themselves.
    for routes in (text, ops, jobs, files):
        app.router.routes.extend(routes.router.routes)
    install_docs(app)
    install_openapi(app, settings, service.access)

    # Middleware added last runs first: the envelope around everything, CORS where asked for (before the guard:
    # a preflight has no key, and a page needs CORS headers to read a refusal), the guard before every route.
    app.add_middleware(Guard, settings=settings, access=service.access)
    if origins := settings.origins():
        app.add_middleware(Cors, origins=origins)
    app.add_middleware(Envelope, metrics=service.metrics)

    if (STATIC / "index.html").is_file():  # the browser demo

        @app.get("/", include_in_schema=False)
        async def index() -> FileResponse:
            return FileResponse(STATIC / "index.html")

        app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
