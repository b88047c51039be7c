"""A bound on the work a JSON body can make before it is parsed. Parsing costs about 0.2 us per value, so a
4 MB body of a million tiny values would hold the event loop for a quarter of a second, while the largest
legal request holds about as many values as texts. Vectorized: a few milliseconds for a few megabytes."""

from __future__ import annotations

import numpy as np

QUOTE, BACKSLASH = ord('"'), ord("\\")
SEPARATORS = tuple(map(ord, ",[{"))  # one per value or member, give or take one per container


def too_many_values(body: bytes, limit: int) -> bool:
    """Whether a JSON text holds more than about `limit` values: strings, or commas, brackets and braces
    outside strings. On invalid JSON the answer is still a bound; the parser that runs next rejects it."""
    a = np.frombuffer(body, dtype=np.uint8)
    quotes = np.flatnonzero(a == QUOTE)
    quotes = quotes[~escaped(a, quotes)]
    if quotes.size // 2 > limit:  # each pair of quotes is a string
        return True
    separators = np.flatnonzero((a == SEPARATORS[0]) | (a == SEPARATORS[1]) | (a == SEPARATORS[2]))
    if separators.size <= limit:
        return False
    before = np.searchsorted(separators, quotes[: quotes.size // 2 * 2])  # separators before each quote
    inside = int((before[1::2] - before[0::2]).sum())  # those between a string's opening and closing quote
    return separators.size - inside > limit


def escaped(a: np.ndarray, quotes: np.ndarray) -> np.ndarray:
    """Which quotes are escaped: those right after a run of an odd number of backslashes."""
    slashes = np.flatnonzero(a == BACKSLASH)
    if slashes.size == 0 or quotes.size == 0:
        return np.zeros(quotes.size, dtype=bool)
    breaks = np.flatnonzero(np.diff(slashes) != 1)  # runs of consecutive backslashes
    starts = slashes[np.r_[0, breaks + 1]]
    ends = slashes[np.r_[breaks, slashes.size - 1]]  # each run's last backslash
    run = np.minimum(np.searchsorted(ends, quotes - 1), ends.size - 1)  # the run that may end just before
    return (ends[run] == quotes - 1) & ((ends[run] - starts[run]) % 2 == 0)  # odd length: end - start even
