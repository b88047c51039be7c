"""The API's own CPU per request: `transformer serve` with an instant worker (every job answered as soon as it is
read, its texts echoed, no model run) against a bare FastAPI endpoint that echoes the same JSON, both under the
same uvicorn, driven by the same minimal keep-alive clients (serve.Connection), in alternating rounds. Server CPU
is read from /proc (every thread), so the number is what one request costs the process beside the decoder.

What `transformer serve` does for a request that the bare endpoint does not: the Host and key checks, the body
read within its limits, the request id and security headers, the request's metrics, the schema's validation,
checking each text's cost (service.registry), queueing the job and waking the request when it is answered.
With --in-process, both apps run in this process and requests go straight into their ASGI interfaces: the same
comparison without uvicorn, the sockets, the HTTP parsing and the worker thread (ours answers each job as it is
queued).

    python benchmarks/api_cpu.py --model bench/ours --text bench/marian/test.en --clients 32 --rounds 2
    python benchmarks/api_cpu.py --model bench/ours --text bench/marian/test.en --clients 32 --rounds 4 --in-process
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


def instant_app(models: Path, at_submit: bool = False) -> Any:
    """`transformer serve`'s app (embedded queue) whose worker answers every job at once with its texts; with
    at_submit, the queue answers each job as it is queued, in the request's own task (the worker never sees it)."""
    import service.api.runtime
    from model.output import Hypothesis, Output
    from service.api.app import create_app
    from service.queue.contract import Answer, Job, WorkerQueue
    from service.settings import ServiceSettings

    def echoed(job: Job) -> Answer:
        return Answer([Output([Hypothesis([], 0.0, 0.0, text)]) for text in job.texts])

    class InstantWorker:
        def __init__(self, queue: WorkerQueue, *_: Any) -> None:
            self.queue = queue

        def run(self, stop: threading.Event) -> None:
            if at_submit:  # nothing to read: a thread woken for each job would contend for the loop's GIL
                stop.wait()
            while not stop.is_set():
                for job in self.queue.read(64, 1.0):
                    self.queue.finish(job, echoed(job))

    service.api.runtime.Worker = InstantWorker  # type: ignore[misc,assignment]
    settings = ServiceSettings(
        models_dir=models, rate_limit=0, max_queue=100_000, workers=1, worker_processes=False
    )  # the instant worker is a thread of this process
    app = create_app(settings)
    if at_submit:
        memory = app.state.service.memory
        submit = memory.submit

        async def answered(job: Job, file: bytes | None = None) -> None:
            await submit(job, file)
            for read in memory.read(1, 0.0):  # the job just queued, as a worker reads it
                memory.finish(read, echoed(read))

        memory.submit = answered
    return app


def bare_app() -> Any:
    """A bare FastAPI endpoint: the request's JSON validated by a model, the text echoed back."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/translate")
    async def translate(req: TranslateRequest) -> dict[str, Any]:
        return {"translatedText": req.q}

    @app.get("/readyz")
    async def ready() -> dict[str, str]:
        return {"status": "ready"}

    return app


def serve(app: Any, port: int, ours: bool = False) -> None:
    """Under uvicorn; ours with the options `transformer serve` runs (service.http), the bare endpoint with
    uvicorn's own."""
    import uvicorn

    from service.http import uvicorn_options
    from service.settings import ServiceSettings

    options = uvicorn_options(ServiceSettings()) if ours else {"http": "auto"}  # "auto": uvicorn's default
    uvicorn.run(app, host="127.0.0.1", port=port, log_config=None, **options)


async def asgi_post(app: Any, text: str) -> None:
    """One POST /translate straight into the app's ASGI interface: no socket, no HTTP parsing."""
    body = json.dumps({"q": text}).encode()
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/translate",
        "raw_path": b"/translate",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    sent, never, status = False, asyncio.Event(), 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()  # the client stays until the answer
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    if status != 200:
        raise RuntimeError(f"POST /translate answered {status}")


async def in_process(models: Path, texts: list[str], clients: int, rounds: int) -> dict[str, list[float]]:
    """Both apps in this process, driven through ASGI in alternating rounds: this process's CPU us a request. Ours
    answers each job as it is queued: a worker thread here would wait for the GIL of a loop that never sleeps."""
    apps = {"ours": instant_app(models, at_submit=True), "bare": bare_app()}
    results: dict[str, list[float]] = {name: [] for name in apps}

    async def drive_app(app: Any, todo: list[str]) -> float:
        queue = list(reversed(todo))

        async def client() -> None:
            while queue:
                await asgi_post(app, queue.pop())

        start = time.process_time()
        await asyncio.gather(*(client() for _ in range(clients)))
        return 1e6 * (time.process_time() - start) / len(todo)

    async with apps["ours"].router.lifespan_context(apps["ours"]):
        while not apps["ours"].state.service.ready.is_set():
            await asyncio.sleep(0.05)
        for app in apps.values():
            await drive_app(app, texts[:200])  # warm-up
        for r in range(rounds):
            for name in list(apps)[:: 1 if r % 2 == 0 else -1]:
                results[name].append(await drive_app(apps[name], texts))
                print(f"round {r + 1} {name}: {results[name][-1]:.1f} us CPU a request (in process)", flush=True)
    return results


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
    p.add_argument(
        "--in-process", action="store_true", help="both apps in this process through ASGI: no uvicorn, no sockets"
    )
    p.add_argument("--serve", choices=["instant", "bare"], help=argparse.SUPPRESS)  # the servers' own processes
    p.add_argument("--models", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve is not None:
        ours = args.serve == "instant"
        serve(instant_app(args.models) if ours else bare_app(), args.port, ours)
        return
    if args.model is None or args.text is None:
        p.error("--model and --text are needed")
    lines = [line.strip() for line in args.text.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = (lines * (args.requests // len(lines) + 1))[: args.requests]
    if args.in_process:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "bench").symlink_to(args.model.resolve())
            found = asyncio.run(in_process(Path(tmp), texts, args.clients, args.rounds))
        ours_us, bare_us = (statistics.median(found[name]) for name in ("ours", "bare"))
        print(f"\n{args.clients} clients, in process: ours {ours_us:.1f} us, bare FastAPI {bare_us:.1f} us a request")
        return
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
