"""The deployment for real: the image built from this working tree, docker/compose.yaml run with 2 workers on a
real Docker engine, a model put into the `models` volume the README's way, and faults on the running stack.

The engine: one that answers already, else the machine's own `docker-engine.sh start` (TRANSFORMER_DOCKER_ENGINE
names it; by default ../shared/tools/docker-engine.sh beside the checkout, or /work/shared/tools). Where neither
exists, the test fails and says so; TRANSFORMER_SKIP_DOCKER=1 skips it knowingly. About 4 minutes from cold.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from model.translator import Translator
from service.queue.keys import Keys
from tests.conftest import SPM_VOCAB, make_sentences, save_random_checkpoint

ROOT = Path(__file__).parents[2]
PROJECT = "transformer-deploy-test"  # its own compose project: a stack of the same machine is left alone
IMAGE = "transformer-service:cpu"  # the tag docker/compose.yaml names
ENGINE_SCRIPTS = (ROOT.parent / "shared" / "tools" / "docker-engine.sh", Path("/work/shared/tools/docker-engine.sh"))
OPTIONS = {"beam_size": 4, "max_length": 16}
KEYS = Keys()  # the default prefix, as compose.yaml leaves it
# The shipped compose file, with the API on a free port of the loopback interface, jobs of a killed worker
# reclaimed after 3 s rather than 30, and 2 texts a batch so that a job lasts long enough to be hit mid-way.
OVERRIDE = """
services:
  api:
    ports: !override
      - "127.0.0.1::8000"
    environment:
      TRANSFORMER_CLAIM_IDLE_MS: "3000"
  worker:
    environment:
      TRANSFORMER_CLAIM_IDLE_MS: "3000"
      TRANSFORMER_MAX_BATCH_SIZE: "2"
"""

pytestmark = pytest.mark.skipif(
    os.environ.get("TRANSFORMER_SKIP_DOCKER") == "1",
    reason="TRANSFORMER_SKIP_DOCKER=1: the deployment test was skipped on purpose",
)


def engine_env() -> tuple[dict[str, str], Path | None]:
    """The environment that reaches a running engine, and the script that started it (None: it was running)."""
    env = dict(os.environ)
    named = os.environ.get("TRANSFORMER_DOCKER_ENGINE")
    script = Path(named) if named else next((p for p in ENGINE_SCRIPTS if p.is_file()), None)
    if script is None or not script.is_file():  # an engine set up by other means, with compose v2 on PATH
        docker = shutil.which("docker")
        if docker is None or subprocess.run([docker, "info"], capture_output=True).returncode != 0:
            pytest.fail(
                "no Docker engine answers and no docker-engine.sh was found to start one: set "
                "TRANSFORMER_DOCKER_ENGINE to it, or TRANSFORMER_SKIP_DOCKER=1 to skip this test"
            )
        env.setdefault("TORCH_INDEX_URL", "https://download.pytorch.org/whl/cpu")
        return env, None
    running = subprocess.run(["bash", "-c", "/usr/bin/docker info"], capture_output=True).returncode == 0
    out = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    exports = next(line for line in out.stdout.splitlines() if line.startswith("export "))
    for pair in exports.removeprefix("export ").split():
        name, _, value = pair.partition("=")
        env[name] = value.replace("$PATH", env.get("PATH", ""))
    return env, None if running else script


def dockerfile_base() -> str:
    """The Dockerfile's default base image (its PYTHON_IMAGE)."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    return next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("ARG PYTHON_IMAGE="))


