"""Resident memory of an NLLB-600M-shaped model served in int8 against float32: `transformer serve` processes.

The model is random (no public weights reach this machine) but shaped as facebook/nllb-200-distilled-600M: d_model
1024, 12 + 12 layers, d_ff 4096, 16 heads, 256,206 embeddings, pre-LN, fairseq's positions; its tokenizer is the
tests' small NLLB one (tests/model/hf_families.py), whose ids fit. Three servers, one at a time, each with only
that model: the float32 checkpoint; the int8 checkpoint that `transformer quantize` writes; and the float32
checkpoint quantized at load (TRANSFORMER_DTYPE=int8). Each is asked one /translate (English into German) and
its process's resident memory (VmRSS) and peak (VmHWM), with its worker processes' where it has them, are read
from /proc. A server with the tests' tiny model
gives the baseline (Python, torch, the service): "model" is a server's memory above it.

    python benchmarks/nllb_memory.py --json nllb_memory.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: model/ and the tests' fixtures
from peer import descendants  # noqa: E402
from serve import ServerProcess  # noqa: E402

NLLB_600M = {
    "vocab_size": 256206,
    "d_model": 1024,
    "encoder_layers": 12,
    "decoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "decoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_attention_heads": 16,
    "max_position_embeddings": 1024,
    "activation_function": "relu",
    "scale_embedding": True,
    "pad_token_id": 1,
    "dropout": 0.1,
}


def make_checkpoints(work: Path) -> dict[str, Path]:
    """The tiny NLLB fixture (imported), the 600M-shaped float32 checkpoint with its tokenizer, its int8 copy."""
    import torch

    from model.checkpoint import read_meta, save_checkpoint
    from model.families import import_model, model_config
    from model.int8_checkpoint import quantize_checkpoint
    from model.transformer import Transformer
    from tests.model.hf_families import build_family_dir

    tiny = import_model(build_family_dir("nllb", work / "fixture").hf_dir, work / "tiny" / "nllb")
    meta = read_meta(tiny)
    cfg = model_config("m2m_100", NLLB_600M, work / "config.json")
    torch.manual_seed(0)
    print(f"making a random {cfg.d_model}-wide, {cfg.N} + {cfg.n_dec}-layer model ...", file=sys.stderr)
    model = Transformer(cfg)
    with torch.no_grad():
        for p in model.parameters():  # small weights: LayerNorms keep activations in range
            if p.dim() > 1:
                p.mul_(0.5)
    big = work / "float32" / "nllb"
    save_checkpoint(big, model, dataclasses.replace(meta, model=cfg), tokenizer_dir=tiny)
    del model
    print("quantizing ...", file=sys.stderr)
    quantize_checkpoint(big, work / "int8" / "nllb")
    shutil.copytree(work / "float32", work / "float32-at-load")
    return {
        "baseline (tiny model)": work / "tiny",
        "float32": work / "float32",
        "int8 checkpoint": work / "int8",
        "float32 quantized at load": work / "float32-at-load",
    }


def memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process and its worker processes, summed, in MiB."""
    total = {"VmRSS": 0.0, "VmHWM": 0.0}
    for one in (pid, *descendants(pid)):
        status = Path(f"/proc/{one}/status").read_text().splitlines()
        fields = dict(line.split(":", 1) for line in status if ":" in line)
        for k in total:
            total[k] += int(fields[k].split()[0]) / 1024
    return total


def serve(models: Path, dtype: str, threads: int, processes: bool, root: Path | None) -> dict[str, Any]:
    """Start `transformer serve` on models (serve.py's ServerProcess), translate once, read its memory, stop it."""
    start = time.monotonic()
    settings = {"dtype": dtype, "threads": str(threads), "worker_processes": str(processes).lower()}
    with ServerProcess(models, settings, root) as server:
        ready = time.monotonic() - start
        body = {"q": "kalo mine ruza", "source": "en", "target": "de", "max_length": 16}
        r = httpx.post(f"{server.url}/translate", json=body, timeout=120)
        r.raise_for_status()
        return {**memory(server.proc.pid), "ready_s": ready, "answer": r.json()["translatedText"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument(
        "--worker-processes",
        action="store_true",
        help="the CPU default: a worker process per thread, each with its own copy of the model (summed); "
        "without it, one worker thread in the API's process holds the only copy",
    )
    p.add_argument("--root", type=Path, default=None, help="serve another checkout's code (before/after)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dirs = make_checkpoints(Path(tmp))
        results = {}
        for name, models in dirs.items():
            dtype = "int8" if name == "float32 quantized at load" else "auto"
            results[name] = serve(models, dtype, args.threads, args.worker_processes, args.root)
            print(name, json.dumps(results[name]), file=sys.stderr, flush=True)
    base = results["baseline (tiny model)"]["VmRSS"]
    f32 = results["float32"]["VmRSS"] - base
    for r in results.values():
        r["model_MiB"] = r["VmRSS"] - base
        r["model_over_float32"] = r["model_MiB"] / f32
        r["process_over_float32"] = r["VmRSS"] / results["float32"]["VmRSS"]
    print(json.dumps(results, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
