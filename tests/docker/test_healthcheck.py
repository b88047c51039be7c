"""docker/healthcheck.py, the image's HEALTHCHECK: the API is healthy when GET /healthz answers 200, a worker
when its Redis answers PING. Servers here listen on the loopback interface only and are stopped at the end."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).parents[2]
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"
LOCAL_REDIS = "redis://127.0.0.1:6379/0"


def load_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docker_healthcheck", HEALTHCHECK)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check(*args: str, **env: str) -> tuple[int, str]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TRANSFORMER_") and k != "REDIS_URL" and "proxy" not in k.lower()
    }
    result = subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args], env={**clean, **env}, capture_output=True, text=True, timeout=30
    )
    return result.returncode, result.stdout + result.stderr


class FakeAPI(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        code = self.status if self.path == "/healthz" else 404
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}' if code == 200 else b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAPI)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        FakeAPI.status = 200


def test_api_healthy(api: ThreadingHTTPServer) -> None:
    port = str(api.server_address[1])
    assert check("api", TRANSFORMER_HOST="0.0.0.0", TRANSFORMER_PORT=port) == (0, "")
    assert check(TRANSFORMER_HOST="127.0.0.1", TRANSFORMER_PORT=port, HTTP_PROXY="http://127.0.0.1:9")[0] == 0


def test_api_unhealthy(api: ThreadingHTTPServer) -> None:
    FakeAPI.status = 503
    code, out = check("api", TRANSFORMER_HOST="0.0.0.0", TRANSFORMER_PORT=str(api.server_address[1]))
    assert code == 1 and "503" in out


def test_api_down() -> None:
    code, out = check("api", TRANSFORMER_PORT=str(free_port()))
    assert code == 1 and "unhealthy (api)" in out


def test_worker_needs_redis_url() -> None:
    code, out = check("worker")
    assert code == 1 and "REDIS_URL" in out


def test_worker_unhealthy_without_redis() -> None:
    code, out = check("worker", REDIS_URL=f"redis://:secret@127.0.0.1:{free_port()}/0")
    assert code == 1 and "unhealthy (worker)" in out
    assert "secret" not in out


def test_worker_healthy_with_redis() -> None:
    pytest.importorskip("redis")
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
    except OSError:
        pytest.skip("no Redis on 127.0.0.1:6379")
    assert check("worker", REDIS_URL=LOCAL_REDIS) == (0, "")


def test_unknown_argument() -> None:
    assert check("database")[0] == 1


def test_role_of_the_main_process() -> None:
    detect = load_module().detect_role
    assert detect(b"/opt/venv/bin/python\0/opt/venv/bin/transformer\0worker\0") == "worker"
    assert detect(b"/sbin/docker-init\0--\0/opt/transformer/entrypoint.sh\0worker\0") == "worker"
    assert detect(b"/opt/venv/bin/python\0/opt/venv/bin/transformer\0serve\0") == "api"
    assert detect(b"/opt/venv/bin/python\0/opt/venv/bin/transformer\0serve\0--workers-dir\0") == "api"


def test_api_url(monkeypatch: pytest.MonkeyPatch) -> None:
    api_url = load_module().api_url
    cases = {
        ("0.0.0.0", "8000"): "http://127.0.0.1:8000/healthz",
        ("10.1.2.3", "9000"): "http://10.1.2.3:9000/healthz",
        ("::", "8000"): "http://127.0.0.1:8000/healthz",
        ("::1", "8000"): "http://[::1]:8000/healthz",
    }
    for (host, port), url in cases.items():
        monkeypatch.setenv("TRANSFORMER_HOST", host)
        monkeypatch.setenv("TRANSFORMER_PORT", port)
        assert api_url() == url
