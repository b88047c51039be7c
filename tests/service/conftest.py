"""Service fixtures: tiny checkpoints in a models directory, a real HTTP server in a thread, and private
real Redis servers (redis-server on a free port) that tests may stop and restart."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import uvicorn

from service import allocator
from service.api.app import create_app
from service.http import uvicorn_options
from service.settings import ServiceSettings
from tests.conftest import SPM_VOCAB, save_random_checkpoint

REDIS_SERVER = shutil.which("redis-server")


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory, spm_dir: Path) -> Path:
    """Two tiny random models: en->de translation and en summarization."""
    d = tmp_path_factory.mktemp("models")
    save_random_checkpoint(d / "tiny-en-de", spm_dir, SPM_VOCAB, seed=1, source_lang="en", target_lang="de", max_len=64)
    save_random_checkpoint(
        d / "tiny-sum", spm_dir, SPM_VOCAB, seed=2, task="summarization", source_lang="en", target_lang="en"
    )
    return d


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], why: Callable[[], str], timeout: float = 60.0) -> None:
    """Wait for a `transformer serve` process to answer /readyz 200; fail with why() if it exits or takes too long."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None, why()
        time.sleep(0.2)


def wait_until(check: Callable[[], object], timeout: float = 30.0, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout} s")


@contextlib.contextmanager
def health_latency(url: str) -> Iterator[list[float]]:
    """While the block runs, GET /healthz every 10 ms from a thread: the list of how long each took (a blocked
    event loop shows as one long wait)."""
    worst: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=url) as client:
            while not done.is_set():
                start = time.perf_counter()
                assert client.get("/healthz").status_code == 200
                worst.append(time.perf_counter() - start)
                time.sleep(0.01)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        yield worst
    finally:
        done.set()
        prober.join()


class Server:
    """The app under uvicorn in a thread, on a free port: real HTTP, real concurrency."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.app = create_app(settings)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        options = uvicorn_options(settings)  # as `transformer serve` runs it
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning", **options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        wait_until(lambda: self.server.started)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        wait_until(lambda: httpx.get(f"{self.url}/readyz").status_code == 200, timeout, 0.1)

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@pytest.fixture
def serve(models_dir: Path) -> Iterator[Callable[..., Server]]:
    """serve(**settings) -> a started, ready Server (embedded queue unless redis_url is given)."""
    servers: list[Server] = []

    def start(ready: bool = True, **settings: object) -> Server:
        server = Server(ServiceSettings(models_dir=models_dir, **settings)).__enter__()  # type: ignore[arg-type]
        servers.append(server)
        if ready:
            server.wait_ready()
        return server

    yield start
    for s in servers:
        s.__exit__()


@pytest.fixture(scope="session")
def heavy_dir(tmp_path_factory: pytest.TempPathFactory, spm_dir: Path) -> Path:
    """Models whose answers are large or slow: `long` (tiny, 512 positions) and `slow` (the small preset's
    widths, 512 positions). Random weights: outputs run to their length limit."""
    d = tmp_path_factory.mktemp("heavy")
    save_random_checkpoint(d / "long", spm_dir, SPM_VOCAB, seed=5, source_lang="en", target_lang="xl", max_len=512)
    save_random_checkpoint(
        d / "slow",
        spm_dir,
        SPM_VOCAB,
        seed=6,
        source_lang="en",
        target_lang="xs",
        max_len=512,
        N=3,
        d_model=256,
        d_ff=1024,
        h=4,
    )
    return d


@pytest.fixture
def serve_heavy(heavy_dir: Path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(**settings: Any) -> Server:
        server = Server(ServiceSettings(models_dir=heavy_dir, **settings)).__enter__()
        servers.append(server)
        server.wait_ready()
        return server

    yield start
    for s in servers:
        s.__exit__()


class RedisServer:
    """A private redis-server process (no persistence) that a test may stop and start again."""

    def __init__(self, directory: Path, *args: str) -> None:
        self.port = free_port()
        self.directory = directory
        self.args = list(args)  # further redis-server options
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.proc = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                *self.args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        wait_until(lambda: _pings(client), 10)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.ConnectionError:
        return False


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.fail("redis-server is not installed; .ci/run installs it")
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


class Workers:
    """`transformer worker` processes against one Redis."""

    def __init__(self, models_dir: Path, redis_url: str, log_dir: Path) -> None:
        self.models_dir, self.redis_url, self.log_dir = models_dir, redis_url, log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, **env: str) -> subprocess.Popen[bytes]:
        environ = {
            **os.environ,
            "REDIS_URL": self.redis_url,
            "TRANSFORMER_MODELS_DIR": str(self.models_dir),
            "TRANSFORMER_WORKER_NAME": name,
            "TRANSFORMER_THREADS": "1",
            **env,
        }
        log = (self.log_dir / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker"], env=environ, stdout=log, stderr=subprocess.STDOUT
        )
        self.procs[name] = proc
        return proc

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def workers(models_dir: Path, redis_server: RedisServer, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(models_dir, redis_server.url, tmp_path)
    yield w
    w.stop_all()


@pytest.fixture
def no_jemalloc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A machine without jemalloc (service.allocator): the loader is asked for a library nobody has."""
    monkeypatch.setitem(allocator.LIBRARIES, "jemalloc", "no-such-allocator-4c1d")
    allocator.library.cache_clear()
    yield
    allocator.library.cache_clear()
