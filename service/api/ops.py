"""Operations: GET /healthz, /readyz, /metrics and /models."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from model.config import DecodingConfig
from service.api import examples
from service.api.deps import AnyService, ReadyService
from service.api.examples import json_example
from service.api.metrics import render_queue
from service.api.schemas import ModelEntry, ModelsResponse
from service.errors import ServiceError, Unavailable

router = APIRouter(tags=["operations"])


@router.get("/healthz", responses={200: json_example(examples.HEALTHZ)})
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={
        200: json_example(examples.READYZ),
        503: json_example(
            {"status": "not ready", "reason": "the models are still loading", "models": [], "queue": "embedded"},
            "Not ready",
        ),
    },
)
async def readyz(service: AnyService) -> JSONResponse:
    """200 once the models are loaded and the queue answers; 503 before, or while Redis is down."""
    body: dict[str, object] = {
        "models": service.registry.ids,
        "queue": "redis" if service.settings.redis_url else "embedded",
    }
    try:
        if not service.ready.is_set():
            raise Unavailable(service.load_error or "the models are still loading")
        await service.queue.ping()
    except ServiceError as e:
        return JSONResponse({"status": "not ready", "reason": e.message, **body}, 503)
    return JSONResponse({"status": "ready", **body})


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"description": "OK", "content": {"text/plain": {"example": examples.METRICS}}}},
)
async def metrics(service: AnyService) -> PlainTextResponse:
    """Prometheus text format: queue depth, batch sizes, latency, tokens/s."""
    try:
        stats = await service.queue.stats()
    except Unavailable:
        stats = {}
    lines = render_queue(stats, service.ready.is_set()) + service.metrics.render()
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


@router.get("/models", response_model=ModelsResponse)
async def models(service: ReadyService) -> ModelsResponse:
    """Every model loaded: id, task, languages."""
    entries = [
        ModelEntry(
            id=m.id,
            task=m.task,
            source=m.meta.source_lang,
            target=m.meta.target_lang,
            languages=m.languages() if m.multilingual else None,
            max_length=m.max_len,
            reads_first=m.meta.model.read_first or None,
            parameters={
                "N": m.meta.model.N,
                "d_model": m.meta.model.d_model,
                "d_ff": m.meta.model.d_ff,
                "h": m.meta.model.h,
            },
            dtype=m.dtype(service.settings.dtype),
            decoding=own_options(m.meta.decoding),
        )
        for m in service.registry.models.values()
    ]
    return ModelsResponse(models=entries, errors=service.registry.errors)


def own_options(cfg: DecodingConfig) -> dict[str, object]:
    """A model's decoding options as a request names them (DecodingConfig.OPTIONS), and its output limit's rule
    (max_len_a x input tokens + max_len_b) where a request gives no max_length."""
    return {name: getattr(cfg, name) for name in (*DecodingConfig.OPTIONS, "max_len_a", "max_len_b")}
