"""Language detection on held-out text: the share of sources and references of 4 or more words that
service.detect.Detector (lingua, among the model's two languages, as the service runs it) tells right.

    python benchmarks/detect.py --jsonl runs/demo-en-de/data/test.jsonl --source en --target de
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.detect import MIN_LETTERS, Detector  # noqa: E402
from service.errors import InvalidRequest  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jsonl", type=Path, nargs="+", required=True, help="held-out pairs, {source, target} per line")
    p.add_argument("--source", required=True, help="the sources' language (ISO 639-1)")
    p.add_argument("--target", required=True, help="the targets' language")
    p.add_argument("--min-words", type=int, default=4)
    args = p.parse_args()
    rows = [json.loads(line) for path in args.jsonl for line in path.read_text(encoding="utf-8").splitlines() if line]
    texts = [(r[side], lang) for r in rows for side, lang in (("source", args.source), ("target", args.target))]
    texts = [(t, lang) for t, lang in texts if len(t.split()) >= args.min_words]
    detector = Detector((args.source, args.target))
    right = refused = 0
    start = time.perf_counter()
    for text, lang in texts:
        try:
            right += detector.detect(text, "q")[0].language == lang
        except InvalidRequest:  # fewer than MIN_LETTERS letters
            refused += 1
    ms = 1000 * (time.perf_counter() - start) / len(texts)
    print(
        f"{len(texts)} held-out texts of {args.min_words}+ words ({args.source} and {args.target}): "
        f"{right / len(texts):.1%} right, {refused} refused (under {MIN_LETTERS} letters), {ms:.2f} ms each"
    )


if __name__ == "__main__":
    main()
