"""Redis mode on a real (private) redis-server with real `transformer worker` processes: batching across
workers, a worker killed mid-batch, a job that keeps killing workers, Redis restarted under load."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import docx
import httpx
import pytest
import redis
import uvicorn

from model.output import Hypothesis, Output
from model.translator import Translator
from service.api.app import create_app
from service.queue import counters, redis_api, scripts
from service.queue.contract import Answer, Job
from service.queue.keys import Keys
from service.queue.redis_worker import RedisWorkerQueue
from service.settings import ServiceSettings
from tests.conftest import make_sentences
from tests.service.conftest import RedisServer, Server, Workers, free_port, wait_until
from tests.service.test_batching import batch_sizes, post_all
from tests.service.test_hardening import metric, post_and_hang_up

FAST_RECLAIM = {"TRANSFORMER_CLAIM_IDLE_MS": "1500"}  # workers beat every 0.5 s, reclaim after 1.5 s idle


@pytest.fixture(scope="module")
def translator(models_dir: Path) -> Translator:
    return Translator.load(models_dir / "tiny-en-de", device="cpu")


def wait_workers(r: RedisServer, n: int) -> None:
    client = r.client()
    wait_until(lambda: len(client.keys(Keys().workers_pattern())) >= n, timeout=60, every=0.2)


def test_concurrent_requests_through_two_workers(
    serve: Callable[..., Server], redis_server: RedisServer, workers: Workers, translator: Translator
) -> None:
    server = serve(redis_url=redis_server.url)
    workers.start("w1")
    workers.start("w2")
    wait_workers(redis_server, 2)
    texts = make_sentences(100, seed=21, max_words=10)
    responses = asyncio.run(post_all(server.url, texts, max_length=8))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200][:3]
    alone = [translator.translate([t], max_len_a=0.0, max_len_b=8)[0].text for t in texts]
    assert [r.json()["translatedText"] for r in responses] == alone
    metrics = httpx.get(f"{server.url}/metrics").text
    steps, text_steps = batch_sizes(metrics)
    assert "transformer_texts_decoded_total 100" in metrics  # each text decoded once
    assert "transformer_admitted_texts_total 100" in metrics  # and joined a search once
    assert text_steps / steps > 2, f"{text_steps / steps:.1f} texts per step: the loops did not share rows"
    metrics = httpx.get(f"{server.url}/metrics").text
    assert "transformer_workers 2" in metrics, [m for m in metrics.splitlines() if "workers" in m]
    client = redis_server.client()
    assert client.xlen(Keys().stream) == 0  # every entry acknowledged and deleted
    for pattern in (Keys().job("*"), Keys().outputs("*")):  # answered requests keep nothing
        assert client.keys(pattern) == []


def test_one_worker_process_runs_several_workers_each_a_consumer_of_its_own(
    serve: Callable[..., Server], redis_server: RedisServer, workers: Workers, translator: Translator
) -> None:
    server = serve(redis_url=redis_server.url)
    proc = workers.start("w", TRANSFORMER_WORKERS="2", TRANSFORMER_THREADS="2")
    wait_workers(redis_server, 2)
    assert "libtcmalloc" in Path(f"/proc/{proc.pid}/maps").read_text()  # started again on it, the same pid
    consumers = redis_server.client().xinfo_consumers(Keys().stream, Keys().group)
    assert sorted(c["name"] for c in consumers) == [b"w-0", b"w-1"]
    texts = make_sentences(60, seed=22, max_words=10)
    responses = asyncio.run(post_all(server.url, texts, max_length=8))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200][:3]
    alone = [translator.translate([t], max_len_a=0.0, max_len_b=8)[0].text for t in texts]
    assert [r.json()["translatedText"] for r in responses] == alone
    assert "transformer_texts_decoded_total 60" in httpx.get(f"{server.url}/metrics").text


def test_requests_waiting_beyond_the_connection_pool_are_all_answered(
    serve: Callable[..., Server], redis_server: RedisServer, workers: Workers, translator: Translator
) -> None:
    """A waiting request used to hold a Redis connection of its own (BLPOP), so past the pool's 100 connections,
    requests the queue had room for were answered 503 "unreachable". Now one listener per API process wakes
    them: 300 requests wait queued (no worker yet) on a few connections, then are all answered."""
    server = serve(redis_url=redis_server.url)
    texts = make_sentences(300, seed=26, max_words=8)
    client = redis_server.client()

    async def scenario() -> tuple[int, list[httpx.Response]]:
        limits = httpx.Limits(max_connections=None)
        async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as c:
            sent = asyncio.gather(*(c.post("/translate", json={"q": t, "max_length": 8}) for t in texts))
            await asyncio.to_thread(wait_until, lambda: client.xlen(Keys().stream) == len(texts), 60, 0.05)
            connected = int(client.info("clients")["connected_clients"])
            workers.start("w")
            return connected, await sent

    connected, responses = asyncio.run(scenario())
    refused = [r.text for r in responses if r.status_code != 200]
    assert not refused, f"{len(refused)} refused: {refused[:3]}"
    assert [r.json()["translatedText"] for r in responses] == [
        translator.translate([t], max_len_a=0.0, max_len_b=8)[0].text for t in texts
    ]
    assert connected <= redis_api.MAX_CONNECTIONS + 2  # the API's pool, its listener, this test's client


def test_a_request_is_woken_by_its_notification(
    serve: Callable[..., Server],
    redis_server: RedisServer,
    workers: Workers,
    translator: Translator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the fallback look pushed past the request timeout, only the published id can wake the waiter."""
    monkeypatch.setattr(redis_api, "ANSWER_POLL_S", 3600.0)
    server = serve(redis_url=redis_server.url, request_timeout_s=30)
    workers.start("w")
    wait_workers(redis_server, 1)
    texts = make_sentences(5, seed=27)
    responses = asyncio.run(post_all(server.url, texts, max_length=8))
    assert [r.status_code for r in responses] == [200] * 5, [r.text for r in responses]
    assert [r.json()["translatedText"] for r in responses] == [
        translator.translate([t], max_len_a=0.0, max_len_b=8)[0].text for t in texts
    ]