@dataclass
class Stack:
    env: dict[str, str]
    files: list[str]  # -f arguments of every compose command
    models: Path  # what was put into the models volume
    url: str = ""

    def run(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(list(args), cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check:
            assert out.returncode == 0, f"{' '.join(args)}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        return out

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("docker", "compose", "-p", PROJECT, *self.files, *args, timeout=timeout, check=check)

    def containers(self, service: str) -> list[str]:
        return self.compose("ps", "-q", service).stdout.split()

    def health(self, container: str) -> str:
        return self.run("docker", "inspect", "-f", "{{.State.Health.Status}}", container).stdout.strip()

    def redis(self, *command: str) -> str:
        return self.compose("exec", "-T", "redis", "redis-cli", *command).stdout.strip()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, spm_dir: Path) -> Iterator[Stack]:
    env, started = engine_env()
    tmp = tmp_path_factory.mktemp("deploy")
    override = tmp / "compose.test.yaml"
    override.write_text(OVERRIDE)
    models = tmp / "models"
    save_random_checkpoint(
        models / "tiny-en-de", spm_dir, SPM_VOCAB, seed=5, source_lang="en", target_lang="de", max_len=64
    )
    s = Stack(env, ["-f", str(ROOT / "docker" / "compose.yaml"), "-f", str(override)], models)
    local_base(s, dockerfile_base())
    start = time.monotonic()
    s.run(
        "docker",
        "build",
        "--network=host",
        "--build-arg",
        f"TORCH_INDEX_URL={env['TORCH_INDEX_URL']}",
        "-t",
        IMAGE,
        ".",
        timeout=900,
    )
    print(f"image built in {time.monotonic() - start:.1f} s")
    s.compose("down", "-v", "--remove-orphans")  # what a killed earlier run may have left
    try:
        # The README's way to put a model into the volume: a one-off container, as the service's user, copies
        # the checkpoint from a read-only bind mount (so its files must be readable by that user).
        s.compose(
            "run",
            "--rm",
            "--no-deps",
            "-v",
            f"{models / 'tiny-en-de'}:/checkpoint:ro",
            "api",
            "cp",
            "-r",
            "/checkpoint",
            "/models/tiny-en-de",
        )
        start = time.monotonic()
        s.compose("up", "-d", "--no-build", "--scale", "worker=2", "--wait", "--wait-timeout", "180", timeout=300)
        print(f"stack healthy {time.monotonic() - start:.1f} s after up")
        port = s.compose("port", "api", "8000").stdout.strip().rsplit(":", 1)[1]
        s.url = f"http://127.0.0.1:{port}"
        yield s
    finally:
        s.compose("down", "-v", "--remove-orphans", check=False)
        if started is not None:
            subprocess.run(["bash", str(started), "stop"], capture_output=True, timeout=300)


def local_base(s: Stack, base: str) -> None:
    """The base image by the Dockerfile's name for it. An engine without Docker Hub holds what docker-engine.sh
    makes: `python:3.11-slim` built from Debian 12, the release the Dockerfile's `python:3.11-slim-bookworm` names
    (its tcmalloc package is pinned for it); that image takes the name once its os-release says so."""
    if s.run("docker", "image", "inspect", base, check=False).returncode == 0:
        return
    plain, _, release = base.rpartition("-")
    release_line = s.run("docker", "run", "--rm", plain, "grep", "^VERSION_CODENAME=", "/etc/os-release").stdout
    assert release_line.strip() == f"VERSION_CODENAME={release}", f"{plain} is not Debian {release}: {release_line}"
    s.run("docker", "tag", plain, base)


def expected(stack: Stack, texts: list[str]) -> list[str]:
    tr = Translator.load(stack.models / "tiny-en-de", device="cpu")
    return [
        t.text
        for t in tr.translate(texts, beam_size=OPTIONS["beam_size"], max_len_a=0.0, max_len_b=OPTIONS["max_length"])
    ]


def job_results(stack: Stack, job_id: str, deadline_s: float) -> list[str]:
    """Poll a job until it is done (failing on any other end) and read all its results."""
    end, job = time.monotonic() + deadline_s, {}
    while time.monotonic() < end:
        r = httpx.get(f"{stack.url}/jobs/{job_id}", timeout=10)
        if r.status_code == 503:  # the API answers 503 while its Redis restarts
            time.sleep(0.3)
            continue
        job = r.json()
        if job["status"] == "done":
            return [r["text"] for r in job["results"]]
        assert job["status"] in ("queued", "running"), job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} not done within {deadline_s} s: {job}")


