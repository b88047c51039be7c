"""The worker loop, the same for the embedded queue and for Redis: one beam search per model and beam size
runs continuously; at every step, texts of newly read jobs take free rows (requests' first, background jobs'
filling what is left) and finished texts leave; a job is answered as soon as its last text is done.

The texts wait in a Pool, each an Item, until model.beam.Admission lets them join a running search."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from model.beam import Admission, BeamLoop, Sentence
from model.errors import ModelError
from model.output import Output
from model.segment import Segmented, joined
from model.translator import Source, Translator
from service.attention import maps_json
from service.queue.contract import Answer, Job, QueueUnavailable, WorkerQueue
from service.settings import ServiceSettings

log = logging.getLogger("service")
LoopKey = tuple[str, int]  # model, beam size (Item.loop_key)
PROGRESS_EVERY_S = 0.5  # how often a background job's progress is written
# Cancelled and abandoned jobs are asked about at most this often, not every step: from a worker process or on
# Redis, asking is a round trip (70 us to the API's process), some 4% of a step of one sentence's 4 rows.
ASK_UNWANTED_EVERY_S = 0.02
ADMIT_TOGETHER = 8  # while busy, texts join once 1/8 of max_batch_size can (as many waiting, as many rows free),
ADMIT_WAIT_STEPS = 3  # or after this many steps (model.beam.Admission)


@dataclass
class Item:
    """One segment of a job's texts (a sentence, model.segment), as the model reads it."""

    job: Job
    index: int  # among the job's segments, in order
    source: Source
    seq: int  # arrival order

    @property
    def ids(self) -> list[int]:
        return self.source.ids

    @property
    def tag(self) -> tuple[str, int]:
        """Its name in a BeamLoop."""
        return (self.job.id, self.index)

    @property
    def loop_key(self) -> LoopKey:
        """The running search it goes to: its model and beam size."""
        assert self.job.model is not None  # a job that no model reads is answered before it is pooled (admit)
        return (self.job.model, self.job.options.beam_size)


@dataclass
class Pending:
    """A job being worked on: its texts' segments and their outputs so far."""

    job: Job
    texts: list[Segmented]
    outputs: list[Output | None]  # one per segment
    decoded: int = 0  # segments with an output
    reported: float = 0.0  # when its progress was last reported (background jobs)

    @property
    def done(self) -> int:
        """Texts whose every segment is decoded."""
        ends = itertools.accumulate(len(t.spans) for t in self.texts)
        return sum(
            all(o is not None for o in self.outputs[end - len(t.spans) : end])
            for t, end in zip(self.texts, ends, strict=True)
        )

    def joined(self) -> list[Output]:
        """One output per text, from its segments' (model.segment.joined)."""
        done = iter(o for o in self.outputs if o is not None)
        return [joined(t, list(itertools.islice(done, len(t.spans)))) for t in self.texts]


@dataclass
class Pool:
    """Jobs in flight on one worker, and their texts waiting for a row."""

    jobs: dict[str, Pending] = field(default_factory=dict)
    waiting: list[Item] = field(default_factory=list)
    counter: itertools.count[int] = field(default_factory=itertools.count)

    def add(self, job: Job, texts: list[Segmented], sources: list[Source]) -> Pending:
        """Hold a job; its segments with nothing to translate (all kept: model.protect) are done at once."""
        outputs = [None if s.ids else s.kept_whole() for s in sources]
        pending = self.jobs[job.id] = Pending(job, texts, outputs, decoded=sum(o is not None for o in outputs))
        self.waiting += [Item(job, i, s, next(self.counter)) for i, s in enumerate(sources) if s.ids]
        return pending

    def take(self, fits: Callable[[Item], bool]) -> list[Item]:
        """Waiting texts in admission order (requests' first, then by arrival) for as long as each fits; the
        taken ones leave the waiting list. A text that does not fit stops the taking: nothing overtakes it."""
        self.waiting.sort(key=lambda i: (i.job.background, i.seq))
        taken: list[Item] = []
        for item in self.waiting:
            if not fits(item):
                break
            taken.append(item)
        self.waiting = self.waiting[len(taken) :]
        return taken

    def deliver(self, item: Item, output: Output) -> None:
        pending = self.jobs[item.job.id]
        pending.outputs[item.index] = output
        pending.decoded += 1

    def finished(self) -> list[Pending]:
        """Jobs whose every segment is decoded; removed from the pool."""
        out = [p for p in self.jobs.values() if p.decoded == len(p.outputs)]
        for p in out:
            del self.jobs[p.job.id]
        return out

    def drop(self, job_id: str) -> None:
        self.jobs.pop(job_id, None)
        self.waiting = [i for i in self.waiting if i.job.id != job_id]


