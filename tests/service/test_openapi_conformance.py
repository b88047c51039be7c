"""The OpenAPI document tells the truth: schemathesis generates valid and invalid requests for every operation
from /openapi.json and runs every check against `transformer serve` (status codes, content types and bodies as
documented, invalid data refused, auth as declared, no 5xx), once open and once behind API keys."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.conftest import free_port, wait_ready

CONFIG = Path(__file__).with_name("schemathesis.toml")
KEY = "a-key-for-conformance-0123"
# Small limits, which the document then states: random weights decode to the length limit, so the generated
# requests (up to the largest legal ones) are kept to seconds of decoding.
LIMITS = {
    "TRANSFORMER_MAX_TEXTS": "4",
    "TRANSFORMER_MAX_JOB_TEXTS": "8",
    "TRANSFORMER_MAX_CHARS": "300",
    "TRANSFORMER_MAX_BEAM_SIZE": "3",
    "TRANSFORMER_MAX_REQUEST_COST": "300000",
    "TRANSFORMER_MAX_JOB_COST": "600000",
    "TRANSFORMER_REQUEST_TIMEOUT_S": "20",
}


def serve(models_dir: Path, **env: str) -> Iterator[str]:
    port = free_port()
    settings = {"TRANSFORMER_MODELS_DIR": str(models_dir), "TRANSFORMER_PORT": str(port), **LIMITS, **env}
    command = [sys.executable, "-m", "service.cli", "serve"]
    proc = subprocess.Popen(
        command, env={**os.environ, **settings}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, lambda: "transformer serve did not start")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize(
    "access",
    [
        {},
        {
            "TRANSFORMER_API_KEYS": KEY,
            "TRANSFORMER_RATE_LIMIT": "0",  # the run sends far more than a minute's requests
            "TRANSFORMER_AUTH_FAILURES_PER_MINUTE": "1000000",  # and many wrong keys on purpose
        },
    ],
    ids=["open", "keys"],
)
def test_every_operation_conforms_to_the_document(models_dir: Path, access: dict[str, str], tmp_path: Path) -> None:
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert cli is not None, "schemathesis is a test dependency"
    for url in serve(models_dir, **access):
        auth = ["-H", f"Authorization: Bearer {KEY}"] if access else []
        command = [
            cli,
            "--config-file",
            str(CONFIG),
            "run",
            f"{url}/openapi.json",
            "--checks",
            "all",
            # DELETE /jobs/{id} cancels a job still queued or running, which GET then shows as cancelled (README);
            # only an ended job's DELETE forgets it, which is what use_after_free expects of every DELETE.
            "--exclude-checks",
            "use_after_free",
            "--generation-deterministic",
            "--request-timeout",
            "60",
            *auth,
        ]
        # in tmp_path: schemathesis keeps a cache of what it found where it runs, not in the checkout
        run = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert run.returncode == 0, run.stdout[-6000:]
        assert "5xx" not in run.stdout.split("SUMMARY")[-1]


def test_the_document_states_this_deployments_keys_and_limits(models_dir: Path) -> None:
    from fastapi.testclient import TestClient

    from service.api.app import create_app
    from service.settings import ServiceSettings

    open_doc = TestClient(create_app(ServiceSettings(models_dir=models_dir, max_texts=7))).get("/openapi.json").json()
    assert "securitySchemes" not in open_doc["components"]
    translate = open_doc["paths"]["/translate"]["post"]
    assert "security" not in translate and "401" not in translate["responses"]
    q = open_doc["components"]["schemas"]["TextRequest"]["properties"]["q"]["oneOf"]
    assert q[0]["maxLength"] == 5000 and q[1]["maxItems"] == 7 and q[1]["items"]["pattern"].startswith("[^")
    keyed = ServiceSettings(models_dir=models_dir, api_keys=KEY, ops_need_key=True)
    doc = TestClient(create_app(keyed)).get("/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert doc["paths"]["/translate"]["post"]["security"] == [{"HTTPBearer": []}]
    assert doc["components"]["securitySchemes"] == {"HTTPBearer": {"type": "http", "scheme": "bearer"}}
    assert "401" in doc["paths"]["/metrics"]["get"]["responses"]  # operations need the key too here
    assert "security" not in doc["paths"]["/languages"]["get"] and "security" not in doc["paths"]["/healthz"]["get"]
