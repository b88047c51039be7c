"""The embedded queue: the API (async) and a worker thread (sync) share it within one process. A request's job
is forgotten once answered or abandoned; a background job is kept for result_ttl_s after it ends."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from service.errors import QueueFull, RequestTimeout
from service.queue.contract import ACTIVE, Answer, Job, JobInfo, JobStatus, check_kept
from service.queue.counters import admission_counts, step_counts
from service.settings import ServiceSettings

MAX_BUCKETS = 100_000  # token buckets kept before full ones are forgotten


@dataclass
class _Entry:
    job: Job
    status: JobStatus = JobStatus.queued
    done: int = 0
    answer: Answer | None = None
    expires: float = 0.0
    file: bytes | None = None  # a file job's file, until it is taken
    size: int = 0  # bytes it counts against its owner's max_kept_bytes (background jobs)
    deliveries: int = 0  # times a worker read it (a worker process that dies gives its jobs back: requeue)
    events: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)


@dataclass(frozen=True)
class Bucket:
    """A token bucket: tokens left at time `at` (seconds)."""

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


class Wakeups:
    """The answered requests' events, set on their event loops from the workers' threads: one
    call_soon_threadsafe for each burst of answers rather than each answer. Each call writes to the loop's
    self-pipe, a system call that lets go of the GIL, and the loop wakes once for the burst."""

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock  # the queue's: add is called holding it
        self.pending: dict[asyncio.AbstractEventLoop, list[asyncio.Event]] = {}

    def add(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
        """Set event on loop soon (the caller holds the lock)."""
        events = self.pending.get(loop)
        if events is not None:  # a call is on its way: it sets this one too
            events.append(event)
            return
        loop.call_soon_threadsafe(self._set, loop)  # raises on a closed loop: then nothing is left pending
        self.pending[loop] = [event]  # before _set reads it: that takes the lock, which the caller holds

    def _set(self, loop: asyncio.AbstractEventLoop) -> None:
        with self.lock:
            events = self.pending.pop(loop, [])
        for event in events:
            event.set()


class MemoryQueue:
    """Both sides of the queue (ApiQueue, WorkerQueue) in one process."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)
        self.queued: deque[Job] = deque()
        self.entries: dict[str, _Entry] = {}
        self.active = 0  # jobs queued or running
        self.ended: deque[tuple[float, str]] = deque()  # (expiry, id) of ended background jobs, oldest first
        self.counters: dict[str, float] = {}
        self.in_flight: dict[int, tuple[int, int]] = {}  # jobs, texts: what each worker (thread) holds
        self.readers = 1  # the workers reading: a read takes its share of what is queued
        self.buckets: dict[str, Bucket] = {}
        self.wakers: dict[str, Callable[[], None]] = {}  # called whenever jobs are queued (worker processes' Bridges)
        self.wakeups = Wakeups(self.lock)

    # -- the API's side (ApiQueue) ---------------------------------------------------------------

    async def submit(self, job: Job, file: bytes | None = None) -> None:
        with self.ready:
            self._expire()
            if self.active >= self.settings.max_queue:
                raise QueueFull(f"the queue is full ({self.settings.max_queue} jobs); try again shortly", 1)
            size = job.kept_bytes(file) if job.background else 0
            if job.background:
                kept = [e.size for e in self.entries.values() if e.job.background and e.job.owner == job.owner]
                check_kept(len(kept), sum(kept), size, self.settings.max_kept_jobs, self.settings.max_kept_bytes)
            self.entries[job.id] = _Entry(job, file=file, size=size)
            self.active += 1
            self.queued.append(job)
            self.ready.notify()
            self._wake()

    async def wait(self, job_id: str, timeout: float) -> Answer:
        event = asyncio.Event()
        with self.lock:
            entry = self.entries[job_id]
            if entry.answer is None:
                entry.events.append((asyncio.get_running_loop(), event))
        try:
            if entry.answer is None:
                # asyncio.timeout, not wait_for: no task of its own, and on Python 3.11 wait_for swallows a
                # cancellation that comes as the event is set (python/cpython#86296)
                async with asyncio.timeout(timeout):
                    await event.wait()
        except TimeoutError:
            pass
        finally:  # answered, timed out, or its waiter cancelled (the client went away): the worker drops it
            with self.lock:
                if entry.answer is None:
                    self._end(entry, JobStatus.cancelled)
                self.entries.pop(job_id, None)  # answered or abandoned: nothing is kept
        if entry.answer is None:
            raise RequestTimeout(f"no answer within {timeout:g} s; the service is overloaded")
        return entry.answer

    async def info(self, job_id: str, owner: str | None, offset: int = 0, limit: int = 0) -> JobInfo | None:
        with self.lock:
            self._expire()
            e = self.entries.get(job_id)
            if e is None or not e.job.background or e.job.owner != owner:
                return None
            a = e.answer
            outputs = a.outputs[offset : offset + limit] if a is not None and not a.error else None
            error = a.error if a else None
            total = len(e.job.texts)
            return JobInfo(job_id, e.status, e.done, total, e.job.model, error, outputs, offset, e.job.file)

    async def take_file(self, job_id: str, owner: str | None) -> bytes | None:
        with self.lock:
            e = self.entries.get(job_id)
            if e is None or not e.job.background or e.job.owner != owner:
                return None
            file, e.file = e.file, None
            return file

    async def cancel(self, job_id: str, owner: str | None) -> JobInfo | None:
        before = await self.info(job_id, owner)
        if before is None:
            return None
        with self.lock:
            entry = self.entries.get(job_id)
            if entry is not None and entry.status in ACTIVE:
                self._end(entry, JobStatus.cancelled)
            elif entry is not None:
                del self.entries[job_id]
        return before

    async def ping(self) -> None:
        return None

    async def stats(self) -> dict[str, float]:
        with self.lock:
            queued = sum(1 for j in self.queued if (e := self.entries.get(j.id)) and e.status is JobStatus.queued)
            jobs = sum(j for j, _ in self.in_flight.values())
            texts = sum(t for _, t in self.in_flight.values())
            return {
                **self.counters,
                "queued": float(queued),
                "in_flight_jobs": float(jobs),
                "in_flight_texts": float(texts),
            }

    async def throttle(self, name: str, per_minute: int, take: bool) -> float:
        with self.lock:
            if len(self.buckets) > MAX_BUCKETS:
                self.buckets = {}  # a flood of addresses: start over rather than grow without end
            self.buckets[name], wait = Bucket.take(self.buckets.get(name), per_minute, time.monotonic(), take)
            return wait

    async def close(self) -> None:
        return None

    def watch(self, name: str, wake: Callable[[], None] | None) -> None:
        """Call wake (quick, never raising) whenever jobs are queued, until watched again with None."""
        with self.lock:
            if wake is None:
                self.wakers.pop(name, None)
            else:
                self.wakers[name] = wake

    def _wake(self) -> None:
        for wake in self.wakers.values():
            wake()

    def _end(self, entry: _Entry, status: JobStatus) -> None:
        """Move a job to an ended status; a background job is kept for result_ttl_s from now."""
        if entry.status in ACTIVE:
            self.active -= 1
        entry.status = status
        if entry.job.background:
            entry.expires = time.time() + self.settings.result_ttl_s
            self.ended.append((entry.expires, entry.job.id))

    def _expire(self) -> None:
        """Forget ended background jobs past their expiry (the oldest first: only those are looked at)."""
        now = time.time()
        while self.ended and self.ended[0][0] < now:
            _, job_id = self.ended.popleft()
            e = self.entries.get(job_id)
            if e is not None and e.expires < now:
                del self.entries[job_id]

    # -- the worker's side (WorkerQueue) ---------------------------------------------------------

    def read(self, count: int, block_s: float) -> list[Job]:
        """At most count jobs, and no more than this worker's share of those queued (a burst is split among the
        workers, each reading when its search can take them)."""
        with self.ready:
            if not self.queued and block_s > 0:
                self.ready.wait(block_s)
            count = min(count, max(1, -(-len(self.queued) // self.readers)))
            out: list[Job] = []
            while self.queued and len(out) < count:
                job = self.queued.popleft()
                entry = self.entries.get(job.id)
                if entry is not None and entry.status is JobStatus.queued:  # abandoned ones are skipped
                    entry.deliveries += 1
                    out.append(job)
            return out

    def has_queued(self) -> bool:
        """Whether jobs wait to be read (some may be abandoned ones, which a read skips)."""
        return bool(self.queued)

    def requeue(self, jobs: list[Job]) -> None:
        """Put back the jobs of a worker process that died at the front of the queue, in their order; one
        delivered max_deliveries times fails instead (it may be what crashed them, as with Redis)."""
        with self.ready:
            for job in reversed(jobs):
                entry = self.entries.get(job.id)
                if entry is None or entry.status not in ACTIVE:
                    continue
                if entry.deliveries >= self.settings.max_deliveries:
                    error = f"delivered {entry.deliveries} times without an answer (workers crashed on it)"
                    self._answer(entry, Answer(error=error))
                else:
                    entry.status = JobStatus.queued
                    self.queued.appendleft(job)
            self.ready.notify_all()
            self._wake()

    def maintain(self) -> list[Job]:
        return []  # one process: nothing to reclaim

    def unwanted(self, job_ids: list[str]) -> set[str]:
        with self.lock:
            return {j for j in job_ids if (e := self.entries.get(j)) is None or e.status not in ACTIVE}

    def started(self, job: Job) -> None:
        with self.lock:
            entry = self.entries.get(job.id)
            if entry is not None and entry.status is JobStatus.queued:
                entry.status = JobStatus.running

    def progress(self, job: Job, done: int) -> None:
        with self.lock:
            entry = self.entries.get(job.id)
            if entry is not None:
                entry.done = max(entry.done, done)

    def finish(self, job: Job, answer: Answer) -> None:
        with self.lock:
            entry = self.entries.get(job.id)
            if entry is None or entry.status not in ACTIVE:
                return  # abandoned or cancelled meanwhile
            self._answer(entry, answer)

    def _answer(self, entry: _Entry, answer: Answer) -> None:
        entry.answer = answer
        entry.done = len(answer.outputs)
        self._end(entry, JobStatus.failed if answer.error else JobStatus.done)
        for loop, event in entry.events:
            self.wakeups.add(loop, event)

    def drop(self, job: Job) -> None:
        return None  # an unwanted job has ended already

    def busy(self, jobs: int, texts: int) -> None:
        self.in_flight[threading.get_ident()] = (jobs, texts)

    def record_step(self, sentences: int, finished: int, seconds: float) -> None:
        self._count(step_counts(sentences, finished, seconds))

    def record_admission(self, texts: int, seconds: float) -> None:
        self._count(admission_counts(texts, seconds))

    def add_counts(self, increments: dict[str, float]) -> None:
        """Counter increments a worker process added up (service.queue.processes)."""
        self._count(increments)

    def _count(self, increments: dict[str, float]) -> None:
        with self.lock:
            for k, v in increments.items():
                self.counters[k] = self.counters.get(k, 0.0) + v
