"""The API's side of the task queue, and the embedded (in-process) queue that serves one process alone."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from service.errors import QueueFull, RequestTimeout
from service.settings import ServiceSettings
from service.tasks import JobState, Task, TaskResult, TaskStatus

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def batch_stats(sentences: int, tokens: int, seconds: float) -> dict[str, float]:
    """Counter increments for one decoded batch (Prometheus-style cumulative buckets)."""
    out = {"batches_total": 1.0, "batch_sentences_total": float(sentences),
           "generated_tokens_total": float(tokens), "decode_seconds_total": seconds}
    for b in BATCH_BUCKETS:
        if sentences <= b:
            out[f"batch_size_le_{b}"] = 1.0
    return out


class TaskQueue(Protocol):
    """What the API needs of a queue; errors are ServiceErrors (QueueFull, Unavailable, RequestTimeout)."""

    async def submit(self, task: Task) -> None: ...

    async def wait(self, task_id: str, timeout: float) -> TaskResult: ...

    async def state(self, task_id: str) -> JobState | None: ...

    async def depth(self) -> int: ...

    async def ping(self) -> None: ...

    async def stats(self) -> dict[str, float]: ...

    async def hit(self, key: str) -> int:
        """Count one request of an API key in the current minute; returns the count so far."""

    async def close(self) -> None: ...


@dataclass
class _Entry:
    task: Task
    status: TaskStatus = TaskStatus.queued
    done: int = 0
    result: TaskResult | None = None
    expires: float = 0.0
    events: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = field(default_factory=list)


class MemoryQueue:
    """The embedded queue: the API (async) and a worker thread (sync) share it within one process."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.lock = threading.Lock()
        self.ready = threading.Condition(self.lock)
        self.queued: deque[Task] = deque()
        self.entries: dict[str, _Entry] = {}
        self.active = 0  # tasks queued or running
        self.ended: deque[tuple[float, str]] = deque()  # (expiry, task id) of ended tasks, oldest first
        self.counters: dict[str, float] = {}
        self.hits: dict[tuple[str, int], int] = {}

    # -- the API's side --------------------------------------------------------------------------

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
            if entry.result is not None:
                return entry.result
            entry.events.append((asyncio.get_running_loop(), event))
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            with self.lock:
                if entry.result is None:
                    self._end(entry, TaskStatus.cancelled)
                    raise RequestTimeout(f"no answer within {timeout:g} s; the service is overloaded") from None
        assert entry.result is not None
        return entry.result

    async def state(self, task_id: str) -> JobState | None:
        with self.lock:
            self._expire()
            e = self.entries.get(task_id)
            if e is None:
                return None
            error = e.result.error if e.result else None
            return JobState(task_id, e.status, e.done, len(e.task.texts), e.task.model, error, e.result)

    async def depth(self) -> int:
        with self.lock:
            return self.active

    async def ping(self) -> None:
        return None

    async def stats(self) -> dict[str, float]:
        with self.lock:
            return dict(self.counters)

    async def hit(self, key: str) -> int:
        window = int(time.time() // 60)
        with self.lock:
            self.hits = {k: v for k, v in self.hits.items() if k[1] == window}
            self.hits[(key, window)] = self.hits.get((key, window), 0) + 1
            return self.hits[(key, window)]

    async def close(self) -> None:
        return None

    def _end(self, entry: _Entry, status: TaskStatus) -> None:
        """Move a task to an ended status; it is kept for result_ttl_s from now."""
        if entry.status in (TaskStatus.queued, TaskStatus.running):
            self.active -= 1
        entry.status = status
        entry.expires = time.time() + self.settings.result_ttl_s
        self.ended.append((entry.expires, entry.task.id))

    def _expire(self) -> None:
        """Forget ended tasks past their expiry (the oldest first: only those are looked at)."""
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
                if self.entries[task.id].status is TaskStatus.queued:  # timed-out requests are skipped
                    out.append(task)
            return out

    def maintain(self, in_flight: list[str]) -> list[Task]:
        return []  # one process: nothing to reclaim

    def started(self, task: Task) -> None:
        with self.lock:
            if self.entries[task.id].status is TaskStatus.queued:
                self.entries[task.id].status = TaskStatus.running

    def progress(self, task: Task, done: int) -> None:
        with self.lock:
            self.entries[task.id].done = done

    def finish(self, task: Task, result: TaskResult) -> None:
        with self.lock:
            entry = self.entries[task.id]
            entry.result = result
            entry.done = len(result.outputs)
            self._end(entry, TaskStatus.failed if result.error else TaskStatus.done)
            for loop, event in entry.events:
                loop.call_soon_threadsafe(event.set)

    def record_batch(self, sentences: int, tokens: int, seconds: float) -> None:
        with self.lock:
            for k, v in batch_stats(sentences, tokens, seconds).items():
                self.counters[k] = self.counters.get(k, 0.0) + v
