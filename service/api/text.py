"""POST /translate, /summarize and /attention, GET /languages and POST /detect: a request's texts checked (their
number and size, the options within the service's limits, the model, the cost), queued as one Job, waited for,
and answered (service.api.schemas)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.types import Receive

from model.config import DecodingConfig
from model.errors import ConfigError
from service.api import examples
from service.api.deps import Owner, ReadyService
from service.api.examples import json_example
from service.api.libre import html_join, html_parts, language_name
from service.api.runtime import Service
from service.api.schemas import (
    AttentionRequest,
    AttentionResponse,
    DecodeOptions,
    ErrorResponse,
    Hypothesis,
    Language,
    Output,
    SummarizeRequest,
    SummarizeResponse,
    TextRequest,
    TranslateResponse,
    attention_json,
    output_of,
)
from service.attention import AttentionSelection, check_cells
from service.errors import (
    BadRequest,
    ClientClosed,
    InvalidRequest,
    JobFailed,
    NotImplementedHere,
    ResultTooLarge,
    TooCostly,
)
from service.queue.contract import Answer, Job
from service.registry import ModelInfo
from service.settings import ServiceSettings

ERRORS: dict[int | str, dict[str, Any]] = {
    c: {"model": ErrorResponse} for c in (400, 401, 404, 413, 422, 429, 500, 503, 504)
}
router = APIRouter(responses=ERRORS)
INLINE_CHARS = 4096  # texts of at most this many characters in all are tokenized on the event loop


# -- what a request must pass before its job is queued ---------------------------------------------


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


def options_of(
    req: DecodeOptions, settings: ServiceSettings, info: ModelInfo, n_best_at_least: int = 1
) -> DecodingConfig:
    """The request's options over the model's own (CheckpointMeta.decoding), within the service's limits; an
    option the request does not give is the model's. n_best_at_least (LibreTranslate's alternatives) raises
    n-best, and the beam with it."""
    base, given = info.meta.decoding, req.model_fields_set
    beam_size = req.beam_size if "beam_size" in given else base.beam_size
    n_best = req.n_best if "n_best" in given else min(base.n_best, beam_size)
    if n_best < n_best_at_least:
        n_best, beam_size = n_best_at_least, max(beam_size, n_best_at_least)
    if beam_size > settings.max_beam_size:
        own = "" if "beam_size" in given else f" (model {info.id}'s own beam size)"
        raise InvalidRequest("beam_size", f"{beam_size}{own} is more than the limit of {settings.max_beam_size}")
    if n_best > beam_size:
        raise InvalidRequest("n_best", f"{n_best} is more than beam_size ({beam_size})")
    try:
        return replace(
            req.decoding(replace(base, n_best=min(base.n_best, beam_size))), beam_size=beam_size, n_best=n_best
        )
    except ConfigError as e:  # options that do not fit together
        raise InvalidRequest("options", str(e)) from e


def decode_cost(lengths: list[int], cfg: DecodingConfig, model_max_len: int) -> int:
    """For each text: beam_size x output limit x (source tokens + output limit), the (query, key) pairs its
    hypotheses may attend over if they run to the limit. The decoder's other work grows with beam x limit,
    so this tracks worker time within a factor of about two for a given model."""
    limits = ((n, cfg.output_limit(n, model_max_len)) for n in lengths)
    return sum(cfg.beam_size * limit * (n + limit) for n, limit in limits)


async def checked_lengths(service: Service, job: Job, field: str, limit: int, setting: str) -> list[int]:
    """Tokenize the job's texts, segment by segment (model.segment: sentences, as the worker will cut them), and
    check its cost; the lengths of every segment, in order. Short texts are tokenized on the event loop (tens of
    microseconds, less than handing them to a thread); longer ones in a thread, so that the loop keeps answering."""
    args = (job.model, job.texts, job.truncate, field, service.settings.max_sentences)
    if sum(len(t) for t in job.texts) <= INLINE_CHARS:
        lengths = service.registry.lengths(*args)
    else:
        lengths = await asyncio.to_thread(service.registry.lengths, *args)
    cost = decode_cost(lengths, job.options, service.registry.get(job.model).max_len)
    if cost > limit:
        raise TooCostly(
            field,
            f"this request would cost {cost:,}, more than the limit of {limit:,} ({setting}): send fewer or shorter "
            "texts, or a smaller beam_size or max_length",
        )
    return lengths


def resolve(service: Service, task: str, req: TextRequest) -> ModelInfo:
    """The model of a request; source "auto" (LibreTranslate's) leaves the choice to the target alone."""
    if req.source != "auto":
        return service.registry.resolve(task, req.model, req.source, req.target)
    try:
        return service.registry.resolve(task, req.model, None, req.target)
    except InvalidRequest:
        fits = sorted(
            f"{m.id} ({m.meta.source_lang or '?'} -> {m.meta.target_lang or '?'})"
            for m in service.registry.models.values()
            if m.task == task and (req.target is None or m.meta.target_lang == req.target)
        )
        raise BadRequest(
            f"source 'auto': no language detection here, and several {task} models fit: "
            f"{', '.join(fits)}; name the source language or the model",
            details={"models": fits},
        ) from None


# -- a request's job, queued and waited for -------------------------------------------------------


async def client_gone(receive: Receive) -> None:
    """Return once the client has closed its connection (its body was read already: the next message is the
    disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def run(service: Service, job: Job, request: Request) -> Answer:
    """Queue a checked job and wait for its answer. A client that goes away first cancels it: the worker lets go
    of its texts at its next step, instead of decoding for nobody while others wait."""
    await service.queue.submit(job)
    answer = asyncio.ensure_future(service.queue.wait(job.id, service.settings.request_timeout_s))
    gone = asyncio.ensure_future(client_gone(request.receive))
    try:
        await asyncio.wait((answer, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not answer.done():  # the client went away (or this request was cancelled): the queue cancels the job
            answer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answer
    if answer.cancelled():
        raise ClientClosed("the client closed its connection before the answer")
    result = answer.result()
    if result.error:
        raise ResultTooLarge(result.error) if result.too_large else JobFailed(result.error)
    return result


async def decode_texts(
    service: Service, req: TextRequest, task: str, owner: str | None, request: Request
) -> tuple[ModelInfo, list[Output]]:
    """Decode the request's texts (for format html, the text between its tags) and return one output per text."""
    s = service.settings
    texts = [req.q] if isinstance(req.q, str) else req.q
    check_texts(texts, "q", s.max_texts, s)
    info = resolve(service, task, req)
    options = options_of(req, s, info, n_best_at_least=1 + req.alternatives)
    documents = [html_parts(t) for t in texts] if req.format == "html" else None
    pieces = texts if documents is None else [p.strip() for d in documents for p, is_text in d if is_text]
    outputs: list[Output] = []
    if pieces:
        deadline = time.time() + s.request_timeout_s
        job = Job(info.id, pieces, options, truncate=req.truncate, owner=owner, deadline=deadline)
        await checked_lengths(service, job, "q", s.max_request_cost, "TRANSFORMER_MAX_REQUEST_COST")
        outputs = [output_of(o) for o in (await run(service, job, request)).outputs]
    return info, outputs if documents is None else html_outputs(documents, outputs)


def html_outputs(documents: list[list[tuple[str, bool]]], outputs: list[Output]) -> list[Output]:
    """One output per HTML document from the outputs of its text pieces: the markup kept, each piece replaced by
    its best translation (alternatives: by its next ones, the best where it has fewer)."""
    out, it = [], iter(outputs)
    for parts in documents:
        mine = [next(it) for _, is_text in parts if is_text]
        ranked = [[o, *o.alternatives] for o in mine]  # each piece's n-best list
        n = max((len(r) for r in ranked), default=1)
        joined = []
        for k in range(n):
            chosen: list[Hypothesis] = [r[k] if k < len(r) else r[0] for r in ranked]
            text = html_join(parts, [h.text for h in chosen])
            joined.append(
                Hypothesis(text=text, score=sum(h.score for h in chosen), tokens=[t for h in chosen for t in h.tokens])
            )
        best, *rest = joined
        out.append(Output(text=best.text, score=best.score, tokens=best.tokens, alternatives=rest))
    return out


# -- the routes -----------------------------------------------------------------------------------


@router.post("/translate", response_model=TranslateResponse, response_model_exclude_none=True, tags=["text"])
async def translate(req: TextRequest, service: ReadyService, owner: Owner, request: Request) -> TranslateResponse:
    """Translate one text or a list; choose the model by `model`, or by `source` and `target`. LibreTranslate's
    clients work unchanged: form bodies, `api_key`, `format: html`, `alternatives` and `source: "auto"`."""
    info, outputs = await decode_texts(service, req, "translation", owner, request)
    one = isinstance(req.q, str)
    best: str | list[str] = outputs[0].text if one else [o.text for o in outputs]
    alternatives: list[str] | list[list[str]] | None = None
    if req.alternatives:
        each = [[h.text for h in o.alternatives][: req.alternatives] for o in outputs]
        alternatives = each[0] if one else each
    return TranslateResponse(model=info.id, translatedText=best, alternatives=alternatives, translations=outputs)


@router.get("/languages", response_model=list[Language], tags=["text"])
async def languages(service: ReadyService) -> list[Language]:
    """The source languages of the translation models and each one's targets (LibreTranslate's GET /languages)."""
    targets: dict[str, set[str]] = {}
    for m in service.registry.models.values():
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
async def summarize(req: SummarizeRequest, service: ReadyService, owner: Owner, request: Request) -> SummarizeResponse:
    """Summarize one document or a list; `length` (short, medium, long, or [min, max] tokens) sets the summary's
    length, and `truncate` cuts a document longer than the model takes."""
    info, outputs = await decode_texts(service, req, "summarization", owner, request)
    return SummarizeResponse(model=info.id, summaries=outputs)


@router.post("/attention", response_model=AttentionResponse, tags=["text"])
async def attention(req: AttentionRequest, service: ReadyService, owner: Owner, request: Request) -> Response:
    """One text decoded with any options, as /translate would, with the attention maps of one hypothesis of its
    n-best list (`hypothesis`, default the best): cross, encoder and decoder self-attention,
    [layer][head][query][key], rounded to 3 decimals; `kinds`, `layers` and `heads` choose which."""
    s = service.settings
    check_texts([req.q], "q", 1, s)
    registry = service.registry
    info = registry.get(req.model) if req.model else registry.resolve("translation", None, req.source, req.target)
    options = options_of(req, s, info)
    if req.hypothesis >= options.n_best:
        raise InvalidRequest("hypothesis", f"{req.hypothesis} is not an index of an n-best list of {options.n_best}")
    layers, heads = (None if x is None else tuple(x) for x in (req.layers, req.heads))
    selection = AttentionSelection(tuple(dict.fromkeys(req.kinds)), layers, heads, req.hypothesis, req.sentence)
    selection.check(info.meta.model)
    deadline = time.time() + s.request_timeout_s
    job = Job(info.id, [req.q], options, attention=selection, truncate=req.truncate, owner=owner, deadline=deadline)
    lengths = await checked_lengths(service, job, "q", s.max_request_cost, "TRANSFORMER_MAX_REQUEST_COST")
    if req.sentence >= len(lengths):
        raise InvalidRequest("sentence", f"{req.sentence} is not an index of the text's {len(lengths)} sentences")
    length = lengths[req.sentence]
    check_cells(
        selection.cells(length, options.output_limit(length, info.max_len), info.meta.model), s.max_attention_cells
    )
    answer = await run(service, job, request)
    [out] = answer.outputs
    index = min(req.hypothesis, len(out.hypotheses) - 1)  # a search may end with fewer than n_best
    assert answer.attention is not None  # asked for, so the worker made it
    maps = attention_json(info.id, index, req.sentence, out.hypotheses, answer.attention)
    return Response(maps, media_type="application/json")