def test_a_request_whose_notification_is_lost_is_answered_all_the_same(
    serve: Callable[..., Server], redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pub/sub delivers at most once (a listener that reconnects misses what was published meanwhile; a worker of
    the release before publishes nothing): a waiter also looks at its job every ANSWER_POLL_S."""
    monkeypatch.setattr(redis_api, "ANSWER_POLL_S", 0.2)
    server = serve(redis_url=redis_server.url, request_timeout_s=30)  # no worker: the test answers, silently
    client, k = redis_server.client(), Keys()

    async def scenario() -> httpx.Response:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as c:
            pending = asyncio.ensure_future(c.post("/translate", json={"q": "kalo mine"}))
            await asyncio.to_thread(wait_until, lambda: client.xlen(k.stream) == 1, 30, 0.05)
            [(_, fields)] = client.xrange(k.stream)
            job = Job.from_json(fields[b"job"])
            [output] = Answer(
                [Output([Hypothesis([7, 8], -1.5, -2.0, "Hallo Welt", ["Hallo", "Welt"])])]
            ).outputs_json()
            client.register_script(scripts.FINISH)(
                keys=[k.job(job.id), k.outputs(job.id), k.stream, k.file(job.id), k.kept(job.owner)],
                args=["done", "", "", 1, 60, k.group, "", "", job.id, "", output],
            )  # no channel: no notification
            return await pending

    r = asyncio.run(scenario())
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"] == "Hallo Welt"
    assert client.keys(k.job("*")) == [] and client.keys(k.outputs("*")) == []  # read once, then forgotten


def script_calls(client: redis.Redis) -> int:
    """The scripts Redis has run so far: each look of a waiter at its job is one."""
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for name, v in stats.items() if name.startswith(("cmdstat_eval", "cmdstat_fcall")))


def test_a_worker_sends_its_counters_at_most_so_often_and_before_every_answer(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's step and admission counters go to Redis at most every COUNTS_EVERY_S (a round trip on each step
    of 1-2 ms before), but always before an answer: a client that has its answer finds /metrics counting its steps."""
    monkeypatch.setattr(counters, "COUNTS_EVERY_S", 60.0)
    settings = ServiceSettings(redis_url=redis_server.url)
    worker, stats = RedisWorkerQueue(settings), Keys(settings.queue_prefix).stats
    client = redis_server.client()
    job = Job("m", ["a"])

    async def scenario() -> None:
        api = redis_api.RedisApiQueue(settings)
        await api.submit(job)
        assert [j.id for j in worker.read(4, 0.0)] == [job.id]
        worker.record_admission(texts=1, seconds=0.01)
        for _ in range(3):
            worker.record_step(sentences=1, finished=0, seconds=0.01)
        assert client.hgetall(stats) == {}  # counted, not sent
        worker.record_step(sentences=1, finished=1, seconds=0.01)
        worker.finish(job, Answer(error="stopped"))
        sent = {k.decode(): float(v) for k, v in client.hgetall(stats).items()}
        assert sent["batches_total"] == 4 and sent["texts_decoded_total"] == 1 and sent["admitted_texts_total"] == 1
        monkeypatch.setattr(counters, "COUNTS_EVERY_S", 0.0)
        worker.record_step(sentences=1, finished=0, seconds=0.01)  # past the interval: sent with the step
        assert float(client.hget(stats, "batches_total") or 0) == 5
        await api.close()

    asyncio.run(scenario())
    worker.r.close()


def test_many_waiting_requests_look_at_their_tasks_within_a_budget(
    serve: Callable[..., Server], redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each waiter also looks at its job unwoken, in case its notification was lost; when many wait (a deep
    queue, no worker keeping up), they used to look ANSWER_POLL_S apart each, a script call per waiter, on the
    API's CPU and Redis's; now all of them together look at most ANSWER_POLLS_PER_S times a second."""
    monkeypatch.setattr(redis_api, "ANSWER_POLL_S", 0.1)  # 300 waiters: 3,000 looks a second unbudgeted
    monkeypatch.setattr(redis_api, "ANSWER_POLLS_PER_S", 100.0)  # budgeted: a look every 3 s each
    server = serve(redis_url=redis_server.url, request_timeout_s=60)  # no worker: every request waits
    client, n = redis_server.client(), 300

    async def scenario() -> float:
        limits = httpx.Limits(max_connections=None)
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as c:
            sent = [asyncio.ensure_future(c.post("/translate", json={"q": f"kalo mine {i}"})) for i in range(n)]
            await asyncio.to_thread(wait_until, lambda: client.xlen(Keys().stream) == n, 30, 0.05)
            await asyncio.sleep(1.0)  # every waiter past its first look
            before, start = script_calls(client), time.monotonic()
            await asyncio.sleep(2.0)
            rate = (script_calls(client) - before) / (time.monotonic() - start)
            for f in sent:
                f.cancel()
            await asyncio.gather(*sent, return_exceptions=True)
            return rate

    rate = asyncio.run(scenario())
    assert rate <= 2 * redis_api.ANSWER_POLLS_PER_S, f"{rate:.0f} script calls a second while {n} requests wait"


def test_every_queued_request_whose_client_hangs_up_is_cancelled(models_dir: Path, redis_server: RedisServer) -> None:
    """1,000 requests wait queued (no worker), looking at their jobs every 2 s, and then their clients hang up.
    redis-py's asyncio client swallowed the cancellation of those whose client left during such a look (7 to
    16 in 1,000 here): they went on waiting until the request timeout, for nobody, and a server told to stop
    waited for them. Every one now ends at once: cancelled in Redis, counted as 499. The server runs on the
    clients' event loop, which makes the race likely; in a thread of its own it hardly ever happened."""
    app = create_app(ServiceSettings(models_dir=models_dir, redis_url=redis_server.url, request_timeout_s=120))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    client, k, n = redis_server.client(), Keys(), 1000

    def statuses() -> dict[bytes | None, int]:
        found = [client.hget(j, "status") for j in client.keys(k.job("*"))]
        return {s: found.count(s) for s in set(found)}

    async def scenario() -> str:
        serving = asyncio.ensure_future(server.serve())
        limits = httpx.Limits(max_connections=None)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120, limits=limits) as c:
                while not server.started or (await c.get("/readyz")).status_code != 200:
                    await asyncio.sleep(0.1)
                sent = [asyncio.ensure_future(c.post("/translate", json={"q": f"kalo mine {i}"})) for i in range(n)]
                await asyncio.to_thread(wait_until, lambda: client.xlen(k.stream) == n, 60, 0.05)
                await asyncio.sleep(3.0)  # the waiters' first looks at their jobs are under way
                for f in sent:
                    f.cancel()
                await asyncio.gather(*sent, return_exceptions=True)
                await asyncio.to_thread(wait_until, lambda: statuses() == {b"cancelled": n}, 30, 0.2)
                return (await c.get("/metrics")).text
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, 30)  # no request left behind for the server to wait on

    metrics = asyncio.run(scenario())
    assert f'transformer_requests_total{{route="/translate",status="499"}} {n}' in metrics


