"""This machine's processor as /proc/cpuinfo names it: its vendor and its instruction-set flags, read once. The
CPU's fast paths are chosen by them: the float32 weights' layout (model.packing) and the int8 kernels
(model.quantize)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Processor:
    vendor: str  # vendor_id: GenuineIntel, AuthenticAMD, ...; "" where /proc/cpuinfo does not say
    flags: frozenset[str]  # the first processor's flags: avx512_vnni, amx_int8, ...


def parse_cpuinfo(text: str) -> Processor:
    """The vendor and flags of the first processor listed in /proc/cpuinfo's text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return Processor(fields.get("vendor_id", ""), frozenset(fields.get("flags", "").split()))


@functools.cache
def processor() -> Processor:
    """This machine's processor (parse_cpuinfo); no vendor and no flags where /proc/cpuinfo cannot be read."""
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace"))
    except OSError:
        return Processor("", frozenset())
