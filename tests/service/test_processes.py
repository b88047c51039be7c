"""The embedded queue's workers in child processes (service.queue.processes), through real HTTP and real child
processes: the same answers as the translator alone, nothing lost when a child is killed mid-batch, a job that
kills every child fails instead of killing them forever, a client that hangs up frees its rows in the child, a
child that cannot load the models (or lacks its allocator) is reported by /readyz, and a busy child asks for new
jobs only when woken."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from model.translator import Translator
from service.queue import counters
from service.queue.contract import Answer, Job
from service.queue.memory import MemoryQueue
from service.queue.processes import Bridge, ParentGone, PipeQueue, poke
from service.settings import ServiceSettings
from tests.conftest import make_sentences
from tests.model.test_files import docx_bytes
from tests.service.conftest import Server, wait_until
from tests.service.test_batching import post_all
from tests.service.test_files import GERMAN_LINES
from tests.service.test_hardening import metric, post_and_hang_up


def children(server: Server) -> list[int]:
    """The pids of the server's worker processes now running."""
    return [b.proc.pid for b in server.app.state.service.bridges if b.proc is not None and b.proc.poll() is None]


def test_worker_processes_answer_as_the_translator_alone(serve: Callable[..., Server], models_dir: Path) -> None:
    server = serve(worker_processes=True, threads=2)
    pids = children(server)
    assert len(pids) == 2 and os.getpid() not in pids  # one per thread, each its own process
    assert all("libtcmalloc" in Path(f"/proc/{pid}/maps").read_text() for pid in pids)  # allocator auto: tcmalloc
    texts = make_sentences(40, seed=41, max_words=10)
    responses = asyncio.run(post_all(server.url, texts, max_length=8, n_best=2, beam_size=3))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200][:3]
    translator = Translator.load(models_dir / "tiny-en-de", device="cpu")
    alone = translator.translate(texts, max_len_a=0.0, max_len_b=8, n_best=2, beam_size=3)
    assert [r.json()["translatedText"] for r in responses] == [o.text for o in alone]
    assert [[h["text"] for h in r.json()["translations"][0]["alternatives"]] for r in responses] == [
        [h.text for h in o.hypotheses[1:]] for o in alone
    ]
    metrics = httpx.get(f"{server.url}/metrics").text
    assert "transformer_admitted_texts_total 40" in metrics and "transformer_texts_decoded_total 40" in metrics
    maps = httpx.post(f"{server.url}/attention", json={"q": texts[0], "max_length": 8, "kinds": ["cross"]})
    assert maps.status_code == 200 and maps.json()["cross"], maps.text  # the maps' JSON crosses the pipe
    job = httpx.post(f"{server.url}/jobs", json={"texts": texts[:5], "max_length": 8}).json()
    wait_until(lambda: httpx.get(f"{server.url}/jobs/{job['id']}").json()["status"] == "done", 60)
    results = httpx.get(f"{server.url}/jobs/{job['id']}").json()["results"]
    assert [r["text"] for r in results] == [o.text for o in translator.translate(texts[:5], max_len_a=0.0, max_len_b=8)]
    german = docx_bytes(GERMAN_LINES)  # already in the target language: answered by a child without the model
    files, auto = {"file": ("b.docx", german)}, {"source": "auto", "target": "de"}
    job = httpx.post(f"{server.url}/translate_file", files=files, data=auto).json()
    assert httpx.get(job["translatedFileUrl"], timeout=60).content == german


