"""The worker loop, the same for the embedded queue and for Redis: one beam search per model and beam size
runs continuously; at every step, texts of newly read tasks take free rows (requests first, job texts
filling what is left) and finished texts leave; a task is answered as soon as its last text is done."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable

from model.beam import BeamLoop, Sentence
from model.errors import ModelError
from model.translator import Translator
from service.batcher import Item, Pool, output_of
from service.queue import SourceUnavailable, WorkSource
from service.settings import ServiceSettings
from service.tasks import Task, TaskResult

log = logging.getLogger("service")
LoopKey = tuple[str, int]  # model, beam size (Item.loop_key)
PROGRESS_EVERY_S = 0.5  # how often a job's progress is written
ADMIT_TOGETHER = 8  # while busy, texts join once 1/8 of max_batch_size can (as many waiting, as many rows free),
ADMIT_WAIT_STEPS = 3  # or after this many steps


class Worker:
    """Decodes tasks from a source with the loaded translators."""

    def __init__(
        self,
        source: WorkSource,
        translators: dict[str, Translator],
        settings: ServiceSettings,
        maintain_every_s: float = 2.0,
    ) -> None:
        self.source = source
        self.translators = translators
        self.settings = settings
        self.pool = Pool()
        self.loops: dict[LoopKey, BeamLoop] = {}
        self.live: dict[Hashable, Item] = {}  # the texts in the loops, by tag
        self.turn = 0  # round robin over the loops
        self.deferred = 0  # steps since waiting texts could have joined
        self.reported = (-1, -1)  # the load last told to the source (busy)
        self.maintain_every_s = maintain_every_s
        self.last_maintained = 0.0

    def run(self, stop: threading.Event) -> None:
        """Work until stop is set; an unreachable queue is waited out, never fatal."""
        while not stop.is_set():
            try:
                self.step()
            except SourceUnavailable as e:
                log.warning("queue unavailable (%s); retrying", e)
                self.reset()  # what was in flight is redelivered once the queue is back
                stop.wait(1.0)
            except Exception as e:  # a bug must not stop the worker and leave requests waiting
                log.exception("worker step failed")
                self.fail_all(f"worker error ({type(e).__name__}); see the worker's log")

    def reset(self) -> None:
        self.pool, self.loops, self.live, self.reported = Pool(), {}, {}, (-1, -1)

    def fail_all(self, reason: str) -> None:
        """Answer every task in flight with an error and start over with nothing in flight."""
        pending = list(self.pool.tasks.values())
        self.reset()
        for p in pending:
            try:
                self.source.finish(p.task, TaskResult(error=reason))
            except SourceUnavailable:
                return  # redelivered once the queue is back

    @property
    def sentences(self) -> int:
        """Texts in the loops."""
        return sum(len(loop) for loop in self.loops.values())

    def step(self) -> None:
        """Read new tasks (waiting for them only when there is nothing to do), let go of the unwanted ones,
        give free rows to waiting texts, then decode one step of one loop."""
        s = self.settings
        if time.monotonic() - self.last_maintained > self.maintain_every_s:
            self.admit(self.source.maintain())
            self.last_maintained = time.monotonic()
        room = s.max_batch_size - self.load()
        if room > 0:
            idle = not self.live and not self.pool.waiting
            self.admit(self.source.read(room, 1.0 if idle else 0.0))
        self.prune()
        self.fill()
        self.report_busy()
        loops = [key for key, loop in self.loops.items() if loop]
        if loops:
            self.turn += 1
            self.decode_step(loops[self.turn % len(loops)])
            self.report_busy()

    def report_busy(self) -> None:
        """Tell the source what is in flight, when it changed."""
        load = (len(self.pool.tasks), self.sentences + len(self.pool.waiting))
        if load != self.reported:
            self.source.busy(*load)
            self.reported = load

    def load(self) -> int:
        """What limits reading new tasks: request texts in flight, plus one per job held. Job texts waiting for
        rows do not hold back reading, so that a request behind a large job is read and goes first."""
        requests = sum(i.interactive for i in self.live.values()) + sum(i.interactive for i in self.pool.waiting)
        return requests + sum(p.task.kind == "job" for p in self.pool.tasks.values())

    def admit(self, tasks: list[Task]) -> None:
        """Encode new tasks' texts into the pool; a task that cannot be decoded here is answered at once."""
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
            if not ids:  # the API never sends one; answered rather than held forever
                self.source.finish(task, TaskResult([]))
                continue
            self.pool.add(task, ids)
            self.source.started(task)

    def unwanted(self, tasks: list[Task]) -> set[str]:
        """Which of these tasks nobody waits for: past their deadline, cancelled, abandoned."""
        now = time.time()
        expired = {t.id for t in tasks if t.expired(now)}
        return expired | self.source.unwanted([t.id for t in tasks if t.id not in expired])

    def prune(self) -> None:
        """Let go of the tasks nobody waits for any more: their waiting texts and their rows in the loops."""
        gone = self.unwanted([p.task for p in self.pool.tasks.values()])
        if not gone:
            return
        tags = {tag for tag, item in self.live.items() if item.task.id in gone}
        for loop in self.loops.values():
            loop.drop(tags)
        for tag in tags:
            del self.live[tag]
        for task_id in gone:
            self.source.drop(self.pool.tasks[task_id].task)
            self.pool.drop(task_id)

    def fill(self) -> None:
        """Give free rows to waiting texts within the budgets: max_batch_size texts, and max_batch_tokens
        source tokens counting each loop's padding.

        An admission costs some milliseconds whatever it holds (encoding one text takes most of the time of
        encoding several), so while the loops are busy, texts join once a few can (1/ADMIT_TOGETHER of
        max_batch_size are waiting and as many rows are free) or after ADMIT_WAIT_STEPS steps: under load, when
        one or two rows free up at a step, not one or two texts at every step."""
        s = self.settings
        count = self.sentences
        free = s.max_batch_size - count
        few = min(len(self.pool.waiting), free) < max(1, s.max_batch_size // ADMIT_TOGETHER)
        if count and few and self.deferred < ADMIT_WAIT_STEPS:
            self.deferred += 1
            return
        self.deferred = 0
        tokens = {key: (len(loop), loop.source_length) for key, loop in self.loops.items()}

        def fits(item: Item) -> bool:
            nonlocal count
            key = item.loop_key
            n, longest = tokens.get(key, (0, 0))
            longest = max(longest, len(item.ids))
            other = sum(a * b for k, (a, b) in tokens.items() if k != key)
            if count + 1 > s.max_batch_size or (count and other + (n + 1) * longest > s.max_batch_tokens):
                return False
            count += 1
            tokens[key] = (n + 1, longest)
            return True

        by_loop: dict[LoopKey, list[Item]] = {}
        for item in self.pool.take(fits):
            by_loop.setdefault(item.loop_key, []).append(item)
        for key, items in by_loop.items():
            loop = self.loops.get(key)
            if loop is None:
                loop = self.loops[key] = self.translators[key[0]].loop(key[1], s.max_batch_size)
            start = time.perf_counter()
            loop.admit([i.ids for i in items], [i.task.options for i in items], [i.tag for i in items])
            self.source.record_admission(len(items), time.perf_counter() - start)
            self.live.update((i.tag, i) for i in items)

    def decode_step(self, key: LoopKey) -> None:
        """One step of one loop; answer the tasks whose last text finished."""
        loop, translator = self.loops[key], self.translators[key[0]]
        start, size = time.perf_counter(), len(loop)
        try:
            ended = loop.step()
        except (RuntimeError, ModelError) as e:  # a bug or out of memory: fail this loop's tasks, keep serving
            log.exception("decoding failed")
            self.fail_loop(key, f"decoding failed: {str(e)[:200]}")
            return
        self.source.record_batch(size, len(ended), time.perf_counter() - start)
        self.deliver(translator, ended)

    def deliver(self, translator: Translator, ended: list[Sentence]) -> None:
        touched: dict[str, Task] = {}
        for sentence in ended:
            item = self.live.pop(sentence.tag)
            self.pool.deliver(item, output_of(translator, item, sentence.n_best()))
            touched[item.task.id] = item.task
        for pending in self.pool.finished():
            self.source.finish(pending.task, TaskResult([o for o in pending.outputs if o is not None]))
        now = time.monotonic()
        for task in touched.values():
            job = self.pool.tasks.get(task.id)
            if job is not None and task.kind == "job" and now - job.reported > PROGRESS_EVERY_S:
                self.source.progress(task, job.done)
                job.reported = now

    def fail_loop(self, key: LoopKey, reason: str) -> None:
        """Answer every task with a text in this loop with an error; the loop starts over empty."""
        del self.loops[key]
        failed = {item.task.id: item.task for item in self.live.values() if item.loop_key == key}
        self.live = {tag: item for tag, item in self.live.items() if item.task.id not in failed}
        for task in failed.values():
            self.pool.drop(task.id)
            self.source.finish(task, TaskResult(error=reason))
