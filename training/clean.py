"""Corpus cleaning (empty lines, length limits, length ratio, duplicates) and a deterministic split."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from training.data import Pair


@dataclass(frozen=True)
class CleanConfig:
    """Filters applied before training; lengths are in whitespace-separated words."""

    min_words: int = 1
    max_words: int = 100
    max_ratio: float = 3.0  # longest side / shortest side, in characters; 0 disables
    dedup: bool = True
    collapse_whitespace: bool = True  # newlines and runs of spaces become one space
    max_per_origin: int = 0  # keep at most this many pairs of one origin (source item), the first ones; 0: all.
    # One program family can hold thousands of near-copies (gcloud's 16,000 manual pages): they would teach its
    # template rather than summarizing.
    min_overlap: float = 0.0  # summaries: a training pair is kept only if its target's content words are at
    # least this share in its source (overlap()); dev and test keep every pair. A docstring's summary line that
    # its description never mentions ("Helper function for _eval_expand_mul." of "sums must be a list of
    # instances of Basic.") teaches a small model to write generic lines instead of taking the document's words.

    def __post_init__(self) -> None:
        if self.min_words < 1 or self.max_words < self.min_words:
            raise ValueError("need 1 <= min_words <= max_words")
        if self.max_per_origin < 0:
            raise ValueError("max_per_origin must not be negative")
        if self.max_ratio < 0:
            raise ValueError("max_ratio must not be negative")
        if not 0.0 <= self.min_overlap <= 1.0:
            raise ValueError("min_overlap must be between 0 and 1")


@dataclass
class CleanStats:
    kept: int = 0
    empty: int = 0
    length: int = 0
    ratio: int = 0
    duplicate: int = 0
    origin_cap: int = 0  # past max_per_origin
    overlap: int = 0  # training pairs below min_overlap

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def clean(pairs: Iterable[Pair], cfg: CleanConfig, stats: CleanStats | None = None) -> Iterator[Pair]:
    """The pairs that pass every filter, in their original order; counts go into stats."""
    stats = stats if stats is not None else CleanStats()
    seen: set[bytes] = set()
    per_origin: dict[str, int] = {}
    for p in pairs:
        source, target = p.source.strip(), p.target.strip()
        if cfg.collapse_whitespace:
            source, target = " ".join(source.split()), " ".join(target.split())
        if not source or not target:
            stats.empty += 1
            continue
        words = (len(source.split()), len(target.split()))
        if min(words) < cfg.min_words or max(words) > cfg.max_words:
            stats.length += 1
            continue
        chars = sorted((len(source), len(target)))
        if cfg.max_ratio and chars[1] > cfg.max_ratio * chars[0] and chars[1] > 10:
            stats.ratio += 1
            continue
        if cfg.dedup:
            key = hashlib.blake2b(f"{source}\t{target}".encode(), digest_size=16).digest()
            if key in seen:
                stats.duplicate += 1
                continue
            seen.add(key)
        if cfg.max_per_origin:
            per_origin[p.origin] = per_origin.get(p.origin, 0) + 1
            if per_origin[p.origin] > cfg.max_per_origin:
                stats.origin_cap += 1
                continue
        stats.kept += 1
        yield Pair(source, target, p.origin)


# English function words: what a summary shares with any document, so they do not count as overlap.
FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "it",
        "its",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "from",
        "with",
        "as",
        "into",
        "over",
        "about",
        "and",
        "or",
        "but",
        "not",
        "no",
        "if",
        "then",
        "than",
        "so",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "has",
        "have",
        "had",
        "do",
        "does",
        "did",
        "can",
        "could",
        "will",
        "would",
        "should",
        "may",
        "might",
        "must",
        "which",
        "who",
        "whom",
        "whose",
        "what",
        "when",
        "where",
        "how",
        "all",
        "any",
        "each",
        "some",
        "such",
        "other",
    ]
)
WORD = re.compile(r"[a-z0-9]+")


def overlap(pair: Pair) -> float:
    """The share of the target's content words (lowercased letter and digit runs, not FUNCTION_WORDS) that
    the source holds; 1.0 for a target without any."""
    words = [w for w in WORD.findall(pair.target.lower()) if w not in FUNCTION_WORDS]
    if not words:
        return 1.0
    source = set(WORD.findall(pair.source.lower()))
    return sum(w in source for w in words) / len(words)


def supported(train: list[Pair], cfg: CleanConfig, stats: CleanStats) -> list[Pair]:
    """The training pairs whose target the source supports (overlap() of min_overlap or more); the others
    are counted in stats.overlap."""
    kept = [p for p in train if not cfg.min_overlap or overlap(p) >= cfg.min_overlap]
    stats.overlap += len(train) - len(kept)
    return kept


@dataclass(frozen=True)
class SplitConfig:
    """Fractions of dev and test, chosen by a hash of the source text (stable across runs and order);
    whole origins (catalogs, domains) can be held out into the test split."""

    dev: float = 0.01
    test: float = 0.01
    seed: int = 0
    holdout: tuple[str, ...] = field(default=())
    by_origin: bool = False  # hash each pair's origin (its source item) rather than its text: near-copies from
    # one item (a program's pages, a source package's binaries) stay on one side of the split
    max_dev: int = 500  # dev is decoded at every evaluation: keep it small
    max_test: int = 2000

    def __post_init__(self) -> None:
        if self.dev < 0 or self.test < 0 or self.dev + self.test >= 1:
            raise ValueError("dev and test fractions must be >= 0 and sum to less than 1")


@dataclass
class Splits:
    train: list[Pair] = field(default_factory=list)
    dev: list[Pair] = field(default_factory=list)
    test: list[Pair] = field(default_factory=list)


def split(pairs: Iterable[Pair], cfg: SplitConfig) -> Splits:
    """Deterministic train/dev/test split. The same source text always lands in the same split,
    so a sentence never appears on both sides of the line."""
    out = Splits()
    for p in pairs:
        if p.origin in cfg.holdout:
            bucket = out.test
        else:
            key = p.origin if cfg.by_origin else p.source
            digest = hashlib.blake2b(f"{cfg.seed}\t{key}".encode(), digest_size=8).digest()
            u = int.from_bytes(digest, "big") / 2**64
            bucket = out.dev if u < cfg.dev else out.test if u < cfg.dev + cfg.test else out.train
        limit = cfg.max_dev if bucket is out.dev else cfg.max_test if bucket is out.test else None
        if limit is None or len(bucket) < limit:
            bucket.append(p)
    return out
