"""What the workers count, named once: the queue adds their increments up (in Redis mode, in Redis, shared by
every worker), and /metrics shows them under these names, prefixed with transformer_ (service.api.metrics)."""

from __future__ import annotations

import time

# A histogram of the texts in each decoding step, over BATCH_BUCKETS: its name and help; its sum is
# texts_in_steps_total, its count batches_total.
TEXTS_PER_STEP = ("batch_size", "Texts per decoding step.")
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)

# Cumulative counters: name -> help.
COUNTERS: dict[str, str] = {
    "batches_total": "Decoding steps (each adds one token to every text in its loop).",
    "texts_decoded_total": "Texts whose search ended.",
    "generated_tokens_total": "Target tokens decoded (every beam search step of a text).",
    "decode_seconds_total": "Time spent in beam search.",
    "admitted_texts_total": "Texts encoded and joined to a running beam search.",
    "admissions_total": "Times texts joined a running beam search (encoded together).",
    "admit_seconds_total": "Time spent encoding texts and joining them to a running search.",
}
# What the queue knows now: the name in ApiQueue.stats -> (the metric's name, help).
GAUGES: dict[str, tuple[str, str]] = {
    "queued": ("queue_depth", "Jobs waiting for a worker."),
    "in_flight_jobs": ("in_flight_jobs", "Jobs (each request's, and background jobs) workers are decoding."),
    "in_flight_texts": ("in_flight_texts", "Texts of those jobs still to decode."),
    "workers": ("workers", "Workers with a live heartbeat (Redis mode)."),
}


def bucket(le: int) -> str:
    """The counter of decoding steps with at most `le` texts."""
    return f"{TEXTS_PER_STEP[0]}_le_{le}"


def step_counts(sentences: int, finished: int, seconds: float) -> dict[str, float]:
    """Counter increments for one decoding step of `sentences` texts (one token each), `finished` of which
    ended."""
    out = {
        "batches_total": 1.0,
        "texts_in_steps_total": float(sentences),
        "generated_tokens_total": float(sentences),
        "texts_decoded_total": float(finished),
        "decode_seconds_total": seconds,
    }
    for b in BATCH_BUCKETS:
        if sentences <= b:
            out[bucket(b)] = 1.0
    return out


def admission_counts(texts: int, seconds: float) -> dict[str, float]:
    """Counter increments for one admission of `texts` texts into a running search."""
    return {"admissions_total": 1.0, "admitted_texts_total": float(texts), "admit_seconds_total": seconds}


# A worker sends its step and admission counts at most this often, and with every answer (so that /metrics is
# current for a client that has its answer), not every step: each send is a round trip to Redis, or a line to the
# API's process that its Bridge thread wakes for (service.queue.processes), on steps of 1-10 ms.
COUNTS_EVERY_S = 0.25


class PendingCounts:
    """A worker's counter increments not yet sent to its queue, added up between sends."""

    def __init__(self) -> None:
        self.counts: dict[str, float] = {}
        self.sent = time.monotonic()

    def add(self, increments: dict[str, float]) -> None:
        for name, v in increments.items():
            self.counts[name] = self.counts.get(name, 0.0) + v

    def pending(self) -> bool:
        """Whether some increment waits to be sent."""
        return bool(self.counts)

    def due(self) -> bool:
        """Whether the pending increments are to be sent now: COUNTS_EVERY_S after the last send."""
        return self.pending() and time.monotonic() - self.sent >= COUNTS_EVERY_S

    def take(self) -> dict[str, float]:
        """The counts to send now; none are pending after."""
        counts, self.counts, self.sent = self.counts, {}, time.monotonic()
        return counts
