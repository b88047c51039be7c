"""Inline markup on held-out sentences: each sentence gets one to three inline elements (<b>, <i>, <a href>,
nested at times) around random words, goes through format html's path (model.markup with the model's word
alignment) and is scored against the same sentence sent without tags: every tag of the input must come back,
the output must parse, and its text (tags removed) must score as the plain sentence's output does.

    python benchmarks/html_tags.py --model runs/demo-en-de/best --jsonl runs/demo-en-de/data/test.jsonl
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from model.markup import VOID, Document, render  # noqa: E402
from model.translator import Translator  # noqa: E402

TAGS = ["b", "i", 'a href="https://example.com/"']
WORD = re.compile(r"(\W*)(.*?)(\W*)", re.DOTALL)  # a word's leading punctuation, core and trailing punctuation
PUNCT_CLOSE = re.compile(r"[^\w\s>]</")  # an end tag right after punctuation


class Check(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[str] = []
        self.text = ""
        self.ok = True

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        self.ok &= bool(self.stack) and self.stack.pop() == tag

    def handle_data(self, data: str) -> None:
        self.text += data


def check(markup: str) -> Check:
    c = Check()
    c.feed(markup)
    c.close()
    c.ok &= not c.stack
    return c


def tagged(sentence: str, rng: random.Random) -> str:
    """The sentence (escaped) with one to three inline elements around runs of its words, their punctuation
    left outside as authors write it ("<b>file</b>.")."""
    words = [[html.escape(p, quote=False) for p in WORD.fullmatch(w).groups()] for w in sentence.split()]  # type: ignore[union-attr]
    for _ in range(rng.randint(1, 3)):
        a = rng.randrange(len(words))
        b = rng.randrange(a, min(len(words), a + 3))
        tag = rng.choice(TAGS)
        words[a][1] = f"<{tag}>{words[a][1]}"
        words[b][1] = f"{words[b][1]}</{tag.split()[0]}>"
    return "<p>" + " ".join("".join(w) for w in words) + "</p>"


def main() -> None:
    import sacrebleu

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--jsonl", type=Path, nargs="+", required=True)
    p.add_argument("--min-words", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    args = p.parse_args()
    rows = [json.loads(line) for path in args.jsonl for line in path.read_text(encoding="utf-8").splitlines() if line]
    rows = [r for r in rows if len(r["source"].split()) >= args.min_words]
    rng = random.Random(args.seed)
    tr = Translator.load(args.model, device=args.device, threads=2 if args.device == "cpu" else None)
    plain = [o.text for o in tr.translate([r["source"] for r in rows], truncate=True)]
    inputs = [tagged(r["source"], rng) for r in rows]
    documents = [Document(markup) for markup in inputs]
    outputs = tr.translate([t for d in documents for t in d.texts], align=True, truncate=True)
    best = iter(o.hypotheses[0] for o in outputs)
    rendered = [render(d, [next(best) for _ in d.texts]) for d in documents]
    checks = [check(r) for r in rendered]
    every_tag = sum(sorted(c.tags) == sorted(check(m).tags) for c, m in zip(checks, inputs, strict=True))
    refs = [r["target"] for r in rows]
    text = [" ".join(c.text.split()) for c in checks]
    same = sum(t == " ".join(p.split()) for t, p in zip(text, plain, strict=True))
    print(f"{args.model}: {len(rows)} held-out sentences of {args.min_words}+ words, 1-3 inline elements each")
    print(f"every tag back: {every_tag}/{len(rows)}; output parses: {sum(c.ok for c in checks)}/{len(rows)}")
    print(f"text equal to the plain sentence's output: {same}/{len(rows)}")
    after = [len(PUNCT_CLOSE.findall(r)) for r in rendered]
    before = [len(PUNCT_CLOSE.findall(m)) for m in inputs]
    print(f"end tags right after punctuation: {sum(after)} in the outputs, {sum(before)} in the inputs")
    print(f"BLEU, plain sentences: {sacrebleu.corpus_bleu(plain, [refs]).score:.2f}")
    print(f"BLEU, tagged sentences with their tags removed: {sacrebleu.corpus_bleu(text, [refs]).score:.2f}")


if __name__ == "__main__":
    main()
