"""Attacks and accidents in Redis mode, on private real redis-servers with real `transformer worker`
processes: a result too large for Redis, redeliveries of every kind, batches longer than the claim-idle
time, cancelled jobs, rate limits shared by API processes, Redis restarts and outages."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from service.queue.keys import Keys
from tests.conftest import make_sentences
from tests.service.conftest import REDIS_SERVER, RedisServer, Server, Workers, wait_until
from tests.service.test_redis import running_on, wait_workers

KEY = "key-a-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
FAST = {"TRANSFORMER_CLAIM_IDLE_MS": "1500"}  # workers beat every 0.5 s; an entry idle 1.5 s is reclaimed


@pytest.fixture
def small_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis that takes no value over 1 MiB (its smallest proto-max-bulk-len)."""
    if REDIS_SERVER is None:
        pytest.fail("redis-server is not installed; .ci/run installs it")
    server = RedisServer(tmp_path, "--proto-max-bulk-len", "1mb")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def heavy_workers(heavy_dir: Path, redis_server: RedisServer, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(heavy_dir, redis_server.url, tmp_path)
    yield w
    w.stop_all()


def stats(redis_server: RedisServer) -> dict[str, float]:
    return {k.decode(): float(v) for k, v in redis_server.client().hgetall(Keys().stats).items()}


def test_a_result_too_large_for_redis_fails_once_and_is_dead_lettered(
    serve_heavy: Callable[..., Server], small_redis: RedisServer, heavy_dir: Path, tmp_path: Path
) -> None:
    server = serve_heavy(redis_url=small_redis.url, max_attention_cells=10**8)
    workers = Workers(heavy_dir, small_redis.url, tmp_path)
    try:
        workers.start("w")
        wait_workers(small_redis, 1)
        r = httpx.post(
            f"{server.url}/attention",
            json={"q": make_sentences(1, seed=40, min_words=60, max_words=60)[0], "model": "long", "max_length": 100},
            timeout=120,
        )
        err = r.json()["error"]
        assert r.status_code == 413 and err["code"] == "result_too_large", r.text[:300]
        assert "bytes, more than the queue takes" in err["message"]
        client = small_redis.client()
        dead = client.xrange(Keys().dead)
        assert len(dead) == 1 and b"more than the queue takes" in dead[0][1][b"reason"]
        assert client.xlen(Keys().stream) == 0
        # The worker is still serving, and never lost its connection over the result.
        ok = httpx.post(f"{server.url}/translate", json={"q": "kalo", "model": "long", "max_length": 3}, timeout=60)
        assert ok.status_code == 200, ok.text
        log = (tmp_path / "w.log").read_text()
        assert "queue unavailable" not in log and log.count("more than the queue takes") == 1
    finally:
        workers.stop_all()


def test_a_replay_after_a_restart_counts_as_a_delivery(
    serve_heavy: Callable[..., Server], redis_server: RedisServer, heavy_workers: Workers
) -> None:
    server = serve_heavy(redis_url=redis_server.url, max_job_cost=10**12)
    env = {"TRANSFORMER_MAX_DELIVERIES": "1", "TRANSFORMER_MAX_BATCH_SIZE": "2"}
    first = heavy_workers.start("same-name", **env)
    wait_workers(redis_server, 1)
    texts = make_sentences(8, seed=41, min_words=20, max_words=25)
    job = httpx.post(f"{server.url}/jobs", json={"texts": texts, "model": "slow", "max_length": 300}).json()
    wait_until(lambda: running_on(redis_server, job["id"]) == "same-name", 60, 0.01)
    first.send_signal(signal.SIGKILL)
    first.wait()
    heavy_workers.start("same-name", **env)  # reads its own pending entry again, as after an outage
    wait_until(lambda: httpx.get(f"{server.url}/jobs/{job['id']}").json()["status"] == "failed", 60, 0.2)
    assert "delivered 2 times" in httpx.get(f"{server.url}/jobs/{job['id']}").json()["error"]
    dead = redis_server.client().xrange(Keys().dead)
    assert len(dead) == 1 and b"delivered 2 times" in dead[0][1][b"reason"]


def test_a_batch_longer_than_the_claim_idle_time_is_decoded_once(
    serve_heavy: Callable[..., Server], redis_server: RedisServer, heavy_workers: Workers
) -> None:
    server = serve_heavy(redis_url=redis_server.url, max_job_cost=10**12)
    heavy_workers.start("w1", TRANSFORMER_MAX_BATCH_SIZE="8", **FAST)
    heavy_workers.start("w2", TRANSFORMER_MAX_BATCH_SIZE="8", **FAST)
    wait_workers(redis_server, 2)
    texts = make_sentences(8, seed=42, min_words=20, max_words=25)
    start = time.monotonic()
    job = httpx.post(
        f"{server.url}/jobs", json={"texts": texts, "model": "slow", "beam_size": 8, "max_length": 400}
    ).json()  # 2.5 s at 200 on an AVX-512 core
    wait_until(lambda: httpx.get(f"{server.url}/jobs/{job['id']}").json()["status"] == "done", 180, 0.2)
    took = time.monotonic() - start
    assert took > 3.0, f"the batch took {took:.1f} s: too short to test reclaiming (claim idle 1.5 s)"
    client = redis_server.client()
    assert client.hget(Keys().job(job["id"]), "deliveries") == b"1"  # never reclaimed from its live worker
    assert stats(redis_server)["texts_decoded_total"] == 8  # decoded once


def test_a_cancelled_job_is_dropped_by_its_worker(
    serve_heavy: Callable[..., Server], redis_server: RedisServer, heavy_workers: Workers
) -> None:
    server = serve_heavy(redis_url=redis_server.url, max_job_cost=10**12, api_keys=KEY)
    heavy_workers.start("w", TRANSFORMER_MAX_BATCH_SIZE="4", **FAST)
    wait_workers(redis_server, 1)
    texts = make_sentences(64, seed=43, min_words=20, max_words=25)
    job = httpx.post(
        f"{server.url}/jobs", json={"texts": texts, "model": "slow", "max_length": 300}, headers=AUTH
    ).json()
    wait_until(lambda: running_on(redis_server, job["id"]) == "w", 60, 0.05)
    wait_until(lambda: "transformer_in_flight_jobs 1" in httpx.get(f"{server.url}/metrics", headers=AUTH).text, 10)
    assert httpx.delete(f"{server.url}/jobs/{job['id']}", headers=AUTH).status_code == 200
    client = redis_server.client()
    wait_until(lambda: client.xlen(Keys().stream) == 0, 30, 0.1)  # the worker let go of it
    wait_until(lambda: "transformer_in_flight_jobs 0" in httpx.get(f"{server.url}/metrics", headers=AUTH).text, 10)
    batches = stats(redis_server).get("batches_total", 0.0)  # no more steps once let go
    time.sleep(1.5)
    assert stats(redis_server).get("batches_total", 0.0) == batches
    assert httpx.get(f"{server.url}/jobs/{job['id']}", headers=AUTH).json()["status"] == "cancelled"


def test_rate_limits_are_token_buckets_shared_by_api_processes(
    serve_heavy: Callable[..., Server], redis_server: RedisServer
) -> None:
    one = serve_heavy(redis_url=redis_server.url, api_keys=f"{KEY}:2")
    two = serve_heavy(redis_url=redis_server.url, api_keys=f"{KEY}:2")
    assert httpx.get(f"{one.url}/models", headers=AUTH).status_code == 200
    assert httpx.get(f"{two.url}/models", headers=AUTH).status_code == 200
    r = httpx.get(f"{one.url}/models", headers=AUTH)
    assert r.status_code == 429 and 25 <= int(r.headers["retry-after"]) <= 30
    wrong = {"Authorization": "Bearer not-the-key-0123456789"}
    for _ in range(10):  # ten failures a minute per address, counted in Redis too
        assert httpx.get(f"{two.url}/models", headers=wrong).status_code == 401
    assert httpx.get(f"{one.url}/models", headers=AUTH).status_code == 429


def test_outages_name_no_address_and_a_restart_costs_no_request(
    serve: Callable[..., Server], redis_server: RedisServer, workers: Workers
) -> None:
    server = serve(redis_url=redis_server.url)
    workers.start("w")
    wait_workers(redis_server, 1)
    body = {"q": "kalo mine", "max_length": 5}
    assert httpx.post(f"{server.url}/translate", json=body, timeout=30).status_code == 200
    redis_server.stop()
    r = httpx.post(f"{server.url}/translate", json=body, timeout=30)
    assert r.status_code == 503
    ready = httpx.get(f"{server.url}/readyz", timeout=30)
    for text in (r.text, ready.text, httpx.get(f"{server.url}/metrics").text):
        assert "127.0.0.1" not in text and str(redis_server.port) not in text, text[:300]
    redis_server.start()
    # The API's pooled connections are stale now; the first request retries on a new one.
    r = httpx.post(f"{server.url}/translate", json=body, timeout=60)
    assert r.status_code == 200, r.text

    async def many() -> list[int]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            return [x.status_code for x in await asyncio.gather(*(client.get("/models") for _ in range(20)))]

    assert asyncio.run(many()) == [200] * 20
