"""Prometheus text exposition of the API's own request metrics and the workers' batch counters."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import defaultdict
from itertools import accumulate

from service.queue.counters import BATCH_BUCKETS, COUNTERS, GAUGES, TEXTS_PER_STEP, bucket

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class RequestMetrics:
    """Request counts and a latency histogram per route, for this API process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: dict[tuple[str, int], int] = defaultdict(int)
        # Requests per latency bucket, not yet cumulative (render sums them): one count a request. The last
        # counts those over the largest bound, so a route's total is their sum.
        self.buckets: dict[str, list[int]] = defaultdict(lambda: [0] * (len(LATENCY_BUCKETS) + 1))
        self.sum: dict[str, float] = defaultdict(float)

    def observe(self, route: str, status: int, seconds: float) -> None:
        with self.lock:
            self.count[(route, status)] += 1
            self.sum[route] += seconds
            self.buckets[route][bisect_left(LATENCY_BUCKETS, seconds)] += 1  # the first bound >= seconds

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
            for route in sorted(self.buckets):
                *within, total = accumulate(self.buckets[route])  # cumulative counts; the last is every request
                for b, c in zip(LATENCY_BUCKETS, within, strict=True):
                    out.append(f'transformer_request_seconds_bucket{{route="{route}",le="{b}"}} {c}')
                out.append(f'transformer_request_seconds_bucket{{route="{route}",le="+Inf"}} {total}')
                out.append(f'transformer_request_seconds_sum{{route="{route}"}} {self.sum[route]:.6f}')
                out.append(f'transformer_request_seconds_count{{route="{route}"}} {total}')
        return out


def render_queue(stats: dict[str, float], ready: bool) -> list[str]:
    """Gauges and the workers' counters (service.queue.counters; shared through Redis in Redis mode); a gauge
    is -1 while the queue is down."""
    g = stats.get
    out = [
        "# HELP transformer_ready 1 once the models are loaded.",
        "# TYPE transformer_ready gauge",
        f"transformer_ready {int(ready)}",
    ]
    for key, (name, help_text) in GAUGES.items():
        if key in stats or key != "workers":  # workers: in Redis mode only
            out += [
                f"# HELP transformer_{name} {help_text}",
                f"# TYPE transformer_{name} gauge",
                f"transformer_{name} {g(key, -1):g}",
            ]
    steps, (name, help_text) = g("batches_total", 0.0), TEXTS_PER_STEP
    out += [f"# HELP transformer_{name} {help_text}", f"# TYPE transformer_{name} histogram"]
    out += [f'transformer_{name}_bucket{{le="{b}"}} {g(bucket(b), 0.0):g}' for b in BATCH_BUCKETS]
    out += [
        f'transformer_{name}_bucket{{le="+Inf"}} {steps:g}',
        f"transformer_{name}_sum {g('texts_in_steps_total', 0.0):g}",
        f"transformer_{name}_count {steps:g}",
    ]
    for name, help_text in COUNTERS.items():
        out += [
            f"# HELP transformer_{name} {help_text}",
            f"# TYPE transformer_{name} counter",
            f"transformer_{name} {g(name, 0.0):.6f}"
            if name.endswith("seconds_total")
            else f"transformer_{name} {g(name, 0.0):g}",
        ]
    seconds = g("decode_seconds_total", 0.0)
    rate = g("generated_tokens_total", 0.0) / seconds if seconds else 0.0
    out += [
        "# HELP transformer_decode_tokens_per_second Target tokens per second of decoding, since start.",
        "# TYPE transformer_decode_tokens_per_second gauge",
        f"transformer_decode_tokens_per_second {rate:.3f}",
    ]
    return out
