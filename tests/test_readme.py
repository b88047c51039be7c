"""The README's set-up commands are the ones CI runs, so the two cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    test_command = next(c for c in readme_commands() if "pytest" in c)
    for step in test_command.split(" && "):
        step = step.replace("pip install", "python3 -m pip install -q")
        assert step in ci, f"{step!r} is not a line of .ci/run"


def test_ci_installs_the_cpu_torch_the_readme_names() -> None:
    first = readme_commands()[0]
    assert first.startswith(
        'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e ".[train]"'
    )
    assert "python3 -m pip install -q torch==2.13.0" in (ROOT / ".ci" / "run").read_text()


def test_the_main_command_is_the_demo() -> None:
    assert readme_commands()[0].endswith("&& transformer demo")
