"""`transformer serve` against the serving peer a user would deploy instead: FastAPI + CTranslate2, each request
translated on its own (peer_server.py), on the same converted weights (marian.py's MarianMTModel, imported for
ours and converted for CTranslate2) with the same search (beam, |Y|^alpha, at most --max-output tokens, each
sentence ending at beam_size finished hypotheses), on the texts that the service reads as they are (read_whole).
All servers are up at once (ours: one per --ours, with its settings); each round drives every client count
against each in turn, the order reversed every round (these machines drift). Reported per level: sentences/s,
p50 and p99 latency, the server's CPU time per request (/proc, every thread of it and of its worker processes),
BLEU when --refs is given, and the share of outputs the two engines agree on; and the offline engines' ratio.

    python benchmarks/serve.py --model bench/ours --text bench/marian/test.en --refs bench/marian/test.de \
        --peer bench/marian --clients 1,8,32,64 --json peer.json
    python benchmarks/serve.py --model bench/ours --text bench/marian/test.en --peer bench/marian --clients 32 \
        --ours threads=worker_processes:false --ours processes=worker_processes:true \
        --ours redis=redis_workers:2,threads:1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import read_whole
from serve import Process, ServerProcess, drive, options, workload

from model.config import DecodingConfig
from model.translator import Translator

HERE = Path(__file__).resolve().parent
REDIS_WORKERS = "redis_workers"  # --ours NAME=redis_workers:N,...: Redis mode, not a TRANSFORMER_* setting
ROOT = "root"  # --ours NAME=root:DIR,...: the code of another checkout (a worktree of main, for before/after)


def descendants(pid: int) -> list[int]:
    """The processes below a process (its worker processes, say), from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue  # it ended meanwhile
    out, frontier = [], [pid]
    while frontier:
        below = [p for p, parent in parents.items() if parent in frontier]
        out += below
        frontier = below
    return out


def cpu_seconds(pid: int, tree: bool = True) -> float:
    """User and system CPU time so far of a process, all its threads, and with tree, of every process below it
    (the embedded queue's worker processes)."""
    total = 0.0
    for p in [pid, *(descendants(pid) if tree else [])]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class PeerProcess(Process):
    """peer_server.py in its own process on a free port."""

    def __init__(self, ct2: Path, spm_dir: Path, args: argparse.Namespace) -> None:
        cmd = [sys.executable, str(HERE / "peer_server.py"), "--ct2", str(ct2), "--spm", str(spm_dir)]
        cmd += ["--beam-size", str(args.beam_size), "--alpha", str(args.alpha), "--max-output", str(args.max_output)]
        cmd += ["--inter-threads", str(args.threads), "--intra-threads", "1"]
        super().__init__(lambda port: [*cmd, "--port", str(port)])


def offline_ratio(checkpoint: Path, ct2: Path, texts: list[str], args: argparse.Namespace) -> dict[str, float]:
    """Both engines offline on every text, batches of --batch-size: sentences/s each."""
    import ctranslate2
    import sentencepiece as spm

    tr = Translator.load(checkpoint, device="cpu", threads=args.threads)
    cfg = DecodingConfig(beam_size=args.beam_size, length_penalty=args.alpha, length_penalty_form="average")
    cfg = cfg.with_max_length(args.max_output)
    peer = ctranslate2.Translator(str(ct2), device="cpu", inter_threads=1, intra_threads=args.threads)
    source = spm.SentencePieceProcessor(model_file=str(args.peer / "source.spm"))
    pieces = [source.encode(t, out_type=str) + ["</s>"] for t in texts]
    out = {}
    for name in ("ours", "peer"):
        start = time.perf_counter()
        if name == "ours":
            tr.translate(texts, cfg, max_batch_size=args.batch_size, max_batch_tokens=10**9)
        else:
            peer.translate_batch(
                pieces,
                beam_size=args.beam_size,
                length_penalty=args.alpha,
                max_decoding_length=args.max_output,
                max_batch_size=args.batch_size,
            )
        out[name] = len(texts) / (time.perf_counter() - start)
    return out


