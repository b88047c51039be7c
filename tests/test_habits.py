"""The checks a developer runs before a commit (.pre-commit-config.yaml) are CI's (.ci/run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_the_pre_commit_hooks_are_valid_and_are_what_ci_runs() -> None:
    config = ROOT / ".pre-commit-config.yaml"
    check = subprocess.run([sys.executable, "-m", "pre_commit", "validate-config", str(config)], capture_output=True)
    assert check.returncode == 0, check.stdout + check.stderr
    hooks = [h for repo in yaml.safe_load(config.read_text())["repos"] for h in repo["hooks"]]
    ci = (ROOT / ".ci" / "run").read_text()
    for hook in hooks:
        tool = hook["entry"].replace(" --fix", "")  # the hook mends what CI only checks
        assert tool.split()[0] in ("ruff", "mypy", "npm") and tool in ci.replace(" --check", ""), hook["id"]
    assert {h["id"] for h in hooks} == {"ruff-check", "ruff-format", "mypy", "eslint"}
