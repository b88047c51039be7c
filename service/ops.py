"""Operations: GET /healthz, /readyz, /metrics and /models."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse

from service import examples
from service.errors import ServiceError, Unavailable
from service.examples import json_example
from service.metrics import render_queue
from service.schemas import ModelEntry, ModelsResponse
from service.state import Owner, ReadyState, State

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
async def readyz(state: State) -> JSONResponse:
    """200 once the models are loaded and the queue answers; 503 before, or while Redis is down."""
    body: dict[str, object] = {
        "models": state.registry.ids,
        "queue": "redis" if state.settings.redis_url else "embedded",
    }
    try:
        if not state.ready.is_set():
            raise Unavailable(state.load_error or "the models are still loading")
        await state.queue.ping()
    except ServiceError as e:
        return JSONResponse({"status": "not ready", "reason": e.message, **body}, 503)
    return JSONResponse({"status": "ready", **body})


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"description": "OK", "content": {"text/plain": {"example": examples.METRICS}}}},
)
async def metrics(state: State) -> PlainTextResponse:
    """Prometheus text format: queue depth, batch sizes, latency, tokens/s."""
    try:
        stats = await state.queue.stats()
    except Unavailable:
        stats = {}
    lines = render_queue(stats, state.ready.is_set()) + state.metrics.render()
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


@router.get("/models", response_model=ModelsResponse)
async def models(state: ReadyState, _: Owner) -> ModelsResponse:
    """Every model loaded: id, task, languages."""
    entries = [
        ModelEntry(
            id=m.id,
            task=m.task,
            source=m.meta.source_lang,
            target=m.meta.target_lang,
            max_length=m.max_len,
            reads_first=m.meta.model.read_first or None,
            parameters={
                "N": m.meta.model.N,
                "d_model": m.meta.model.d_model,
                "d_ff": m.meta.model.d_ff,
                "h": m.meta.model.h,
            },
            dtype=m.dtype(state.settings.dtype),
            decoding=m.meta.decoding.changed(),
        )
        for m in state.registry.models.values()
    ]
    return ModelsResponse(models=entries, errors=state.registry.errors)