def level(
    name: str,
    server: ServerProcess | PeerProcess,
    texts: list[str],
    n: int,
    args: argparse.Namespace,
    refs: list[str] | None,
) -> dict[str, Any]:
    import sacrebleu

    asyncio.run(drive(server.url, texts[:1], 1, args))  # warm-up
    cpu, api = sum(cpu_seconds(pid) for pid in server.pids()), cpu_seconds(server.proc.pid, tree=False)
    answers: list[bytes] = []
    seconds, lat = asyncio.run(drive(server.url, texts, n, args, answers))
    cpu = sum(cpu_seconds(pid) for pid in server.pids()) - cpu
    api = cpu_seconds(server.proc.pid, tree=False) - api
    outputs = [str(json.loads(a)["translatedText"]) for a in answers]
    q = statistics.quantiles(lat, n=100, method="inclusive")
    row = {
        "engine": name,
        "clients": n,
        "sentences_per_s": len(texts) / seconds,
        "p50_ms": 1000 * statistics.median(lat),
        "p99_ms": 1000 * q[98],
        "cpu_ms_per_request": 1000 * cpu / len(texts),
        "api_cpu_ms_per_request": 1000 * api / len(texts),  # the API's process alone, not its worker processes
        "bleu": sacrebleu.corpus_bleu(outputs, [refs]).score if refs else None,
    }
    bleu = f"  BLEU {row['bleu']:.2f}" if refs else ""
    print(
        f"  {name:9s} N={n:3d}: {row['sentences_per_s']:7.1f} sentences/s  p50 {row['p50_ms']:6.0f} ms  "
        f"p99 {row['p99_ms']:6.0f} ms  CPU {row['cpu_ms_per_request']:5.1f} ms/request "
        f"(API process {row['api_cpu_ms_per_request']:4.1f}){bleu}",
        flush=True,
    )
    row["outputs"] = outputs
    return row


def compare(args: argparse.Namespace) -> None:
    import ctranslate2

    refs = None
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint, texts = workload(args, Path(tmp))
        if args.refs is not None:
            refs = [line.strip() for line in args.refs.read_text(encoding="utf-8").splitlines() if line.strip()]
            refs = refs[: len(texts)]
        whole = read_whole(checkpoint, texts)
        print(f"{len(whole)} of {len(texts)} texts are one sentence with nothing kept out: those are served")
        texts, refs = [texts[i] for i in whole], None if refs is None else [refs[i] for i in whole]
        ct2 = Path(tmp) / "ct2"
        ctranslate2.converters.TransformersConverter(str(args.peer)).convert(str(ct2), force=True)
        print(f"real: {len(texts)} texts of {args.text}; {options(args)}; {args.threads} threads", flush=True)
        offline = offline_ratio(checkpoint, ct2, texts, args)
        print(f"  offline: ours {offline['ours']:.1f}, CTranslate2 {offline['peer']:.1f} sentences/s", flush=True)
        settings = {
            "threads": str(args.threads),
            "device": "cpu",
            "max_batch_size": str(args.batch_size),
            "max_queue": "100000",
            "request_timeout_s": "600",
            "rate_limit": "0",
        }
        rows = []
        configs = ours_configs(args.ours)
        with contextlib.ExitStack() as stack:
            engines: list[tuple[str, Process]] = []
            for name, given in configs.items():
                extra = dict(given)
                workers = int(extra.pop(REDIS_WORKERS, "0"))  # Redis mode, with this many `transformer worker`s
                redis = args.redis if workers else None
                root = Path(extra.pop(ROOT)) if ROOT in extra else None
                server = ServerProcess(checkpoint.parent, settings | extra, root=root, redis=redis, workers=workers)
                engines.append((name, stack.enter_context(server)))
            engines.append(("peer", stack.enter_context(PeerProcess(ct2, args.peer, args))))
            for r in range(args.rounds):
                for n in args.clients:
                    for name, server in engines if r % 2 == 0 else engines[::-1]:
                        rows.append({"round": r, **level(name, server, texts, n, args, refs)})
        offline_after = offline_ratio(checkpoint, ct2, texts, args)
    tables = {}
    for name in configs:
        print(f"\n{name}: {configs[name] or 'the default settings'}")
        mine = [{**r, "engine": "ours"} if r["engine"] == name else r for r in rows if r["engine"] in (name, "peer")]
        tables[name] = summarize(args, mine, offline, offline_after)
    if args.json:
        for r in rows:
            r.pop("outputs", None)
        report = {"offline": [offline, offline_after], "rows": rows, "tables": tables}
        args.json.write_text(json.dumps(report, indent=1))


