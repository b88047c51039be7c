"""The worker loop, the same for the embedded queue and for Redis: collect tasks for up to max_wait_ms,
decode them in dynamic batches, answer each task once all its texts are done."""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from model.errors import ModelError
from model.translator import Translator
from service.batcher import Pool, decode_batch
from service.settings import ServiceSettings
from service.tasks import Task, TaskResult

log = logging.getLogger("service")
RETURN_WAIT = 0.15  # the share of a batch's decoding time worth waiting for its clients' next requests


class SourceUnavailable(Exception):
    """The queue cannot be reached (Redis down); the worker waits and tries again."""


class WorkSource(Protocol):
    """Where a worker gets tasks and leaves results."""

    def read(self, count: int, block_s: float) -> list[Task]:
        """Up to count new tasks, waiting at most block_s for the first."""

    def maintain(self, in_flight: list[str]) -> list[Task]:
        """Heartbeat for tasks in flight; returns tasks reclaimed from dead workers."""

    def started(self, task: Task) -> None: ...

    def progress(self, task: Task, done: int) -> None: ...

    def finish(self, task: Task, result: TaskResult) -> None: ...

    def record_batch(self, sentences: int, tokens: int, seconds: float) -> None: ...


class Worker:
    """Decodes tasks from a source with the loaded translators."""

    def __init__(self, source: WorkSource, translators: dict[str, Translator], settings: ServiceSettings,
                 maintain_every_s: float = 2.0) -> None:
        self.source = source
        self.translators = translators
        self.settings = settings
        self.pool = Pool()
        self.maintain_every_s = maintain_every_s
        self.last_maintained = 0.0
        self.answered = 0  # requests answered by the last batch
        self.answered_at = 0.0
        self.last_decode_s = 0.0

    def run(self, stop: threading.Event) -> None:
        """Work until stop is set; an unreachable queue is waited out, never fatal."""
        while not stop.is_set():
            try:
                self.step()
            except SourceUnavailable as e:
                log.warning("queue unavailable (%s); retrying", e)
                self.pool = Pool()  # what was in flight is redelivered once the queue is back
                stop.wait(1.0)
            except Exception as e:  # a bug must not stop the worker and leave requests waiting
                log.exception("worker step failed")
                self.fail_all(f"worker error: {type(e).__name__}: {e}")

    def fail_all(self, reason: str) -> None:
        """Answer every task in flight with an error and start over with an empty pool."""
        pending, self.pool = list(self.pool.tasks.values()), Pool()
        for p in pending:
            try:
                self.source.finish(p.task, TaskResult(error=reason))
            except SourceUnavailable:
                return  # redelivered once the queue is back

    def step(self) -> None:
        """Admit new tasks (waiting up to wait_budget() to fill a batch), then decode one batch."""
        s = self.settings
        if time.monotonic() - self.last_maintained > self.maintain_every_s:
            self.admit(self.source.maintain(list(self.pool.tasks)))
            self.last_maintained = time.monotonic()
        idle = not self.pool.items
        self.admit(self.source.read(s.max_batch_size, 1.0 if idle else 0.0))
        deadline = time.monotonic() + self.wait_budget()
        while self.pool.items and self.should_wait(idle) and (left := deadline - time.monotonic()) > 0:
            self.admit(self.source.read(s.max_batch_size - self.pool.sentences, left))
        if self.pool.items:
            self.decode_next()

    def wait_budget(self) -> float:
        """Seconds to wait for more texts: max_wait_ms, or while the clients of the last batch come back,
        up to RETURN_WAIT of that batch's decoding time (a small price for a full next batch)."""
        wait = self.settings.max_wait_ms / 1000
        return max(wait, RETURN_WAIT * self.last_decode_s) if self.answered else wait

    def should_wait(self, idle: bool) -> bool:
        """Whether to wait (at most wait_budget()) for more texts before decoding.

        From idle, a first burst is gathered. After a batch, the clients it answered usually send their
        next request soon (tens to hundreds of milliseconds on a busy machine): waiting until as many
        requests came in since then keeps batches full, where decoding at once would let the load settle
        into half-full batches taking turns. Task.created is the API's clock; with Redis on several
        machines a skewed clock only makes this wait run to its budget.
        """
        s = self.settings
        if self.pool.sentences >= s.max_batch_size or self.pool.tokens() >= s.max_batch_tokens:
            return False
        if not self.answered:
            return idle
        came_back = sum(p.task.created >= self.answered_at for p in self.pool.tasks.values())
        return came_back < self.answered

    def admit(self, tasks: list[Task]) -> None:
        for task in tasks:
            if task.id in self.pool.tasks:
                continue  # redelivered while still in flight here
            translator = self.translators.get(task.model)
            if translator is None:
                self.source.finish(task, TaskResult(error=f"model {task.model!r} is not loaded on this worker"))
                continue
            try:
                ids = translator.encode(task.texts, truncate=task.truncate)
            except ModelError as e:
                self.source.finish(task, TaskResult(error=str(e)))
                continue
            self.pool.add(task, ids)
            self.source.started(task)

    def decode_next(self) -> None:
        s = self.settings
        batch = self.pool.next_batch(s.max_batch_tokens, s.max_batch_size)
        task = batch[0].task
        start = time.perf_counter()
        try:
            outputs, tokens = decode_batch(self.translators[task.model], batch)
        except (RuntimeError, ModelError) as e:  # a bug or out of memory: fail these tasks, keep serving
            log.exception("decoding failed")
            for t in {i.task.id: i.task for i in batch}.values():
                self.pool.drop(t.id)
                self.source.finish(t, TaskResult(error=f"decoding failed: {e}"))
            return
        self.last_decode_s = time.perf_counter() - start
        self.source.record_batch(len(batch), tokens, self.last_decode_s)
        for item, output in zip(batch, outputs, strict=True):
            self.pool.deliver(item, output)
        finished = self.pool.finished()
        self.answered = sum(p.task.kind == "request" for p in finished)
        self.answered_at = time.time()  # the clock of Task.created
        for pending in finished:
            self.source.finish(pending.task, TaskResult([o for o in pending.outputs if o is not None]))
        for t in {i.task.id: i.task for i in batch if i.task.kind == "job"}.values():
            if t.id in self.pool.tasks:
                self.source.progress(t, self.pool.tasks[t.id].done)
