"""Public models by name: `transformer import HUB_ID OUT` through huggingface_hub's cache (pre-filled here: the
tests never reach the network), `transformer import-models` (once, then reused), `transformer demo --model`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from model.errors import ConfigError
from model.families import import_models
from model.hub import is_hub_id
from model.translator import Translator
from tests.conftest import make_sentences
from tests.model.hf_families import Family, build_family_dir
from tests.service.conftest import free_port, wait_until

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def m2m(tmp_path_factory: pytest.TempPathFactory) -> Family:
    return build_family_dir("m2m100", tmp_path_factory.mktemp("m2m100"))


@pytest.fixture(scope="module")
def cache(m2m: Family, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hub cache holding acme/tiny-m2m as huggingface_hub lays one out, acme/sharded with its weights in
    shards, and acme/pickled without safetensors."""
    root = tmp_path_factory.mktemp("hub")
    for repo, skip in (("tiny-m2m", ""), ("pickled", "model.safetensors"), ("sharded", "model.safetensors")):
        repo_dir = root / f"models--acme--{repo}"
        snapshot = repo_dir / "snapshots" / "0123abcd"
        shutil.copytree(m2m.hf_dir, snapshot, ignore=shutil.ignore_patterns(skip) if skip else None)
        if repo == "sharded":  # as save_pretrained leaves a model over its max_shard_size
            m2m.model.save_pretrained(str(snapshot), max_shard_size="200KB")
        (repo_dir / "refs").mkdir()
        (repo_dir / "refs" / "main").write_text("0123abcd")
    return root


def cli(*args: str, cache: Path, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", **env}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], cwd=cwd, env=environment, capture_output=True, text=True
    )


def test_hub_ids_are_told_from_directories(tmp_path: Path) -> None:
    assert is_hub_id("facebook/nllb-200-distilled-600M") and is_hub_id("t5-small")
    (tmp_path / "acme").mkdir()
    assert not is_hub_id(str(tmp_path / "acme")) and not is_hub_id("./acme") and not is_hub_id("a/b/c")


@pytest.mark.parametrize("repo", ["acme/tiny-m2m", "acme/sharded"])
def test_import_by_hub_id_reads_the_cache(cache: Path, m2m: Family, tmp_path: Path, repo: str) -> None:
    r = cli("import", repo, str(tmp_path / "ours"), cache=cache)
    assert r.returncode == 0, r.stderr
    got = Translator.load(tmp_path / "ours", device="cpu").translate(["kalo mine"], source_lang="en", target_lang="de")
    from model.families import import_model

    want = Translator.load(import_model(m2m.hf_dir, tmp_path / "direct"), device="cpu")
    assert got == want.translate(["kalo mine"], source_lang="en", target_lang="de")


@pytest.mark.parametrize(
    ("repo", "message"),
    [
        ("acme/missing", "acme/missing: not in the local hub cache, and the hub cannot be reached"),
        ("acme/pickled", "acme/pickled: has no model.safetensors nor model.safetensors.index.json"),
    ],
)
def test_hub_errors_are_one_line(cache: Path, tmp_path: Path, repo: str, message: str) -> None:
    r = cli("import", repo, str(tmp_path / "out"), cache=cache)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out").exists()


def test_import_models_imports_once_and_moves_in_whole(cache: Path, m2m: Family, tmp_path: Path) -> None:
    models = tmp_path / "models"
    listed = f"acme/tiny-m2m=m2m, {m2m.hf_dir}=local"
    r = cli("import-models", cache=cache, TRANSFORMER_IMPORT_MODELS=listed, TRANSFORMER_MODELS_DIR=str(models))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in models.iterdir()) == ["local", "m2m"]  # no half-written ones left
    stamp = (models / "m2m" / "model.safetensors").stat().st_mtime_ns
    r = cli("import-models", cache=cache, TRANSFORMER_IMPORT_MODELS=listed, TRANSFORMER_MODELS_DIR=str(models))
    assert r.returncode == 0 and (models / "m2m" / "model.safetensors").stat().st_mtime_ns == stamp  # reused
    with pytest.raises(ConfigError, match="give SRC or SRC=NAME"):
        import_models([f"{m2m.hf_dir}=../x"], models)


def test_demo_serves_a_public_model_imported_once(cache: Path, tmp_path: Path) -> None:
    for attempt in ("first", "second"):
        port = free_port()
        log = tmp_path / f"{attempt}.log"
        env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "demo", "--model", "acme/tiny-m2m", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: ready(url) or proc.poll() is not None, timeout=120, every=0.2)  # noqa: B023
            assert proc.poll() is None, log.read_text()
            [model] = httpx.get(f"{url}/models").json()["models"]
            assert model["id"] == "tiny-m2m" and "de" in model["languages"]
            text = make_sentences(1, seed=3)[0]
            r = httpx.post(f"{url}/translate", json={"q": text, "source": "en", "target": "de"}, timeout=60)
            assert r.status_code == 200, r.text
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        assert ("importing" if attempt == "first" else "reusing") in log.read_text()
    assert (tmp_path / "runs" / "demo-models" / "tiny-m2m" / "tiny-m2m" / "config.json").is_file()


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz").status_code == 200
    except httpx.TransportError:
        return False
