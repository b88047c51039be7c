"""POST /translate, /summarize, /attention and the batch jobs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from service.errors import InvalidRequest, NotFound, TaskFailed
from service.registry import ModelInfo
from service.schemas import (
    AttentionRequest,
    AttentionResponse,
    DecodeOptions,
    ErrorResponse,
    Hypothesis,
    JobProgress,
    JobRequest,
    JobResponse,
    OutputText,
    SummarizeResponse,
    TextRequest,
    TranslateResponse,
)
from service.settings import ServiceSettings
from service.state import ApiKey, ReadyState, ServiceState
from service.tasks import JobState, Options, Output, Task, TaskResult, TaskStatus

ERRORS: dict[int | str, dict[str, Any]] = {
    c: {"model": ErrorResponse} for c in (401, 404, 413, 422, 429, 500, 503, 504)}
router = APIRouter(responses=ERRORS)


def check_texts(texts: list[str], field: str, limit: int, settings: ServiceSettings) -> None:
    if not texts:
        raise InvalidRequest(field, "no texts given")
    if len(texts) > limit:
        raise InvalidRequest(field, f"{len(texts)} texts, more than the limit of {limit} per request")
    for i, text in enumerate(texts):
        if not text.strip():
            raise InvalidRequest(f"{field}[{i}]", "empty text")
        if len(text) > settings.max_chars:
            raise InvalidRequest(f"{field}[{i}]", f"{len(text)} characters, more than the limit of "
                                                  f"{settings.max_chars}")


def options_of(req: DecodeOptions, settings: ServiceSettings) -> Options:
    if req.beam_size > settings.max_beam_size:
        raise InvalidRequest("beam_size", f"{req.beam_size} is more than the limit of {settings.max_beam_size}")
    if req.n_best > req.beam_size:
        raise InvalidRequest("n_best", f"{req.n_best} is more than beam_size ({req.beam_size})")
    a, b = (1.0, 50) if req.max_length is None else (0.0, req.max_length)  # the paper's |x| + 50, or a cap
    return Options(beam_size=req.beam_size, n_best=req.n_best, length_penalty=req.length_penalty,
                   length_penalty_form=req.length_penalty_form, min_length=req.min_length,
                   no_repeat_ngram_size=req.no_repeat_ngram_size, max_len_a=a, max_len_b=b)


async def run(state: ServiceState, task: Task, field: str) -> TaskResult:
    """Validate against the model, queue, wait for the answer."""
    state.registry.check(task, field)
    await state.queue.submit(task)
    result = await state.queue.wait(task.id, state.settings.request_timeout_s)
    if result.error:
        raise TaskFailed(result.error)
    return result


def output_text(o: Output) -> OutputText:
    best, *rest = o.hypotheses
    return OutputText(text=best.text, score=best.score, tokens=best.tokens,
                      alternatives=[Hypothesis(text=h.text, score=h.score) for h in rest])


async def texts_task(state: ServiceState, req: TextRequest, kind: str) -> tuple[ModelInfo, list[OutputText]]:
    s = state.settings
    texts = [req.q] if isinstance(req.q, str) else req.q
    check_texts(texts, "q", s.max_texts, s)
    options = options_of(req, s)
    info = state.registry.resolve(kind, req.model, req.source, req.target)
    result = await run(state, Task(info.id, texts, options, truncate=req.truncate), "q")
    return info, [output_text(o) for o in result.outputs]


@router.post("/translate", response_model=TranslateResponse, tags=["text"])
async def translate(req: TextRequest, state: ReadyState, _: ApiKey) -> TranslateResponse:
    """Translate one text or a list; choose the model by `model`, or by `source` and `target`."""
    info, outputs = await texts_task(state, req, "translation")
    best: str | list[str] = outputs[0].text if isinstance(req.q, str) else [o.text for o in outputs]
    return TranslateResponse(model=info.id, translatedText=best, translations=outputs)


@router.post("/summarize", response_model=SummarizeResponse, tags=["text"])
async def summarize(req: TextRequest, state: ReadyState, _: ApiKey) -> SummarizeResponse:
    """Summarize one document or a list."""
    info, outputs = await texts_task(state, req, "summarization")
    return SummarizeResponse(model=info.id, summaries=outputs)


@router.post("/attention", response_model=AttentionResponse, tags=["text"])
async def attention(req: AttentionRequest, state: ReadyState, _: ApiKey) -> AttentionResponse:
    """The best output for one text with every attention map: cross, encoder and decoder self-attention,
    [layer][head][query][key], rounded to 3 decimals."""
    s = state.settings
    check_texts([req.q], "q", 1, s)
    options = options_of(DecodeOptions(beam_size=req.beam_size, max_length=req.max_length), s)
    info = state.registry.get(req.model) if req.model else \
        state.registry.resolve("translation", None, req.source, req.target)
    result = await run(state, Task(info.id, [req.q], options, attention=True, truncate=req.truncate), "q")
    out = result.outputs[0]
    maps = out.attention or {}
    return AttentionResponse(model=info.id, text=out.hypotheses[0].text, score=out.hypotheses[0].score, **maps)


def job_response(job: JobState) -> JobResponse:
    results = [output_text(o) for o in job.result.outputs] if job.result and not job.result.error else None
    return JobResponse(id=job.id, status=job.status, model=job.model, error=job.error, results=results,
                       progress=JobProgress(done=job.done, total=job.total))


@router.post("/jobs", response_model=JobResponse, status_code=202, tags=["jobs"])
async def submit_job(req: JobRequest, response: Response, state: ReadyState, _: ApiKey) -> JobResponse:
    """Queue many texts; poll GET /jobs/{id} for progress and results (kept for TRANSFORMER_RESULT_TTL_S)."""
    s = state.settings
    check_texts(req.texts, "texts", s.max_job_texts, s)
    options = options_of(req, s)
    info = state.registry.resolve(req.task, req.model, req.source, req.target)
    task = Task(info.id, req.texts, options, kind="job", truncate=req.truncate)
    state.registry.check(task, "texts")
    await state.queue.submit(task)
    response.headers["Location"] = f"/jobs/{task.id}"
    return JobResponse(id=task.id, status=TaskStatus.queued, model=info.id,
                       progress=JobProgress(done=0, total=len(task.texts)))


@router.get("/jobs/{job_id}", response_model=JobResponse, tags=["jobs"])
async def get_job(job_id: str, state: ReadyState, _: ApiKey) -> JobResponse:
    """A job's status (queued, running, done, failed), progress and, once done, results."""
    job = await state.queue.state(job_id)
    if job is None:
        raise NotFound(f"no job {job_id!r} (unknown, or its results expired)")
    return job_response(job)
