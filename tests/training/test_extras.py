"""The train extra (pyproject.toml): serving works without it, and the commands that need it say so up front."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).parents[2]

# Runs in a fresh interpreter in which the train extra's packages cannot be imported, as in the service's image.
WITHOUT_TRAIN_EXTRA = textwrap.dedent("""
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("matplotlib", "sacrebleu", "rouge_score"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    import importlib.util
    real_find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a: None if name in ("matplotlib", "sacrebleu", "rouge_score") \\
        else real_find_spec(name, *a)
""")


def run_without_train_extra(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TRAIN_EXTRA + textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_serving_needs_no_train_extra(checkpoint_dir: Path, tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny").symlink_to(checkpoint_dir)
    result = run_without_train_extra(f"""
        from fastapi.testclient import TestClient
        from service.api.app import create_app
        from service.settings import ServiceSettings
        app = create_app(ServiceSettings(models_dir={str(models)!r}))
        with TestClient(app) as client:
            import time
            while client.get("/readyz").status_code != 200:
                time.sleep(0.1)
            r = client.post("/translate", json={{"q": "Hello world", "max_length": 5}})
            assert r.status_code == 200, r.text
        assert not {{"matplotlib", "sacrebleu", "rouge_score"}} & set(sys.modules)
        print("served")
    """)
    assert result.returncode == 0 and "served" in result.stdout, result.stderr[-2000:]


def test_commands_that_need_the_train_extra_say_so_before_starting(tmp_path: Path, checkpoint_dir: Path) -> None:
    config = ROOT / "training" / "configs" / "demo-en-de.yaml"
    for argv in (
        ["train", "--config", str(config), f"run_dir={tmp_path / 'run'}"],
        ["evaluate", "--model", str(checkpoint_dir), "--data", str(tmp_path / "test.jsonl")],
        ["attention", "--model", str(checkpoint_dir), "Hello", "--png", str(tmp_path / "a.png")],
    ):
        result = run_without_train_extra(f"""
            from service.cli import main
            sys.exit(main({argv!r}))
        """)
        assert result.returncode == 2, (argv, result.stderr[-2000:])
        assert "of the train extra: pip install 'transformer-service[train]'" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists(), "training started before the check"
