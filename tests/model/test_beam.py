"""Batched beam search (§6.1) against a naive greedy decoder and against its own definitions."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from model.beam import beam_search
from model.config import DecodingConfig
from model.output import Hypothesis
from model.transformer import Transformer
from tests.conftest import SPECIAL, build_model, pad_ids, random_source, tiny_config

V = 60
LENGTHS = [3, 5, 7, 9, 11, 4, 6, 8]  # source lengths, EOS included


def biased_model(
    eos_bias: float = 0.0,
    seed: int = 1,
    max_len: int = 64,
    copy: bool = False,
    follow: bool = False,
    **token_bias: float,
) -> Transformer:
    """A random tiny model whose logits get extra bias on EOS (and on ids given as t<id>=bias); copy: a
    pointer-generator (model.copy); follow: one that favours copying runs (ModelConfig.copy_follow)."""
    model = build_model(tiny_config(V, logits_bias=True, max_len=max_len, copy=copy, copy_follow=follow), seed=seed)
    assert model.logits_bias is not None
    with torch.no_grad():
        if model.copy is not None and model.copy.follow is not None:
            model.copy.follow.fill_(3.0)  # large enough to change what the search finds
        model.logits_bias[SPECIAL.eos] += eos_bias
        for name, bias in token_bias.items():
            model.logits_bias[int(name[1:])] += bias
    return model


@torch.no_grad()
def bigram_model(transitions: dict[int, dict[int, float]], floor: float = -12.0) -> Transformer:
    """A Transformer that is a bigram model: logits(next | prev) = transitions[prev][next], else `floor`.

    Every decoder sub-layer adds zero, there are no positions and token j is embedded as the one-hot e_j, so
    the decoder output is h = LayerNorm(8 e_j) = c (e_j - 1/64) with c = 8 / sqrt(63/64); an untied output
    matrix W with columns W[:, j] = logits_j / c and W 1 = 0 (the last, unused column) gives W h = logits_j.
    """
    cfg = tiny_config(V, tie_output=False, positions="learned")
    model = build_model(cfg, std=None)
    d = cfg.d_model
    for layer in model.decoder:
        for linear in (layer.self_attn.out, layer.cross_attn.out, layer.ffn.w2):
            linear.weight.zero_()
            linear.bias.zero_()
    model.tgt_embed.positions.weight.zero_()
    model.tgt_embed.tokens.weight.copy_(torch.eye(V, d))
    c = 8.0 / math.sqrt((d - 1) / d + cfg.ln_eps)
    W = torch.zeros(V, d)
    for prev in range(V):
        logits = torch.full((V,), floor)
        for nxt, value in transitions.get(prev, {}).items():
            logits[nxt] = value
        W[:, prev] = logits / c
    W[:, d - 1] = -W.sum(dim=1)
    model.out_proj.weight.copy_(W)
    return model


def sources(lengths: list[int] = LENGTHS, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [random_source(gen, n, V) for n in lengths]


def search(model: Transformer, srcs: list[list[int]], **options: Any) -> list[list[Hypothesis]]:
    src, mask = pad_ids(srcs)
    return beam_search(model, src, mask, DecodingConfig(**options), SPECIAL)


@torch.no_grad()
def greedy(model: Transformer, src_ids: list[int], limit: int) -> list[int]:
    """The naive decoder: recompute the whole decoder each step, take the argmax, stop at EOS or the limit."""
    src = torch.tensor([src_ids])
    mask = torch.ones_like(src, dtype=torch.bool)
    memory, _ = model.encode(src, mask)
    out = [SPECIAL.decoder_start]
    while len(out) - 1 < limit:
        hidden, _ = model.decode(torch.tensor([out]), memory, mask)
        logp = torch.log_softmax(model.logits(hidden[0, -1]), dim=-1)
        logp[[SPECIAL.pad, SPECIAL.decoder_start]] = -math.inf
        token = int(logp.argmax())
        if token == SPECIAL.eos:
            break
        out.append(token)
    return out[1:]


@torch.no_grad()
def forced_log_prob(model: Transformer, src_ids: list[int], out_ids: list[int]) -> float:
    """log P(out_ids | src) under teacher forcing, summing log-softmax terms (no renormalisation)."""
    src = torch.tensor([src_ids])
    mask = torch.ones_like(src, dtype=torch.bool)
    tgt = torch.tensor([[SPECIAL.decoder_start, *out_ids[:-1]]])
    logp = torch.log_softmax(model(src, mask, tgt)[0].double(), dim=-1)
    return float(logp[torch.arange(len(out_ids)), torch.tensor(out_ids)].sum())


def has_repeated_ngram(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


# -- beam 1 is greedy ----------------------------------------------------------------------------


@pytest.mark.parametrize(("early_stopping", "alpha"), [(True, 0.6), (True, 1.0), (False, 0.0)])
def test_beam_1_equals_greedy(early_stopping: bool, alpha: float) -> None:
    model, limit = biased_model(eos_bias=7.0), 12
    srcs = sources()
    expected = [greedy(model, s, limit) for s in srcs]
    assert len({tuple(e) for e in expected}) >= 3, "the test model should depend on its input"
    assert {len(e) for e in expected} & {limit} and min(len(e) for e in expected) < limit, (
        "the test model should end some outputs with EOS and run others to the limit"
    )
    results = search(
        model, srcs, beam_size=1, max_len_a=0.0, max_len_b=limit, length_penalty=alpha, early_stopping=early_stopping
    )
    assert [r[0].ids for r in results] == expected


def test_beam_1_equals_greedy_one_sentence_at_a_time() -> None:
    model, limit = biased_model(eos_bias=7.0, seed=2), 10
    for s in sources(seed=5)[:4]:
        [[hyp]] = search(model, [s], beam_size=1, max_len_a=0.0, max_len_b=limit, early_stopping=True)
        assert hyp.ids == greedy(model, s, limit)


# -- batching ------------------------------------------------------------------------------------


@pytest.mark.parametrize("early_stopping", [True, False])
def test_sentence_alone_equals_sentence_in_a_padded_batch(early_stopping: bool) -> None:
    model = biased_model(eos_bias=7.0)
    batch = sources([6, 12, 2, 9, 4])
    options = {"beam_size": 4, "n_best": 4, "max_len_a": 1.0, "max_len_b": 3, "early_stopping": early_stopping}
    together = search(model, batch, **options)
    assert len(together) == len(batch)
    for i, s in enumerate(batch):
        [alone] = search(model, [s], **options)
        assert [h.ids for h in together[i]] == [h.ids for h in alone]
        for a, b in zip(together[i], alone, strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-4)
            assert a.log_prob == pytest.approx(b.log_prob, abs=1e-4)


def test_outputs_differ_between_sources() -> None:
    results = search(biased_model(), sources(), beam_size=4, max_len_b=6)
    assert len({tuple(r[0].ids) for r in results}) >= 3


# -- n-best lists, scores and length penalties ---------------------------------------------------


@pytest.mark.parametrize("n_best", [1, 2, 4])
def test_n_best_lists_are_sorted_and_distinct(n_best: int) -> None:
    results = search(biased_model(eos_bias=7.0), sources(), beam_size=4, n_best=n_best, max_len_b=5)
    for hyps in results:
        assert len(hyps) == n_best
        scores = [h.score for h in hyps]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.ids) for h in hyps}) == n_best


@pytest.mark.parametrize("form", ["gnmt", "average"])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_scores_are_log_prob_over_length_penalty(form: str, alpha: float) -> None:
    """Every hypothesis here ends with EOS: score = log P(Y + EOS) / lp(|Y| + 1), log P as teacher-forced."""
    model, limit = biased_model(eos_bias=8.0), 30
    srcs = sources()
    cfg = {
        "beam_size": 4,
        "n_best": 4,
        "max_len_a": 0.0,
        "max_len_b": limit,
        "min_length": 1,
        "length_penalty": alpha,
        "length_penalty_form": form,
        "early_stopping": True,
    }
    lp = DecodingConfig(**cfg).length_penalty_of
    lengths = set()
    for s, hyps in zip(srcs, search(model, srcs, **cfg), strict=True):
        for h in hyps:
            assert len(h.ids) < limit  # ended by EOS
            lengths.add(len(h.ids))
            assert h.log_prob == pytest.approx(forced_log_prob(model, s, h.ids + [SPECIAL.eos]), abs=1e-4)
            assert h.score == pytest.approx(h.log_prob / lp(len(h.ids) + 1), rel=1e-6, abs=1e-6)
    assert len(lengths) > 1


def test_hypotheses_at_the_length_limit_are_scored_consistently() -> None:
    """An output cut at the limit is scored either with EOS counted (a forced EOS) or without it."""
    model, limit = biased_model(eos_bias=-20.0), 6
    srcs = sources()[:3]
    cfg = {
        "beam_size": 3,
        "n_best": 3,
        "max_len_a": 0.0,
        "max_len_b": limit,
        "length_penalty": 1.0,
        "length_penalty_form": "average",
    }
    for s, hyps in zip(srcs, search(model, srcs, **cfg), strict=True):
        for h in hyps:
            assert len(h.ids) == limit
            without_eos = forced_log_prob(model, s, h.ids)
            with_eos = forced_log_prob(model, s, h.ids + [SPECIAL.eos])
            cut = h.log_prob == pytest.approx(without_eos, abs=1e-4) and h.score == pytest.approx(h.log_prob / limit)
            forced = h.log_prob == pytest.approx(with_eos, abs=1e-4) and h.score == pytest.approx(
                h.log_prob / (limit + 1)
            )
            assert cut or forced


def test_beam_search_beats_or_matches_greedy() -> None:
    model, limit = biased_model(eos_bias=7.0), 8
    cfg = {"max_len_a": 0.0, "max_len_b": limit, "length_penalty": 0.0, "early_stopping": False}
    srcs = sources()
    greedy_hyps = search(model, srcs, beam_size=1, **cfg)
    beam_hyps = search(model, srcs, beam_size=5, **cfg)
    for g, b in zip(greedy_hyps, beam_hyps, strict=True):
        assert b[0].score >= g[0].score - 1e-5


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_early_stopping_false_searches_at_least_as_well(alpha: float) -> None:
    model = biased_model(eos_bias=7.0)
    srcs = sources()
    cfg = {"beam_size": 4, "n_best": 2, "max_len_a": 0.0, "max_len_b": 10, "length_penalty": alpha}
    eager = search(model, srcs, early_stopping=True, **cfg)
    patient = search(model, srcs, early_stopping=False, **cfg)
    for e, p in zip(eager, patient, strict=True):
        assert len(p) == 2
        assert [h.score for h in p] == sorted((h.score for h in p), reverse=True)
        assert p[0].score >= e[0].score - 1e-5


def test_early_stopping_false_keeps_searching_while_a_longer_hypothesis_can_win() -> None:
    """After the start, EOS is likely (log P -0.20) and Y costs 1.70; Y is followed by a sure chain of ten ids
    and EOS. With |Y|^1 normalisation the long output wins (-1.70 / 12 = -0.14): a search that stops while a
    live hypothesis could still beat the finished ones (tensor2tensor's test, early_stopping=False) finds it; one
    that stops at the first finished hypothesis (early_stopping=True), or a heuristic bounding the live score at
    its current length (-1.70 / 2), returns the empty output."""
    start, y, chain = SPECIAL.decoder_start, 10, list(range(11, 21))
    transitions = {start: {SPECIAL.eos: 0.0, y: -1.5}, y: {chain[0]: 0.0}, chain[-1]: {SPECIAL.eos: 0.0}}
    transitions.update({a: {b: 0.0} for a, b in zip(chain, chain[1:], strict=False)})
    model = bigram_model(transitions)
    cfg = {"beam_size": 1, "max_len_a": 0.0, "max_len_b": 20, "length_penalty": 1.0, "length_penalty_form": "average"}
    src = sources([4])
    [[eager]] = search(model, src, early_stopping=True, **cfg)
    [[patient]] = search(model, src, early_stopping=False, **cfg)
    assert eager.ids == []
    assert eager.score == pytest.approx(-math.log1p(math.exp(-1.5)), abs=1e-3)
    assert patient.ids == [y, *chain]
    assert patient.score == pytest.approx(-(1.5 + math.log1p(math.exp(-1.5))) / 12, abs=1e-3)


def test_bigram_model_is_what_it_claims() -> None:
    model = bigram_model({2: {5: 1.0, 6: -1.0}, 5: {7: 2.0}})
    src, mask = pad_ids(sources([3]))
    tgt = torch.tensor([[2, 5, 9]])
    with torch.no_grad():
        logits = model(src, mask, tgt)[0]
    expected = torch.full((3, V), -12.0)
    expected[0, 5], expected[0, 6], expected[1, 7] = 1.0, -1.0, 2.0
    torch.testing.assert_close(logits, expected, atol=1e-3, rtol=0)


# -- constraints ---------------------------------------------------------------------------------


@pytest.mark.parametrize("min_length", [1, 3, 5])
def test_min_length_is_honoured(min_length: int) -> None:
    model = biased_model(eos_bias=9.0)
    srcs = sources()
    unconstrained = search(model, srcs, beam_size=4, n_best=4, max_len_b=20)
    assert min(len(h.ids) for hyps in unconstrained for h in hyps) < min_length
    for hyps in search(model, srcs, beam_size=4, n_best=4, max_len_b=20, min_length=min_length):
        assert len(hyps) == 4
        assert all(len(h.ids) >= min_length for h in hyps)


@pytest.mark.parametrize("n", [2, 3])
def test_no_repeat_ngram_size(n: int) -> None:
    model = biased_model(eos_bias=-10.0, t10=6.0, t11=5.0)  # likes "10 10 10 ..." and never ends
    srcs = sources()[:4]
    options = {"beam_size": 4, "n_best": 4, "max_len_a": 0.0, "max_len_b": 12}
    repeating = search(model, srcs, **options)
    assert all(has_repeated_ngram(h.ids, n) for hyps in repeating for h in hyps)
    for hyps in search(model, srcs, no_repeat_ngram_size=n, **options):
        for h in hyps:
            assert not has_repeated_ngram(h.ids, n)
            assert not has_repeated_ngram([SPECIAL.decoder_start, *h.ids], n)


@pytest.mark.parametrize(("a", "b"), [(0.0, 4), (0.5, 2), (1.0, 0), (1.5, 1), (2.0, 3)])
def test_max_len_a_b_limit_the_output(a: float, b: int) -> None:
    model = biased_model(eos_bias=-20.0)  # never ends on its own: every output runs to its limit
    lengths = [3, 8, 13, 1]
    src, mask = pad_ids(sources(lengths))
    results = beam_search(model, src, mask, DecodingConfig(beam_size=3, n_best=3, max_len_a=a, max_len_b=b), SPECIAL)
    for n, hyps in zip(lengths, results, strict=True):
        limit = int(a * n + b)  # tokens, EOS not counted; n counts the source's EOS
        assert len(hyps) == 3
        assert all(len(h.ids) == limit for h in hyps), (n, limit, [len(h.ids) for h in hyps])


def test_zero_length_limit_gives_empty_outputs() -> None:
    """a * |x| + b may round down to 0 tokens: such a sentence gets empty outputs, not longer ones."""
    model = biased_model(eos_bias=-20.0)
    results = search(model, sources([3, 25]), beam_size=2, n_best=1, max_len_a=0.1, max_len_b=0)
    assert [len(hyps) for hyps in results] == [1, 1]
    assert results[0][0].ids == []  # limit int(0.1 * 3) = 0
    assert len(results[1][0].ids) == 2  # limit int(0.1 * 25) = 2
    [alone] = search(model, sources([3]), beam_size=2, n_best=1, max_len_a=0.1, max_len_b=0)
    assert [h.ids for h in alone] == [[]]


def test_outputs_stay_within_the_models_positions() -> None:
    model = biased_model(eos_bias=-20.0, max_len=12)
    for hyps in search(model, sources([5, 11]), beam_size=2, n_best=2, max_len_b=50):
        assert all(len(h.ids) == 11 for h in hyps)  # max_len - 1: the decoder start takes a position


def test_banned_ids_are_never_generated() -> None:
    model = biased_model(eos_bias=-20.0, t10=4.0, t0=4.0, t2=4.0)  # likes pad, decoder start and 10
    results = search(model, sources(), beam_size=4, n_best=4, max_len_b=6, banned_ids=(10,))
    tokens = {t for hyps in results for h in hyps for t in h.ids}
    assert tokens and not tokens & {10, SPECIAL.pad, SPECIAL.decoder_start, SPECIAL.eos}