def test_a_client_that_hangs_up_cancels_its_request_on_the_workers(
    serve_heavy: Callable[..., Server], redis_server: RedisServer, heavy_dir: Path, tmp_path: Path
) -> None:
    """The API cancels the job of a client that went away; the worker holding it lets go at its next heartbeat."""
    server = serve_heavy(redis_url=redis_server.url, max_request_cost=10**12)
    w = Workers(heavy_dir, redis_server.url, tmp_path)
    try:
        w.start("w")
        wait_workers(redis_server, 1)
        texts = make_sentences(8, seed=28, min_words=20, max_words=25)
        heavy = {"q": texts, "model": "slow", "beam_size": 8, "max_length": 400}  # many seconds of decoding
        client, k = redis_server.client(), Keys()

        def running() -> bool:
            jobs = client.keys(k.job("*"))
            return len(jobs) == 1 and client.hget(jobs[0], "status") == b"running"

        post_and_hang_up(server.port, heavy, running)
        wait_until(lambda: client.xlen(k.stream) == 0, 30, 0.05)  # dropped: acknowledged and deleted, unanswered
        [job] = client.keys(k.job("*"))
        assert client.hget(job, "status") == b"cancelled"
        assert client.keys(k.outputs("*")) == []
        assert metric(server.url, "transformer_texts_decoded_total") == 0
    finally:
        w.stop_all()


