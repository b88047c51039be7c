"""What the largest legal requests and hostile bodies cost `transformer serve` (embedded queue), measured:

1. the API process's RSS after `--translate-requests` largest legal /translate requests, then `--requests`
   largest legal requests of each other kind, one kind after another:
   /translate (64 texts of 5000 characters, truncated, beam 8, n-best 8, as long an output as the cost
   limit allows), /attention (as many weights as the limit allows) and /jobs (10,000 texts, every page of
   results read);
2. /healthz latency (p50, p99, max) while `--attackers` clients send hostile bodies without pause: a
   million tiny JSON values, a million short strings, chunked bodies past the body limit, and the largest
   legal /jobs body;
3. with `--model` (a trained checkpoint), the worker seconds of the costliest legal /translate, and the cost
   per worker second, from which the costliest request under the old limits is estimated.

Parts 1 and 2 use a random model with 512 positions (the API's memory does not depend on the weights).

    python benchmarks/hostile.py --model runs/demo-en-de/best --json hostile.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import log  # noqa: E402
from benchmarks.serve import ServerProcess, build_model, made_up_text  # noqa: E402
from model.checkpoint import read_meta  # noqa: E402
from model.config import DecodingConfig  # noqa: E402
from model.tokenizer import Tokenizer  # noqa: E402


def server_at(models: Path) -> ServerProcess:
    """`transformer serve` for a models directory, with no time limit on requests."""
    return ServerProcess(models, {"request_timeout_s": "3600"})


def words_for(tokenizer: Tokenizer, words: list[str], tokens: int) -> str:
    """The longest prefix of words that is at most `tokens` source tokens (EOS included)."""
    lo, hi = 1, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(tokenizer.encode_source(" ".join(words[:mid]))) <= tokens else (lo, mid - 1)
    return " ".join(words[:lo])


def largest_translate(max_cost: int, max_len: int, source: int) -> int:
    """The longest output limit (max_length) 64 texts of `source` tokens at beam 8 may ask for."""
    fits = [n for n in range(1, max_len) if 64 * 8 * n * (source + n) <= max_cost]
    return max(fits)


def memory(model_dir: Path, requests: int, translate_requests: int) -> dict[str, Any]:
    tokenizer = Tokenizer(model_dir, read_meta(model_dir).tokenizer)
    words = " ".join(made_up_text(2000, seed=5)).split()
    out: dict[str, Any] = {}
    with server_at(model_dir.parent) as server, httpx.Client(base_url=server.url, timeout=3600) as client:
        out["rss_start_mib"] = server.rss_mib()
        text = " ".join(words[:1200])[:5000]
        source = min(len(tokenizer.encode_source(text)), 512)
        limit = largest_translate(20_000_000, 512, source)
        body = {"q": [text] * 64, "truncate": True, "beam_size": 8, "n_best": 8, "max_length": limit}
        kinds = {"translate": ("/translate", body)}
        att = words_for(tokenizer, words, 200)
        kinds["attention"] = ("/attention", {"q": att, "max_length": 200})
        job = {"texts": [" ".join(words[i : i + 12]) for i in range(10_000)], "beam_size": 1, "max_length": 4}
        for kind, (path, payload) in kinds.items():
            start = time.perf_counter()
            count = translate_requests if kind == "translate" else requests
            for _ in range(count):
                r = client.post(path, json=payload)
                assert r.status_code == 200, r.text[:300]
            out[f"{kind}_seconds"] = time.perf_counter() - start
            out[f"rss_after_{kind}_mib"] = server.rss_mib()
            out[f"{kind}_answer_bytes"] = len(r.content)
            log(
                f"  {count} x {kind}: {out[f'{kind}_answer_bytes'] >> 10} KiB answers, "
                f"RSS {out[f'rss_after_{kind}_mib']:.0f} MiB"
            )
        start = time.perf_counter()
        for _ in range(requests):
            job_id = client.post("/jobs", json=job).json()["id"]
            while client.get(f"/jobs/{job_id}").json()["status"] != "done":
                time.sleep(0.05)
            offset: int | None = 0
            while offset is not None:
                page = client.get(f"/jobs/{job_id}", params={"offset": offset}).json()
                offset = page["next_offset"]
        out["jobs_seconds"] = time.perf_counter() - start
        out["rss_after_jobs_mib"] = server.rss_mib()
        log(f"  {requests} x jobs of 10,000 texts: RSS {out['rss_after_jobs_mib']:.0f} MiB")
    return out


def hostile_bodies(limit: int) -> dict[str, bytes]:
    return {
        "million_values": json.dumps({"q": [1] * 1_000_000}, separators=(",", ":")).encode(),
        "million_strings": json.dumps({"q": ["ab"] * 600_000}, separators=(",", ":")).encode(),
        "largest_job": json.dumps({"texts": [("kalo mine ruza " * 25)[:370]] * 10_000}).encode()[:limit],
    }


async def healthz_under_attack(model_dir: Path, attackers: int, seconds: float) -> dict[str, Any]:
    with server_at(model_dir.parent) as server:
        bodies = hostile_bodies(4 * 1024 * 1024)
        latencies: list[float] = []
        answered: dict[int, int] = {}
        stop = asyncio.Event()

        async def attacker(i: int) -> None:
            names = list(bodies)
            async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
                n = 0
                while not stop.is_set():
                    if n % 4 == 3:  # a chunked body past the limit

                        async def chunks() -> Any:
                            for _ in range(64):
                                yield b"x" * (1 << 20)

                        try:
                            r = await client.post("/translate", content=chunks())
                            answered[r.status_code] = answered.get(r.status_code, 0) + 1
                        except httpx.HTTPError:
                            answered[0] = answered.get(0, 0) + 1
                    else:
                        body = bodies[names[(i + n) % len(names)]]
                        path = "/jobs" if body.startswith(b'{"texts"') else "/translate"
                        r = await client.post(path, content=body, headers={"content-type": "application/json"})
                        answered[r.status_code] = answered.get(r.status_code, 0) + 1
                    n += 1

        async def prober() -> None:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    start = time.perf_counter()
                    r = await client.get("/healthz")
                    assert r.status_code == 200
                    latencies.append(time.perf_counter() - start)
                    await asyncio.sleep(0.01)
            stop.set()

        await asyncio.gather(prober(), *(attacker(i) for i in range(attackers)))
    latencies.sort()
    q = statistics.quantiles(latencies, n=100)
    out = {
        "healthz_probes": len(latencies),
        "healthz_p50_ms": 1000 * q[49],
        "healthz_p99_ms": 1000 * q[98],
        "healthz_max_ms": 1000 * latencies[-1],
        "attack_answers": answered,
    }
    log(
        f"  /healthz under {attackers} hostile clients: p50 {out['healthz_p50_ms']:.1f} ms, "
        f"p99 {out['healthz_p99_ms']:.1f} ms, max {out['healthz_max_ms']:.1f} ms; answers {answered}"
    )
    return out


def worker_seconds(model_dir: Path) -> dict[str, Any]:
    """The costliest legal /translate on a trained model, and the old limits' costliest, estimated."""
    meta = read_meta(model_dir)
    tokenizer = Tokenizer(model_dir, meta.tokenizer)
    words = " ".join(made_up_text(2000, seed=6)).split()
    max_len = meta.model.max_len
    source = 100
    text = words_for(tokenizer, words, source)
    source = len(tokenizer.encode_source(text))
    limit = largest_translate(20_000_000, max_len, source)
    cost = 64 * 8 * limit * (source + limit)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "m").symlink_to(model_dir.resolve())
        with server_at(Path(tmp)) as server, httpx.Client(base_url=server.url, timeout=3600) as client:
            start = time.perf_counter()
            r = client.post(
                "/translate", json={"q": [text] * 64, "beam_size": 8, "max_length": limit, "min_length": limit}
            )
            seconds = time.perf_counter() - start
            assert r.status_code == 200, r.text[:300]
    # The old costliest: 64 texts of 5000 characters (truncated at the model's limit), beam 8, input + 50.
    old_source = max_len
    old_limit = DecodingConfig().output_limit(old_source, max_len)
    old_cost = 64 * 8 * old_limit * (old_source + old_limit)
    out = {
        "largest_source_tokens": source,
        "largest_max_length": limit,
        "largest_cost": cost,
        "largest_seconds": seconds,
        "cost_per_second": cost / seconds,
        "old_largest_cost": old_cost,
        "old_largest_seconds_estimate": old_cost / (cost / seconds),
    }
    log(
        f"  costliest legal /translate: 64 x {source} tokens, beam 8, {limit} tokens out: cost {cost:,}, "
        f"{seconds:.1f} s; under the old limits: cost {old_cost:,}, about {out['old_largest_seconds_estimate']:.0f} s"
    )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=None, help="a trained checkpoint for part 3")
    p.add_argument("--requests", type=int, default=20, help="largest /attention and /jobs requests")
    p.add_argument(
        "--translate-requests",
        type=int,
        default=3,
        help="largest /translate requests (each is minutes of decoding on a CPU)",
    )
    p.add_argument("--attackers", type=int, default=8)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        log("building a random model with 512 positions")
        model_dir = build_model(Path(tmp), "tiny", 8000, seed=1, max_len=512)
        summary["memory"] = memory(model_dir, args.requests, args.translate_requests)
        summary["healthz"] = asyncio.run(healthz_under_attack(model_dir, args.attackers, args.seconds))
    if args.model is not None:
        summary["worker"] = worker_seconds(args.model)
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
