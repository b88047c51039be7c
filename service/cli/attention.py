"""`transformer attention`: one text decoded as POST /attention would (the model's own decoding options, unless
given), its attention drawn as a PNG heatmap and, if asked, written as POST /attention's JSON."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from model.commands import add_decoding_options, decoding_config
from model.output import ATTENTION_KINDS


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "attention",
        help="translate one text and draw its attention as a PNG heatmap",
        description="Default: cross-attention of the last decoder layer, mean over heads. Layers and heads "
        "count from 0. Decoding options not given are the model's own, as for POST /attention.",
    )
    p.add_argument("text", help="the text to translate (or summarize)")
    p.add_argument("--model", required=True, help="checkpoint directory")
    p.add_argument("--png", required=True, help="heatmap file to write")
    p.add_argument("--json", default=None, help="also write every attention map, as POST /attention answers")
    p.add_argument(
        "--kind",
        choices=ATTENTION_KINDS,
        default="cross",
        help="cross: output over source tokens; encoder or decoder: self-attention",
    )
    p.add_argument("--layer", type=int, default=-1, help="layer index; negative counts from the last (default -1)")
    p.add_argument("--head", type=head_arg, default=None, metavar="H|mean", help="head index, or mean (default)")
    p.add_argument(
        "--sentence", type=int, default=0, help="of a text of several sentences, the one whose maps to draw (from 0)"
    )
    p.add_argument("--truncate", action="store_true", help="cut an input longer than the model's limit")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    add_decoding_options(p)
    p.set_defaults(run=run_attention)


def head_arg(value: str) -> int | None:
    """--head: an index, or mean (None) for the mean over heads."""
    if value == "mean":
        return None
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a head index or 'mean', got {value!r}") from None


def run_attention(args: argparse.Namespace) -> int:
    from model.translator import Translator
    from service.api.schemas import attention_json
    from service.attention import AttentionSelection, maps_json
    from service.demo.heatmap import select, write_png
    from training.extras import require_train_extra

    require_train_extra("attention", ("matplotlib",))  # the PNG
    translator = Translator.load(args.model, device=args.device)
    cfg = decoding_config(args, translator.meta.decoding)
    sentences = translator.segment([args.text])[0].sentences
    if not 0 <= args.sentence < len(sentences):
        print(f"error: --sentence {args.sentence}: the text has {len(sentences)} sentences", file=sys.stderr)
        return 2
    if len(sentences) > 1:  # the whole text's output, then the maps of the one sentence (decoded alone, as always)
        print(translator.translate([args.text], cfg, truncate=args.truncate)[0].text, flush=True)
    one = [sentences[args.sentence]]
    best = translator.translate(one, cfg, return_attention=True, truncate=args.truncate, segment=False)[0]
    assert best.attention is not None
    heatmap = select(best.attention, args.kind, args.layer, args.head)
    if len(sentences) == 1:
        print(best.text, flush=True)
    print(f"wrote {write_png(heatmap, args.png)} ({heatmap.title})", file=sys.stderr)
    if args.json:
        maps = maps_json(best.attention, AttentionSelection())
        body = attention_json(Path(args.model).resolve().name, 0, args.sentence, best.hypotheses, maps)
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(body)
        print(f"wrote {out}", file=sys.stderr)
    return 0
