"""The worker loop on the embedded queue: a failing step is answered with an error and the worker goes
on serving; an input too long for the worker's model fails its job, not the worker."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from model.beam import BeamLoop, Sentence
from model.config import DecodingConfig
from model.output import Hypothesis, Output
from model.translator import Translator
from service.queue.contract import Answer, Job
from service.queue.memory import MemoryQueue
from service.queue.worker import ADMIT_WAIT_STEPS, Worker
from service.settings import ServiceSettings, WorkerPlan

SHORT = DecodingConfig(max_len_a=0.0, max_len_b=5)


def serve_jobs(translator: Translator, jobs: list[Job], workers: int = 1, together: bool = False) -> list[Answer]:
    """Submit jobs to a MemoryQueue served by Worker threads; return their answers in order. One after another
    (each its own batch), or together: all submitted, then all waited for."""
    settings = ServiceSettings()
    queue = MemoryQueue(settings)
    queue.readers = workers
    stop = threading.Event()
    threads = [
        threading.Thread(target=Worker(queue, {"m": translator}, settings).run, args=(stop,), daemon=True)
        for _ in range(workers)
    ]
    for t in threads:
        t.start()

    async def go() -> list[Answer]:
        if together:
            for job in jobs:
                await queue.submit(job)
            return list(await asyncio.gather(*(queue.wait(job.id, 60) for job in jobs)))
        out = []
        for job in jobs:
            await queue.submit(job)
            out.append(await queue.wait(job.id, 60))
        return out

    try:
        return asyncio.run(go())
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)


def test_a_bug_in_a_step_fails_its_jobs_and_the_worker_goes_on(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    translator = Translator.load(models_dir / "tiny-en-de", device="cpu")
    real_loop, calls = translator.loop, []

    def flaky(beam_size: int, max_sentences: int | None = None) -> BeamLoop:
        loop = real_loop(beam_size, max_sentences)
        real_step = loop.step

        def step() -> list[Sentence]:
            calls.append(1)
            if len(calls) == 1:
                raise KeyError("a bug")
            return real_step()

        monkeypatch.setattr(loop, "step", step)
        return loop

    monkeypatch.setattr(translator, "loop", flaky)
    first, second = serve_jobs(translator, [Job("m", ["kalo mine"], SHORT), Job("m", ["kalo mine"], SHORT)])
    assert first.error is not None and "KeyError" in first.error and first.outputs == []
    assert second.error is None
    assert (
        second.outputs[0].hypotheses[0].text == translator.translate(["kalo mine"], max_len_a=0.0, max_len_b=5)[0].text
    )


def test_unknown_model_and_too_long_input_fail_only_their_job(models_dir: Path) -> None:
    translator = Translator.load(models_dir / "tiny-en-de", device="cpu")
    results = serve_jobs(
        translator,
        [Job("other", ["kalo"], SHORT), Job("m", ["kalo mine ruza " * 40], SHORT), Job("m", ["kalo"], SHORT)],
    )
    assert "not loaded on this worker" in (results[0].error or "")
    assert "limit of 64" in (results[1].error or "")
    assert results[2].error is None and len(results[2].outputs) == 1


def test_memory_queue_forgets_answered_requests_and_keeps_ended_jobs_for_their_ttl() -> None:
    queue = MemoryQueue(ServiceSettings(result_ttl_s=1, max_queue=3))
    request, first, second = Job("m", ["a"]), Job("m", ["b"], background=True), Job("m", ["c"], background=True)
    answer = Answer([Output([Hypothesis([5], -1.0, -1.0, "A", ["A"])])])

    async def go() -> None:
        for job in (request, first, second):
            await queue.submit(job)
        assert (await queue.stats())["queued"] == 3
        from service.errors import QueueFull

        with pytest.raises(QueueFull):
            await queue.submit(Job("m", ["d"]))
        assert queue.read(3, 0) == [request, first, second]
        queue.finish(request, answer)
        assert await queue.wait(request.id, 1) == answer
        assert request.id not in queue.entries  # answered: nothing kept
        queue.finish(first, Answer(error="x"))
        assert (await queue.info(first.id, None)) is not None
        assert (await queue.info(first.id, "someone else")) is None  # a job belongs to its owner
        await asyncio.sleep(1.1)
        assert await queue.info(first.id, None) is None  # expired
        assert await queue.info(second.id, None) is not None  # still running: never expires

    asyncio.run(go())


def test_a_burst_of_answers_wakes_the_event_loop_once() -> None:
    """Each answer set its waiter's event with a call_soon_threadsafe of its own: a write to the loop's self-pipe,
    which lets go of the GIL. A worker thread that answers five jobs in a row now wakes the loop once, and every
    waiter gets its own answer."""
    queue = MemoryQueue(ServiceSettings())
    jobs = [Job("m", [f"text {i}"]) for i in range(5)]

    async def go() -> tuple[list[Answer], int]:
        loop = asyncio.get_running_loop()
        calls = 0
        plain = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return plain(*args, **kwargs)

        loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
        for job in jobs:
            await queue.submit(job)
        waiting = [asyncio.create_task(queue.wait(job.id, 10.0)) for job in jobs]
        await asyncio.sleep(0)  # each waiter has registered its event
        worker = threading.Thread(
            target=lambda: [queue.finish(j, Answer(error=j.texts[0])) for j in queue.read(5, 0.0)]
        )
        worker.start()
        worker.join()  # the loop is held here: every answer comes before it can run
        answers = await asyncio.gather(*waiting)
        return answers, calls

    answers, calls = asyncio.run(go())
    assert [a.error for a in answers] == [f"text {i}" for i in range(5)] and calls == 1


def test_under_load_texts_join_several_at_a_time_not_one_per_freed_row(models_dir: Path) -> None:
    """Every admission encodes its texts together at a cost of milliseconds whatever it holds: when one row of a
    full loop frees up while many texts wait, they wait (a few steps at most) for more rows, then join together."""
    translator = Translator.load(models_dir / "tiny-en-de", device="cpu")
    settings = ServiceSettings(max_batch_size=16)  # texts join 16 // ADMIT_TOGETHER = 2 at a time
    queue = MemoryQueue(settings)
    worker = Worker(queue, {"m": translator}, settings)
    worker.admit([Job("m", [f"kalo mine {i}" for i in range(30)], SHORT)])
    worker.fill()  # an empty loop takes what fits at once
    [loop] = worker.loops.values()
    assert len(loop) == 16 and len(worker.pool.waiting) == 14

    def finish(n: int) -> None:  # n texts leave the loop, as when their searches end
        tags = [s.tag for s in loop.sentences[:n]]
        loop.drop(set(tags))
        for tag in tags:
            del worker.live[tag]

    finish(1)
    for _ in range(ADMIT_WAIT_STEPS):
        worker.fill()
        assert len(loop) == 15  # one row free: waiting for another rather than encoding a single text
    worker.fill()
    assert len(loop) == 16  # but not for long
    finish(2)
    worker.fill()
    assert len(loop) == 16 and len(worker.pool.waiting) == 11  # two rows free: both taken at once
    assert queue.counters["admissions_total"] == 3 and queue.counters["admitted_texts_total"] == 19


def test_workers_sharing_a_queue_split_a_burst_and_answer_as_each_text_alone(models_dir: Path) -> None:
    translator = Translator.load(models_dir / "tiny-en-de", device="cpu")
    texts = [f"kalo mine {i} tavu" for i in range(24)]
    jobs = [Job("m", [t], SHORT) for t in texts]
    stepped: set[int] = set()
    record_step = MemoryQueue.record_step

    def recorded(queue: MemoryQueue, sentences: int, finished: int, seconds: float) -> None:
        stepped.add(threading.get_ident())  # which worker thread decoded
        record_step(queue, sentences, finished, seconds)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MemoryQueue, "record_step", recorded)
        answers = serve_jobs(translator, jobs, workers=2, together=True)
    alone = translator.translate(texts, SHORT, max_batch_size=1)
    assert [a.outputs[0].text for a in answers] == [o.text for o in alone]
    assert len(stepped) == 2  # both workers took part of the burst


def test_a_read_takes_its_share_of_what_is_queued() -> None:
    queue = MemoryQueue(ServiceSettings())
    queue.readers = 2

    async def submit(n: int) -> None:
        for i in range(n):
            await queue.submit(Job("m", [f"text {i}"], SHORT))

    asyncio.run(submit(10))
    assert [len(queue.read(32, 0.0)) for _ in range(5)] == [5, 3, 1, 1, 0]  # ceil(queued / readers), at least 1
    asyncio.run(submit(10))
    assert len(queue.read(2, 0.0)) == 2  # and never more than the worker has room for


@pytest.mark.parametrize(
    ("settings", "beside_api", "plan"),
    [
        ({"device": "cpu", "threads": 2}, False, WorkerPlan(2, 1)),  # a worker process: one per thread, one each
        # beside the API: child processes, one per thread, unless threads are asked for (one search on every core)
        ({"device": "cpu", "threads": 2, "worker_processes": None}, True, WorkerPlan(2, 1, processes=True)),
        ({"device": "cpu", "threads": 2, "worker_processes": False}, True, WorkerPlan(1, 2)),
        ({"device": "cpu", "threads": 4, "workers": 2, "worker_processes": False}, True, WorkerPlan(2, 2)),
        ({"device": "cpu", "threads": 2, "workers": 1}, False, WorkerPlan(1, 2)),
        ({"device": "cpu", "threads": 2, "workers": 3}, False, WorkerPlan(3, 1)),  # never fewer than one thread
        ({"device": "cuda", "threads": 2}, False, WorkerPlan(1, 2, allocator="system")),  # one per GPU unless asked
        # one copy of the weights; the allocator's gain is the CPU's steps, so auto keeps the system's on CUDA
        ({"device": "cuda", "threads": 2, "worker_processes": None}, True, WorkerPlan(1, 2, allocator="system")),
        ({"device": "cuda", "allocator": "jemalloc"}, False, WorkerPlan(1, None, allocator="jemalloc")),
        ({"device": "cpu", "threads": 1, "allocator": "system"}, False, WorkerPlan(1, 1, allocator="system")),
    ],
)
def test_worker_plan(settings: dict[str, object], beside_api: bool, plan: WorkerPlan) -> None:
    assert ServiceSettings(**settings).worker_plan(beside_api) == plan


def test_cancelled_jobs_are_asked_about_every_interval_and_expired_ones_every_step(models_dir: Path) -> None:
    """Asking the queue which jobs were cancelled is a round trip from a worker process or on Redis: the worker
    asks at most every ask_unwanted_every_s, while deadlines, which it reads itself, are checked every step."""
    translator = Translator.load(models_dir / "tiny-en-de", device="cpu")
    settings = ServiceSettings()
    queue = MemoryQueue(settings)
    asked: list[list[str]] = []
    unwanted = queue.unwanted

    def counted(job_ids: list[str]) -> set[str]:
        asked.append(job_ids)
        return unwanted(job_ids)

    queue.unwanted = counted  # type: ignore[method-assign]
    worker = Worker(queue, {"m": translator}, settings, ask_unwanted_every_s=3600)
    cancelled, late, kept = (Job("m", ["kalo mine tavu"], SHORT, background=True) for _ in range(3))

    async def go() -> None:
        for job in (cancelled, late, kept):
            await queue.submit(job)
        worker.admit(queue.read(3, 0.0))
        worker.prune()  # the first prune asks
        assert len(asked) == 1 and set(worker.pool.jobs) == {cancelled.id, late.id, kept.id}
        await queue.cancel(cancelled.id, None)
        worker.pool.jobs[late.id].job = dataclasses.replace(late, deadline=time.time() - 1)
        worker.prune()  # within the interval: not asked, yet the job past its deadline is let go
        assert len(asked) == 1 and set(worker.pool.jobs) == {cancelled.id, kept.id}
        worker.ask_unwanted_every_s = 0.0
        worker.prune()  # asked again: the cancelled job is let go
        assert len(asked) == 2 and set(worker.pool.jobs) == {kept.id}

    asyncio.run(go())


def test_job_ids_are_random_128_bit_hex_and_differ_in_a_forked_child() -> None:
    import os

    ids = [Job("m", ["x"]).id for _ in range(600)]  # past one read of the random source (256 ids)
    assert len(set(ids)) == 600 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, written back
        os.write(write, " ".join(Job("m", ["x"]).id for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 4096).decode().split()
    os.close(read)
    mine = [Job("m", ["x"]).id for _ in range(3)]
    assert len(child) == 3 and not set(child) & set(mine)
