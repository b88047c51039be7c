"""Serving throughput and latency: continuous batching against batch size 1, and against the offline engine.

Two workloads:

- real (`--model DIR --text FILE`): a trained checkpoint and real held-out sentences, one per line, each
  stopping on its own with the service's default options (beam `--beam-size`);
- forced (the default): a random model (`--shape`, SentencePiece trained on the fly on made-up text) with
  every output forced to exactly `--out-tokens` tokens (min_length = max_length), so that every mode does
  the same decoding work. Random weights hide what natural stopping does to batching: a second table.

For each, on this machine:

1. the offline engine: `Translator.translate` over all texts in batches of `--batch-size` (the ceiling),
   before every serving level and after the last (the machine's speed drifts over a run: each level's
   ratio uses the mean of the offline runs just before and after it);
2. `transformer serve` with continuous batching (`TRANSFORMER_MAX_BATCH_SIZE=--batch-size`);
3. `transformer serve` with batch size 1 (`TRANSFORMER_MAX_BATCH_SIZE=1`), unless --no-batch-1,

each server in its own process with `--threads` torch threads, driven by N concurrent HTTP clients
(N in `--clients`), each sending one text per POST /translate and the next as soon as it is answered.
The clients are minimal keep-alive HTTP/1.1 connections on asyncio, as cheap as a client can be: they
share the machine's cores with the server. Reported: sentences/s, p50 and p99 latency, texts per decoding
step, the ratios serve / batch-1 and serve / offline at each N, and p50 against Little's law at offline
speed (N / offline sentences/s).

With `--peer DIR` (a MarianMTModel directory: marian.py's, the same weights as --model), the real workload is
served by ours and by the peer a user would deploy instead, FastAPI + CTranslate2 (peer.py, peer_server.py).

    python benchmarks/serve.py --model bench/ours --text bench/marian/test.en --clients 1,32,64
    python benchmarks/serve.py --model bench/ours --text bench/marian/test.en --refs bench/marian/test.de \
        --peer bench/marian --clients 1,8,32,64
    python benchmarks/serve.py --shape base --clients 1,8,32 --json serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

import httpx
import sentencepiece as spm
import torch
from common import SHAPES

from model.checkpoint import CheckpointMeta, save_checkpoint
from model.config import DecodingConfig, ModelConfig
from model.tokenizer import SpecialIds, TokenizerConfig
from model.transformer import Transformer
from model.translator import Translator

LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class Level:
    """One mode at one client count."""

    mode: str
    clients: int
    requests: int
    seconds: float
    tokens_per_s: float
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    mean_batch: float = 0.0  # texts per decoding step, from the server's /metrics
    busy: float = 0.0  # the share of the wall time the server spent in beam search, from its /metrics
    admitting: float = 0.0  # the share it spent encoding texts and joining them to the search (admission)


def made_up_text(n: int, seed: int, min_words: int = 6, max_words: int = 20) -> list[str]:
    rng = random.Random(seed)
    words = ["".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 9))) for _ in range(20000)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(min_words, max_words))) for _ in range(n)]


def build_model(directory: Path, shape: str, vocab_size: int, seed: int, **overrides: Any) -> Path:
    """A random checkpoint of the preset's shape (ModelConfig overrides allowed) with a SentencePiece model
    trained on made-up text."""
    special = SpecialIds()
    text = directory / "text.txt"
    text.write_text("\n".join(made_up_text(20000, seed)) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(directory / "spm"),
        vocab_size=vocab_size,
        model_type="bpe",
        pad_id=special.pad,
        unk_id=special.unk,
        bos_id=special.bos,
        eos_id=special.eos,
        minloglevel=2,
        num_threads=1,
    )
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(vocab_size, vocab_size, **{**SHAPES[shape], **overrides})).eval()
    meta = CheckpointMeta(
        model=model.cfg,
        tokenizer=TokenizerConfig(source_model="spm.model", target_model="spm.model"),
        source_lang="xx",
        target_lang="yy",
    )
    return save_checkpoint(directory / "models" / "bench", model, meta, tokenizer_dir=directory)


def options(args: argparse.Namespace) -> dict[str, Any]:
    """What every mode decodes with: beam --beam-size, the defaults otherwise (real; with --peer, the peer's
    search: |Y|^alpha, at most --max-output tokens, ending at beam_size hypotheses), or exactly --out-tokens
    tokens (forced), as POST /translate fields."""
    if args.peer is not None:
        return {
            "beam_size": args.beam_size,
            "length_penalty": args.alpha,
            "length_penalty_form": "average",
            "max_length": args.max_output,
            "early_stopping": True,
        }
    if args.text is not None:
        return {"beam_size": args.beam_size}
    return {"beam_size": args.beam_size, "min_length": args.out_tokens, "max_length": args.out_tokens}


def offline(tr: Translator, texts: list[str], args: argparse.Namespace, before: int) -> Level:
    """The offline engine's throughput, measured just before the level with `before` clients (0: after the last)."""
    cfg = DecodingConfig(beam_size=args.beam_size)
    if args.text is None:
        cfg = DecodingConfig(beam_size=args.beam_size, min_length=args.out_tokens).with_max_length(args.out_tokens)
    start = time.perf_counter()
    tr.translate(texts, cfg, max_batch_size=args.batch_size, max_batch_tokens=10**9)
    seconds = time.perf_counter() - start
    level = Level(
        "offline", before, len(texts), seconds, len(texts) * args.out_tokens / seconds, len(texts) / seconds, 0.0, 0.0
    )
    if before >= 0:  # not the warm-up
        print(f"  offline        : {level.requests_per_s:8.1f} sentences/s", flush=True)
    return level


