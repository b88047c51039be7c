"""Sentences that join a running beam search mid-search get what their search alone gets, on any device: the
paper's base model, and a small summarizer with copying (See et al., 2017) and copy_follow. Random weights,
outputs of their own lengths (each ends at EOS or at its own limit). Run by gpu_check.sh on CUDA.

    python benchmarks/continuous_check.py --device cuda
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Hashable

import torch

from model.beam import BeamLoop, Hypothesis, search_all
from model.config import DecodingConfig, ModelConfig
from model.tokenizer import SpecialIds
from model.transformer import Transformer


def check(name: str, cfg: ModelConfig, device: str, sentences: int, rows: int, compared: int) -> bool:
    """Feed sentences into one BeamLoop, at most `rows` at a time, and compare the first ones with search_all."""
    torch.manual_seed(0)
    special = SpecialIds()
    model = Transformer(cfg).to(device).eval()
    rng = random.Random(0)
    srcs = [
        [rng.randrange(4, cfg.src_vocab_size) for _ in range(rng.randint(3, 60))] + [special.eos]
        for _ in range(sentences)
    ]
    cfgs = [
        DecodingConfig(max_len_a=0.0, max_len_b=rng.randint(5, 60), no_repeat_ngram_size=rng.choice((0, 2)))
        for _ in srcs
    ]
    loop, waiting = BeamLoop(model, special, 4), list(range(len(srcs)))
    got: dict[Hashable, list[Hypothesis]] = {}
    with torch.inference_mode():
        while waiting or loop:
            take, waiting = waiting[: rows - len(loop)], waiting[rows - len(loop) :]
            loop.admit([srcs[i] for i in take], [cfgs[i] for i in take], take)
            got.update((s.tag, s.n_best()) for s in loop.step())
        same = sum(
            got[i][0].tokens == search_all(model, [srcs[i]], [cfgs[i]], special)[0][0].tokens for i in range(compared)
        )
    print(f"{name}: {same}/{compared} equal to their search alone ({sentences} sentences, up to {rows} at once)")
    return same == compared


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--rows", type=int, default=256, help="most sentences in the loop at once")
    ap.add_argument("--compared", type=int, default=60)
    a = ap.parse_args()
    base = ModelConfig.from_preset("base", 8000, max_len=256)
    copying = ModelConfig.from_preset("small", 8000, max_len=256, norm="pre", copy=True, copy_follow=True)
    ok = [
        check(name, cfg, a.device, a.sentences, a.rows, a.compared)
        for name, cfg in (("base", base), ("small, copy + copy_follow", copying))
    ]
    raise SystemExit(0 if all(ok) else 1)


if __name__ == "__main__":
    main()
