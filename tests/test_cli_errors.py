"""Every user mistake at the command line is one line on stderr and exit 2, naming the file, line, key or
environment variable at fault; no traceback. And `--version`, and help that shows the defaults."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[1]
DEMO = str(ROOT / "training" / "configs" / "demo-en-de.yaml")


def transformer(*args: str, env: dict[str, str] | None = None, stdin: str = "") -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        input=stdin,
        text=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(out: subprocess.CompletedProcess[str], *words: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, out.stderr[-2000:]
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_a_yaml_override_that_does_not_parse(tmp_path: Path) -> None:
    assert_one_line_error(
        transformer("train", "--config", DEMO, f"run_dir={tmp_path}", "lr_scale=[1"),
        "override 'lr_scale=[1'",
        "not valid YAML",
    )


def test_a_corpus_that_cleans_down_to_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.en").write_text("\n\n")
    (tmp_path / "a.de").write_text("\n\n")
    out = transformer(
        "corpus",
        "--config",
        DEMO,
        f"run_dir={tmp_path / 'run'}",
        "data.corpus=parallel",
        f"data.paths=[{tmp_path / 'a.en'}, {tmp_path / 'a.de'}]",
    )
    assert_one_line_error(out, "no training pairs left after cleaning", "data.paths")


def test_evaluate_on_an_empty_or_missing_file(tmp_path: Path, checkpoint_dir: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("")
    assert_one_line_error(
        transformer("evaluate", "--model", str(checkpoint_dir), "--data", str(tmp_path / "empty.jsonl")),
        "empty.jsonl",
        "no pairs",
    )
    assert_one_line_error(
        transformer("evaluate", "--model", str(checkpoint_dir), "--data", str(tmp_path / "nope.jsonl")),
        "nope.jsonl",
        "no such file",
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: asking for it is no mistake here")
def test_a_device_that_is_not_there(checkpoint_dir: Path) -> None:
    assert_one_line_error(
        transformer("translate", "--model", str(checkpoint_dir), "--device", "cuda", stdin="a\n"),
        "CUDA is not available",
        "use cpu",
    )


def test_a_device_that_does_not_exist(checkpoint_dir: Path) -> None:
    assert_one_line_error(
        transformer("translate", "--model", str(checkpoint_dir), "--device", "gpu", stdin="a\n"),
        "device must be cpu, cuda or cuda:N",
        "'gpu'",
    )


def test_a_setting_that_does_not_validate_names_its_variable() -> None:
    assert_one_line_error(transformer("serve", env={"TRANSFORMER_PORT": "abc"}), "TRANSFORMER_PORT:", "integer")
    assert_one_line_error(
        transformer("worker", env={"REDIS_URL": "redis://127.0.0.1:1/0", "TRANSFORMER_MAX_BATCH_SIZE": "0"}),
        "TRANSFORMER_MAX_BATCH_SIZE:",
    )


def test_version_and_help_with_defaults() -> None:
    out = transformer("--version")
    assert out.returncode == 0 and out.stdout.startswith("transformer ")
    help_text = transformer("translate", "--help").stdout
    assert "(default: the model's own, else 4)" in help_text and "(default: 32)" in help_text  # beam, batch size
