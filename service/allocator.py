"""The memory allocator of the decoding processes: tcmalloc (or jemalloc) in place of glibc's malloc, loaded by
LD_PRELOAD when a process starts, as PyTorch's CPU performance guide advises (its `torch.backends.xeon.run_cpu`
launcher does the same). A search step makes and frees some hundred tensors, of sizes that change as texts join
and leave; glibc's malloc and free take a share of the step's CPU time that tcmalloc's thread caches do not
(benchmarks/README, "Issue 36, eleventh stop"). An allocator cannot be changed inside a running process, so it
applies to the processes the service starts: the embedded queue's worker processes, and `transformer worker`,
which starts itself again once with it."""

from __future__ import annotations

import ctypes.util
import functools
import logging
import os
import sys
from collections.abc import Mapping
from typing import Literal

Allocator = Literal["auto", "system", "tcmalloc", "jemalloc"]  # ServiceSettings.allocator
LIBRARIES = {"tcmalloc": "tcmalloc_minimal", "jemalloc": "jemalloc"}  # as ctypes.util.find_library names them
PACKAGES = {  # Debian's, for the error message
    "tcmalloc": "libtcmalloc-minimal4 (libtcmalloc-minimal4t64 on Debian 13 and Ubuntu 24.04)",
    "jemalloc": "libjemalloc2",
}
# tcmalloc reports every allocation past 1 GiB on stderr; loading a large model makes several
QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)}
RESTARTED = "TRANSFORMER_ALLOCATOR_LOADED"  # set in a process started again with its allocator (restart_with)

log = logging.getLogger("service")


class AllocatorMissing(Exception):
    """TRANSFORMER_ALLOCATOR names an allocator this machine does not have."""


@functools.cache
def library(name: str) -> str | None:
    """The shared library of allocator `name` (tcmalloc, jemalloc) as the dynamic loader finds it, or None."""
    return ctypes.util.find_library(LIBRARIES[name])


def chosen(setting: Allocator) -> str | None:
    """The library to preload for a setting: none for "system"; for "auto" tcmalloc's, else jemalloc's, else
    none; a named allocator must be there (AllocatorMissing)."""
    if setting == "system":
        return None
    if setting == "auto":
        return library("tcmalloc") or library("jemalloc")
    found = library(setting)
    if found is None:
        raise AllocatorMissing(
            f"TRANSFORMER_ALLOCATOR={setting}: the library is not on this machine (Debian: apt install "
            f"{PACKAGES[setting]}); set TRANSFORMER_ALLOCATOR to auto or system"
        )
    return found


def preloaded(env: Mapping[str, str], setting: Allocator) -> dict[str, str]:
    """env for a new process, with the allocator of `setting` preloaded ahead of what LD_PRELOAD already holds,
    unless LD_PRELOAD already names an allocator (a deploy's own choice wins)."""
    out = dict(env)
    lib = chosen(setting)
    held = out.get("LD_PRELOAD", "")
    if lib is None or "malloc" in held:
        return out
    out["LD_PRELOAD"] = f"{lib} {held}".strip()
    return out if "tcmalloc" not in lib else out | {k: v for k, v in QUIET.items() if k not in out}


def restart_with(setting: Allocator) -> None:
    """Start this process again (same pid, arguments and environment) with the allocator of `setting`
    preloaded, unless it already runs with it or with no other allocator than the system's to load. Returns
    only when there is nothing to do; call before anything else starts (threads, sockets, files)."""
    if os.environ.get(RESTARTED):
        return
    env = preloaded(os.environ, setting)
    if env.get("LD_PRELOAD") == os.environ.get("LD_PRELOAD"):
        return
    env[RESTARTED] = "1"
    log.info("starting again with %s (TRANSFORMER_ALLOCATOR)", env["LD_PRELOAD"].split()[0])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)
