"""Operations: every answer carries an X-Request-Id (the client's, or a new one), every log line the id of the
request it was written under, and TRANSFORMER_LOG_FORMAT=json writes one JSON object a line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.service.conftest import free_port, wait_ready


def test_request_ids_and_json_log_lines(models_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    env = {
        **os.environ,
        "TRANSFORMER_MODELS_DIR": str(models_dir),
        "TRANSFORMER_PORT": str(port),
        "TRANSFORMER_LOG_FORMAT": "json",
    }
    env.pop("REDIS_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve"], env=env, stderr=log, stdout=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, lambda: (tmp_path / "serve.log").read_text())
        mine = httpx.post(f"{url}/translate", json={"q": "kalo", "max_length": 4}, headers={"X-Request-Id": "r-42"})
        assert mine.status_code == 200 and mine.headers["x-request-id"] == "r-42"
        made = httpx.get(f"{url}/healthz", headers={"X-Request-Id": "not an id;" * 20})  # 200 chars, spaces
        assert len(made.headers["x-request-id"]) == 32  # a new one
        headers = {"X-Request-Id": "r-43", "Content-Type": "application/json"}
        bad = httpx.post(f"{url}/translate", content=b"{", headers=headers)
        assert bad.status_code == 422 and bad.headers["x-request-id"] == "r-43"  # errors carry it too
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = [json.loads(line) for line in (tmp_path / "serve.log").read_text().splitlines() if line.strip()]
    assert all({"time", "level", "logger", "request_id", "message"} <= set(line) for line in lines)
    access = [line for line in lines if line["logger"] == "uvicorn.access"]
    assert any(line["request_id"] == "r-42" and "POST /translate" in line["message"] for line in access)
    assert any(line["request_id"] == "r-43" and "422" in line["message"] for line in access)
    assert any("loaded tiny-en-de" in line["message"] for line in lines)
