"""`transformer demo` end to end: builds the corpus, trains, serves the page and the API; a second start
reuses the trained model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from tests.service.conftest import free_port, wait_until
from tests.training.test_train import copy_corpus, settings

ROOT = Path(__file__).parents[2]


def start_demo(config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "demo", "--config", str(config), "--port", str(port)],
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz").status_code == 200
    except httpx.TransportError:
        return False


def test_demo_trains_then_serves_then_reuses(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    config = tmp_path / "demo.json"  # JSON is YAML too
    config.write_text(
        json.dumps(settings(run_dir, copy_corpus(tmp_path / "copy.jsonl", n=600), max_steps=30, progress=True))
    )
    for attempt in ("first", "second"):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = tmp_path / f"{attempt}.log"
        proc = start_demo(config, port, log)
        try:
            wait_until(lambda: ready(url) or proc.poll() is not None, timeout=300, every=0.5)  # noqa: B023
            assert proc.poll() is None, log.read_text()
            page = httpx.get(f"{url}/")
            assert page.status_code == 200 and "<html" in page.text.lower()
            assert [m["id"] for m in httpx.get(f"{url}/models").json()["models"]] == ["demo-en-de"]
            r = httpx.post(f"{url}/translate", json={"q": "1 2 3", "max_length": 10}, timeout=60)
            assert r.status_code == 200 and r.json()["model"] == "demo-en-de", r.text
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        text = log.read_text()
        if attempt == "first":
            assert "training the demo model" in text and (run_dir / "test_scores.json").is_file()
            assert "step" in text  # the progress bar
        else:
            assert "reusing the trained demo model" in text
