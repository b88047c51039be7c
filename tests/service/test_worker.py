"""The worker loop on the embedded queue: a failing batch is answered with an error and the worker goes
on serving; an input too long for the worker's model fails its task, not the worker."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from model.translator import Translator
from service.queue import MemoryQueue
from service.settings import ServiceSettings
from service.tasks import Options, Task, TaskResult
from service.worker import Worker

SHORT = Options(max_len_a=0.0, max_len_b=5)


def serve_tasks(translator: Translator, tasks: list[Task]) -> list[TaskResult]:
    """Submit tasks to a MemoryQueue served by a Worker thread; return their results in order."""
    settings = ServiceSettings(max_wait_ms=0)
    queue = MemoryQueue(settings)
    stop = threading.Event()
    thread = threading.Thread(target=Worker(queue, {"m": translator}, settings).run, args=(stop,), daemon=True)
    thread.start()

    async def go() -> list[TaskResult]:
        out = []
        for task in tasks:  # one after another, so each is its own batch
            await queue.submit(task)
            out.append(await queue.wait(task.id, 60))
        return out
    try:
        return asyncio.run(go())
    finally:
        stop.set()
        thread.join(timeout=10)


def test_a_bug_in_one_batch_fails_its_tasks_and_the_worker_goes_on(models_dir: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    translator = Translator.load(models_dir / "tiny-en-de", device="cpu")
    real_search, calls = translator.search, []

    def flaky(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("a bug")
        return real_search(*args, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setattr(translator, "search", flaky)
    first, second = serve_tasks(translator, [Task("m", ["kalo mine"], SHORT), Task("m", ["kalo mine"], SHORT)])
    assert first.error is not None and "KeyError" in first.error and first.outputs == []
    assert second.error is None
    assert second.outputs[0].hypotheses[0].text == translator.translate(["kalo mine"], max_len_a=0.0,
                                                                        max_len_b=5)[0].text


def test_unknown_model_and_too_long_input_fail_only_their_task(models_dir: Path) -> None:
    translator = Translator.load(models_dir / "tiny-en-de", device="cpu")
    results = serve_tasks(translator, [Task("other", ["kalo"], SHORT), Task("m", ["kalo mine ruza " * 40], SHORT),
                                       Task("m", ["kalo"], SHORT)])
    assert "not loaded on this worker" in (results[0].error or "")
    assert "limit of 64" in (results[1].error or "")
    assert results[2].error is None and len(results[2].outputs) == 1


def test_memory_queue_counts_active_tasks_and_forgets_ended_ones_after_their_ttl() -> None:
    queue = MemoryQueue(ServiceSettings(result_ttl_s=1, max_queue=2))
    first, second = Task("m", ["a"]), Task("m", ["b"])

    async def go() -> None:
        await queue.submit(first)
        await queue.submit(second)
        assert await queue.depth() == 2
        from service.errors import QueueFull
        with pytest.raises(QueueFull):
            await queue.submit(Task("m", ["c"]))
        assert queue.read(2, 0) == [first, second]
        queue.finish(first, TaskResult(error="x"))
        assert await queue.depth() == 1
        assert (await queue.state(first.id)) is not None
        await asyncio.sleep(1.1)
        assert await queue.state(first.id) is None  # expired
        assert await queue.state(second.id) is not None  # still running: never expires
    asyncio.run(go())