def submit_job(stack: Stack, texts: list[str]) -> str:
    r = httpx.post(f"{stack.url}/jobs", json={"texts": texts, **OPTIONS}, timeout=30)
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def wait_running(stack: Stack, job_id: str) -> dict[str, Any]:
    """The job's hash once a worker has decoded part of it."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        job = httpx.get(f"{stack.url}/jobs/{job_id}", timeout=10).json()
        assert job["status"] != "done", "the job ended before the fault could hit it: make it longer"
        if job["status"] == "running" and job["progress"]["done"] > 0:
            raw = stack.redis("--raw", "HGETALL", KEYS.job(job_id)).splitlines()
            return dict(zip(raw[::2], raw[1::2], strict=True))
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never started")


def assert_queue_empty(stack: Stack) -> None:
    assert stack.redis("XLEN", KEYS.stream) == "0"
    assert stack.redis("XPENDING", KEYS.stream, KEYS.group).splitlines()[0] == "0"


def test_the_stack_comes_up_healthy_and_serves_the_model(stack: Stack) -> None:
    for service in ("api", "worker", "worker", "redis"):
        assert all(stack.health(c) == "healthy" for c in stack.containers(service)), service
    assert len(stack.containers("worker")) == 2
    assert httpx.get(f"{stack.url}/readyz", timeout=10).status_code == 200
    models = httpx.get(f"{stack.url}/models", timeout=10).json()
    assert [m["id"] for m in models["models"]] == ["tiny-en-de"] and models["errors"] == {}
    texts = make_sentences(6, seed=21)
    r = httpx.post(f"{stack.url}/translate", json={"q": texts, **OPTIONS}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"] == expected(stack, texts)


def test_the_workers_decode_on_tcmalloc(stack: Stack) -> None:
    """The image holds tcmalloc, so each `transformer worker` (the container's pid 1: the entry point execs it)
    has started itself again with it preloaded (TRANSFORMER_ALLOCATOR=auto, service/allocator.py)."""
    for container in stack.containers("worker"):
        maps = stack.run("docker", "exec", container, "cat", "/proc/1/maps").stdout
        assert "libtcmalloc_minimal" in maps, container
        environ = stack.run("docker", "exec", container, "cat", "/proc/1/environ").stdout.split("\0")
        assert any(e.startswith("LD_PRELOAD=") and "tcmalloc" in e for e in environ), environ


def test_a_job_survives_the_kill_of_its_worker(stack: Stack) -> None:
    texts = make_sentences(300, seed=22)
    job_id = submit_job(stack, texts)
    job = wait_running(stack, job_id)
    victim = next(c for c in stack.containers("worker") if job["worker"].startswith(c[:12] + "-"))
    stack.run("docker", "kill", victim)
    killed = time.monotonic()
    assert job_results(stack, job_id, deadline_s=180) == expected(stack, texts)
    after = dict(zip(*[iter(stack.redis("--raw", "HGETALL", KEYS.job(job_id)).splitlines())] * 2, strict=True))
    assert int(after["deliveries"]) >= 2 and after["worker"] != job["worker"], "the other worker finished it"
    print(f"job of {len(texts)} texts done {time.monotonic() - killed:.1f} s after its worker was killed")
    assert_queue_empty(stack)
    stack.compose("up", "-d", "--no-build", "--scale", "worker=2", "--wait", "--wait-timeout", "120")


def test_a_job_survives_a_restart_of_redis(stack: Stack) -> None:
    texts = make_sentences(300, seed=23)
    job_id = submit_job(stack, texts)
    wait_running(stack, job_id)
    stack.compose("restart", "redis")
    assert job_results(stack, job_id, deadline_s=180) == expected(stack, texts)
    assert_queue_empty(stack)
    r = httpx.post(f"{stack.url}/translate", json={"q": "after the restart", **OPTIONS}, timeout=60)
    assert r.status_code == 200 and r.json()["translatedText"] == expected(stack, ["after the restart"])[0]


def test_the_gpu_override_is_a_valid_deployment_for_compose_itself(stack: Stack) -> None:
    """It cannot run here (no GPU); compose reads and merges it, and each worker reserves an NVIDIA GPU."""
    gpu = ["-f", str(ROOT / "docker" / "compose.yaml"), "-f", str(ROOT / "docker" / "compose.gpu.yaml")]
    out = stack.run("docker", "compose", "-p", PROJECT, *gpu, "config", "--format", "json")
    services = json.loads(out.stdout)["services"]
    (device,) = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert services["worker"]["image"] == services["api"]["image"] == "transformer-service:cuda"
    assert services["api"]["build"]["args"]["TORCH_INDEX_URL"] == "https://pypi.org/simple"


def test_down_leaves_nothing_behind(stack: Stack) -> None:
    stack.compose("down", "-v")
    label = f"label=com.docker.compose.project={PROJECT}"
    assert stack.run("docker", "ps", "-aq", "--filter", label).stdout.split() == []
    assert stack.run("docker", "volume", "ls", "-q", "--filter", label).stdout.split() == []
    assert stack.run("docker", "network", "ls", "-q", "--filter", label).stdout.split() == []
