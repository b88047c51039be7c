"""POST /translate, /summarize, /attention and the batch jobs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from starlette.types import Receive

from model.config import DecodingConfig
from model.errors import ConfigError
from service import examples
from service.batcher import attention_body
from service.costs import attention_cells, check_cells, check_cost, check_selection, decode_cost
from service.errors import (
    BadRequest,
    ClientClosed,
    InvalidRequest,
    NotFound,
    NotImplementedHere,
    ResultTooLarge,
    TaskFailed,
    shown,
)
from service.examples import json_example
from service.libre import html_join, html_parts, language_name
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
    Language,
    OutputText,
    SummarizeRequest,
    SummarizeResponse,
    TextRequest,
    TranslateResponse,
)
from service.settings import ServiceSettings
from service.state import Owner, ReadyState, ServiceState
from service.tasks import AttentionSelection, JobState, Output, Task, TaskResult, TaskStatus

ERRORS: dict[int | str, dict[str, Any]] = {
    c: {"model": ErrorResponse} for c in (400, 401, 404, 413, 422, 429, 500, 503, 504)
}
router = APIRouter(responses=ERRORS)
JobId = Annotated[str, Path(max_length=64)]
INLINE_CHARS = 4096  # texts of at most this many characters in all are tokenized on the event loop


def check_texts(texts: list[str], field: str, limit: int, settings: ServiceSettings) -> None:
    if not texts:
        raise InvalidRequest(field, "no texts given")
    if len(texts) > limit:
        raise InvalidRequest(field, f"{len(texts)} texts, more than the limit of {limit} per request")
    for i, text in enumerate(texts):
        if not text.strip():
            raise InvalidRequest(f"{field}[{i}]", "empty text")
        if len(text) > settings.max_chars:
            raise InvalidRequest(
                f"{field}[{i}]", f"{len(text)} characters, more than the limit of {settings.max_chars}"
            )


def options_of(req: DecodeOptions, settings: ServiceSettings, info: ModelInfo) -> DecodingConfig:
    """The request's options over the model's own (CheckpointMeta.decoding), within the service's limits."""
    base, given = info.meta.decoding, req.model_fields_set
    beam_size = req.beam_size if "beam_size" in given else base.beam_size
    n_best = req.n_best if "n_best" in given else min(base.n_best, beam_size)
    if beam_size > settings.max_beam_size:
        own = "" if "beam_size" in given else f" (model {info.id}'s own beam size)"
        raise InvalidRequest("beam_size", f"{beam_size}{own} is more than the limit of {settings.max_beam_size}")
    if n_best > beam_size:
        raise InvalidRequest("n_best", f"{n_best} is more than beam_size ({beam_size})")
    try:
        return req.decoding(replace(base, n_best=min(base.n_best, beam_size)))  # the model's n-best fits the beam
    except ConfigError as e:  # options that do not fit together
        raise InvalidRequest("options", str(e)) from e


