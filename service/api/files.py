"""Files (LibreTranslate's POST /translate_file and its download): a file is read into its texts (model.files),
which run as a batch job (GET /jobs/{id} shows its progress); GET /download_file/{id} writes them back into the
file once the job is done, and hands it over once: the file and the job's results are forgotten then."""

from __future__ import annotations

import asyncio
import re
import time
import unicodedata
from pathlib import PurePath
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, File, Form, Request, Response, UploadFile

from model.errors import FileError
from model.files import MEDIA_TYPES, FileLimits, FileText, format_of, read_file
from model.output import Output
from service.api.deps import Caller, ReadyService
from service.api.jobs import JobId, download_url, unknown
from service.api.schemas import NAME_CHARS, ErrorResponse, JobProgress, JobResponse, Name, TextRequest
from service.api.text import ERRORS, check_cost, options_of, resolve_or_keep
from service.errors import InvalidRequest, JobFailed, NotFound, NotReady, PayloadTooLarge
from service.queue.contract import ACTIVE, Job, JobInfo, JobStatus

router = APIRouter(responses=ERRORS, tags=["files"])
SAMPLE_CHARS = 2000  # of a file's text, for source "auto" (its language is told from its start)
POLL_S = 0.25  # how often a download waiting for its job looks at it
UNSAFE = re.compile(r'[^\x20-\x7e]|["\\]')  # what a quoted filename in Content-Disposition cannot hold


def shown_name(name: str) -> str:
    """A file's name without control and format characters (Unicode's Cc and Cf): a right-to-left override
    would show "report\u202etxt.exe" as "reportexe.txt" where the name is shown and downloaded."""
    return "".join(c for c in name if unicodedata.category(c) not in ("Cc", "Cf"))


def read_checked(name: str, data: bytes, limits: FileLimits) -> FileText:
    try:
        read = read_file(name, data, limits)
    except FileError as e:
        raise InvalidRequest("file", str(e)) from None
    if not read.texts:
        raise InvalidRequest("file", f"{name}: there is no text to translate in it")
    return read


FORM_EXAMPLE = {"file": "report.docx", "source": "en", "target": "de"}
FILE_EXAMPLES = {"text/plain; charset=utf-8": "Datei nicht gefunden.\nFestplatte voll.\n"}


@router.post(
    "/translate_file",
    response_model=JobResponse,
    response_model_exclude_none=True,
    status_code=202,
    openapi_extra={"requestBody": {"content": {"multipart/form-data": {"example": FORM_EXAMPLE}}}},
)
async def translate_file(
    file: Annotated[UploadFile, File(description=f"the file: .{', .'.join(MEDIA_TYPES)}")],
    caller: Caller,
    request: Request,
    response: Response,
    source: Annotated[Name | None, Form(description="source language code, or 'auto'")] = None,
    target: Annotated[Name | None, Form(description="target language code")] = None,
    model: Annotated[Name | None, Form(description="model id; else chosen by source and target")] = None,
    beam_size: Annotated[int | None, Form(ge=1, description="beams per text; else the model's own")] = None,
    max_length: Annotated[int | None, Form(ge=1, description="longest output of a sentence, in tokens")] = None,
    truncate: Annotated[
        bool, Form(description="cut a sentence longer than the model takes, not refuse the file")
    ] = False,
    api_key: Annotated[
        str | None, Form(max_length=NAME_CHARS, description="LibreTranslate's place for the key")
    ] = None,
) -> JobResponse:
    """Translate a file as a batch job, keeping its structure (LibreTranslate's multipart form). Answers at once
    with the job (GET /jobs/{id}: progress) and `translatedFileUrl`, where the file is downloaded once when done."""
    service, owner = caller
    s = service.settings
    files = len((await request.form()).getlist("file"))  # the form FastAPI read (cached): it kept the last
    if files > 1:
        raise InvalidRequest("file", f"{files} files in one request: send one file per request")
    name = shown_name(PurePath(file.filename or "").name)
    if not name:
        raise InvalidRequest("file", "the file part has no filename: name it, since its extension tells its format")
    data = await file.read()
    if len(data) > s.max_file_bytes:
        raise PayloadTooLarge(
            f"the file has {len(data):,} bytes, more than the limit of {s.max_file_bytes:,} "
            "(TRANSFORMER_MAX_FILE_BYTES)"
        )
    read = await asyncio.to_thread(read_checked, name, data, s.file_limits())
    sample = "\n".join(read.texts[:50])[:SAMPLE_CHARS]
    given = {k: v for k, v in {"beam_size": beam_size, "max_length": max_length}.items() if v is not None}
    req = TextRequest(q=sample, source=source, target=target, model=model, **given)
    [info], guesses = resolve_or_keep(service, "translation", req, [sample], keep=True)
    if info is None:  # already in the target language: handed back as it is, as LibreTranslate does
        job = Job(None, read.texts, background=True, owner=owner, file=name)
    else:
        detected = guesses[0].language if guesses and info.multilingual else None
        pair = info.pair(detected or (None if source == "auto" else source), target)
        job = Job(
            info.id,
            read.texts,
            options_of(req, s, info),
            background=True,
            truncate=truncate,
            source_lang=pair[0],
            target_lang=pair[1],
            align=read.align,
            owner=owner,
            file=name,
        )
        await check_cost(service, job, "file", s.max_job_cost, "TRANSFORMER_MAX_JOB_COST")
    await service.queue.submit(job, data)
    response.headers["Location"] = f"/jobs/{job.id}"
    return JobResponse(
        id=job.id,
        status=JobStatus.queued,
        model=job.model,
        progress=JobProgress(done=0, total=len(job.texts)),
        file=name,
        translatedFileUrl=download_url(request, job.id),
    )


