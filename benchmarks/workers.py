"""Workers (TRANSFORMER_WORKERS) against torch threads: the same cores given to one search on every thread or to
independent single-thread searches, through HTTP, in alternating rounds (benchmarks/README, issue 36).

Each configuration is `NAME=KEY:VALUE,...` of TRANSFORMER_* settings. Embedded (the default): one `transformer
serve` per configuration, all up at once. With --redis URL: one `transformer serve` on Redis per configuration
(each its own queue prefix) and `--processes` `transformer worker` processes with the configuration's settings.
Reported per configuration and round: sentences/s, p50 and p99, and server CPU per request (API; its worker
processes, when it has any).

    python benchmarks/workers.py --model bench/ours --text bench/marian/test.en \
        one=workers:1,threads:2 two=workers:2,threads:2
    python benchmarks/workers.py --model bench/ours --text bench/marian/test.en --redis redis://127.0.0.1:6379/0 \
        one=workers:1,threads:2 two=workers:2,threads:2 two-processes=threads:1 --processes 1,1,2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from pathlib import Path

from peer import cpu_seconds, descendants, ours_configs
from serve import ServerProcess, drive

BASE = {"max_queue": "100000", "rate_limit": "0", "request_timeout_s": "600"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("configs", nargs="+", help="NAME=KEY:VALUE,... settings of one server (and its workers)")
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--text", type=Path, required=True)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--redis", default=None, help="Redis mode: the URL of a Redis to use (queue prefixes of its own)")
    p.add_argument("--processes", default=None, help="with --redis: worker processes per configuration, e.g. 1,2")
    args = p.parse_args()
    configs = ours_configs(args.configs)
    processes = [int(x) for x in args.processes.split(",")] if args.processes else [1] * len(configs)
    if len(processes) != len(configs):
        p.error("--processes needs one count per configuration")
    texts = [line.strip() for line in args.text.read_text(encoding="utf-8").splitlines() if line.strip()]
    drive_args = argparse.Namespace(peer=None, text=args.text, beam_size=args.beam_size)
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        models.mkdir()
        (models / "bench").symlink_to(args.model.resolve())
        servers = {
            name: ServerProcess(models, {**BASE, **settings}, redis=args.redis, workers=count)
            for (name, settings), count in zip(configs.items(), processes, strict=True)
        }
        try:
            for server in servers.values():
                server.__enter__()
            for r in range(args.rounds):
                order = list(servers.items())[:: 1 if r % 2 == 0 else -1]
                for name, server in order:
                    asyncio.run(drive(server.url, texts[:20], 1, drive_args))  # warm-up
                    # the workers: `transformer worker` processes, or the embedded queue's worker processes
                    pids = [w.pid for w in server.workers] or descendants(server.proc.pid)
                    api, work = cpu_seconds(server.proc.pid, tree=False), sum(cpu_seconds(pid) for pid in pids)
                    seconds, lat = asyncio.run(drive(server.url, texts, args.clients, drive_args))
                    api = 1000 * (cpu_seconds(server.proc.pid, tree=False) - api) / len(texts)
                    work = 1000 * (sum(cpu_seconds(pid) for pid in pids) - work) / len(texts)
                    q = statistics.quantiles(lat, n=100, method="inclusive")
                    cpu = f"API {api:.2f}, worker processes {work:.1f}" if pids else f"{api:.1f}"
                    print(
                        f"round {r + 1} {name:14s} N={args.clients}: {len(texts) / seconds:6.1f} sentences/s  "
                        f"p50 {1000 * statistics.median(lat):5.0f} ms  p99 {1000 * q[98]:5.0f} ms  "
                        f"CPU ms/request {cpu}",
                        flush=True,
                    )
        finally:
            for server in servers.values():
                server.__exit__()  # and its `transformer worker` processes


if __name__ == "__main__":
    main()
