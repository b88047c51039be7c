"""The API's own CPU per request: `transformer serve` with an instant worker (every job answered as soon as it is
read, its texts echoed, no model run) against a bare FastAPI endpoint that echoes the same JSON, both under the
same uvicorn, driven by the same minimal keep-alive clients (serve.Connection), in alternating rounds. Server CPU
is read from /proc (every thread), so the number is what one request costs the process beside the decoder.

What `transformer serve` does for a request that the bare endpoint does not: the Host and key checks, the body
read within its limits, the request id and security headers, the request's metrics, the schema's validation,
checking each text's cost (service.registry), queueing the job and waking the request when it is answered.

    python benchmarks/api_cpu.py --model bench/ours --text bench/marian/test.en --clients 32 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from serve import Connection, Process

HERE = Path(__file__).resolve().parent


class TranslateRequest(BaseModel):
    """The bare endpoint's body (module level: FastAPI resolves the route's annotations by name)."""

    q: str


def serve_instant(models: Path, port: int) -> None:
    """`transformer serve` (embedded queue) whose worker answers every job at once with its texts."""
    import uvicorn

    import service.api.runtime
    from model.output import Hypothesis, Output
    from service.api.app import create_app
    from service.queue.contract import Answer, WorkerQueue
    from service.settings import ServiceSettings

    class InstantWorker:
        def __init__(self, queue: WorkerQueue, *_: Any) -> None:
            self.queue = queue

        def run(self, stop: threading.Event) -> None:
            while not stop.is_set():
                for job in self.queue.read(64, 1.0):
                    outputs = [Output([Hypothesis([], 0.0, 0.0, text)]) for text in job.texts]
                    self.queue.finish(job, Answer(outputs))

    service.api.runtime.Worker = InstantWorker  # type: ignore[misc,assignment]
    settings = ServiceSettings(
        models_dir=models, port=port, rate_limit=0, max_queue=100_000, workers=1, worker_processes=False
    )  # the instant worker is a thread of this process
    uvicorn.run(create_app(settings), host="127.0.0.1", port=port, log_config=None)


def serve_bare(port: int) -> None:
    """A bare FastAPI endpoint: the request's JSON validated by a model, the text echoed back."""
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/translate")
    async def translate(req: TranslateRequest) -> dict[str, Any]:
        return {"translatedText": req.q}

    @app.get("/readyz")
    async def ready() -> dict[str, str]:
        return {"status": "ready"}

    uvicorn.run(app, host="127.0.0.1", port=port, log_config=None)


def cpu_seconds(pid: int) -> float:
    from peer import cpu_seconds as read

    return read(pid)


async def drive(url: str, texts: list[str], clients: int) -> float:
    """Every text once, clients at a time; the wall time."""
    queue = list(reversed(texts))

    async def client(conn: Connection) -> None:
        while queue:
            status, payload = await conn.post("/translate", {"q": queue.pop()})
            if status != 200:
                raise RuntimeError(f"POST /translate answered {status}: {payload[:200]!r}")

    connections = [Connection(url) for _ in range(clients)]
    start = time.perf_counter()
    try:
        await asyncio.gather(*(client(c) for c in connections))
    finally:
        for c in connections:
            c.close()
    return time.perf_counter() - start


def measure(server: Process, texts: list[str], clients: int) -> tuple[float, float]:
    """(server CPU ms per request, requests/s) over every text."""
    asyncio.run(drive(server.url, texts[:200], clients))  # warm-up
    before = cpu_seconds(server.proc.pid)
    seconds = asyncio.run(drive(server.url, texts, clients))
    return 1000 * (cpu_seconds(server.proc.pid) - before) / len(texts), len(texts) / seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, help="a checkpoint directory (its tokenizer checks each text's cost)")
    p.add_argument("--text", type=Path, help="sentences, one per line")
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--serve", choices=["instant", "bare"], help=argparse.SUPPRESS)  # the servers' own processes
    p.add_argument("--models", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve == "instant":
        serve_instant(args.models, args.port)
        return
    if args.serve == "bare":
        serve_bare(args.port)
        return
    if args.model is None or args.text is None:
        p.error("--model and --text are needed")
    lines = [line.strip() for line in args.text.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = (lines * (args.requests // len(lines) + 1))[: args.requests]
    me = [sys.executable, str(Path(__file__).resolve())]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bench").symlink_to(args.model.resolve())
        ours = Process(lambda port: [*me, "--serve", "instant", "--models", tmp, "--port", str(port)])
        bare = Process(lambda port: [*me, "--serve", "bare", "--port", str(port)])
        results: dict[str, list[tuple[float, float]]] = {"ours": [], "bare": []}
        with ours, bare:
            for r in range(args.rounds):
                order = [("ours", ours), ("bare", bare)][:: 1 if r % 2 == 0 else -1]
                for name, server in order:
                    cpu, rate = measure(server, texts, args.clients)
                    results[name].append((cpu, rate))
                    print(f"round {r + 1} {name}: {cpu:.3f} ms CPU a request, {rate:.0f} requests/s", flush=True)
    ours_cpu = statistics.median(c for c, _ in results["ours"])
    bare_cpu = statistics.median(c for c, _ in results["bare"])
    ratios = [o[0] / b[0] for o, b in zip(results["ours"], results["bare"], strict=True)]
    print(
        f"\n{args.clients} clients: ours {ours_cpu:.3f} ms, bare FastAPI {bare_cpu:.3f} ms of server CPU a request: "
        f"{ours_cpu / bare_cpu:.2f}x (rounds: {', '.join(f'{x:.2f}x' for x in ratios)})"
    )


if __name__ == "__main__":
    main()
