"""POST /translate, /summarize and /attention, GET /languages and POST /detect: a request's texts checked (their
number and size, the options within the service's limits, the model, the cost), queued as one Job, waited for,
and answered (service.api.schemas)."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.types import Receive

from model import output
from model.config import DecodingConfig
from model.errors import ConfigError, InputError, InputTooLongError
from model.files import MEDIA_TYPES
from model.markup import Document, render
from model.segment import sections
from service.api.deps import Caller, ReadyService
from service.api.libre import language_name
from service.api.runtime import Service
from service.api.schemas import (
    NOT_BLANK,
    AttentionRequest,
    AttentionResponse,
    DecodeOptions,
    DetectedLanguage,
    DetectRequest,
    ErrorResponse,
    FrontendSettings,
    Hypothesis,
    Language,
    NamedLanguage,
    Output,
    StartLanguages,
    SummarizeRequest,
    SummarizeResponse,
    TextRequest,
    TranslateResponse,
    attention_json,
    output_of,
)
from service.attention import AttentionSelection, check_cells
from service.detect import Guess
from service.errors import (
    ClientClosed,
    InvalidRequest,
    JobFailed,
    ModelNotFound,
    ResultTooLarge,
    TooCostly,
)
from service.queue.contract import Answer, Job
from service.registry import ModelInfo
from service.settings import ServiceSettings

ERRORS: dict[int | str, dict[str, Any]] = {
    c: {"model": ErrorResponse} for c in (400, 401, 404, 413, 422, 429, 503, 504)
}
BLANK_FREE = re.compile(NOT_BLANK)
router = APIRouter(responses=ERRORS)
INLINE_CHARS = 4096  # texts of at most this many characters in all are tokenized on the event loop
MAX_ROUNDS = 4  # of map-reduce summaries: each round shortens a document to its sections' summaries
SAME_LANGUAGE = 90.0  # percent: with source "auto", a text the detector is this sure is in the target is kept
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default wait after typing: this service's own page translates on a button


# -- what a request must pass before its job is queued ---------------------------------------------


def check_texts(texts: list[str], field: str, limit: int, settings: ServiceSettings) -> None:
    if not texts:
        raise InvalidRequest(field, "no texts given")
    if len(texts) > limit:
        raise InvalidRequest(field, f"{len(texts)} texts, more than the limit of {limit} per request")
    for i, text in enumerate(texts):
        if not BLANK_FREE.search(text):  # the schema's NOT_BLANK: what str.strip() leaves nothing of
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
    if {"min_length", "max_length"} <= given and req.max_length is not None and req.min_length > req.max_length:
        # Given both, a client means both: refused. Against the model's own min_length, max_length wins.
        raise InvalidRequest("min_length", f"{req.min_length} is more than max_length ({req.max_length})")
    try:
        return req.decoding(base, beam_size=beam_size, n_best=n_best)
    except ConfigError as e:  # options that do not fit together
        raise InvalidRequest("options", str(e)) from e


def decode_cost(lengths: list[int], cfg: DecodingConfig, model_max_len: int) -> int:
    """For each text: beam_size x output limit x (source tokens + output limit), the (query, key) pairs its
    hypotheses may attend over if they run to the limit. The decoder's other work grows with beam x limit,
    so this tracks worker time within a factor of about two for a given model."""
    limits = ((n, cfg.output_limit(n, model_max_len)) for n in lengths)
    return sum(cfg.beam_size * limit * (n + limit) for n, limit in limits)


async def check_cost(service: Service, job: Job, field: str, limit: int, setting: str) -> None:
    """Check the job's texts and cost (checked_lengths), without tokenizing them where the bounds of their lengths
    (Registry.length_bounds: ASCII text, the common case) show the cost within the limit."""
    assert job.model is not None  # a job that no model reads (Job.model) costs nothing
    if sum(len(t) for t in job.texts) <= INLINE_CHARS:
        pair = (job.source_lang, job.target_lang)
        bounds = service.registry.length_bounds(job.model, job.texts, field, service.settings.max_sentences, pair)
        if bounds is not None and decode_cost(bounds, job.options, service.registry.get(job.model).max_len) <= limit:
            return
    await checked_lengths(service, job, field, limit, setting)


async def checked_lengths(service: Service, job: Job, field: str, limit: int, setting: str) -> list[int]:
    """Tokenize the job's texts, segment by segment (model.segment: sentences, as the worker will cut them), and
    check its cost; the lengths of every segment, in order. Short texts are tokenized on the event loop (tens of
    microseconds, less than handing them to a thread); longer ones in a thread, so that the loop keeps answering."""
    assert job.model is not None
    args = (
        job.model,
        job.texts,
        job.truncate,
        field,
        service.settings.max_sentences,
        (job.source_lang, job.target_lang),
    )
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


def resolve(service: Service, task: str, req: TextRequest, texts: list[str]) -> tuple[list[ModelInfo], list[Guess]]:
    """Each text's model, and with source "auto" (LibreTranslate's) and no model named, each text's detected
    language: the model is the one from that language to the target (the only one for the target, when a text
    is too short to tell)."""
    infos, guesses = resolve_or_keep(service, task, req, texts, keep=False)
    return [m for m in infos if m is not None], guesses  # without keep, every text has its model


def resolve_or_keep(
    service: Service, task: str, req: TextRequest, texts: list[str], keep: bool
) -> tuple[list[ModelInfo | None], list[Guess]]:
    """resolve, and with keep, None for the model of a text the detector is at least SAME_LANGUAGE % sure is in
    the target language already (among all the models' languages): it is answered as it is, as LibreTranslate
    and Google do, not sent to a model that reads another language."""
    if req.source != "auto" or req.model is not None:
        source = None if req.source == "auto" else req.source
        return [service.registry.resolve(task, req.model, source, req.target)] * len(texts), []
    fits = fitting_sources(service, task, req.target)
    if not fits:
        return [service.registry.resolve(task, None, None, req.target)] * len(texts), []
    target = req.target and service.registry.code(req.target)
    infos: list[ModelInfo | None] = []
    guesses = []
    for i, text in enumerate(texts):
        field = f"q[{i}]"
        try:
            seen: list[Guess] | InvalidRequest = service.detector.detect(text, field)  # among all the languages
        except InvalidRequest as e:  # too short to tell, or no language lingua knows
            seen = e
        if keep and isinstance(seen, list) and seen[0].language == target and seen[0].confidence >= SAME_LANGUAGE:
            infos.append(None)
            guesses.append(seen[0])
            continue
        guess = detected(service, seen, field, fits)
        if guess.language not in fits:
            to = f" to {req.target}" if req.target else ""
            raise InvalidRequest(
                field,
                f"detected {guess.language} ({guess.confidence:g}%), and no {task} model reads {guess.language}{to}; "
                f"models here read {', '.join(sorted(fits))}",
            )
        infos.append(service.registry.resolve(task, None, guess.language, req.target))  # several: a 422 names them
        guesses.append(guess)
    return infos, guesses


def fitting_sources(service: Service, task: str, target: str | None) -> set[str]:
    """The languages some model of this task reads, into target where one is given (its code as the models know
    it), target itself left out."""
    target = target and service.registry.code(target)
    fits = {
        m.meta.source_lang
        for m in service.registry.models.values()
        if m.task == task and m.meta.source_lang and (target is None or m.meta.target_lang == target)
    }
    fits |= {
        code
        for m in service.registry.models.values()
        if m.task == task and m.multilingual and (target is None or m.knows(target))
        for code in m.languages()
        if code != target
    }
    return fits


def detected(service: Service, seen: list[Guess] | InvalidRequest, field: str, fits: set[str]) -> Guess:
    """A text's most likely language among the fitting models' sources, from what the detector saw in it among
    all the models' languages (or why it could not tell). When one model fits, it is that one's, with the
    detector's confidence in it among all the models' languages (0 for a text too short to tell): a request that
    worked before detection still does."""
    if len(fits) > 1:
        if isinstance(seen, InvalidRequest):
            raise seen
        return service.detector.among(seen, fits, field)[0]
    [only] = fits
    if isinstance(seen, InvalidRequest):  # too short, or in none of the languages: the one model takes it
        return Guess(only, 0.0)
    return next((g for g in seen if g.language == only), Guess(only, 0.0))


# -- a request's job, queued and waited for -------------------------------------------------------


async def client_gone(receive: Receive) -> None:
    """Return once the client has closed its connection (its body was read already: the next message is the
    disconnect)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def run(service: Service, job: Job, request: Request) -> Answer:
    """Queue a checked job and wait for its answer. A client that goes away first cancels it: the worker lets go
    of its texts within 20 ms (service.queue.worker), instead of decoding for nobody while others wait."""
    await service.queue.submit(job)
    answer = asyncio.ensure_future(service.queue.wait(job.id, service.settings.request_timeout_s))
    gone = asyncio.ensure_future(client_gone(request.receive))
    gone.add_done_callback(lambda _: answer.cancel())  # the queue cancels the job
    try:
        result = await answer  # this request cancelled (the server stopping): the wait is cancelled with it
    except asyncio.CancelledError:
        if gone.done() and not gone.cancelled():
            raise ClientClosed("the client closed its connection before the answer") from None
        raise
    finally:
        gone.cancel()
    if result.error:
        raise ResultTooLarge(result.error) if result.too_large else JobFailed(result.error)
    return result


async def decode_texts(
    service: Service, req: TextRequest, task: str, owner: str | None, request: Request
) -> tuple[list[ModelInfo | None], list[Output], list[Guess]]:
    """Decode the request's texts (for format html, the text between its tags): one job per model (source
    "auto" may pick several), one output and model per text, and the languages detected for source "auto".
    A translation's text already in the target language (resolve_or_keep) is answered as it is: its model is
    None."""
    s = service.settings
    texts = [req.q] if isinstance(req.q, str) else req.q
    check_texts(texts, "q", s.max_texts, s)
    args = (service, task, req, texts, task == "translation")
    if req.source == "auto" and sum(len(t) for t in texts) > INLINE_CHARS:  # lingua takes ~1 ms a 1,000 characters
        infos, guesses = await asyncio.to_thread(resolve_or_keep, *args)
    else:
        infos, guesses = resolve_or_keep(*args)
    outputs: list[Output | None] = [None] * len(texts)
    chosen = {i: m for i, m in enumerate(infos) if m is not None}
    # One job per model, and for a multilingual one per detected source language.
    keys = {i: (m.id, guesses[i].language if guesses and m.multilingual else None) for i, m in chosen.items()}
    for key in dict.fromkeys(keys.values()):
        mine = [i for i, k in keys.items() if k == key]
        info, texts_of = chosen[mine[0]], [texts[i] for i in mine]
        for i, out in zip(
            mine, await decode_with(service, info, req, texts_of, owner, request, source=key[1]), strict=True
        ):
            outputs[i] = out
    return (
        infos,
        [output_of(output.Output.as_it_is(t)) if o is None else o for t, o in zip(texts, outputs, strict=True)],
        guesses,
    )


async def decode_with(
    service: Service,
    info: ModelInfo,
    req: TextRequest,
    texts: list[str],
    owner: str | None,
    request: Request,
    source: str | None = None,
) -> list[Output]:
    """Decode texts with one model as one job: one output per text (format html: model.markup); source, the
    language detected for them where the request says "auto"."""
    s = service.settings
    options = options_of(req, s, info, n_best_at_least=1 + req.alternatives)
    large = sum(len(t) for t in texts) > INLINE_CHARS  # parsed and rendered in a thread: the loop keeps answering
    documents = None
    if req.format == "html":
        documents = await asyncio.to_thread(parse_all, texts) if large else parse_all(texts)
    pieces = texts if documents is None else [p for d in documents for p in d.texts]
    found: list[output.Output] = []
    if pieces:
        deadline = time.time() + s.request_timeout_s
        html = documents is not None
        pair = info.pair(source or (None if req.source == "auto" else req.source), req.target)
        job = Job(
            info.id,
            pieces,
            options,
            truncate=req.truncate,
            align=html,
            owner=owner,
            deadline=deadline,
            source_lang=pair[0],
            target_lang=pair[1],
        )
        await check_cost(service, job, "q", s.max_request_cost, "TRANSFORMER_MAX_REQUEST_COST")
        found = (await run(service, job, request)).outputs
    if documents is None:
        return [output_of(o) for o in found]
    return await asyncio.to_thread(html_outputs, documents, found) if large else html_outputs(documents, found)


def parse_all(texts: list[str]) -> list[Document]:
    return [Document(t) for t in texts]


def html_outputs(documents: list[Document], outputs: list[output.Output]) -> list[Output]:
    """One output per document from the outputs of its texts: its k-th hypothesis renders each text's k-th
    (the best, where a text has fewer)."""
    out, it = [], iter(outputs)
    for document in documents:
        joined = []
        for chosen in output.by_rank([next(it).hypotheses for _ in document.texts]):
            joined.append(
                Hypothesis(
                    text=render(document, chosen),
                    score=sum(h.score for h in chosen),
                    tokens=[t for h in chosen for t in h.tokens],
                )
            )
        best, *rest = joined
        out.append(Output(text=best.text, score=best.score, tokens=best.tokens, alternatives=rest))
    return out


# -- the routes -----------------------------------------------------------------------------------


@router.post("/translate", response_model=TranslateResponse, response_model_exclude_none=True, tags=["text"])
async def translate(req: TextRequest, caller: Caller, request: Request) -> TranslateResponse:
    """Translate one text or a list; choose the model by `model`, or by `source` and `target`. A text is
    translated sentence by sentence. LibreTranslate's clients work unchanged: form bodies, `api_key`,
    `format: html`, `alternatives` and `source: "auto"` (each text's language detected). With no model from
    `source` to `target`, but one from `source` to a language x and one from x to `target`, the texts are
    translated through x (`pivot`)."""
    service, owner = caller
    route = pivot_route(service, req)
    if route is not None:
        return await pivoted(service, req, route, owner, request)
    infos, outputs, guesses = await decode_texts(service, req, "translation", owner, request)
    one = isinstance(req.q, str)
    best: str | list[str] = outputs[0].text if one else [o.text for o in outputs]
    alternatives: list[str] | list[list[str]] | None = None
    if req.alternatives:
        each = [[h.text for h in o.alternatives][: req.alternatives] for o in outputs]
        alternatives = each[0] if one else each
    found = [DetectedLanguage(language=g.language, confidence=g.confidence) for g in guesses]
    ids = [m and m.id for m in infos]  # None: a text already in the target language
    return TranslateResponse(
        model=next((i for i in ids if i is not None), None),
        translatedText=best,
        alternatives=alternatives,
        translations=outputs,
        detectedLanguage=(found[0] if one else found) if found else None,
        models=ids if len(set(ids)) > 1 else None,
    )


def pivot_route(service: Service, req: TextRequest) -> tuple[ModelInfo, str, ModelInfo] | None:
    """The two models and the language between them, when the request names a pair that no model translates
    directly (and no model by name, nor source "auto")."""
    if req.model is not None or req.source in (None, "auto") or req.target is None:
        return None
    try:
        service.registry.resolve("translation", None, req.source, req.target)
        return None
    except ModelNotFound:
        return service.registry.pivot("translation", req.source, req.target)


async def pivoted(
    service: Service, req: TextRequest, route: tuple[ModelInfo, str, ModelInfo], owner: str | None, request: Request
) -> TranslateResponse:
    """Translate from source to the pivot language with the first model, and its best outputs on to target with
    the second; alternatives are the second's."""
    first, through, second = route
    leg = req.model_copy(update={"model": first.id, "target": through, "alternatives": 0})
    _, middle, _ = await decode_texts(service, leg, "translation", owner, request)
    texts = [o.text for o in middle]
    leg = req.model_copy(
        update={"model": second.id, "source": through, "q": texts[0] if isinstance(req.q, str) else texts}
    )
    _, outputs, _ = await decode_texts(service, leg, "translation", owner, request)
    one = isinstance(req.q, str)
    alternatives: list[str] | list[list[str]] | None = None
    if req.alternatives:
        each = [[h.text for h in o.alternatives][: req.alternatives] for o in outputs]
        alternatives = each[0] if one else each
    return TranslateResponse(
        model=second.id,
        translatedText=outputs[0].text if one else [o.text for o in outputs],
        alternatives=alternatives,
        translations=outputs,
        models=[first.id, second.id],
        pivot=through,
    )


@router.get("/languages", response_model=list[Language], tags=["text"])
async def languages(service: ReadyService) -> list[Language]:
    """The source languages of the translation models and each one's targets, directly or through a pivot
    (LibreTranslate's GET /languages)."""
    targets = service.registry.targets
    return [Language(code=code, name=language_name(code), targets=t) for code, t in sorted(targets.items())]


@router.get("/frontend/settings", response_model=FrontendSettings, response_model_exclude_none=True, tags=["text"])
async def frontend_settings(service: ReadyService) -> FrontendSettings:
    """What LibreTranslate's clients read before they translate (its GET /frontend/settings): the longest text,
    whether a key is needed, the file formats, and the languages a page starts with: "auto" into English where a
    model translates into English, else into the first target."""
    targets = sorted({t for ts in service.registry.targets.values() for t in ts})
    start = None
    if targets:
        target = "en" if "en" in targets else targets[0]
        start = StartLanguages(
            source=NamedLanguage(code="auto", name="Auto Detect"),  # LibreTranslate's name for it
            target=NamedLanguage(code=target, name=language_name(target)),
        )
    return FrontendSettings(
        charLimit=service.settings.max_chars,
        frontendTimeout=FRONTEND_TIMEOUT_MS,
        apiKeys=bool(service.access.keys),
        keyRequired=service.access.needs_key("/translate"),
        suggestions=False,
        filesTranslation=True,
        supportedFilesFormat=[f".{extension}" for extension in MEDIA_TYPES],
        language=start,
    )


@router.post("/detect", response_model=list[DetectedLanguage], tags=["text"])
async def detect(req: DetectRequest, service: ReadyService) -> list[DetectedLanguage]:
    """The language of a text among those of the service's models, most likely first, confidence in percent
    (LibreTranslate's POST /detect); 422 for a text too short to tell."""
    check_texts([req.q], "q", 1, service.settings)
    guesses = await asyncio.to_thread(service.detector.detect, req.q, "q")
    return [DetectedLanguage(language=g.language, confidence=g.confidence) for g in guesses]


@router.post("/summarize", response_model=SummarizeResponse, tags=["text"])
async def summarize(req: SummarizeRequest, caller: Caller, request: Request) -> SummarizeResponse:
    """Summarize one document or a list; `length` (short, medium, long, or [min, max] tokens) sets the summary's
    length. A document longer than the model takes is summarized in sections of whole sentences, and the
    sections' summaries once more, until one summary is left (map-reduce); `truncate` cuts it instead."""
    service, owner = caller
    texts = [req.q] if isinstance(req.q, str) else req.q
    check_texts(texts, "q", service.settings.max_texts, service.settings)
    [info, *_], _ = resolve(service, "summarization", req, texts)
    whole = [i for i, t in enumerate(texts) if req.truncate or fits(info, t)]
    outputs: list[Output | None] = [None] * len(texts)
    if whole:
        done = await decode_with(service, info, req, [texts[i] for i in whole], owner, request)
        for i, out in zip(whole, done, strict=True):
            outputs[i] = out
    for i in (i for i in range(len(texts)) if outputs[i] is None):
        outputs[i] = await map_reduce(service, info, req, texts[i], f"q[{i}]", owner, request)
    return SummarizeResponse(model=info.id, summaries=[o for o in outputs if o is not None])


def fits(info: ModelInfo, text: str) -> bool:
    """Whether the model reads the whole text (or, a summarizer that reads only a document's first tokens, takes
    any length); invalid Unicode counts as fitting, for the job's own check to name."""
    try:
        info.tokenizer.source_ids(text, info.meta.model, truncate=False)
    except InputTooLongError:
        return False
    except InputError:
        return True
    return True


async def map_reduce(
    service: Service, info: ModelInfo, req: SummarizeRequest, text: str, field: str, owner: str | None, request: Request
) -> Output:
    """A document too long for the model summarized in sections, and their summaries joined and summarized
    again, until it fits (at most MAX_ROUNDS rounds)."""
    length = lambda s: len(info.tokenizer.source_ids(s, info.meta.model, truncate=True))  # noqa: E731
    for _ in range(MAX_ROUNDS):
        if fits(info, text):
            break
        parts = sections(text, info.meta.source_lang, length, info.meta.model.max_len)
        text = " ".join(o.text for o in await decode_with(service, info, req, parts, owner, request))
    else:
        raise InvalidRequest(field, f"still longer than the model takes after {MAX_ROUNDS} rounds of summaries")
    [out] = await decode_with(service, info, req, [text], owner, request)
    return out


@router.post("/attention", response_model=AttentionResponse, tags=["text"])
async def attention(req: AttentionRequest, caller: Caller, request: Request) -> Response:
    """One text decoded with any options, as /translate would, with the attention maps of one hypothesis of its
    n-best list (`hypothesis`, default the best): cross, encoder and decoder self-attention,
    [layer][head][query][key], rounded to 3 decimals; `kinds`, `layers` and `heads` choose which."""
    service, owner = caller
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
    source, target = info.pair(req.source, req.target)
    job = Job(info.id, [req.q], options, attention=selection, truncate=req.truncate, owner=owner, deadline=deadline)
    job = replace(job, source_lang=source, target_lang=target)
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
