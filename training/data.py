"""Streaming readers for the corpus formats users already have: aligned text files, TSV, JSONL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO


@dataclass(frozen=True)
class Pair:
    """One training example; origin names the catalog, domain or file it came from."""

    source: str
    target: str
    origin: str = ""


class CorpusError(ValueError):
    """A malformed corpus line, named by file and line number."""

    def __init__(self, path: str | Path, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path = str(path)
        self.line = line
        self.reason = reason


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text without newline), decoding UTF-8 line by line so errors name the line."""
    try:
        f = path.open("rb")
    except OSError as e:
        raise CorpusError(path, 0, f"cannot open ({e.strerror})") from e
    with f:
        for number, raw in enumerate(f, start=1):
            try:
                yield number, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise CorpusError(path, number, f"not valid UTF-8 ({e.reason} at byte {e.start})") from e


def read_parallel(source: str | Path, target: str | Path) -> Iterator[Pair]:
    """Two aligned files, line i of one translating line i of the other."""
    source, target = Path(source), Path(target)
    tgt_lines = _lines(target)
    for n, s in _lines(source):
        t = next(tgt_lines, None)
        if t is None:
            raise CorpusError(target, n, f"ends before {source} (which has a line {n})")
        yield Pair(s, t[1], source.name)
    extra = next(tgt_lines, None)
    if extra is not None:
        raise CorpusError(target, extra[0], f"has more lines than {source}")


def read_tsv(path: str | Path, source_column: int = 0, target_column: int = 1) -> Iterator[Pair]:
    """Tab-separated lines; the two named columns are source and target."""
    path = Path(path)
    need = max(source_column, target_column) + 1
    for n, line in _lines(path):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) < need:
            raise CorpusError(path, n, f"has {len(cols)} tab-separated column(s), need at least {need}")
        yield Pair(cols[source_column], cols[target_column], path.name)


def read_jsonl(path: str | Path, source_field: str = "source", target_field: str = "target") -> Iterator[Pair]:
    """One JSON object per line, e.g. {"source", "target"} or {"document", "summary"}."""
    path = Path(path)
    for n, line in _lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(path, n, f"not valid JSON ({e.msg} at column {e.colno})") from e
        if not isinstance(obj, dict):
            raise CorpusError(path, n, "is not a JSON object")
        for name in (source_field, target_field):
            if not isinstance(obj.get(name), str):
                raise CorpusError(path, n, f"field {name!r} is missing or not a string")
        yield Pair(obj[source_field], obj[target_field], str(obj.get("origin", path.name)))


def write_jsonl(pairs: Iterator[Pair] | list[Pair], out: TextIO) -> int:
    """Write pairs as JSONL with source, target and origin fields; returns the count."""
    count = 0
    for p in pairs:
        out.write(json.dumps({"source": p.source, "target": p.target, "origin": p.origin}, ensure_ascii=False))
        out.write("\n")
        count += 1
    return count
