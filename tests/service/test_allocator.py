"""The decoding processes' allocator (service.allocator): which library "auto" and a named allocator choose, what
happens to a deploy's own LD_PRELOAD, and real processes that start with it loaded (their memory maps show it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from service import allocator
from service.allocator import AllocatorMissing, chosen, library, preloaded


def mapped(env: dict[str, str], code: str = "") -> str:
    """The shared objects a new Python process has mapped, after running code."""
    script = f"{code}\nprint(open('/proc/self/maps').read())"
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout


def test_the_machine_has_an_allocator_for_auto() -> None:
    """tests/system-deps.sh installs tcmalloc and jemalloc: auto picks tcmalloc."""
    assert library("tcmalloc") is not None and "tcmalloc" in str(chosen("auto"))
    assert chosen("system") is None and chosen("jemalloc") == library("jemalloc")


def test_a_named_allocator_the_machine_lacks_is_a_clear_error(no_jemalloc: None) -> None:
    with pytest.raises(AllocatorMissing, match="TRANSFORMER_ALLOCATOR=jemalloc.*apt install libjemalloc2"):
        chosen("jemalloc")
    assert "tcmalloc" in str(chosen("auto"))  # auto takes what there is


def test_preloaded_goes_first_and_a_deploys_own_allocator_wins() -> None:
    env = preloaded({"LD_PRELOAD": "libfoo.so", "PATH": "/bin"}, "auto")
    assert env["LD_PRELOAD"].split() == [str(chosen("auto")), "libfoo.so"] and env["PATH"] == "/bin"
    assert preloaded({"LD_PRELOAD": "/opt/libjemalloc.so.2"}, "tcmalloc")["LD_PRELOAD"] == "/opt/libjemalloc.so.2"
    assert "LD_PRELOAD" not in preloaded({"PATH": "/bin"}, "system")


def test_a_process_started_with_it_runs_on_it() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    assert "tcmalloc" in mapped(preloaded(env, "auto")) and "jemalloc" in mapped(preloaded(env, "jemalloc"))
    assert "tcmalloc" not in mapped(preloaded(env, "system"))


def test_restart_with_starts_the_process_again_once_with_its_allocator() -> None:
    """As `transformer worker` does: same arguments, the allocator loaded; and not again once loaded."""
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.RESTARTED)}
    lines = ["import sys", "from service.allocator import restart_with", "print('start', file=sys.stderr)"]
    script = "\n".join([*lines, "restart_with('auto')", "print(open('/proc/self/maps').read())"])
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert "tcmalloc" in run.stdout and run.stderr.count("start") == 2
    assert "tcmalloc" not in mapped(env, "from service.allocator import restart_with; restart_with('system')")


@pytest.mark.parametrize("name", ["tcmalloc", "jemalloc", "system"])
def test_trim_heap_gives_freed_memory_back_on_every_allocator(name: allocator.Allocator) -> None:
    """Loading a model frees the float weights that packing or quantizing replaced (model.translator.trim_heap):
    tcmalloc keeps freed memory resident unless told to release it, where glibc's malloc gives most back itself."""
    script = "\n".join(
        [
            "import torch",
            "from model.translator import trim_heap",
            "def rss(): return int(open('/proc/self/statm').read().split()[1]) * 4096 / 2**20",
            "xs = [torch.ones(256, 1024, 256) for _ in range(4)] + [torch.ones(1024, 1024) for _ in range(128)]",
            "held = rss()",
            "del xs",
            "trim_heap()",
            "print(held, rss())",
        ]
    )
    env = preloaded({k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}, name)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    held, after = map(float, out.stdout.split())
    assert held > 1500 and after < held - 1200, (name, held, after)  # 1.5 GiB made, at least 1.2 GiB given back


def test_the_translate_command_starts_again_on_its_allocator_before_torch(checkpoint_dir: Path) -> None:
    """`transformer translate` decodes in its own process (service.start): it runs on the allocator too, with the
    same output, and a setting it does not know is a one-line error."""
    script = "\n".join(
        [
            "import sys",
            f"sys.argv = ['transformer', 'translate', '--model', {str(checkpoint_dir)!r}, '--max-length', '4']",
            "from service.start import main",
            "assert 'torch' not in sys.modules  # so that starting again costs no import of torch",
            "code = main()",
            "print('mapped', 'tcmalloc' in open('/proc/self/maps').read(), code)",
        ]
    )
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", allocator.RESTARTED)}
    lines = "kalo mine\nvo sa ti ruza\n"
    runs = {}
    for setting in ("tcmalloc", "system"):
        env = {**base, "TRANSFORMER_ALLOCATOR": setting}
        run = subprocess.run([sys.executable, "-c", script], env=env, input=lines, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        *outputs, last = run.stdout.splitlines()
        assert last == f"mapped {setting == 'tcmalloc'} 0" and len(outputs) == 2
        runs[setting] = outputs
    assert runs["tcmalloc"] == runs["system"]
    env = {**base, "TRANSFORMER_ALLOCATOR": "tcmallloc"}
    run = subprocess.run([sys.executable, "-c", script], env=env, input=lines, capture_output=True, text=True)
    assert run.stdout.strip() == "mapped False 2" and run.stderr.startswith("error: TRANSFORMER_ALLOCATOR: one of auto")