def running_on(redis_server: RedisServer, job_id: str) -> str | None:
    status, worker = redis_server.client().hmget(Keys().job(job_id), "status", "worker")
    return worker.decode() if status == b"running" and worker else None


def test_worker_killed_mid_batch(
    serve: Callable[..., Server], redis_server: RedisServer, workers: Workers, translator: Translator
) -> None:
    server = serve(redis_url=redis_server.url)
    doomed = workers.start("doomed", TRANSFORMER_MAX_BATCH_SIZE="4", **FAST_RECLAIM)
    wait_workers(redis_server, 1)
    texts = make_sentences(24, seed=22)
    job = httpx.post(f"{server.url}/jobs", json={"texts": texts, "max_length": 40}).json()
    sync_texts = make_sentences(6, seed=23)

    async def scenario() -> list[httpx.Response]:
        requests = asyncio.ensure_future(post_all(server.url, sync_texts, max_length=40))
        await asyncio.to_thread(wait_until, lambda: running_on(redis_server, job["id"]) == "doomed", 60, 0.01)
        doomed.send_signal(signal.SIGKILL)  # in the middle of the job's batches
        doomed.wait()
        workers.start("rescuer", **FAST_RECLAIM)
        return await requests

    responses = asyncio.run(scenario())
    assert [r.status_code for r in responses] == [200] * 6
    assert [r.json()["translatedText"] for r in responses] == [
        translator.translate([t], max_len_a=0.0, max_len_b=40)[0].text for t in sync_texts
    ]
    wait_until(lambda: httpx.get(f"{server.url}/jobs/{job['id']}").json()["status"] == "done", 120, 0.2)
    done = httpx.get(f"{server.url}/jobs/{job['id']}").json()
    assert [o["text"] for o in done["results"]] == [
        t.text for t in translator.translate(texts, max_len_a=0.0, max_len_b=40)
    ]
    assert redis_server.client().hget(Keys().job(job["id"]), "worker") == b"rescuer"
    assert redis_server.client().xlen(Keys().stream) == 0