async def ended(service: ReadyService, job_id: str, owner: str | None) -> JobInfo | None:
    """The job once it has ended, or as it is after request_timeout_s (a client that fetches the file as soon as
    it was accepted, as LibreTranslate's do, waits for it)."""
    deadline = time.monotonic() + service.settings.request_timeout_s
    while True:
        job = await service.queue.info(job_id, owner)
        if job is None or job.status not in ACTIVE or time.monotonic() >= deadline:
            return job
        await asyncio.sleep(POLL_S)


def rendered(name: str, data: bytes, outputs: list[Output], limits: FileLimits) -> bytes:
    return read_file(name, data, limits).render([o.best for o in outputs])


@router.get(
    "/download_file/{job_id}",
    response_class=Response,
    responses={
        200: {
            "content": {t: {"example": FILE_EXAMPLES[t]} if t in FILE_EXAMPLES else {} for t in MEDIA_TYPES.values()},
            "description": "the translated file",
        },
        409: {"model": ErrorResponse, "description": "the job is not done yet"},
    },
)
async def download_file(job_id: JobId, caller: Caller) -> Response:
    """A file's translation, once its job is done (waiting for it up to TRANSFORMER_REQUEST_TIMEOUT_S). It is
    handed over once: the file and the job's results are forgotten as it is."""
    service, owner = caller
    job = await ended(service, job_id, owner)
    if job is None or job.file is None:
        raise unknown(job_id)
    if job.status in ACTIVE:
        raise NotReady(f"job {job_id} is {job.status.value} ({job.done} of {job.total} texts done); try later", 5)
    if job.status is JobStatus.failed:
        raise JobFailed(job.error or "the job failed")
    if job.status is JobStatus.cancelled:
        raise NotFound(f"job {job_id} was cancelled")
    outputs = None
    if job.model is not None:  # a file answered as it is (Job.model) goes back as its very bytes: no outputs read
        whole = await service.queue.info(job_id, owner, 0, job.total)
        outputs = None if whole is None else whole.outputs
    data = await service.queue.take_file(job_id, owner)
    if data is None or (outputs is None and job.model is not None):
        raise NotFound(f"the file of job {job_id} was downloaded already")
    limits = service.settings.file_limits()
    content = data if outputs is None else await asyncio.to_thread(rendered, job.file, data, outputs, limits)
    await service.queue.cancel(job_id, owner)
    fallback = UNSAFE.sub("_", job.file)
    disposition = f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(job.file)}"
    return Response(content, media_type=MEDIA_TYPES[format_of(job.file)], headers={"Content-Disposition": disposition})