class Process:
    """A server in its own process on a free port (cmd(port) starts it), ready once its /readyz answers 200."""

    def __init__(self, cmd: Callable[[int], list[str]], env: dict[str, str] | None = None, cwd: Path | None = None):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            cmd(self.port), env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def __enter__(self) -> Self:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.proc.args} did not become ready")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def pids(self) -> list[int]:
        """The processes that serve (with what runs below them: peer.cpu_seconds)."""
        return [self.proc.pid]


class ServerProcess(Process):
    """`transformer serve` in its own process on a free port, with TRANSFORMER_* settings; root: another
    checkout's code (e.g. the last release, for before/after). The embedded queue; or with redis (a URL),
    the Redis queue under a prefix of its own and `workers` `transformer worker` processes beside it."""

    def __init__(
        self,
        models: Path,
        settings: dict[str, str],
        root: Path | None = None,
        redis: str | None = None,
        workers: int = 0,
    ) -> None:
        env = {
            **os.environ,
            "TRANSFORMER_MODELS_DIR": str(models),
            **{f"TRANSFORMER_{k.upper()}": v for k, v in settings.items()},
        }
        env.pop("REDIS_URL", None)
        if redis is not None:
            env |= {"REDIS_URL": redis, "TRANSFORMER_QUEUE_PREFIX": f"bench-{os.getpid()}-{id(self)}"}
        if root is not None:
            env["PYTHONPATH"] = str(root)
        cmd = [sys.executable, "-m", "service.cli", "serve"]
        super().__init__(lambda port: [*cmd, "--port", str(port)], env, root)
        self.workers = [
            subprocess.Popen(
                [sys.executable, "-m", "service.cli", "worker"],
                env={**env, "TRANSFORMER_WORKER_NAME": f"bench-{i}"},
                cwd=root,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for i in range(workers if redis is not None else 0)
        ]

    def __exit__(self, *exc: object) -> None:
        for w in self.workers:
            w.terminate()
        for w in self.workers:
            w.wait(timeout=30)
        super().__exit__(*exc)

    def pids(self) -> list[int]:
        return [self.proc.pid, *(w.pid for w in self.workers)]

    def rss_mib(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(status.split("VmRSS:")[1].split()[0]) / 1024


class Connection:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams: the client shares the server's cores,
    so it should cost as little as possible (httpx costs a few ms of CPU per request)."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: dict[str, object]) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        data = json.dumps(body).encode()
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def drive(
    url: str, texts: list[str], clients: int, args: argparse.Namespace, answers: list[bytes] | None = None
) -> tuple[float, list[float]]:
    """N clients, each posting its share of texts one after another; returns wall time and latencies (and, with
    answers, fills it with each text's answer body, in order)."""
    body = options(args)
    latencies: list[float] = []
    queue = list(reversed(range(len(texts))))
    if answers is not None:
        answers[:] = [b""] * len(texts)

    async def client(conn: Connection) -> None:
        while queue:
            i = queue.pop()
            start = time.perf_counter()
            status, payload = await conn.post("/translate", {"q": texts[i], **body})
            if status != 200:
                raise RuntimeError(f"POST /translate answered {status}: {payload[:200]!r}")
            latencies.append(time.perf_counter() - start)
            if answers is not None:
                answers[i] = payload

    connections = [Connection(url) for _ in range(clients)]
    try:
        start = time.perf_counter()
        await asyncio.gather(*(client(c) for c in connections))
        return time.perf_counter() - start, latencies
    finally:
        for c in connections:
            c.close()


def batches_so_far(url: str) -> tuple[float, float, float, float]:
    """(decoding steps, texts x steps, seconds of beam search steps, seconds of admission) of the server so far."""
    metrics = dict(
        line.split(" ", 1)
        for line in httpx.get(f"{url}/metrics").text.splitlines()
        if line.startswith(
            ("transformer_batch_size_", "transformer_decode_seconds_total", "transformer_admit_seconds_total")
        )
    )
    return (
        float(metrics["transformer_batch_size_count"]),
        float(metrics["transformer_batch_size_sum"]),
        float(metrics["transformer_decode_seconds_total"]),
        float(metrics.get("transformer_admit_seconds_total", "nan")),
    )  # nan: a --before checkout without it


def serve_levels(
    mode: str,
    models: Path,
    batch_size: int,
    texts: list[str],
    args: argparse.Namespace,
    ceiling: Callable[[int], Level] | None = None,
    root: Path | None = None,
) -> list[Level]:
    """One server, driven by each number of clients in turn; with ceiling, the offline engine is measured
    before every level and after the last, so that each level has its ceiling from the minutes around it."""
    out = []
    settings = {
        "threads": str(args.server_threads or args.threads),
        "device": args.device,
        "max_batch_size": str(batch_size),
        "max_queue": "100000",
        "max_batch_tokens": "1000000",
        "request_timeout_s": "600",
    }
    with ServerProcess(models, settings, root) as server:
        for n in args.clients:
            if ceiling is not None:
                out.append(ceiling(n))
            count = len(texts) if args.text else max(args.min_requests, args.requests_per_client * n)
            asyncio.run(drive(server.url, texts[:1], 1, args))  # warm-up, outside the batch counts
            before = batches_so_far(server.url)
            seconds, lat = asyncio.run(drive(server.url, texts[:count], n, args))
            after = batches_so_far(server.url)
            q = statistics.quantiles(lat, n=100, method="inclusive")
            level = Level(
                mode,
                n,
                count,
                seconds,
                count * args.out_tokens / seconds,
                count / seconds,
                1000 * statistics.median(lat),
                1000 * q[98],
                (after[1] - before[1]) / max(1.0, after[0] - before[0]),
                (after[2] - before[2]) / seconds,
                (after[3] - before[3]) / seconds,
            )
            print(
                f"  {mode:8s} N={n:3d}: {level.requests_per_s:8.1f} sentences/s  "
                f"p50 {level.p50_ms:7.0f} ms  p99 {level.p99_ms:7.0f} ms  {level.mean_batch:5.1f} texts/step  "
                f"busy {100 * level.busy:3.0f}%  admitting {100 * level.admitting:3.0f}%",
                flush=True,
            )
            out.append(level)
        if ceiling is not None:
            out.append(ceiling(0))
    return out


def workload(args: argparse.Namespace, tmp: Path) -> tuple[Path, list[str]]:
    """The checkpoint to serve (alone in its models directory) and the texts."""
    total = max(args.min_requests, args.requests_per_client * max(args.clients))
    if args.text is None:
        return build_model(tmp, args.shape, args.vocab_size, args.seed), made_up_text(total, args.seed + 1)
    (tmp / "models").mkdir()
    checkpoint = tmp / "models" / "bench"
    checkpoint.symlink_to(args.model.resolve())
    lines = [line.strip() for line in args.text.read_text(encoding="utf-8").splitlines() if line.strip()]
    return checkpoint, lines[: args.sentences or None]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=None, help="a trained checkpoint (real workload, with --text)")
    p.add_argument("--text", type=Path, default=None, help="held-out sentences, one per line (real workload)")
    p.add_argument("--sentences", type=int, default=0, help="use the first this many lines of --text (0: all)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="small", help="the forced workload's random model")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu or cuda (then bfloat16, as the service's default)")
    p.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4, 16, 32, 64])
    p.add_argument("--requests-per-client", type=int, default=16, help="forced workload: texts per client")
    p.add_argument("--min-requests", type=int, default=32)
    p.add_argument(
        "--server-threads",
        type=int,
        default=None,
        help="torch threads of the servers (default: --threads, as the offline engine)",
    )
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--no-batch-1", action="store_true", help="skip the batch-size-1 server")
    p.add_argument(
        "--before",
        type=Path,
        default=None,
        help="also serve with the code of this checkout (e.g. a worktree of the last release)",
    )
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--out-tokens", type=int, default=24, help="forced workload: tokens per output")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--peer",
        type=Path,
        default=None,
        help="real workload: also serve this MarianMTModel directory (the same weights: marian.py's) with the "
        "peer, FastAPI + CTranslate2 (peer_server.py), both up at once, in alternating rounds (peer.py)",
    )
    p.add_argument(
        "--ours",
        action="append",
        default=None,
        help="with --peer: one server of ours, NAME=KEY:VALUE,... of TRANSFORMER_* settings (repeatable; default: "
        "one, with the default settings), each measured against the peer; redis_workers:N serves it on Redis "
        "(--redis) with N `transformer worker` processes, and root:DIR with the code of that checkout",
    )
    p.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="with --ours ...redis_workers:N: the Redis")
    p.add_argument("--refs", type=Path, default=None, help="with --peer: references of --text, for BLEU")
    p.add_argument("--rounds", type=int, default=2, help="with --peer: alternating rounds")
    p.add_argument("--alpha", type=float, default=0.6, help="with --peer: length penalty |Y|^alpha")
    p.add_argument("--max-output", type=int, default=200, help="with --peer: most output tokens")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    if (args.model is None) != (args.text is None):
        p.error("--model and --text go together")
    if args.peer is not None:
        if args.text is None:
            p.error("--peer needs the real workload (--model and --text)")
        from peer import compare

        compare(args)
        return
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint, texts = workload(args, Path(tmp))
        kind = f"real: {args.text}" if args.text else f"forced: shape {args.shape}, {args.out_tokens} tokens per output"
        print(
            f"{kind}; {len(texts)} texts, beam {args.beam_size}, {args.threads} threads, batches of {args.batch_size}",
            flush=True,
        )
        tr = Translator.load(checkpoint, device=args.device, threads=args.threads)
        offline(tr, texts[: args.batch_size], args, -1)  # warm-up
        levels = serve_levels(
            "serve", checkpoint.parent, args.batch_size, texts, args, ceiling=lambda n: offline(tr, texts, args, n)
        )
        if not args.no_batch_1:
            levels += serve_levels("batch-1", checkpoint.parent, 1, texts, args)
        if args.before is not None:
            levels += serve_levels("before", checkpoint.parent, args.batch_size, texts, args, root=args.before)
    print_ratios(args, levels)