def test_a_job_that_kills_workers_fails_with_reason(
    serve: Callable[..., Server], redis_server: RedisServer, workers: Workers
) -> None:
    server = serve(redis_url=redis_server.url)
    env = {**FAST_RECLAIM, "TRANSFORMER_MAX_DELIVERIES": "1", "TRANSFORMER_MAX_BATCH_SIZE": "2"}
    first = workers.start("first", **env)
    wait_workers(redis_server, 1)
    job = httpx.post(f"{server.url}/jobs", json={"texts": make_sentences(20, seed=24), "max_length": 40}).json()
    wait_until(lambda: running_on(redis_server, job["id"]) == "first", 60, 0.01)
    first.send_signal(signal.SIGKILL)
    first.wait()
    workers.start("second", **env)
    wait_until(lambda: httpx.get(f"{server.url}/jobs/{job['id']}").json()["status"] == "failed", 60, 0.2)
    failed = httpx.get(f"{server.url}/jobs/{job['id']}").json()
    assert "delivered 2 times" in failed["error"] and failed["results"] is None
    dead = redis_server.client().xrange(Keys().dead)
    assert len(dead) == 1 and b"delivered 2 times" in dead[0][1][b"reason"]


def test_redis_restart_under_load(
    serve: Callable[..., Server], redis_server: RedisServer, workers: Workers, translator: Translator
) -> None:
    server = serve(redis_url=redis_server.url, request_timeout_s=30)
    workers.start("w", TRANSFORMER_MAX_BATCH_SIZE="2")
    wait_workers(redis_server, 1)
    texts = make_sentences(12, seed=25)

    async def scenario() -> list[httpx.Response]:
        requests = asyncio.ensure_future(post_all(server.url, texts, max_length=40))
        await asyncio.sleep(1.0)
        redis_server.stop()
        down = await asyncio.to_thread(httpx.post, f"{server.url}/translate", json={"q": "kalo"}, timeout=30)
        assert down.status_code == 503 and down.json()["error"]["code"] == "unavailable", down.text
        assert "retry-after" in down.headers
        ready = await asyncio.to_thread(httpx.get, f"{server.url}/readyz", timeout=30)
        assert ready.status_code == 503
        await asyncio.sleep(1.0)
        redis_server.start()
        return await asyncio.wait_for(requests, 60)  # never a hang

    responses = asyncio.run(scenario())
    assert {r.status_code for r in responses} <= {200, 503}, [r.text for r in responses]
    for text, r in zip(texts, responses, strict=True):
        if r.status_code == 200:
            assert r.json()["translatedText"] == translator.translate([text], max_len_a=0.0, max_len_b=40)[0].text
    # healthy again: ready, and a new request is answered by the same worker once it reconnected
    wait_until(lambda: httpx.get(f"{server.url}/readyz").status_code == 200, 30, 0.2)
    r = httpx.post(f"{server.url}/translate", json={"q": "kalo mine", "max_length": 8}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"] == translator.translate(["kalo mine"], max_len_a=0.0, max_len_b=8)[0].text


def test_queue_full_in_redis_mode(serve: Callable[..., Server], redis_server: RedisServer) -> None:
    server = serve(redis_url=redis_server.url, max_queue=1)  # no worker: jobs stay queued
    assert httpx.post(f"{server.url}/jobs", json={"texts": ["kalo"]}).status_code == 202
    r = httpx.post(f"{server.url}/jobs", json={"texts": ["kalo"]})
    assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full" and r.headers["retry-after"] == "1"


def test_worker_needs_redis(models_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    out = subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--models-dir", str(models_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "REDIS_URL" in out.stderr


def test_a_worker_with_no_models_waits_for_them_instead_of_exiting(
    redis_server: RedisServer, tmp_path: Path, models_dir: Path
) -> None:
    """An empty models volume must not make compose restart-loop the workers: they wait, then serve."""
    where = tmp_path / "models"
    w = Workers(where, redis_server.url, tmp_path)
    try:
        proc = w.start("patient")
        log = tmp_path / "patient.log"
        deadline = time.monotonic() + 60
        while "waiting for one" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert "does not exist" in log.read_text()
        shutil.copytree(models_dir / "tiny-en-de", where / "tiny-en-de")
        while "serving tiny-en-de" not in log.read_text():  # found at its next look (every 5 s)
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    finally:
        w.stop_all()


def test_sentences_kept_spans_and_inline_tags_travel_through_redis(
    serve: Callable[..., Server], redis_server: RedisServer, workers: Workers, translator: Translator
) -> None:
    """What segmentation and format html need from a worker (each output's sentence spans and word alignment,
    the job's align flag) is JSON through Redis: the answers equal the embedded Translator's."""
    from tests.model.test_markup import parsed

    server = serve(redis_url=redis_server.url)
    workers.start("w1")
    wait_workers(redis_server, 1)
    opts = {"beam_size": 2, "max_length": 6}
    paragraph = "Kalo mine ruza. Vo sa 1,024 ke!\n\nMine 😀 vo."
    r = httpx.post(f"{server.url}/translate", json={"q": paragraph, **opts}, timeout=60)
    assert r.status_code == 200, r.text
    want = translator.translate([paragraph], beam_size=2, max_len_a=0.0, max_len_b=6)[0]
    got = r.json()["translations"][0]
    assert got["text"] == want.text and "1,024" in got["text"] and "😀" in got["text"]
    assert [(s["source"], s["output"]) for s in got["sentences"]] == [
        (list(s.source), list(s.output)) for s in want.best.sentences
    ]
    page = "<p>Kalo <b>mine</b> ruza <i>vo sa</i>.</p>"
    r = httpx.post(f"{server.url}/translate", json={"q": page, "format": "html", **opts}, timeout=60)
    assert r.status_code == 200, r.text
    assert sorted(parsed(r.json()["translatedText"]).tags) == ["b", "i", "p"]
    job = httpx.post(f"{server.url}/jobs", json={"texts": [paragraph], **opts}).json()
    wait_until(lambda: httpx.get(f"{server.url}/jobs/{job['id']}").json()["status"] == "done", timeout=60)
    assert httpx.get(f"{server.url}/jobs/{job['id']}").json()["results"][0]["text"] == want.text


def test_a_file_through_redis_is_downloaded_once_and_bounded_per_key(
    serve: Callable[..., Server], redis_server: RedisServer, workers: Workers, translator: Translator
) -> None:
    """A file's job runs on a worker process; its file waits in Redis beside the job, is handed over once, and
    counts against the key's kept jobs there (shared by every API process)."""
    from tests.model.test_files import docx_bytes
    from tests.service.test_files import GERMAN_LINES, OPTIONS

    server = serve(redis_url=redis_server.url, max_kept_jobs=2)
    workers.start("w1")
    wait_workers(redis_server, 1)
    paragraphs = [p.capitalize() + "." for p in make_sentences(8, seed=47, min_words=3, max_words=6)]
    files = {"file": ("r.docx", docx_bytes(paragraphs))}
    r = httpx.post(f"{server.url}/translate_file", files=files, data=OPTIONS, timeout=60)
    assert r.status_code == 202, r.text
    job = r.json()
    assert redis_server.client().exists(Keys().file(job["id"]))
    got = httpx.get(job["translatedFileUrl"], timeout=60)  # waits for the job
    assert got.status_code == 200, got.text
    want = [o.text for o in translator.translate(paragraphs, beam_size=2, max_len_a=0.0, max_len_b=6)]
    assert [p.text for p in docx.Document(io.BytesIO(got.content)).paragraphs] == want
    assert httpx.get(job["translatedFileUrl"]).status_code == 404
    assert not redis_server.client().exists(Keys().file(job["id"]), Keys().job(job["id"]))
    # A file already in the target language: its job is answered by the worker without the model, the file
    # handed back as it was sent (GET /jobs shows no model: the hash holds none)
    german = docx_bytes(GERMAN_LINES)
    auto = {**OPTIONS, "source": "auto", "target": "de"}
    r = httpx.post(f"{server.url}/translate_file", files={"file": ("b.docx", german)}, data=auto, timeout=60)
    assert r.status_code == 202 and "model" not in r.json(), r.text
    wait_until(lambda: httpx.get(f"{server.url}/jobs/{r.json()['id']}").json()["status"] == "done", timeout=60)
    assert httpx.get(f"{server.url}/jobs/{r.json()['id']}").json()["model"] is None
    assert httpx.get(r.json()["translatedFileUrl"]).content == german
    kept = [httpx.post(f"{server.url}/translate_file", files=files, data=OPTIONS) for _ in range(3)]
    assert [k.status_code for k in kept] == [202, 202, 429], kept[-1].text
    assert kept[-1].json()["error"]["code"] == "too_many_kept"
