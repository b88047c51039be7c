"""The stopping rule's price: BLEU and sentences/s of `Translator.translate` with early_stopping True (stop at
beam_size ended hypotheses, the default) and False (tensor2tensor's exact bound), on a trained checkpoint
and held-out sentences, under the paper's GNMT penalty with output limit input + 50 (the defaults) and under
|Y|^alpha with a fixed limit (the peers' form):

    python benchmarks/stopping.py --model runs/demo-en-de/best --text test.en --refs test.de
    python benchmarks/stopping.py --model runs/demo-en-de/best --jsonl runs/demo-en-de/data/test.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from model.config import DecodingConfig  # noqa: E402
from model.translator import Translator  # noqa: E402


def held_out(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    if args.jsonl is not None:
        rows = [json.loads(line) for line in args.jsonl.read_text(encoding="utf-8").splitlines() if line.strip()]
        return [r["source"] for r in rows], [r["target"] for r in rows]
    texts = args.text.read_text(encoding="utf-8").splitlines()
    return texts, args.refs.read_text(encoding="utf-8").splitlines()[: len(texts)]


def main() -> None:
    import sacrebleu

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="a trained checkpoint directory")
    p.add_argument("--jsonl", type=Path, default=None, help="held-out pairs, {source, target} per line")
    p.add_argument("--text", type=Path, default=None, help="or: sources, one per line")
    p.add_argument("--refs", type=Path, default=None, help="and their references")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--max-output", type=int, default=128, help="the fixed limit of the |Y|^alpha rows")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    if (args.jsonl is None) == (args.text is None) or (args.text is not None and args.refs is None):
        p.error("give --jsonl, or --text with --refs")
    texts, refs = held_out(args)
    translator = Translator.load(args.model, device="cpu", threads=args.threads)
    translator.translate(texts[:32], beam_size=args.beam_size)  # warm-up
    penalties = {
        "GNMT ((5+|Y|)/6)^a, limit input + 50 (defaults)": DecodingConfig(beam_size=args.beam_size),
        f"|Y|^a, limit {args.max_output}": DecodingConfig(
            beam_size=args.beam_size,
            length_penalty=args.alpha,
            length_penalty_form="average",
        ).with_max_length(args.max_output),
    }
    rows: list[dict[str, Any]] = []
    print(
        f"{args.model}: {len(texts)} held-out sentences, beam {args.beam_size}, alpha {args.alpha:g}, "
        f"{args.threads} threads"
    )
    print(f"{'length penalty and limit':<52} {'stopping':<22} {'sentences/s':>11} {'BLEU':>6}")
    for name, cfg in penalties.items():
        for early in (True, False):
            start = time.perf_counter()
            out = translator.translate(texts, cfg, early_stopping=early, truncate=True)
            seconds = time.perf_counter() - start
            bleu = sacrebleu.corpus_bleu([t.text for t in out], [refs]).score
            rule = "beam_size ended" if early else "exact bound"
            rows.append(
                {"penalty": name, "early_stopping": early, "sentences_per_s": len(texts) / seconds, "bleu": bleu}
            )
            print(f"{name:<52} {rule:<22} {len(texts) / seconds:>11.1f} {bleu:>6.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"model": str(args.model), "sentences": len(texts), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
