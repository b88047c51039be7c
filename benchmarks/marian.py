"""A trained Marian model for the real-text benchmarks: the same weights for ours, CTranslate2 and transformers.

Trains a small Transformer in Marian's (OPUS-MT's) configuration (N=3, d_model 256, d_ff 1024, h 4, swish,
sin|cos-halves positions, scaled embeddings shared by encoder, decoder and output, a final logits bias,
<pad> as the decoder start) on the English->German corpus the machine has (its gettext catalogs, as
`transformer demo` builds it), for --minutes with the paper's recipe (Adam 0.9/0.98, Eq. 3's schedule,
label smoothing 0.1, ~2000-token batches), and writes it as a Hugging Face MarianMTModel directory that
`transformer import marian`, transformers and CTranslate2's converter read, plus --test held-out sentences
(test.en, test.de) that were not trained on:

    python benchmarks/marian.py --out bench/marian --minutes 20

The model is trained as our Transformer (model.marian.marian_config of the MarianConfig) and its weights are
exported tensor by tensor (the inverse of `transformer import marian`): a MarianMTModel trained from scratch
with transformers on the same batches and recipe collapsed here (its encoder's output stopped depending on
the source). CTranslate2's Marian converter drops the <pad> row and starts the decoder from a zero
embedding, where transformers and we embed <pad>, so that row is held at zero throughout training:
otherwise CTranslate2 decodes a different model and its speed would mean nothing.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import common  # noqa: E402
from common import SHAPES, log  # noqa: E402

from model.hf_weights import tensor_map  # noqa: E402
from model.marian import marian_config  # noqa: E402
from model.transformer import Transformer  # noqa: E402
from training.config import load_config  # noqa: E402
from training.data import Pair  # noqa: E402
from training.optim import label_smoothed_loss, noam_rate, set_rate  # noqa: E402
from training.prepare import build_corpus, load_split  # noqa: E402


def corpus(work: Path, test: int) -> tuple[list[Pair], list[Pair]]:
    """Train and held-out test pairs of the demo's corpus, with `test` test pairs."""
    cfg = load_config(ROOT / "training/configs/demo-en-de.yaml", [f"run_dir={work}", f"split.max_test={test}"])
    build_corpus(cfg, work / "data")
    return load_split(work / "data", "train"), load_split(work / "data", "test")


def write_tokenizer(hf_dir: Path, pairs: list[Pair], vocab_size: int) -> dict[str, int]:
    """One SentencePiece model for both sides in Marian's layout (common.write_marian_tokenizer)."""
    lines = [p.source for p in pairs] + [p.target for p in pairs]
    random.Random(0).shuffle(lines)
    return common.write_marian_tokenizer(hf_dir, lines[:200_000], vocab_size, vocab_size - 1, "bpe", ("en", "de"))


def batches(ids: list[tuple[list[int], list[int]]], max_tokens: int, rng: random.Random) -> list[list[int]]:
    """Example indices grouped by length, at most max_tokens (padding counted) per side; shuffled."""
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i][0]), len(ids[i][1]), rng.random()))
    out: list[list[int]] = []
    batch: list[int] = []
    longest = 0
    for i in order:
        n = max(len(ids[i][0]), len(ids[i][1]))
        if batch and (len(batch) + 1) * max(longest, n) > max_tokens:
            out.append(batch)
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, n)
    out.append(batch)
    rng.shuffle(out)
    return out


