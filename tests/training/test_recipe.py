"""Cleaning, splitting, token batches and the paper's optimizer, schedule and loss (§5)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from training.batching import EncodedCorpus, collate, token_batches
from training.clean import CleanConfig, CleanStats, SplitConfig, clean, overlap, split
from training.config import from_dict
from training.data import Pair, read_jsonl
from training.optim import label_smoothed_loss, noam_rate
from training.prepare import build_corpus


def test_clean_drops_empty_long_skewed_and_duplicate_pairs() -> None:
    pairs = [
        Pair("hello  world\n", "hallo welt"),
        Pair("", "leer"),
        Pair("a " * 30, "b"),
        Pair("short", "a much much much longer translation than the source"),
        Pair("hello world", "hallo welt"),
        Pair("fine", "gut"),
    ]
    stats = CleanStats()
    kept = list(clean(pairs, CleanConfig(max_words=20, max_ratio=3.0), stats))
    assert [(p.source, p.target) for p in kept] == [("hello world", "hallo welt"), ("fine", "gut")]
    assert stats.as_dict() == {
        "kept": 2,
        "empty": 1,
        "length": 1,
        "ratio": 1,
        "duplicate": 1,
        "origin_cap": 0,
        "overlap": 0,
    }


def test_clean_keeps_the_first_pairs_of_each_origin_up_to_its_cap() -> None:
    pairs = [Pair(f"page {i}", "s", origin="gcloud" if i % 4 else f"tool{i}") for i in range(40)]
    stats = CleanStats()
    kept = list(clean(pairs, CleanConfig(max_per_origin=3), stats))
    assert [p.source for p in kept if p.origin == "gcloud"] == ["page 1", "page 2", "page 3"]
    assert sum(p.origin != "gcloud" for p in kept) == 10 and stats.origin_cap == 27
    assert len(list(clean(pairs, CleanConfig()))) == 40
    with pytest.raises(ValueError, match="max_per_origin"):
        CleanConfig(max_per_origin=-1)


def test_overlap_counts_the_summary_content_words_found_in_the_document() -> None:
    doc = "The chage command changes the number of days between password changes."
    assert overlap(Pair(doc, "change user password expiry information")) == pytest.approx(1 / 5)
    assert overlap(Pair(doc, "Changes the PASSWORD of the days")) == 1.0  # function words aside, any case
    assert overlap(Pair(doc, "of the")) == 1.0  # nothing to find
    assert overlap(Pair(doc, "Helper function for expand_mul.")) == 0.0
    with pytest.raises(ValueError, match="min_overlap"):
        CleanConfig(min_overlap=1.5)


def test_min_overlap_leaves_unsupported_pairs_out_of_training_only(tmp_path: Path) -> None:
    rng = random.Random(0)
    words = [f"w{i}" for i in range(60)]
    with (tmp_path / "pairs.jsonl").open("w") as f:
        for i in range(600):
            doc = rng.sample(words, 12)
            summary = doc[:3] if i % 2 else ["zz", *rng.sample(words, 2)]  # odd: taken from the document
            f.write(json.dumps({"source": " ".join(doc), "target": " ".join(summary)}) + "\n")
    cfg = from_dict(
        {
            "run_dir": str(tmp_path / "run"),
            "task": "summarization",
            "source_lang": "en",
            "target_lang": "en",
            "data": {"corpus": "jsonl", "paths": [str(tmp_path / "pairs.jsonl")]},
            "clean": {"min_overlap": 0.5, "max_ratio": 0},
            "split": {"dev": 0.1, "test": 0.1},
            "vocab": {"size": 80},
        }
    )
    build_corpus(cfg, tmp_path / "data", progress=False)
    splits = {name: list(read_jsonl(tmp_path / "data" / f"{name}.jsonl")) for name in ("train", "dev", "test")}
    assert splits["train"] and all(overlap(p) >= 0.5 for p in splits["train"])
    held_out = splits["dev"] + splits["test"]
    assert any(overlap(p) < 0.5 for p in held_out) and any(overlap(p) >= 0.5 for p in held_out)
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert stats["clean"]["overlap"] + len(splits["train"]) + len(held_out) == 600


def test_split_is_deterministic_disjoint_and_holds_out_origins() -> None:
    rng = random.Random(0)
    pairs = [Pair(f"sentence {rng.random()}", "x", origin=rng.choice(["a", "b", "c"])) for _ in range(3000)]
    cfg = SplitConfig(dev=0.05, test=0.05, holdout=("c",), max_dev=10_000, max_test=10_000)
    first, second = split(pairs, cfg), split(list(reversed(pairs)), cfg)
    assert {p.source for p in first.dev} == {p.source for p in second.dev}
    assert {p.source for p in first.train} == {p.source for p in second.train}
    assert all(p.origin != "c" for p in first.train + first.dev)
    assert {p for p in pairs if p.origin == "c"} <= set(first.test)
    assert not {p.source for p in first.train} & {p.source for p in first.dev + first.test}
    held_in = sum(p.origin != "c" for p in pairs)
    assert 0.03 < len(first.dev) / held_in < 0.07


def corpus(n: int, seed: int = 0) -> EncodedCorpus:
    rng = random.Random(seed)
    src = [[rng.randrange(4, 50) for _ in range(rng.randint(1, 40))] + [3] for _ in range(n)]
    tgt = [[rng.randrange(4, 50) for _ in range(rng.randint(1, 40))] + [3] for _ in range(n)]
    return EncodedCorpus.build(src, tgt)


def test_token_batches_respect_the_budget_with_padding_and_cover_every_pair_once() -> None:
    data = corpus(500)
    batches = token_batches(data, max_tokens=300, seed=1, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(500))
    for b in batches:
        padded_src = len(b) * max(data.src_len(i) for i in b)
        padded_tgt = len(b) * max(data.tgt_len(i) for i in b)
        assert padded_src <= 300 and padded_tgt <= 300
    assert sum(len(b) for b in batches) / len(batches) > 5  # grouped by length, not one per batch


def test_batch_order_is_shuffled_per_epoch_and_reproducible() -> None:
    data = corpus(400)
    a, b = token_batches(data, 200, seed=1, epoch=0), token_batches(data, 200, seed=1, epoch=0)
    c = token_batches(data, 200, seed=1, epoch=1)
    assert a == b and a != c
    lengths = [max(data.src_len(i) for i in batch) for batch in a]
    assert lengths != sorted(lengths)


def test_collate_shifts_targets_right() -> None:
    data = EncodedCorpus.build([[5, 6, 3], [7, 3]], [[8, 9, 3], [10, 3]])
    b = collate(data, [0, 1], pad=0, start=2)
    assert b.src.tolist() == [[5, 6, 3], [7, 3, 0]]
    assert b.src_mask.tolist() == [[True, True, True], [True, True, False]]
    assert b.tgt_in.tolist() == [[2, 8, 9], [2, 10, 0]]
    assert b.tgt_out.tolist() == [[8, 9, 3], [10, 3, 0]]


def test_noam_schedule_matches_equation_3() -> None:
    d_model, warmup = 512, 4000
    for step in (1, 100, 3999, 4000, 4001, 100_000):
        expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert noam_rate(step, d_model, warmup) == pytest.approx(expected)
    peak = noam_rate(warmup, d_model, warmup)
    assert peak == pytest.approx(max(noam_rate(s, d_model, warmup) for s in range(1, 20_000, 7)), rel=1e-3)
    assert noam_rate(warmup, d_model, warmup, scale=2.0) == pytest.approx(2 * peak)


def test_label_smoothed_loss_matches_torch_and_ignores_padding() -> None:
    torch.manual_seed(0)
    logits, target = torch.randn(3, 7, 50), torch.randint(1, 50, (3, 7))
    target[0, 4:] = 0
    loss, nll = label_smoothed_loss(logits, target, eps_ls=0.1, pad=0)
    flat = logits.reshape(-1, 50), target.reshape(-1)
    assert loss.item() == pytest.approx(
        F.cross_entropy(*flat, ignore_index=0, reduction="sum", label_smoothing=0.1).item(), rel=1e-5
    )
    assert nll.item() == pytest.approx(F.cross_entropy(*flat, ignore_index=0, reduction="sum").item(), rel=1e-5)
    unsmoothed, _ = label_smoothed_loss(logits, target, eps_ls=0.0, pad=0)
    assert unsmoothed.item() == pytest.approx(nll.item(), rel=1e-6)
    assert not math.isclose(loss.item(), nll.item())


@pytest.mark.parametrize("eps_ls", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_gradient_matches_torch(eps_ls: float) -> None:
    torch.manual_seed(1)
    logits, target = torch.randn(4, 6, 40, dtype=torch.float64), torch.randint(1, 40, (4, 6))
    target[1, 2:] = 0
    mine = logits.clone().requires_grad_()
    loss, _ = label_smoothed_loss(mine, target, eps_ls=eps_ls, pad=0)
    (loss * 3.0).backward()
    ref = logits.clone().requires_grad_()
    (
        F.cross_entropy(
            ref.reshape(-1, 40), target.reshape(-1), ignore_index=0, reduction="sum", label_smoothing=eps_ls
        )
        * 3.0
    ).backward()
    assert mine.grad is not None and ref.grad is not None
    torch.testing.assert_close(mine.grad, ref.grad, atol=1e-12, rtol=1e-9)
    assert mine.grad[1, 2:].abs().max() == 0  # padding gets no gradient
    assert torch.autograd.gradcheck(
        lambda x: label_smoothed_loss(x, target, eps_ls, 0)[0], (logits.clone().requires_grad_(),)
    )
