"""Background jobs: POST /jobs queues many texts and answers at once with the job's id; GET /jobs/{id} shows its
progress and pages of its results; DELETE /jobs/{id} cancels it or forgets its results. A job belongs to the API
key that sent it."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from service.api.deps import Caller
from service.api.schemas import JobProgress, JobRequest, JobResponse, output_of
from service.api.text import ERRORS, check_cost, check_texts, options_of
from service.errors import InvalidRequest, NotFound, shown
from service.queue.contract import Job, JobInfo, JobStatus

router = APIRouter(responses=ERRORS, tags=["jobs"])
JobId = Annotated[str, Path(max_length=64)]


def download_url(request: Request, job_id: str) -> str:
    return f"{request.base_url}download_file/{job_id}"


def job_response(job: JobInfo, limit: int, request: Request) -> JobResponse:
    results = [output_of(o) for o in job.outputs] if job.outputs is not None else None
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
        file=job.file,
        translatedFileUrl=download_url(request, job.id) if job.file else None,
    )


def unknown(job_id: str) -> NotFound:
    return NotFound(f"no job {shown(job_id)} (unknown, not yours, or its results expired)")


@router.post("/jobs", response_model=JobResponse, status_code=202)
async def submit_job(req: JobRequest, response: Response, caller: Caller) -> JobResponse:
    """Queue many texts; poll GET /jobs/{id} for progress and results (kept for TRANSFORMER_RESULT_TTL_S)."""
    service, owner = caller
    s = service.settings
    check_texts(req.texts, "texts", s.max_job_texts, s)
    info = service.registry.resolve(req.task, req.model, req.source, req.target)
    source, target = info.pair(req.source, req.target)
    job = Job(
        info.id,
        req.texts,
        options_of(req, s, info),
        background=True,
        truncate=req.truncate,
        source_lang=source,
        target_lang=target,
        owner=owner,
    )
    await check_cost(service, job, "texts", s.max_job_cost, "TRANSFORMER_MAX_JOB_COST")
    await service.queue.submit(job)
    response.headers["Location"] = f"/jobs/{job.id}"
    progress = JobProgress(done=0, total=len(job.texts))
    return JobResponse(id=job.id, status=JobStatus.queued, model=info.id, progress=progress)


@router.get("/jobs/{job_id}", response_model=JobResponse)
async def get_job(
    job_id: JobId,
    caller: Caller,
    request: Request,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int | None, Query(ge=1)] = None,
) -> JobResponse:
    """A job's status (queued, running, done, failed, cancelled), progress and, once done, a page of its
    results: results[offset : offset + limit] (limit at most TRANSFORMER_MAX_JOB_PAGE, its default)."""
    service, owner = caller
    page = service.settings.max_job_page
    if limit is not None and limit > page:
        raise InvalidRequest("limit", f"{limit} is more than the limit of {page} results per page")
    limit = limit or page
    job = await service.queue.info(job_id, owner, offset, limit)
    if job is None:
        raise unknown(job_id)
    return job_response(job, limit, request)


@router.delete("/jobs/{job_id}", response_model=JobResponse)
async def cancel_job(job_id: JobId, caller: Caller, request: Request) -> JobResponse:
    """Cancel a queued or running job (its workers drop it), or delete a finished one's results. Answers the
    job as it was; afterwards GET shows a cancelled job, or 404 for a deleted one."""
    service, owner = caller
    job = await service.queue.cancel(job_id, owner)
    if job is None:
        raise unknown(job_id)
    return job_response(replace(job, outputs=None), 0, request)