def train(hf_dir: Path, pairs: list[Pair], vocab_size: int, minutes: float, threads: int) -> None:
    from transformers import MarianMTModel, MarianTokenizer

    torch.set_num_threads(threads)
    tokenizer = MarianTokenizer.from_pretrained(hf_dir)
    pad = vocab_size - 1
    ids = [
        (tokenizer(p.source).input_ids, tokenizer(text_target=p.target).input_ids)
        for p in tqdm(pairs, desc="encoding", unit="pair", mininterval=2)
    ]
    ids = [(s, t) for s, t in ids if len(s) <= 100 and len(t) <= 100]
    hf_config = common.marian_config(SHAPES["small"], vocab_size, init_std=0.02, dropout=0.1)
    torch.manual_seed(0)
    model = Transformer(marian_config(hf_config.to_dict(), hf_dir / "config.json"))
    shared = model.src_embed.tokens.weight
    with torch.no_grad():
        shared[pad].zero_()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    rng, step, end = random.Random(0), 0, time.monotonic() + 60 * minutes
    model.train()
    bar = tqdm(desc="training", unit="step", total=None, mininterval=2)
    while time.monotonic() < end:
        for batch in batches(ids, 2000, rng):
            if time.monotonic() >= end:
                break
            S = max(len(ids[i][0]) for i in batch)
            T = max(len(ids[i][1]) for i in batch)
            src = torch.tensor([ids[i][0] + [pad] * (S - len(ids[i][0])) for i in batch])
            out = torch.tensor([ids[i][1] + [pad] * (T - len(ids[i][1])) for i in batch])
            tgt_in = torch.cat([torch.full((len(batch), 1), pad), out[:, :-1]], dim=1)  # <pad> starts
            step += 1
            set_rate(optimizer, noam_rate(step, SHAPES["small"]["d_model"], warmup=300, scale=0.5))
            keep = out != pad
            logits = model(src, src != pad, tgt_in, keep)  # (n, V): padding skipped
            loss, nll = label_smoothed_loss(logits, out[keep], 0.1, pad)
            tokens = int(keep.sum())
            (loss / tokens).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                shared[pad].zero_()  # CTranslate2 starts the decoder from a zero embedding
            bar.update(1)
            bar.set_postfix(nll=f"{float(nll) / tokens:.3f}", refresh=False)
    bar.close()
    hf = MarianMTModel(hf_config)
    missing = export(model, hf)
    hf.eval().save_pretrained(hf_dir)
    log(f"trained {step} steps in {minutes:g} minutes; exported (left as transformers made them: {missing})")


def export(model: Transformer, hf: Any) -> list[str]:
    """Copy our weights into a MarianMTModel: the inverse of model.marian's tensor map. Returns the Marian
    tensors not copied (its fixed sinusoidal positions, which equal ours)."""
    ours = dict(model.named_parameters())
    theirs = hf.state_dict()
    copied = set()
    with torch.no_grad():
        for name, parts in tensor_map(model.cfg).items():
            for part, tensor in zip(parts, ours[name].chunk(len(parts)), strict=True):  # q | k | v along dim 0
                theirs[part].copy_(tensor)
                copied.add(part)
        for name in (
            "model.shared.weight",
            "model.encoder.embed_tokens.weight",
            "model.decoder.embed_tokens.weight",
            "lm_head.weight",
        ):
            if name in theirs:
                theirs[name].copy_(ours["src_embed.tokens.weight"])
                copied.add(name)
        assert model.logits_bias is not None
        theirs["final_logits_bias"].copy_(model.logits_bias[None])
        copied.add("final_logits_bias")
    hf.load_state_dict(theirs)
    return sorted(set(theirs) - copied)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="the Hugging Face directory to write")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--test", type=int, default=1000, help="held-out sentences")
    p.add_argument("--vocab-size", type=int, default=4000)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    train_pairs, test_pairs = corpus(args.out / "corpus", args.test)
    log(f"corpus: {len(train_pairs)} training pairs, {len(test_pairs)} held out")
    vocab = write_tokenizer(args.out, train_pairs, args.vocab_size)
    train(args.out, train_pairs, len(vocab), args.minutes, args.threads)
    (args.out / "test.en").write_text("".join(p.source + "\n" for p in test_pairs), encoding="utf-8")
    (args.out / "test.de").write_text("".join(p.target + "\n" for p in test_pairs), encoding="utf-8")
    log(f"wrote {args.out} (test.en, test.de: {len(test_pairs)} held-out pairs)")


if __name__ == "__main__":
    main()
