"""The queue's contract: what travels through it (a Job, its Answer, a job's JobInfo), what the API needs of a
queue (ApiQueue), what a worker needs of one (WorkerQueue), and the error a worker waits out.

Two implementations: service.queue.memory (one process) and service.queue.redis_api with
service.queue.redis_worker (Redis Streams, any number of API processes and workers). Everything here is plain
JSON on the way through Redis.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from model.config import DecodingConfig
from model.output import Output
from service.attention import AttentionSelection


class JobStatus(StrEnum):
    queued = "queued"
    running = "running"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"  # a job cancelled by its owner, or a request's that timed out; workers drop it


ACTIVE = (JobStatus.queued, JobStatus.running)


class JobIds:
    """Unguessable job ids, 128 bits of the OS's random source each (os.urandom), read 4 KiB at a time: one system
    call for 256 ids rather than one each. Each call lets go of the GIL, and a worker thread of the embedded queue
    waiting for it takes it then: about a tenth of a request's CPU in the API process (benchmarks/README). A forked
    child reads bytes of its own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bytes, self.at = b"", 0
        os.register_at_fork(after_in_child=self.forget)

    def forget(self) -> None:
        self.lock = threading.Lock()  # another thread may have held it at the fork
        self.bytes, self.at = b"", 0

    def next(self) -> str:
        with self.lock:
            if self.at + 16 > len(self.bytes):
                self.bytes, self.at = os.urandom(4096), 0
            self.at += 16
            return self.bytes[self.at - 16 : self.at].hex()


JOB_IDS = JobIds()


@dataclass(frozen=True)
class Job:
    """What the queue carries: the texts one request sends to one model, with one set of options.

    A request to /translate, /summarize or /attention waits for its job, which goes before the others and is
    forgotten once answered; a background job (POST /jobs) is polled with GET /jobs/{id}, reports its progress,
    fills the rows the others leave and is kept for result_ttl_s once it ends."""

    model: str | None  # None: texts already in the target language (source "auto"), answered as they are
    texts: list[str]
    options: DecodingConfig = field(default_factory=DecodingConfig)
    background: bool = False
    attention: AttentionSelection | None = None  # answer these attention maps of one hypothesis
    truncate: bool = False
    source_lang: str | None = None  # a multilingual model's languages (its codes); None: the model's own
    target_lang: str | None = None
    align: bool = False  # answer each hypothesis' word alignment (format html places its inline tags by it)
    owner: str | None = None  # owner_of(API key) that sent it; only that key may read or cancel a background job
    deadline: float | None = None  # time.time() after which nobody waits for the answer (requests)
    file: str | None = None  # a file's name (POST /translate_file): its bytes stay with the API's side of the queue
    id: str = field(default_factory=JOB_IDS.next)  # unguessable: a background job's handle
    created: float = field(default_factory=time.time)

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now > self.deadline

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "options": self.options.to_dict()}, ensure_ascii=False)

    def kept_bytes(self, file: bytes | None) -> int:
        """What a background job counts against its owner's max_kept_bytes: its texts and file as sent."""
        return sum(len(t.encode("utf-8", "surrogatepass")) for t in self.texts) + len(file or b"")

    @classmethod
    def from_json(cls, text: str | bytes) -> Job:
        data = json.loads(text)
        attention = data.get("attention")
        return cls(
            **{
                **data,
                "options": DecodingConfig.from_dict(data["options"]),
                "attention": None if attention is None else AttentionSelection.from_dict(attention),
            }
        )


@dataclass(frozen=True)
class Answer:
    """What a worker answers a job with: one Output per text (and, for /attention, the maps of the hypothesis
    asked for, as the JSON text service.attention.maps_json makes, which the API passes on unparsed), or an
    error for the whole job: a bug, a job that crashed workers, or (too_large) an answer larger than the queue
    carries."""

    outputs: list[Output] = field(default_factory=list)
    attention: str | None = None
    error: str | None = None
    too_large: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (service.queue.processes carries it so)."""
        outputs = [o.to_dict() for o in self.outputs]  # attention maps as tensors are left out: see `attention`
        return {"outputs": outputs, "attention": self.attention, "error": self.error, "too_large": self.too_large}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Answer:
        return cls(**{**data, "outputs": [Output.from_dict(o) for o in data["outputs"]]})

    def outputs_json(self) -> list[str]:
        """One JSON text per output, as the Redis queue stores them."""
        return [json.dumps(o.to_dict(), ensure_ascii=False) for o in self.outputs]


def outputs_of(texts: list[bytes] | list[str]) -> list[Output]:
    """Outputs from Answer.outputs_json's texts."""
    return [Output.from_dict(json.loads(t)) for t in texts]


