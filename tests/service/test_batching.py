"""Dynamic batching: how batches are cut, and many concurrent HTTP requests answered exactly as the
Translator answers each alone, in batches larger than one."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import httpx

from model.translator import Translator
from service.batcher import Pool
from service.tasks import Options, Task
from tests.conftest import make_sentences
from tests.service.conftest import Server


def pool_of(*tasks: tuple[Task, list[int]]) -> Pool:
    pool = Pool()
    for task, lengths in tasks:
        pool.add(task, [[5] * n for n in lengths])
    return pool


def test_batch_respects_token_budget_and_size() -> None:
    pool = pool_of((Task("m", ["x"] * 6), [10, 10, 10, 10, 10, 10]))
    assert len(pool.next_batch(max_tokens=35, max_size=8)) == 3  # 3 x 10 <= 35 < 4 x 10
    assert len(pool.next_batch(max_tokens=1000, max_size=2)) == 2
    assert len(pool.next_batch(max_tokens=1000, max_size=8)) == 1
    assert pool.items == []


def test_batch_counts_padding_and_groups_similar_lengths() -> None:
    pool = pool_of((Task("m", ["x"] * 6), [3, 30, 4, 31, 5, 29]))
    first = pool.next_batch(max_tokens=20, max_size=8)  # the oldest (3) with its nearest lengths
    assert sorted(len(i.ids) for i in first) == [3, 4, 5]
    second = pool.next_batch(max_tokens=100, max_size=8)
    assert sorted(len(i.ids) for i in second) == [29, 30, 31]


def test_batch_keeps_models_and_options_apart_and_requests_first() -> None:
    job = Task("m", ["x"] * 3, kind="job")
    other = Task("m", ["x"] * 2, Options(beam_size=2))
    request = Task("m", ["x"] * 2)
    pool = pool_of((job, [5, 5, 5]), (other, [5, 5]), (Task("n", ["x"]), [5]), (request, [5, 5]))
    first = pool.next_batch(100, 8)
    assert {i.task.id for i in first} == {other.id}  # the oldest request's group; the job waits
    second = pool.next_batch(100, 8)
    assert {i.task.model for i in second} == {"n"}
    third = pool.next_batch(100, 3)  # the request first; the job's texts fill the batch (same model, options)
    assert [i.task.id for i in third].count(request.id) == 2 and len(third) == 3
    assert {i.task.id for i in pool.next_batch(100, 8)} == {job.id}
    assert pool.items == []


def test_finished_tasks_leave_the_pool() -> None:
    task = Task("m", ["a", "b"])
    pool = pool_of((task, [4, 6]))
    batch = pool.next_batch(100, 1)
    from service.tasks import Hyp, Output
    pool.deliver(batch[0], Output([Hyp("t", 0.0, [])]))
    assert pool.finished() == []
    pool.deliver(pool.next_batch(100, 1)[0], Output([Hyp("u", 0.0, [])]))
    [done] = pool.finished()
    assert done.task is task and pool.tasks == {}


def batch_sizes(metrics: str) -> tuple[float, float]:
    """(batches, sentences) from /metrics."""
    count = float(re.search(r"^transformer_batch_size_count (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    total = float(re.search(r"^transformer_batch_size_sum (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    return count, total


async def post_all(url: str, texts: list[str], **options: object) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        return await asyncio.gather(*(client.post("/translate", json={"q": t, **options}) for t in texts))


def test_100_concurrent_requests_equal_translator_alone(serve: Callable[..., Server], models_dir: Path) -> None:
    server = serve(max_wait_ms=50)
    texts = make_sentences(100, seed=11, max_words=10)
    responses = asyncio.run(post_all(server.url, texts, max_length=8))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200][:3]
    translator = Translator.load(models_dir / "tiny-en-de", device="cpu")
    alone = [translator.translate([t], max_len_a=0.0, max_len_b=8)[0].text for t in texts]
    assert [r.json()["translatedText"] for r in responses] == alone
    batches, sentences = batch_sizes(httpx.get(f"{server.url}/metrics").text)
    assert sentences == 100  # one sentence per request, each decoded once
    assert batches < 50, f"{batches} batches for 100 requests: the batcher did not group them"