def ours_configs(specs: list[str] | None) -> dict[str, dict[str, str]]:
    """NAME=KEY:VALUE,... (--ours here, workers.py's configurations): our servers' names and their TRANSFORMER_*
    settings (default: one, "ours"); here the key redis_workers:N serves on Redis (--redis) with N `transformer
    worker` processes, and root:DIR with the code of that checkout."""
    configs = {}
    for spec in specs or ["ours="]:
        name, _, pairs = spec.partition("=")
        configs[name] = dict(pair.split(":", 1) for pair in pairs.split(",") if pair)
    return configs


def summarize(
    args: argparse.Namespace, rows: list[dict[str, Any]], offline: dict[str, float], after: dict[str, float]
) -> list[dict[str, Any]]:
    """Print one server of ours (engine "ours") against the peer, per client count; the table's rows."""

    def mean(engine: str, n: int, key: str) -> float:
        return statistics.mean(r[key] for r in rows if r["engine"] == engine and r["clients"] == n)

    ratio = statistics.mean([offline["ours"] / offline["peer"], after["ours"] / after["peer"]])
    print(
        f"\noffline ours / CTranslate2: {offline['ours'] / offline['peer']:.2f}x before, "
        f"{after['ours'] / after['peer']:.2f}x after"
    )
    print(
        "clients  ours s/s  peer s/s  ratio (each round)      ours p50/p99 ms  peer p50/p99 ms  "
        "CPU ms/req ours/peer  ours' API  agree"
    )
    table = []
    for n in args.clients:
        each = [
            next(r for r in rows if r["engine"] == "ours" and r["clients"] == n and r["round"] == k)["sentences_per_s"]
            / next(r for r in rows if r["engine"] == "peer" and r["clients"] == n and r["round"] == k)[
                "sentences_per_s"
            ]
            for k in range(args.rounds)
        ]
        last = [r["outputs"] for r in rows if r["clients"] == n and r["round"] == args.rounds - 1]
        agree = sum(a == b for a, b in zip(*last, strict=True)) / len(last[0])
        entry = {
            "clients": n,
            **{
                f"{e}_{k}": mean(e, n, k)
                for e in ("ours", "peer")
                for k in ("sentences_per_s", "p50_ms", "p99_ms", "cpu_ms_per_request", "api_cpu_ms_per_request")
            },
            "ratio_each_round": each,
            "outputs_agree": agree,
            "offline_ratio": ratio,
        }
        table.append(entry)
        print(
            f"{n:7d}  {entry['ours_sentences_per_s']:8.1f}  {entry['peer_sentences_per_s']:8.1f}  "
            f"{statistics.mean(each):.2f}x ({', '.join(f'{x:.2f}' for x in each)})  "
            f"{entry['ours_p50_ms']:7.0f}/{entry['ours_p99_ms']:<7.0f}  {entry['peer_p50_ms']:7.0f}/"
            f"{entry['peer_p99_ms']:<7.0f}  {entry['ours_cpu_ms_per_request']:9.1f}/"
            f"{entry['peer_cpu_ms_per_request']:<9.1f}  {entry['ours_api_cpu_ms_per_request']:11.1f}  {agree:.1%}"
        )
    return table