@dataclass(frozen=True)
class JobInfo:
    """A background job as GET /jobs/{id} shows it, with one page of its outputs once it is done."""

    id: str
    status: JobStatus
    done: int
    total: int
    model: str | None  # None: answered as it is (Job.model)
    error: str | None = None
    outputs: list[Output] | None = None  # outputs[offset : offset + limit], when done
    offset: int = 0
    file: str | None = None  # the file's name, for a file's job


def check_kept(jobs: int, kept: int, adding: int, max_jobs: int, max_bytes: int) -> None:
    """TooManyKept when an owner keeping `jobs` background jobs of `kept` bytes may not add one of `adding`."""
    from service.errors import TooManyKept

    advice = "download its files, DELETE /jobs/{id} the results read, or wait for them to expire"
    if jobs >= max_jobs:
        raise TooManyKept(f"this API key keeps {jobs} jobs, the limit (TRANSFORMER_MAX_KEPT_JOBS): {advice}", 60)
    if kept + adding > max_bytes:
        raise TooManyKept(
            f"this API key keeps {kept:,} bytes of jobs and files; {adding:,} more would pass the limit of "
            f"{max_bytes:,} (TRANSFORMER_MAX_KEPT_BYTES): {advice}",
            60,
        )


class QueueUnavailable(Exception):
    """The queue cannot be reached (Redis down); the worker waits and tries again."""


class ApiQueue(Protocol):
    """The API's side; errors are ServiceErrors (QueueFull, TooManyKept, Unavailable, RequestTimeout)."""

    async def submit(self, job: Job, file: bytes | None = None) -> None:
        """Queue a job; a background one (and its file, kept beside it) counts against its owner's
        max_kept_jobs and max_kept_bytes until it is read, deleted or expired (TooManyKept)."""

    async def take_file(self, job_id: str, owner: str | None) -> bytes | None:
        """A file job's file, once: it is forgotten as it is taken; None if gone, unknown or not owner's."""

    async def wait(self, job_id: str, timeout: float) -> Answer:
        """The answer to a request's job; the job is forgotten once answered, or cancelled after timeout."""

    async def info(self, job_id: str, owner: str | None, offset: int = 0, limit: int = 0) -> JobInfo | None:
        """A background job with outputs[offset:offset + limit] once done; None if unknown or not owner's."""

    async def cancel(self, job_id: str, owner: str | None) -> JobInfo | None:
        """Cancel a queued or running background job, or forget an ended one (and its file); what it was, or
        None."""

    async def ping(self) -> None: ...

    async def stats(self) -> dict[str, float]:
        """The workers' counters (service.queue.counters) and gauges: queued, in_flight_jobs, in_flight_texts."""

    async def throttle(self, name: str, per_minute: int, take: bool) -> float:
        """Token bucket `name` holding up to per_minute tokens, refilled at per_minute a minute: with take,
        take one. Returns 0.0 when a token was there, else the seconds until one will be."""

    async def close(self) -> None: ...


class WorkerQueue(Protocol):
    """A worker's side: where it gets jobs and leaves answers."""

    def read(self, count: int, block_s: float) -> list[Job]:
        """Up to count new jobs, waiting at most block_s for the first."""

    def maintain(self) -> list[Job]:
        """Jobs reclaimed from dead workers."""

    def unwanted(self, job_ids: list[str]) -> set[str]:
        """Those of these jobs in flight that nobody wants any more (cancelled, abandoned)."""

    def started(self, job: Job) -> None: ...

    def progress(self, job: Job, done: int) -> None: ...

    def finish(self, job: Job, answer: Answer) -> None: ...

    def drop(self, job: Job) -> None:
        """Let go of an unwanted job without answering it."""

    def busy(self, jobs: int, texts: int) -> None:
        """What the worker has in flight, for /metrics."""

    def record_step(self, sentences: int, finished: int, seconds: float) -> None:
        """One decoding step of `sentences` texts, `finished` of which ended."""

    def record_admission(self, texts: int, seconds: float) -> None:
        """`texts` texts encoded and joined to a running search (model.beam.BeamLoop.admit) in `seconds`."""