def print_ratios(args: argparse.Namespace, levels: list[Level]) -> None:
    """serve / batch-1 and serve / offline per client count; the machine's speed drifts over a run, so each
    level's ceiling is the mean of the offline runs just before and just after it."""
    ceilings = [lv.requests_per_s for lv in levels if lv.mode == "offline"]
    by = {(lv.mode, lv.clients): lv for lv in levels if lv.mode != "offline"}
    print("\nclients  serve/batch-1  serve/offline  p99/p50  p50/(N/offline)  serve/before  p50/before p50")
    ratios = []
    for i, n in enumerate(args.clients):
        d, b = by[("serve", n)], by.get(("batch-1", n))
        ceiling = (ceilings[i] + ceilings[i + 1]) / 2
        little = 1000 * n / ceiling  # ms: Little's law at offline speed
        before = by.get(("before", n))
        ratios.append(
            {
                "clients": n,
                "serve_over_batch1": d.requests_per_s / b.requests_per_s if b else None,
                "serve_over_before": d.requests_per_s / before.requests_per_s if before else None,
                "p50_over_before": d.p50_ms / before.p50_ms if before else None,
                "offline_sentences_per_s": ceiling,
                "serve_over_offline": d.requests_per_s / ceiling,
                "p99_over_p50": d.p99_ms / d.p50_ms,
                "p50_over_little": d.p50_ms / little,
            }
        )
        r = ratios[-1]
        over_b1 = f"{r['serve_over_batch1']:12.2f}x" if b else f"{'-':>13}"
        vs = f"  {r['serve_over_before']:11.2f}x  {r['p50_over_before']:15.2f}" if before else ""
        print(
            f"{n:7d}  {over_b1}  {r['serve_over_offline']:12.2f}x  {r['p99_over_p50']:7.2f}  "
            f"{r['p50_over_little']:15.2f}{vs}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                    "levels": [asdict(lv) for lv in levels],
                    "ratios": ratios,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
