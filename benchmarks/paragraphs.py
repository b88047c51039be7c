"""Paragraphs against sentences: held-out sentences that end a sentence (. ! ?) grouped three to a paragraph,
translated three ways with one trained checkpoint, each scored by sacreBLEU against the paragraphs' references
(the three references joined), with the share of words the outputs lack against the references:

- sentence by sentence: each sentence sent alone, the outputs joined (what the model does best);
- paragraphs, whole: each paragraph read as one input (what the service did before it segmented);
- paragraphs, segmented: each paragraph as a user sends it, cut into sentences by model.segment and joined back
  (what `Translator.translate`, `transformer translate` and the service do now).

    python benchmarks/paragraphs.py --model runs/demo-en-de/best \
        --jsonl runs/demo-en-de/data/test.jsonl runs/demo-en-de/data/dev.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from model.translator import Translator  # noqa: E402

ENDS = (".", "!", "?")
PER_PARAGRAPH = 3


def paragraphs(paths: list[Path]) -> tuple[list[list[str]], list[list[str]]]:
    """Held-out pairs whose source ends in . ! or ?, three to a paragraph, in file order."""
    lines = [line for path in paths for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [json.loads(line) for line in lines]
    whole = [r for r in rows if r["source"].strip().endswith(ENDS) and r["source"][:1].isupper()]
    whole = whole[: len(whole) - len(whole) % PER_PARAGRAPH]
    groups = [whole[i : i + PER_PARAGRAPH] for i in range(0, len(whole), PER_PARAGRAPH)]
    return [[r["source"].strip() for r in g] for g in groups], [[r["target"].strip() for r in g] for g in groups]


def missing_words(outputs: list[str], refs: list[str]) -> float:
    """1 - output words / reference words, over all paragraphs (negative: longer than the references)."""
    return 1 - sum(len(o.split()) for o in outputs) / sum(len(r.split()) for r in refs)


def main() -> None:
    import sacrebleu

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="a trained translation checkpoint directory")
    p.add_argument(
        "--jsonl", type=Path, nargs="+", required=True, help="held-out pairs, {source, target} per line (files)"
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args()
    sources, targets = paragraphs(args.jsonl)
    translator = Translator.load(args.model, device="cpu", threads=args.threads)
    refs = [" ".join(t) for t in targets]
    texts = [" ".join(s) for s in sources]
    flat = [s for group in sources for s in group]
    singles = iter(o.text for o in translator.translate(flat, segment=False, truncate=True))
    ways = {
        "sentence by sentence, joined": [" ".join(next(singles) for _ in group) for group in sources],
        "paragraphs, whole": [o.text for o in translator.translate(texts, segment=False, truncate=True)],
        "paragraphs, segmented (model.segment)": [o.text for o in translator.translate(texts, truncate=True)],
    }
    cut = [len(t.spans) for t in translator.segment(texts)]
    print(
        f"{args.model}: {len(texts)} paragraphs of {PER_PARAGRAPH} held-out sentences; the segmenter found "
        f"{PER_PARAGRAPH} sentences in {sum(n == PER_PARAGRAPH for n in cut)} of them"
    )
    print(f"{'input':<40} {'BLEU':>6} {'words missing':>14}")
    rows: list[dict[str, Any]] = []
    for name, outputs in ways.items():
        bleu = sacrebleu.corpus_bleu(outputs, [refs]).score
        missing = missing_words(outputs, refs)
        rows.append({"input": name, "bleu": bleu, "missing_words": missing})
        print(f"{name:<40} {bleu:>6.2f} {missing:>13.1%}")
    if args.json:
        summary = {"model": str(args.model), "paragraphs": len(texts), "segmented_into_3": cut.count(3), "rows": rows}
        args.json.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