def test_stopping_the_service_ends_its_worker_processes_quietly(
    models_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each stop logged "its pipe failed" with a BrokenPipeError's traceback for each child: the child is ended
    while it waits for the reply to a call, and the Bridge took that for a failure."""
    with (
        caplog.at_level(logging.WARNING),
        Server(ServiceSettings(models_dir=models_dir, worker_processes=True)) as server,
    ):
        server.wait_ready()
        pids = children(server)
        assert len(pids) == 2 and httpx.post(f"{server.url}/translate", json={"q": "kalo", "max_length": 4}).is_success
    assert all(b.proc is not None and b.proc.poll() is not None for b in server.app.state.service.bridges)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("service")] == []


def test_a_worker_process_killed_mid_batch_loses_no_request(
    serve_heavy: Callable[..., Server], heavy_dir: Path
) -> None:
    """Its jobs go back to the front of the queue and its successor answers them, as the translator would."""
    server = serve_heavy(worker_processes=True, threads=1, max_request_cost=10**12)
    texts = make_sentences(6, seed=42, min_words=8, max_words=12)
    options = {"model": "slow", "beam_size": 2, "max_length": 120}

    async def scenario() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            pending = [asyncio.ensure_future(client.post("/translate", json={"q": t, **options})) for t in texts]
            while metric(server.url, "transformer_in_flight_texts") < len(texts):
                await asyncio.sleep(0.02)
            [pid] = children(server)
            os.kill(pid, 9)  # mid-batch: every text is in the search
            return await asyncio.gather(*pending)

    responses = asyncio.run(scenario())
    assert [r.status_code for r in responses] == [200] * len(texts), [r.text for r in responses]
    translator = Translator.load(heavy_dir / "slow", device="cpu")
    alone = translator.translate(texts, beam_size=2, max_len_a=0.0, max_len_b=120)
    assert [r.json()["translatedText"] for r in responses] == [o.text for o in alone]
    assert len(children(server)) == 1  # a new child took the dead one's place


def test_a_job_that_kills_every_worker_process_fails(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy(worker_processes=True, threads=1, max_deliveries=2, max_job_cost=10**12)
    texts = make_sentences(4, seed=43, min_words=8, max_words=12)
    job = httpx.post(f"{server.url}/jobs", json={"texts": texts, "model": "slow", "max_length": 300}).json()
    [bridge] = server.app.state.service.bridges
    for _ in range(2):  # each child that reads it dies (as if the job crashed it)
        wait_until(lambda: job["id"] in bridge.held and bridge.proc.poll() is None, 60, 0.02)
        bridge.proc.kill()
        wait_until(lambda: job["id"] not in bridge.held, 30, 0.02)
    info = httpx.get(f"{server.url}/jobs/{job['id']}").json()
    assert info["status"] == "failed" and "delivered 2 times" in info["error"], info
    wait_until(lambda: children(server) != [], 60)  # the service goes on
    r = httpx.post(f"{server.url}/translate", json={"q": texts[0], "model": "slow", "max_length": 5}, timeout=60)
    assert r.status_code == 200, r.text


def test_a_client_that_hangs_up_frees_its_rows_in_the_worker_process(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy(worker_processes=True, threads=1, max_request_cost=10**12)
    texts = make_sentences(8, seed=34, min_words=20, max_words=25)
    heavy = {"q": texts, "model": "slow", "beam_size": 8, "max_length": 400}  # many seconds of decoding
    post_and_hang_up(server.port, heavy, lambda: metric(server.url, "transformer_in_flight_texts") == 8)
    wait_until(lambda: metric(server.url, "transformer_in_flight_jobs") == 0, 30, 0.05)
    assert metric(server.url, "transformer_texts_decoded_total") == 0  # dropped by the child, not finished


@pytest.fixture
def broken_dir(tmp_path: Path, models_dir: Path) -> Path:
    """A model whose config reads but whose weights are cut short."""
    d = tmp_path / "models"
    shutil.copytree(models_dir / "tiny-en-de", d / "cut")
    weights = d / "cut" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return d


def test_a_worker_process_that_cannot_load_the_models_is_reported(broken_dir: Path) -> None:
    with Server(ServiceSettings(models_dir=broken_dir, worker_processes=True, threads=1)) as server:
        deadline = time.monotonic() + 60
        while (r := httpx.get(f"{server.url}/readyz")).status_code == 503 and "loading" in r.text:
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)
        assert r.status_code == 503 and "could not load the models" in r.text, r.text
        assert children(server) == []  # not started again and again


def test_a_busy_child_asks_for_jobs_only_when_woken_or_told_more_wait() -> None:
    """PipeQueue over real pipes: a read that would not wait asks the API's process (writes a line) only after a
    byte on the wake pipe or a reply saying more jobs are queued; a waiting read always asks."""
    to_child_r, to_child_w = os.pipe()
    to_api_r, to_api_w = os.pipe()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(to_api_r, False)
    with open(to_child_r, "rb") as source, open(to_child_w, "wb") as api_out, open(to_api_w, "wb") as sink:
        queue = PipeQueue(source, sink, wake_r)

        def read(block_s: float, more: bool) -> bool:
            """One read, the API's reply written beforehand; whether the child asked (and so took the reply)."""
            api_out.write(json.dumps({"jobs": [], "more": more}).encode() + b"\n")
            api_out.flush()
            assert queue.read(4, block_s) == []
            try:
                asked = os.read(to_api_r, 4096)
            except BlockingIOError:
                asked = b""
            if not asked:
                source.readline()  # the unused reply
            return asked != b""

        assert read(0.0, more=False)  # the first read asks
        assert not read(0.0, more=False) and not read(0.0, more=False)  # nothing queued since: no round trip
        poke(wake_w)
        poke(wake_w)
        assert read(0.0, more=True)  # woken (twice: one read empties the pipe)
        assert read(0.0, more=False)  # the last reply said more were queued
        assert not read(0.0, more=False)
        assert read(1.0, more=False)  # an idle child waits in the API's process: it always asks
        os.close(wake_w)  # the API's process is gone: the next read asks, and finds out
        api_out.close()
        with pytest.raises(ParentGone):
            queue.read(4, 0.0)
    os.close(wake_r)
    os.close(to_api_r)


def test_a_child_sends_its_load_with_its_counts_and_started_for_background_jobs_only() -> None:
    """The lines a child writes for WorkerQueue.busy and .started: its load rides on its counts, its answers and
    its last line before it waits for work, when it changed; a request's job is not reported started."""
    to_api_r, to_api_w = os.pipe()
    os.set_blocking(to_api_r, False)
    with open(os.devnull, "rb") as source, open(to_api_w, "wb") as sink:
        queue = PipeQueue(source, sink)

        def sent() -> list[dict[str, object]]:
            try:
                raw = os.read(to_api_r, 65536)
            except BlockingIOError:
                return []
            return [json.loads(line) for line in raw.splitlines()]

        request, background = Job("m", ["a"]), Job("m", ["b"], background=True)
        queue.started(request)
        queue.busy(1, 1)
        assert sent() == []  # neither is a line of its own
        queue.started(background)
        assert sent() == [{"op": "started", "job": background.id}]
        queue.finish(request, Answer(error="x"))
        [finish] = sent()
        assert finish["op"] == "finish" and finish["busy"] == [1, 1]
        queue.busy(0, 0)
        queue.record_step(1, 0, 0.01)
        queue.counts.sent -= counters.COUNTS_EVERY_S  # the counts are due
        queue.record_step(1, 0, 0.01)
        [counts] = sent()
        assert counts["op"] == "counts" and counts["busy"] == [0, 0] and counts["counts"]["batches_total"] == 2.0
        queue.finish(background, Answer(error="x"))
        assert "busy" not in sent()[0]  # unchanged since
    os.close(to_api_r)


def test_a_bridge_reads_the_load_a_child_sends_with_its_lines() -> None:
    memory = MemoryQueue(ServiceSettings(rate_limit=0))
    bridge = Bridge(memory, ServiceSettings(), "w0", threading.Event())
    bridge.call("counts", {"op": "counts", "counts": {}, "busy": [2, 5]})
    assert asyncio.run(memory.stats())["in_flight_texts"] == 5.0
    bridge.call("counts", {"op": "counts", "counts": {"batches_total": 1.0}})
    stats = asyncio.run(memory.stats())
    assert stats["in_flight_jobs"] == 2.0 and stats["batches_total"] == 1.0


def test_requests_join_a_busy_worker_process_search(serve: Callable[..., Server], models_dir: Path) -> None:
    """Requests posted while a large job keeps the one child's search busy are read (it is woken), answered as
    the translator alone would, and answered before the job ends."""
    server = serve(worker_processes=True, threads=1, max_batch_size=6)
    job_texts = make_sentences(400, seed=14, min_words=6, max_words=14)
    job = httpx.post(f"{server.url}/jobs", json={"texts": job_texts, "max_length": 60}).json()
    wait_until(lambda: httpx.get(f"{server.url}/jobs/{job['id']}").json()["progress"]["done"] > 0, 60)
    texts = make_sentences(6, seed=15, max_words=10)
    responses = asyncio.run(post_all(server.url, texts, max_length=8))
    assert httpx.get(f"{server.url}/jobs/{job['id']}").json()["status"] == "running", "the job should outlast them"
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    translator = Translator.load(models_dir / "tiny-en-de", device="cpu")
    alone = translator.translate(texts, max_len_a=0.0, max_len_b=8)
    assert [r.json()["translatedText"] for r in responses] == [o.text for o in alone]


def test_an_allocator_the_machine_lacks_is_reported(models_dir: Path, no_jemalloc: None) -> None:
    """TRANSFORMER_ALLOCATOR=jemalloc on a machine without it: /readyz says what to install, and no worker process
    starts."""
    settings = ServiceSettings(models_dir=models_dir, worker_processes=True, threads=1, allocator="jemalloc")
    with Server(settings) as server:
        wait_until(lambda: "loading" not in httpx.get(f"{server.url}/readyz").text, 60)
        r = httpx.get(f"{server.url}/readyz")
        assert r.status_code == 503 and "apt install libjemalloc2" in r.text, r.text
        assert children(server) == []


def test_a_child_sends_its_counters_with_answers_not_a_line_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line a step woke the API's Bridge thread as often as the child stepped; counts now go at most every
    COUNTS_EVERY_S, and with each answer (a client that has it finds /metrics counting its steps)."""
    monkeypatch.setattr(counters, "COUNTS_EVERY_S", 60.0)
    to_api_r, to_api_w = os.pipe()
    os.set_blocking(to_api_r, False)
    with open(os.devnull, "rb") as source, open(to_api_w, "wb") as sink:
        queue = PipeQueue(source, sink)
        queue.record_admission(texts=1, seconds=0.01)
        for _ in range(3):
            queue.record_step(sentences=1, finished=0, seconds=0.01)
        with pytest.raises(BlockingIOError):
            os.read(to_api_r, 4096)  # counted, not sent
        queue.finish(Job("m", ["a"]), Answer(error="stopped"))
        [finish] = [json.loads(x) for x in os.read(to_api_r, 4096).splitlines()]
        assert finish["op"] == "finish" and finish["counts"]["batches_total"] == 3
        assert finish["counts"]["admitted_texts_total"] == 1
        monkeypatch.setattr(counters, "COUNTS_EVERY_S", 0.0)
        queue.record_step(sentences=2, finished=1, seconds=0.01)  # past the interval: sent with the step
        [sent] = [json.loads(x) for x in os.read(to_api_r, 4096).splitlines()]
        assert sent == {"op": "counts", "counts": {**sent["counts"], "batches_total": 1.0, "texts_decoded_total": 1.0}}
    os.close(to_api_r)
    memory = MemoryQueue(ServiceSettings())
    bridge = Bridge(memory, ServiceSettings(), "w", threading.Event())
    assert bridge.call("counts", sent) is None and memory.counters["texts_decoded_total"] == 1.0