async def client_gone(receive: Receive) -> None:
    """Return once the client has closed its connection (its body was read already: the next message is the
    disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def run(state: ServiceState, task: Task, request: Request) -> TaskResult:
    """Queue a checked task and wait for its answer. A client that goes away first cancels it: the worker lets go
    of its texts at its next step, instead of decoding for nobody while others wait."""
    await state.queue.submit(task)
    answer = asyncio.ensure_future(state.queue.wait(task.id, state.settings.request_timeout_s))
    gone = asyncio.ensure_future(client_gone(request.receive))
    try:
        await asyncio.wait((answer, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not answer.done():  # the client went away (or this request was cancelled): the queue cancels the task
            answer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answer
    if answer.cancelled():
        raise ClientClosed("the client closed its connection before the answer")
    result = answer.result()
    if result.error:
        raise ResultTooLarge(result.error) if result.error_kind == "too_large" else TaskFailed(result.error)
    return result


async def checked_lengths(state: ServiceState, task: Task, field: str, limit: int, setting: str) -> list[int]:
    """Tokenize the task's texts and check its cost. Short texts are tokenized on the event loop (tens of
    microseconds, less than handing them to a thread); longer ones in a thread, so that the loop keeps answering."""
    if sum(len(t) for t in task.texts) <= INLINE_CHARS:
        lengths = state.registry.lengths(task, field)
    else:
        lengths = await asyncio.to_thread(state.registry.lengths, task, field)
    info = state.registry.get(task.model)
    check_cost(decode_cost(lengths, task.options, info.max_len), limit, setting, field)
    return lengths


def output_text(o: Output) -> OutputText:
    best, *rest = o.hypotheses
    return OutputText(
        text=best.text,
        score=best.score,
        tokens=best.tokens,
        alternatives=[Hypothesis(text=h.text, score=h.score) for h in rest],
    )


def resolve(state: ServiceState, kind: str, req: TextRequest) -> ModelInfo:
    """The model of a request; source "auto" (LibreTranslate's) leaves the choice to the target alone."""
    if req.source != "auto":
        return state.registry.resolve(kind, req.model, req.source, req.target)
    try:
        return state.registry.resolve(kind, req.model, None, req.target)
    except InvalidRequest:
        fits = sorted(
            f"{m.id} ({m.meta.source_lang or '?'} -> {m.meta.target_lang or '?'})"
            for m in state.registry.models.values()
            if m.task == kind and (req.target is None or m.meta.target_lang == req.target)
        )
        raise BadRequest(
            f"source 'auto': no language detection here, and several {kind} models fit: "
            f"{', '.join(fits)}; name the source language or the model",
            details={"models": fits},
        ) from None


def libre_options(req: TextRequest) -> TextRequest:
    """LibreTranslate's `alternatives` as n-best: 1 + alternatives hypotheses, with as many beams at least."""
    if not req.alternatives:
        return req
    n_best = max(req.n_best, 1 + req.alternatives)
    return req.model_copy(update={"n_best": n_best, "beam_size": max(req.beam_size, n_best)})


async def texts_task(
    state: ServiceState, req: TextRequest, kind: str, owner: str | None, request: Request
) -> tuple[ModelInfo, list[OutputText]]:
    """Decode the request's texts (for format html, the text between its tags) and return one output per text."""
    s = state.settings
    texts = [req.q] if isinstance(req.q, str) else req.q
    check_texts(texts, "q", s.max_texts, s)
    info = resolve(state, kind, req)
    req = libre_options(req)
    documents = [html_parts(t) for t in texts] if req.format == "html" else None
    pieces = texts if documents is None else [p.strip() for d in documents for p, is_text in d if is_text]
    outputs: list[OutputText] = []
    if pieces:
        task = Task(
            info.id,
            pieces,
            options_of(req, s, info),
            truncate=req.truncate,
            owner=owner,
            deadline=time.time() + s.request_timeout_s,
        )
        await checked_lengths(state, task, "q", s.max_request_cost, "TRANSFORMER_MAX_REQUEST_COST")
        outputs = [output_text(o) for o in (await run(state, task, request)).outputs]
    return info, outputs if documents is None else html_outputs(documents, outputs)


def html_outputs(documents: list[list[tuple[str, bool]]], outputs: list[OutputText]) -> list[OutputText]:
    """One output per HTML document from the outputs of its text pieces: the markup kept, each piece replaced by
    its best translation (alternatives: by its next ones, the best where it has fewer)."""
    out, it = [], iter(outputs)
    for parts in documents:
        mine = [next(it) for _, is_text in parts if is_text]
        n = max((len(o.alternatives) for o in mine), default=0)
        alternatives = [
            html_join(parts, [o.alternatives[k].text if k < len(o.alternatives) else o.text for o in mine])
            for k in range(n)
        ]
        out.append(
            OutputText(
                text=html_join(parts, [o.text for o in mine]),
                score=sum(o.score for o in mine),
                tokens=[t for o in mine for t in o.tokens],
                alternatives=[Hypothesis(text=a, score=0.0) for a in alternatives],
            )
        )
    return out


@router.post("/translate", response_model=TranslateResponse, response_model_exclude_none=True, tags=["text"])
async def translate(req: TextRequest, state: ReadyState, owner: Owner, request: Request) -> TranslateResponse:
    """Translate one text or a list; choose the model by `model`, or by `source` and `target`. LibreTranslate's
    clients work unchanged: form bodies, `api_key`, `format: html`, `alternatives` and `source: "auto"`."""
    info, outputs = await texts_task(state, req, "translation", owner, request)
    one = isinstance(req.q, str)
    best: str | list[str] = outputs[0].text if one else [o.text for o in outputs]
    alternatives: list[str] | list[list[str]] | None = None
    if req.alternatives:
        each = [[h.text for h in o.alternatives][: req.alternatives] for o in outputs]
        alternatives = each[0] if one else each
    return TranslateResponse(model=info.id, translatedText=best, alternatives=alternatives, translations=outputs)


@router.get("/languages", response_model=list[Language], tags=["text"])
async def languages(state: ReadyState) -> list[Language]:
    """The source languages of the translation models and each one's targets (LibreTranslate's GET /languages)."""
    targets: dict[str, set[str]] = {}
    for m in state.registry.models.values():
        if m.task == "translation" and m.meta.source_lang and m.meta.target_lang:
            targets.setdefault(m.meta.source_lang, set()).add(m.meta.target_lang)
    return [Language(code=code, name=language_name(code), targets=sorted(t)) for code, t in sorted(targets.items())]


@router.post(
    "/detect",
    status_code=501,
    tags=["text"],
    responses={501: {**json_example(examples.DETECT_ERROR, "Not implemented"), "model": ErrorResponse}},
)
async def detect() -> None:
    """LibreTranslate's language detection: not offered here (501)."""
    raise NotImplementedHere(
        "language detection is not available on this service: name the source language, or "
        "send source 'auto' to /translate, which picks the model by its target"
    )


@router.post("/summarize", response_model=SummarizeResponse, tags=["text"])
async def summarize(req: SummarizeRequest, state: ReadyState, owner: Owner, request: Request) -> SummarizeResponse:
    """Summarize one document or a list; `length` (short, medium, long, or [min, max] tokens) sets the summary's
    length, and `truncate` cuts a document longer than the model takes."""
    info, outputs = await texts_task(state, req, "summarization", owner, request)
    return SummarizeResponse(model=info.id, summaries=outputs)


@router.post("/attention", response_model=AttentionResponse, tags=["text"])
async def attention(req: AttentionRequest, state: ReadyState, owner: Owner, request: Request) -> Response:
    """One text decoded with any options, as /translate would, with the attention maps of one hypothesis of its
    n-best list (`hypothesis`, default the best): cross, encoder and decoder self-attention,
    [layer][head][query][key], rounded to 3 decimals; `kinds`, `layers` and `heads` choose which."""
    s = state.settings
    check_texts([req.q], "q", 1, s)
    info = (
        state.registry.get(req.model)
        if req.model
        else state.registry.resolve("translation", None, req.source, req.target)
    )
    options = options_of(req, s, info)
    if req.hypothesis >= options.n_best:
        raise InvalidRequest("hypothesis", f"{req.hypothesis} is not an index of an n-best list of {options.n_best}")
    selection = AttentionSelection(
        tuple(dict.fromkeys(req.kinds)),
        None if req.layers is None else tuple(req.layers),
        None if req.heads is None else tuple(req.heads),
        req.hypothesis,
    )
    check_selection(selection, info.meta.model)
    task = Task(
        info.id,
        [req.q],
        options,
        attention=selection,
        truncate=req.truncate,
        owner=owner,
        deadline=time.time() + s.request_timeout_s,
    )
    [length] = await checked_lengths(state, task, "q", s.max_request_cost, "TRANSFORMER_MAX_REQUEST_COST")
    limit = options.output_limit(length, info.max_len)
    check_cells(attention_cells(length, limit, selection, info.meta.model), s.max_attention_cells)
    out = (await run(state, task, request)).outputs[0]
    index = min(req.hypothesis, len(out.hypotheses) - 1)  # a search may end with fewer than n_best
    assert out.attention is not None  # asked for, so the worker made it
    return Response(attention_body(info.id, index, out.hypotheses, out.attention), media_type="application/json")


def job_response(job: JobState, limit: int) -> JobResponse:
    results = [output_text(o) for o in job.outputs] if job.outputs is not None else None
    following = job.offset + limit
    return JobResponse(
        id=job.id,
        status=job.status,
        model=job.model,
        error=job.error,
        results=results,
        progress=JobProgress(done=job.done, total=job.total),
        offset=job.offset,
        next_offset=following if results is not None and following < job.total else None,
    )


@router.post("/jobs", response_model=JobResponse, status_code=202, tags=["jobs"])
async def submit_job(req: JobRequest, response: Response, state: ReadyState, owner: Owner) -> JobResponse:
    """Queue many texts; poll GET /jobs/{id} for progress and results (kept for TRANSFORMER_RESULT_TTL_S)."""
    s = state.settings
    check_texts(req.texts, "texts", s.max_job_texts, s)
    info = state.registry.resolve(req.task, req.model, req.source, req.target)
    task = Task(info.id, req.texts, options_of(req, s, info), kind="job", truncate=req.truncate, owner=owner)
    await checked_lengths(state, task, "texts", s.max_job_cost, "TRANSFORMER_MAX_JOB_COST")
    await state.queue.submit(task)
    response.headers["Location"] = f"/jobs/{task.id}"
    return JobResponse(
        id=task.id, status=TaskStatus.queued, model=info.id, progress=JobProgress(done=0, total=len(task.texts))
    )


@router.get("/jobs/{job_id}", response_model=JobResponse, tags=["jobs"])
async def get_job(
    job_id: JobId,
    state: ReadyState,
    owner: Owner,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int | None, Query(ge=1)] = None,
) -> JobResponse:
    """A job's status (queued, running, done, failed, cancelled), progress and, once done, a page of its
    results: results[offset : offset + limit] (limit at most TRANSFORMER_MAX_JOB_PAGE, its default)."""
    page = state.settings.max_job_page
    if limit is not None and limit > page:
        raise InvalidRequest("limit", f"{limit} is more than the limit of {page} results per page")
    limit = limit or page
    job = await state.queue.state(job_id, owner, offset, limit)
    if job is None:
        raise NotFound(f"no job {shown(job_id)} (unknown, not yours, or its results expired)")
    return job_response(job, limit)


@router.delete("/jobs/{job_id}", response_model=JobResponse, tags=["jobs"])
async def cancel_job(job_id: JobId, state: ReadyState, owner: Owner) -> JobResponse:
    """Cancel a queued or running job (its workers drop it), or delete a finished one's results. Answers the
    job as it was; afterwards GET shows a cancelled job, or 404 for a deleted one."""
    job = await state.queue.cancel(job_id, owner)
    if job is None:
        raise NotFound(f"no job {shown(job_id)} (unknown, not yours, or its results expired)")
    return job_response(replace(job, outputs=None), 0)