class Worker:
    """Decodes jobs from a queue with the loaded translators."""

    def __init__(
        self,
        queue: WorkerQueue,
        translators: dict[str, Translator],
        settings: ServiceSettings,
        maintain_every_s: float = 2.0,
        ask_unwanted_every_s: float = ASK_UNWANTED_EVERY_S,
    ) -> None:
        self.queue = queue
        self.translators = translators
        self.settings = settings
        self.pool = Pool()
        self.loops: dict[LoopKey, BeamLoop] = {}
        self.live: dict[Hashable, Item] = {}  # the texts in the loops, by tag
        self.turn = 0  # round robin over the loops
        self.admission = self.new_admission()
        self.reported = (-1, -1)  # the load last told to the queue (busy)
        self.maintain_every_s = maintain_every_s
        self.last_maintained = 0.0
        self.ask_unwanted_every_s = ask_unwanted_every_s
        self.last_asked = -math.inf  # when the queue was last asked which jobs nobody waits for (prune)

    def new_admission(self) -> Admission:
        s = self.settings
        return Admission(s.max_batch_size, s.max_batch_tokens, s.max_batch_size // ADMIT_TOGETHER, ADMIT_WAIT_STEPS)

    def run(self, stop: threading.Event) -> None:
        """Work until stop is set; an unreachable queue is waited out, never fatal."""
        while not stop.is_set():
            try:
                self.step()
            except QueueUnavailable as e:
                log.warning("queue unavailable (%s); retrying", e)
                self.reset()  # what was in flight is redelivered once the queue is back
                stop.wait(1.0)
            except Exception as e:  # a bug must not stop the worker and leave requests waiting
                log.exception("worker step failed")
                self.fail_all(f"worker error ({type(e).__name__}); see the worker's log")

    def reset(self) -> None:
        self.pool, self.loops, self.live, self.reported = Pool(), {}, {}, (-1, -1)
        self.admission = self.new_admission()

    def fail_all(self, reason: str) -> None:
        """Answer every job in flight with an error and start over with nothing in flight."""
        pending = list(self.pool.jobs.values())
        self.reset()
        for p in pending:
            try:
                self.queue.finish(p.job, Answer(error=reason))
            except QueueUnavailable:
                return  # redelivered once the queue is back

    @property
    def sentences(self) -> int:
        """Texts in the loops."""
        return sum(len(loop) for loop in self.loops.values())

    def step(self) -> None:
        """Read new jobs (waiting for them only when there is nothing to do), let go of the unwanted ones,
        give free rows to waiting texts, then decode one step of one loop."""
        if time.monotonic() - self.last_maintained > self.maintain_every_s:
            self.admit(self.queue.maintain())
            self.last_maintained = time.monotonic()
        room = self.settings.max_batch_size - self.load()
        if room > 0:
            idle = not self.live and not self.pool.waiting
            self.admit(self.queue.read(room, 1.0 if idle else 0.0))
        self.prune()
        self.fill()
        self.report_busy()
        loops = [key for key, loop in self.loops.items() if loop]
        if loops:
            self.turn += 1
            self.decode_step(loops[self.turn % len(loops)])
            self.report_busy()

    def report_busy(self) -> None:
        """Tell the queue what is in flight, when it changed."""
        load = (len(self.pool.jobs), self.sentences + len(self.pool.waiting))
        if load != self.reported:
            self.queue.busy(*load)
            self.reported = load

    def load(self) -> int:
        """What limits reading new jobs: requests' texts in flight, plus one per background job held. Background
        texts waiting for rows do not hold back reading, so that a request behind a large job is read and goes
        first."""
        texts = itertools.chain(self.live.values(), self.pool.waiting)  # walked, not copied: every step reads it
        return sum(not i.job.background for i in texts) + sum(p.job.background for p in self.pool.jobs.values())

    def admit(self, jobs: list[Job]) -> None:
        """Encode new jobs' texts into the pool; a job that cannot be decoded here is answered at once."""
        for job in jobs:
            if job.id in self.pool.jobs:
                continue  # redelivered while still in flight here
            if job.model is None:  # already in the target language: no model reads it
                self.queue.finish(job, Answer([Output.as_it_is(t) for t in job.texts]))
                continue
            translator = self.translators.get(job.model)
            if translator is None:
                self.queue.finish(job, Answer(error=f"model {job.model!r} is not loaded on this worker"))
                continue
            try:
                languages = translator.languages(job.source_lang, job.target_lang)
                texts = translator.segment(job.texts, job.source_lang)
                sources = translator.encode_segments(texts, job.truncate, languages)
                job = dataclasses.replace(job, options=dataclasses.replace(job.options, target_prefix=languages.target))
            except ModelError as e:
                self.queue.finish(job, Answer(error=str(e)))
                continue
            pending = self.pool.add(job, texts, sources)
            if pending.decoded == len(pending.outputs):  # nothing to search (blank, or all kept): answered now
                self.pool.drop(job.id)
                self.queue.finish(job, Answer(pending.joined()))
                continue
            self.queue.started(job)

    def unwanted(self, jobs: list[Job]) -> set[str]:
        """Which of these jobs nobody waits for: past their deadline (every step), and cancelled or abandoned (the
        queue is asked at most every ask_unwanted_every_s)."""
        now = time.time()
        expired = {j.id for j in jobs if j.expired(now)}
        if time.monotonic() - self.last_asked < self.ask_unwanted_every_s:
            return expired
        self.last_asked = time.monotonic()
        return expired | self.queue.unwanted([j.id for j in jobs if j.id not in expired])

    def prune(self) -> None:
        """Let go of the jobs nobody waits for any more: their waiting texts and their rows in the loops."""
        gone = self.unwanted([p.job for p in self.pool.jobs.values()])
        if not gone:
            return
        tags = {tag for tag, item in self.live.items() if item.job.id in gone}
        for loop in self.loops.values():
            loop.drop(tags)
        for tag in tags:
            del self.live[tag]
        for job_id in gone:
            self.queue.drop(self.pool.jobs[job_id].job)
            self.pool.drop(job_id)

    def fill(self) -> None:
        """Give free rows to waiting texts, when model.beam.Admission says they may join and as many as fit:
        max_batch_size texts, and max_batch_tokens source tokens counting each loop's padding."""
        if not self.admission.due(self.sentences, len(self.pool.waiting)):
            return
        held = {key: (len(loop), loop.source_length) for key, loop in self.loops.items()}
        by_loop: dict[LoopKey, list[Item]] = {}
        for item in self.pool.take(lambda item: self.admission.fits(held, item.loop_key, len(item.ids))):
            by_loop.setdefault(item.loop_key, []).append(item)
        for key, items in by_loop.items():
            loop = self.loops.get(key)
            if loop is None:
                loop = self.loops[key] = self.translators[key[0]].loop(key[1], self.settings.max_batch_size)
            start = time.perf_counter()
            loop.admit([i.ids for i in items], [i.job.options for i in items], [i.tag for i in items])
            self.queue.record_admission(len(items), time.perf_counter() - start)
            self.live.update((i.tag, i) for i in items)

    def decode_step(self, key: LoopKey) -> None:
        """One step of one loop; answer the jobs whose last text finished."""
        loop, translator = self.loops[key], self.translators[key[0]]
        start, size = time.perf_counter(), len(loop)
        try:
            ended = loop.step()
        except (RuntimeError, ModelError) as e:  # a bug or out of memory: fail this loop's jobs, keep serving
            log.exception("decoding failed")
            self.fail_loop(key, f"decoding failed: {str(e)[:200]}")
            return
        self.queue.record_step(size, len(ended), time.perf_counter() - start)
        self.deliver(translator, ended)

    def deliver(self, translator: Translator, ended: list[Sentence]) -> None:
        """Each finished text's n-best list read into an Output; answer the jobs now complete, and report the
        progress of the background ones."""
        touched: dict[str, Job] = {}
        attention: dict[str, str] = {}  # a job's attention maps, of the hypothesis it asks for
        for sentence in ended:
            item = self.live.pop(sentence.tag)
            job, nbest = item.job, sentence.n_best()
            asked = job.attention is not None and job.attention.sentence == item.index  # of a one-text job
            chosen = min(job.attention.hypothesis, len(nbest) - 1) if job.attention is not None and asked else None
            output = Output([translator.read(item.source, h, j == chosen, job.align) for j, h in enumerate(nbest)])
            if job.attention is not None and chosen is not None:
                maps = output.hypotheses[chosen].attention
                assert maps is not None, "read with return_attention"
                attention[job.id] = maps_json(maps, job.attention)
            self.pool.deliver(item, output)
            touched[job.id] = job
        for pending in self.pool.finished():
            self.queue.finish(pending.job, Answer(pending.joined(), attention.get(pending.job.id)))
        now = time.monotonic()
        for job in touched.values():
            held = self.pool.jobs.get(job.id)
            if held is not None and job.background and now - held.reported > PROGRESS_EVERY_S:
                self.queue.progress(job, held.done)
                held.reported = now

    def fail_loop(self, key: LoopKey, reason: str) -> None:
        """Answer every job with a text in this loop with an error; the loop starts over empty."""
        del self.loops[key]
        failed = {item.job.id: item.job for item in self.live.values() if item.loop_key == key}
        self.live = {tag: item for tag, item in self.live.items() if item.job.id not in failed}
        for job in failed.values():
            self.pool.drop(job.id)
            self.queue.finish(job, Answer(error=reason))
