"""Prometheus text exposition of the API's own request metrics and the workers' batch counters."""

from __future__ import annotations

import threading
from collections import defaultdict

from service.queue import BATCH_BUCKETS

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class RequestMetrics:
    """Request counts and a latency histogram per route, for this API process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: dict[tuple[str, int], int] = defaultdict(int)
        self.buckets: dict[str, list[int]] = defaultdict(lambda: [0] * len(LATENCY_BUCKETS))
        self.sum: dict[str, float] = defaultdict(float)
        self.n: dict[str, int] = defaultdict(int)

    def observe(self, route: str, status: int, seconds: float) -> None:
        with self.lock:
            self.count[(route, status)] += 1
            self.sum[route] += seconds
            self.n[route] += 1
            for i, b in enumerate(LATENCY_BUCKETS):
                if seconds <= b:
                    self.buckets[route][i] += 1

    def render(self) -> list[str]:
        out = [
            "# HELP transformer_requests_total HTTP requests by route and status.",
            "# TYPE transformer_requests_total counter",
        ]
        with self.lock:
            out += [
                f'transformer_requests_total{{route="{r}",status="{s}"}} {c}'
                for (r, s), c in sorted(self.count.items())
            ]
            out += [
                "# HELP transformer_request_seconds Request latency by route.",
                "# TYPE transformer_request_seconds histogram",
            ]
            for route in sorted(self.n):
                for b, c in zip(LATENCY_BUCKETS, self.buckets[route], strict=True):
                    out.append(f'transformer_request_seconds_bucket{{route="{route}",le="{b}"}} {c}')
                out.append(f'transformer_request_seconds_bucket{{route="{route}",le="+Inf"}} {self.n[route]}')
                out.append(f'transformer_request_seconds_sum{{route="{route}"}} {self.sum[route]:.6f}')
                out.append(f'transformer_request_seconds_count{{route="{route}"}} {self.n[route]}')
        return out


def render_queue(stats: dict[str, float], ready: bool) -> list[str]:
    """Gauges and the workers' counters (shared through Redis in Redis mode); -1 when the queue is down."""
    g = stats.get
    seconds = g("decode_seconds_total", 0.0)
    rate = g("generated_tokens_total", 0.0) / seconds if seconds else 0.0
    out = [
        "# HELP transformer_ready 1 once the models are loaded.",
        "# TYPE transformer_ready gauge",
        f"transformer_ready {int(ready)}",
        "# HELP transformer_queue_depth Tasks waiting for a worker.",
        "# TYPE transformer_queue_depth gauge",
        f"transformer_queue_depth {g('queued', -1):g}",
        "# HELP transformer_in_flight_tasks Tasks (requests and jobs) workers are decoding.",
        "# TYPE transformer_in_flight_tasks gauge",
        f"transformer_in_flight_tasks {g('in_flight_tasks', -1):g}",
        "# HELP transformer_in_flight_texts Texts of those tasks still to decode.",
        "# TYPE transformer_in_flight_texts gauge",
        f"transformer_in_flight_texts {g('in_flight_texts', -1):g}",
        "# HELP transformer_batches_total Decoding steps (each adds one token to every text in its loop).",
        "# TYPE transformer_batches_total counter",
        f"transformer_batches_total {g('batches_total', 0.0):g}",
        "# HELP transformer_batch_size Texts per decoding step.",
        "# TYPE transformer_batch_size histogram",
    ]
    out += [f'transformer_batch_size_bucket{{le="{b}"}} {g(f"batch_size_le_{b}", 0.0):g}' for b in BATCH_BUCKETS]
    out += [
        f'transformer_batch_size_bucket{{le="+Inf"}} {g("batches_total", 0.0):g}',
        f"transformer_batch_size_sum {g('batch_sentences_total', 0.0):g}",
        f"transformer_batch_size_count {g('batches_total', 0.0):g}",
        "# HELP transformer_texts_decoded_total Texts whose search ended.",
        "# TYPE transformer_texts_decoded_total counter",
        f"transformer_texts_decoded_total {g('texts_decoded_total', 0.0):g}",
        "# HELP transformer_generated_tokens_total Target tokens decoded (every beam search step of a text).",
        "# TYPE transformer_generated_tokens_total counter",
        f"transformer_generated_tokens_total {g('generated_tokens_total', 0.0):g}",
        "# HELP transformer_decode_seconds_total Time spent in beam search.",
        "# TYPE transformer_decode_seconds_total counter",
        f"transformer_decode_seconds_total {seconds:.6f}",
        "# HELP transformer_admitted_texts_total Texts encoded and joined to a running beam search.",
        "# TYPE transformer_admitted_texts_total counter",
        f"transformer_admitted_texts_total {g('admitted_texts_total', 0.0):g}",
        "# HELP transformer_admissions_total Times texts joined a running beam search (encoded together).",
        "# TYPE transformer_admissions_total counter",
        f"transformer_admissions_total {g('admissions_total', 0.0):g}",
        "# HELP transformer_admit_seconds_total Time spent encoding texts and joining them to a running search.",
        "# TYPE transformer_admit_seconds_total counter",
        f"transformer_admit_seconds_total {g('admit_seconds_total', 0.0):.6f}",
        "# HELP transformer_decode_tokens_per_second Target tokens per second of decoding, since start.",
        "# TYPE transformer_decode_tokens_per_second gauge",
        f"transformer_decode_tokens_per_second {rate:.3f}",
    ]
    if "workers" in stats:
        out += [
            "# HELP transformer_workers Workers with a live heartbeat.",
            "# TYPE transformer_workers gauge",
            f"transformer_workers {stats['workers']:g}",
        ]
    return out
