"""The embedded queue: the API (async) and a worker thread (sync) share it within one process. A request is
forgotten once answered or abandoned; a job is kept for result_ttl_s after it ends."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from service.errors import QueueFull, RequestTimeout
from service.queue import Bucket, admission_stats, batch_stats
from service.settings import ServiceSettings
from service.tasks import JobState, Task, TaskResult, TaskStatus

ACTIVE = (TaskStatus.queued, TaskStatus.running)
MAX_BUCKETS = 100_000  # token buckets kept before full ones are forgotten


@dataclass
class _Entry:
    task: Task
    status: TaskStatus = TaskStatus.queued
    done: int = 0
    result: TaskResult | None = None
    expires: float = 0.0
    events: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)


class MemoryQueue:
    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)
        self.queued: deque[Task] = deque()
        self.entries: dict[str, _Entry] = {}
        self.active = 0  # tasks queued or running
        self.ended: deque[tuple[float, str]] = deque()  # (expiry, id) of ended jobs, oldest first
        self.counters: dict[str, float] = {}
        self.in_flight = (0, 0)  # tasks, texts: what the worker holds
        self.buckets: dict[str, Bucket] = {}

    # -- the API's side (TaskQueue) ---------------------------------------------------------------

    async def submit(self, task: Task) -> None:
        with self.ready:
            self._expire()
            if self.active >= self.settings.max_queue:
                raise QueueFull(f"the queue is full ({self.settings.max_queue} tasks); try again shortly", 1)
            self.entries[task.id] = _Entry(task)
            self.active += 1
            self.queued.append(task)
            self.ready.notify()

    async def wait(self, task_id: str, timeout: float) -> TaskResult:
        event = asyncio.Event()
        with self.lock:
            entry = self.entries[task_id]
            if entry.result is None:
                entry.events.append((asyncio.get_running_loop(), event))
        try:
            if entry.result is None:
                await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:  # answered, timed out, or its waiter cancelled (the client went away): the worker drops it
            with self.lock:
                if entry.result is None:
                    self._end(entry, TaskStatus.cancelled)
                self.entries.pop(task_id, None)  # answered or abandoned: nothing is kept
        if entry.result is None:
            raise RequestTimeout(f"no answer within {timeout:g} s; the service is overloaded")
        return entry.result

    async def state(self, task_id: str, owner: str | None, offset: int = 0, limit: int = 0) -> JobState | None:
        with self.lock:
            self._expire()
            e = self.entries.get(task_id)
            if e is None or e.task.kind != "job" or e.task.owner != owner:
                return None
            r = e.result
            outputs = r.outputs[offset : offset + limit] if r is not None and not r.error else None
            return JobState(
                task_id, e.status, e.done, len(e.task.texts), e.task.model, r.error if r else None, outputs, offset
            )

    async def cancel(self, task_id: str, owner: str | None) -> JobState | None:
        before = await self.state(task_id, owner)
        if before is None:
            return None
        with self.lock:
            entry = self.entries.get(task_id)
            if entry is not None and entry.status in ACTIVE:
                self._end(entry, TaskStatus.cancelled)
            elif entry is not None:
                del self.entries[task_id]
        return before

    async def ping(self) -> None:
        return None

    async def stats(self) -> dict[str, float]:
        with self.lock:
            queued = sum(1 for t in self.queued if (e := self.entries.get(t.id)) and e.status is TaskStatus.queued)
            tasks, texts = self.in_flight
            return {
                **self.counters,
                "queued": float(queued),
                "in_flight_tasks": float(tasks),
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

    def _end(self, entry: _Entry, status: TaskStatus) -> None:
        """Move a task to an ended status; a job is kept for result_ttl_s from now."""
        if entry.status in ACTIVE:
            self.active -= 1
        entry.status = status
        if entry.task.kind == "job":
            entry.expires = time.time() + self.settings.result_ttl_s
            self.ended.append((entry.expires, entry.task.id))

    def _expire(self) -> None:
        """Forget ended jobs past their expiry (the oldest first: only those are looked at)."""
        now = time.time()
        while self.ended and self.ended[0][0] < now:
            _, task_id = self.ended.popleft()
            e = self.entries.get(task_id)
            if e is not None and e.expires < now:
                del self.entries[task_id]

    # -- the worker's side (WorkSource) ----------------------------------------------------------

    def read(self, count: int, block_s: float) -> list[Task]:
        with self.ready:
            if not self.queued and block_s > 0:
                self.ready.wait(block_s)
            out: list[Task] = []
            while self.queued and len(out) < count:
                task = self.queued.popleft()
                entry = self.entries.get(task.id)
                if entry is not None and entry.status is TaskStatus.queued:  # abandoned ones are skipped
                    out.append(task)
            return out

    def maintain(self) -> list[Task]:
        return []  # one process: nothing to reclaim

    def unwanted(self, task_ids: list[str]) -> set[str]:
        with self.lock:
            return {t for t in task_ids if (e := self.entries.get(t)) is None or e.status not in ACTIVE}

    def started(self, task: Task) -> None:
        with self.lock:
            entry = self.entries.get(task.id)
            if entry is not None and entry.status is TaskStatus.queued:
                entry.status = TaskStatus.running

    def progress(self, task: Task, done: int) -> None:
        with self.lock:
            entry = self.entries.get(task.id)
            if entry is not None:
                entry.done = max(entry.done, done)

    def finish(self, task: Task, result: TaskResult) -> None:
        with self.lock:
            entry = self.entries.get(task.id)
            if entry is None or entry.status not in ACTIVE:
                return  # abandoned or cancelled meanwhile
            entry.result = result
            entry.done = len(result.outputs)
            self._end(entry, TaskStatus.failed if result.error else TaskStatus.done)
            for loop, event in entry.events:
                loop.call_soon_threadsafe(event.set)

    def drop(self, task: Task) -> None:
        return None  # an unwanted task has ended already

    def busy(self, tasks: int, texts: int) -> None:
        self.in_flight = (tasks, texts)

    def record_batch(self, sentences: int, finished: int, seconds: float) -> None:
        self._count(batch_stats(sentences, finished, seconds))

    def record_admission(self, texts: int, seconds: float) -> None:
        self._count(admission_stats(texts, seconds))

    def _count(self, increments: dict[str, float]) -> None:
        with self.lock:
            for k, v in increments.items():
                self.counters[k] = self.counters.get(k, 0.0) + v
