"""The queue contract: what the API needs of a queue (TaskQueue), what a worker needs of one (WorkSource),
and the error a worker waits out. Two implementations: service.memory_queue (one process) and
service.redis_queue (Redis Streams, any number of API processes and workers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from service.tasks import JobState, Task, TaskResult

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class SourceUnavailable(Exception):
    """The queue cannot be reached (Redis down); the worker waits and tries again."""


class TaskQueue(Protocol):
    """The API's side; errors are ServiceErrors (QueueFull, Unavailable, RequestTimeout)."""

    async def submit(self, task: Task) -> None: ...

    async def wait(self, task_id: str, timeout: float) -> TaskResult:
        """The answer to a request; the request is forgotten once answered, or cancelled after timeout."""

    async def state(self, task_id: str, owner: str | None, offset: int = 0, limit: int = 0) -> JobState | None:
        """A job's state with outputs[offset:offset + limit] once done; None if unknown or not owner's."""

    async def cancel(self, task_id: str, owner: str | None) -> JobState | None:
        """Cancel a queued or running job, or forget a finished one; its state before, or None."""

    async def ping(self) -> None: ...

    async def stats(self) -> dict[str, float]:
        """The workers' counters (batch_stats) and gauges: queued, in_flight_tasks, in_flight_texts."""

    async def throttle(self, name: str, per_minute: int, take: bool) -> float:
        """Token bucket `name` holding up to per_minute tokens, refilled at per_minute a minute: with take,
        take one. Returns 0.0 when a token was there, else the seconds until one will be."""

    async def close(self) -> None: ...


class WorkSource(Protocol):
    """A worker's side: where it gets tasks and leaves answers."""

    def read(self, count: int, block_s: float) -> list[Task]:
        """Up to count new tasks, waiting at most block_s for the first."""

    def maintain(self) -> list[Task]:
        """Tasks reclaimed from dead workers."""

    def unwanted(self, task_ids: list[str]) -> set[str]:
        """Those of these tasks in flight that nobody wants any more (cancelled jobs, abandoned requests)."""

    def started(self, task: Task) -> None: ...

    def progress(self, task: Task, done: int) -> None: ...

    def finish(self, task: Task, result: TaskResult) -> None: ...

    def drop(self, task: Task) -> None:
        """Let go of an unwanted task without answering it."""

    def busy(self, tasks: int, texts: int) -> None:
        """What the worker has in flight, for /metrics."""

    def record_batch(self, sentences: int, finished: int, seconds: float) -> None:
        """One decoding step of `sentences` texts, `finished` of which ended."""

    def record_admission(self, texts: int, seconds: float) -> None:
        """`texts` texts encoded and joined to a running search (model.beam.BeamLoop.admit) in `seconds`."""


def batch_stats(sentences: int, finished: int, seconds: float) -> dict[str, float]:
    """Counter increments for one decoding step of `sentences` texts (one token each), `finished` of which
    ended (Prometheus-style cumulative buckets of texts per step)."""
    out = {
        "batches_total": 1.0,
        "batch_sentences_total": float(sentences),
        "generated_tokens_total": float(sentences),
        "texts_decoded_total": float(finished),
        "decode_seconds_total": seconds,
    }
    for b in BATCH_BUCKETS:
        if sentences <= b:
            out[f"batch_size_le_{b}"] = 1.0
    return out


def admission_stats(texts: int, seconds: float) -> dict[str, float]:
    """Counter increments for one admission of `texts` texts into a running search."""
    return {"admissions_total": 1.0, "admitted_texts_total": float(texts), "admit_seconds_total": seconds}


@dataclass(frozen=True)
class Bucket:
    """A token bucket's state: tokens left at time `at` (seconds)."""

    tokens: float
    at: float

    @staticmethod
    def take(bucket: Bucket | None, per_minute: int, now: float, take: bool) -> tuple[Bucket, float]:
        """The bucket after trying to take a token at `now`, and the seconds to wait (0.0: there was one)."""
        rate = per_minute / 60.0
        tokens = float(per_minute) if bucket is None else min(per_minute, bucket.tokens + (now - bucket.at) * rate)
        if tokens >= 1.0:
            return Bucket(tokens - 1.0 if take else tokens, now), 0.0
        return Bucket(tokens, now), (1.0 - tokens) / rate
