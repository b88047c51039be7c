"""Continuous batching (BeamLoop): sentences join a running search and leave it at every step, each with its
own options, and every sentence's output and score equal its search alone."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from model.beam import BeamLoop, search_all, survivors
from model.cache import IN_PLACE_MIN, DecoderCache, _copy_order, _moved_rows, _row_capacity, row_spans
from model.config import DecodingConfig
from model.masks import pad_batch
from model.output import Hypothesis
from tests.conftest import SPECIAL
from tests.model.test_beam import biased_model, sources

OPTION_SETS: list[dict[str, Any]] = [
    {},
    {"length_penalty": 1.0, "length_penalty_form": "average"},
    {"n_best": 3, "max_len_a": 0.0, "max_len_b": 9},
    {"min_length": 5, "max_len_b": 4},
    {"no_repeat_ngram_size": 2, "max_len_b": 12},
    {"early_stopping": False, "length_penalty": 1.2},
    {"max_len_a": 0.0, "max_len_b": 1},
    {"no_repeat_ngram_size": 3, "n_best": 2, "early_stopping": False},
]


def alone(model: Any, src: list[int], cfg: DecodingConfig) -> list[Hypothesis]:
    [hyps] = search_all(model, [src], [cfg], SPECIAL)
    return hyps


def assert_same(got: list[Hypothesis], want: list[Hypothesis]) -> None:
    assert [h.ids for h in got] == [h.ids for h in want]
    for a, b in zip(got, want, strict=True):
        assert a.score == pytest.approx(b.score, abs=1e-4)
        assert a.log_prob == pytest.approx(b.log_prob, abs=1e-4)


def run_with_arrivals(
    loop: BeamLoop,
    arrivals: dict[int, list[tuple[int, list[int], DecodingConfig]]],
    after_step: Callable[[BeamLoop], None] | None = None,
) -> tuple[dict[int, list[Hypothesis]], dict[int, int]]:
    """Admit arrivals[step] before that step (after_step, if given, sees the loop after each one); returns each
    tag's n-best and the loop size it left from."""
    out: dict[int, list[Hypothesis]] = {}
    company: dict[int, int] = {}
    step = 0
    while loop or any(s >= step for s in arrivals):
        batch = arrivals.get(step, [])
        loop.admit([b[1] for b in batch], [b[2] for b in batch], [b[0] for b in batch])
        if loop:
            size = len(loop)
            for s in loop.step():
                out[int(str(s.tag))] = s.n_best()
                company[int(str(s.tag))] = size
            if after_step is not None:
                after_step(loop)
        step += 1
    return out, company


@pytest.mark.parametrize(
    ("seed", "copy", "follow"),
    [(0, False, False), (1, False, False), (2, False, False), (0, True, False), (1, True, False), (2, True, True)],
)
@torch.no_grad()
def test_sentences_admitted_mid_search_with_other_options_equal_their_search_alone(
    seed: int, copy: bool, follow: bool
) -> None:
    """Also with copying (model.copy), whose per-sentence source ids and keys join, move and leave with the
    sentence's cross-attention slot, and each row's last token with its row (copy_follow)."""
    model = biased_model(eos_bias=4.0, seed=seed, copy=copy, follow=follow)
    rng = random.Random(seed)
    srcs = sources([2, 14, 3, 9, 11, 5, 16, 4, 7, 12], seed=seed)
    arrivals: dict[int, list[tuple[int, list[int], DecodingConfig]]] = {}
    cfgs = {}
    for tag, src in enumerate(srcs):
        cfg = DecodingConfig(beam_size=3, **{**OPTION_SETS[tag % len(OPTION_SETS)]})
        cfg = DecodingConfig(**{**cfg.__dict__, "n_best": min(cfg.n_best, 3)})
        cfgs[tag] = cfg
        arrivals.setdefault(rng.choice([0, 0, 1, 2, 3, 5, 8]), []).append((tag, src, cfg))
    got, company = run_with_arrivals(BeamLoop(model, SPECIAL, 3), arrivals)
    assert sorted(got) == list(range(len(srcs)))
    assert max(company.values()) > 1, "sentences should have shared the loop"
    for tag, src in enumerate(srcs):
        assert_same(got[tag], alone(model, src, cfgs[tag]))


@pytest.mark.parametrize(("copy", "follow"), [(False, False), (True, False), (True, True)])
@torch.no_grad()
def test_a_short_sentence_joining_a_long_one_late_equals_its_search_alone(copy: bool, follow: bool) -> None:
    """Very different lengths: a 2-token source joins at step 20 a 30-token source decoding up to 60 tokens."""
    model = biased_model(eos_bias=-3.0, seed=3, max_len=128, copy=copy, follow=follow)
    long, short = sources([30, 2], seed=7)
    long_cfg = DecodingConfig(beam_size=4, max_len_a=0.0, max_len_b=60, min_length=40)
    short_cfg = DecodingConfig(beam_size=4, max_len_a=0.0, max_len_b=25, n_best=2, no_repeat_ngram_size=2)
    got, _ = run_with_arrivals(BeamLoop(model, SPECIAL, 4), {0: [(0, long, long_cfg)], 20: [(1, short, short_cfg)]})
    assert len(got[0][0].ids) >= 40
    assert_same(got[0], alone(model, long, long_cfg))
    assert_same(got[1], alone(model, short, short_cfg))


@torch.no_grad()
def test_the_cache_grows_no_further_than_the_longest_output_limit_of_its_sentences() -> None:
    """Doubling past the limit zeroed buffers nobody would fill: at 256 rows, 830 MB and 1.4 s in one step."""
    model = biased_model(eos_bias=-20.0, seed=3, max_len=512)  # no EOS: every sentence runs to its limit
    first, second = sources([5, 6], seed=2)
    cfg = DecodingConfig(beam_size=2, max_len_a=0.0, max_len_b=70)  # 70 tokens: positions 0 to 69
    capacities: list[int] = []

    def capacity(loop: BeamLoop) -> None:
        if loop.cache is not None:
            capacities.append(loop.cache.capacity)

    got, _ = run_with_arrivals(BeamLoop(model, SPECIAL, 2), {0: [(0, first, cfg)], 10: [(1, second, cfg)]}, capacity)
    assert capacities[0] == 32 and max(capacities) == 70  # doubling would have reached 84 or 128
    assert [len(got[t][0].ids) for t in (0, 1)] == [70, 70]
    assert_same(got[0], alone(model, first, cfg))
    assert_same(got[1], alone(model, second, cfg))


@pytest.mark.parametrize("copy", [False, True])
@torch.no_grad()
def test_a_loop_makes_no_room_past_the_sentences_it_may_hold(copy: bool) -> None:
    """max_sentences (the service's TRANSFORMER_MAX_BATCH_SIZE): rows and slots that joining makes room for stop
    there, where doubling made room for twice the sentences, each growth then zeroing rows nobody fills."""
    model = biased_model(eos_bias=-20.0, seed=3, max_len=128, copy=copy)  # every sentence runs to its limit
    srcs = sources([5, 6, 7, 4, 8, 3], seed=2)
    cfgs = [DecodingConfig(beam_size=2, max_len_a=0.0, max_len_b=n) for n in (40, 6, 30, 30, 20, 10)]
    # 1 leaves first and the last sentence's slot moves into its own (cache.slots), then two join: new buffers
    arrivals = {0: [(t, srcs[t], cfgs[t]) for t in range(4)], 9: [(t, srcs[t], cfgs[t]) for t in (4, 5)]}
    rooms: list[tuple[int, int]] = []
    slotted: list[bool] = []

    def room(loop: BeamLoop) -> None:
        if loop.cache is not None:
            layer = loop.cache.layers[0]
            rooms.append((_row_capacity(layer.kv), _row_capacity(layer.cross_v)))
            slotted.append(loop.cache.slots is not None)

    got, company = run_with_arrivals(BeamLoop(model, SPECIAL, 2, max_sentences=5), arrivals, room)
    assert max(company.values()) == 5 and any(slotted)
    assert max(rows for rows, _ in rooms) == 10 and max(slots for _, slots in rooms) == 5  # 5 sentences, 2 beams
    for tag, src in enumerate(srcs):
        assert_same(got[tag], alone(model, src, cfgs[tag]))


@torch.no_grad()
def test_dropped_sentences_leave_and_the_rest_is_unchanged() -> None:
    model = biased_model(eos_bias=1.0, seed=4)
    srcs = sources([6, 12, 3, 9], seed=2)
    cfg = DecodingConfig(beam_size=2, max_len_b=10, early_stopping=False)
    loop = BeamLoop(model, SPECIAL, 2)
    loop.admit(srcs, [cfg] * 4, [0, 1, 2, 3])
    out: dict[int, list[Hypothesis]] = {}
    for s in loop.step():
        out[int(str(s.tag))] = s.n_best()
    gone = loop.drop({1, 3})
    assert {s.tag for s in gone} <= {1, 3} and len(loop) <= 2
    while loop:
        for s in loop.step():
            out[int(str(s.tag))] = s.n_best()
    assert set(out) <= {0, 2} | {s.tag for s in gone} and {0, 2} <= set(out)
    for tag in (0, 2):
        assert_same(out[tag], alone(model, srcs[tag], cfg))


@torch.no_grad()
def test_first_step_with_k_rows_per_sentence_keeps_one_live_hypothesis() -> None:
    """A new sentence's extra beams start at -inf, so its first step ranks one row's candidates only."""
    model = biased_model(seed=5)
    loop = BeamLoop(model, SPECIAL, 4)
    loop.admit(sources([5], seed=1), [DecodingConfig(beam_size=4, max_len_b=3)], ["x"])
    assert loop.scores[0, 0] == 0 and all(math.isinf(v) for v in loop.scores[0, 1:].tolist())
    loop.step()
    assert len(loop) == 0 or torch.isfinite(loop.scores).all()


@pytest.fixture
def nan_filled_memory() -> Iterator[None]:
    """Uninitialized tensors (torch.empty) filled with NaN, so that reading memory never written shows."""
    import torch.utils.deterministic

    before = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.utils.deterministic.fill_uninitialized_memory = before[1]


@pytest.mark.parametrize(("copy", "in_place_min"), [(False, 0), (True, 0), (False, IN_PLACE_MIN)])
@torch.no_grad()
@pytest.mark.usefixtures("nan_filled_memory")
def test_a_refilled_loop_in_float64_equals_every_search_alone_to_1e9(
    copy: bool, in_place_min: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In float64, rounding cannot flip near-ties: 120 sentences taking the rows others free (8 at most), with
    output limits of 20 to 60 tokens, each equal to its search alone in tokens and to 1e-9 in score. (In float32
    the different shapes round differently, and random weights have near-ties that then break either way.)
    Memory never written reads as NaN here: a row must never read (even masked) a position nobody wrote.
    With copying, each sentence's source ids and copy keys move with its slot. in_place_min 0: every reordering
    that keeps the number of rows is done in place (model.cache._moved_rows), however many rows move."""
    monkeypatch.setattr("model.cache.IN_PLACE_MIN", in_place_min)
    if in_place_min == 0:
        monkeypatch.setattr("model.cache.IN_PLACE_SHARE", 1.0)
    model = biased_model(eos_bias=-2.0, seed=3, max_len=128, copy=copy).double()
    rng = random.Random(0)
    srcs = sources([rng.randint(2, 20) for _ in range(120)], seed=9)
    cfgs = [
        DecodingConfig(beam_size=4, max_len_a=0.0, max_len_b=20 + 7 * i % 41, **OPTION_SETS[i % 2])
        for i in range(len(srcs))
    ]
    loop, waiting, got, joined = BeamLoop(model, SPECIAL, 4), list(range(len(srcs))), {}, 0
    spans, out_of_order = 0, 0  # steps cut into several row ranges; steps with slots in another order
    while waiting or loop:
        take, waiting = waiting[: 8 - len(loop)], waiting[8 - len(loop) :]
        joined += len(take) if loop else 0
        loop.admit([srcs[i] for i in take], [cfgs[i] for i in take], take)
        assert loop.cache is not None
        spans += len(loop.cache.positions().spans) > 1
        out_of_order += loop.cache.slots is not None
        got.update((int(str(s.tag)), s.n_best()) for s in loop.step())
    assert joined > 50, "most sentences should join a running search"
    assert spans > 20 and out_of_order > 20, "rows should be cut into ranges, and slots differ from rows"
    for i, src in enumerate(srcs):
        want = alone(model, src, cfgs[i])
        assert [h.ids for h in got[i]] == [h.ids for h in want]
        assert got[i][0].score == pytest.approx(want[0].score, abs=1e-9)


def test_sentences_keep_their_join_order_and_rows_are_cut_where_lengths_fall() -> None:
    assert survivors(5, {1}) == [0, 2, 3, 4] and survivors(6, {0, 2, 5}) == [1, 3, 4] and survivors(2, {0, 1}) == []
    assert row_spans([9, 9, 9], beams=2) == ((0, 6, 9),)
    # Four sentences at least per range; a range ends where lengths fall to half its first one's.
    assert row_spans([20, 19, 18, 17, 9, 8, 3, 2, 1, 0], beams=2) == ((0, 8, 20), (8, 16, 9), (16, 20, 1))
    assert row_spans([40, 40, 40, 40, 20, 20, 20, 20, 10, 10, 10, 10, 5, 5, 5, 5, 1, 1, 1, 1], beams=1) == (
        (0, 4, 40),
        (4, 8, 20),
        (8, 12, 10),
        (12, 20, 5),
    )  # at most MAX_SPANS ranges
    assert row_spans([3, 30, 2, 1, 1, 1], beams=1) == ((0, 4, 30), (4, 6, 1))  # any order is correct: n is the most


def one_sentence_cache(model: Any, src: list[int], beams: int) -> DecoderCache:
    src_t, mask = pad_batch([src], SPECIAL.pad, "cpu")
    memory, _ = model.encode(src_t, mask)
    return model.start_cache(memory, mask, capacity=0, beams=beams)


@torch.no_grad()
def test_joining_and_leaving_copy_no_other_sentence_and_reused_slots_mask_the_old_source() -> None:
    """Sentences take the slots and rows that others left, in the same buffers: the sentences already there
    are not copied, and a slot that held a longer source masks its positions for the shorter one now in it."""
    model, k = biased_model(seed=6), 2
    loop = BeamLoop(model, SPECIAL, k)
    cfg = DecodingConfig(beam_size=k, max_len_a=0.0, max_len_b=30, min_length=30)  # nobody ends on its own
    loop.admit(sources([9, 12, 4], seed=3), [cfg] * 3, ["a", "b", "c"])
    loop.step()
    assert loop.cache is not None
    before = loop.cache.layers[0].cross_k_t
    a_keys, c_keys = before[0].clone(), before[2, ..., :4].clone()
    loop.drop({"b"})  # "c", the last, takes b's slot
    after = loop.cache.layers[0].cross_k_t
    assert [s.tag for s in loop.sentences] == ["a", "c"]
    assert after.data_ptr() == before.data_ptr() and after.size(-1) == 9  # same buffer, trimmed to 9 positions
    torch.testing.assert_close(after[1, ..., :4], c_keys)
    short = sources([3], seed=8)[0]
    loop.admit([short], [cfg], ["d"])  # into the slot b held (12 positions, of which 9 are shown)
    cache = loop.cache
    assert cache.layers[0].cross_k_t.data_ptr() == before.data_ptr()
    torch.testing.assert_close(cache.layers[0].cross_k_t[0], a_keys[..., :9])  # "a" untouched
    alone_cache = one_sentence_cache(model, short, k)
    torch.testing.assert_close(cache.layers[1].cross_v[2, :, :3], alone_cache.layers[1].cross_v[0])
    bias = cache.cross_bias[2, 0, 0]
    assert bias[:3].eq(0).all() and bias[3:].eq(float("-inf")).all()
    loop.admit(sources([20], seed=9), [cfg], ["e"])  # longer than the buffer holds: a larger one
    bias = loop.cache.cross_bias[:, 0, 0]
    assert bias.size(-1) == 20 and bias[0, 9:].eq(float("-inf")).all() and bias[2, 3:].eq(float("-inf")).all()
    assert bias[3].eq(0).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
@torch.inference_mode()  # as the search runs: its cache's tensors are inference tensors
def test_reordering_in_place_equals_copying_every_row(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large CPU cache is reordered in place, copying only the rows whose parent is another row: each row's
    filled positions equal those of the copy of every row into the spare buffer, across row ranges."""
    model = biased_model(eos_bias=-3.0, seed=seed, max_len=128)
    rng = random.Random(seed)
    srcs = sources([rng.randint(2, 20) for _ in range(6)], seed=seed)
    cfg = DecodingConfig(beam_size=4, max_len_a=0.0, max_len_b=60, min_length=30)
    loop = BeamLoop(model, SPECIAL, 4)
    for step, src in enumerate(srcs):  # one sentence joins at each step: lengths differ, rows fall into ranges
        loop.admit([src], [cfg], [step])
        loop.step()
    cache = loop.cache
    assert cache is not None and len(cache.positions().spans) > 1
    gen = torch.Generator().manual_seed(seed)
    R, beams = cache.rows, cache.beams
    parents = torch.randint(0, beams, (R,), generator=gen) + torch.arange(R) // beams * beams
    keep = torch.rand(R, generator=gen) < 0.4
    beam_idx = torch.where(keep, torch.arange(R), parents)  # (R,) some rows keep their own hypothesis
    monkeypatch.setattr("model.cache.IN_PLACE_MIN", 10**9)
    copied = cache.reorder(beam_idx)
    want = [layer.kv.clone() for layer in copied.layers]  # the spare buffers, before the next reordering
    monkeypatch.setattr("model.cache.IN_PLACE_MIN", 0)
    monkeypatch.setattr("model.cache.IN_PLACE_SHARE", 1.0)
    moved = cache.reorder(beam_idx)
    assert all(a.kv.data_ptr() == b.kv.data_ptr() for a, b in zip(moved.layers, cache.layers, strict=True))
    assert moved.lengths == copied.lengths
    for layer, kv in zip(moved.layers, want, strict=True):
        for r, n in enumerate(n for n in moved.lengths for _ in range(beams)):
            assert torch.equal(layer.kv[r, :, :, :n], kv[r, :, :, :n])


@pytest.mark.parametrize(("moving", "in_place"), [(1, True), (2, True), (3, False), (4, False)])
def test_a_reordering_that_moves_most_rows_copies_every_row(moving: int, in_place: bool) -> None:
    """In place pays while at most IN_PLACE_SHARE of the rows take another row's hypothesis; beyond that,
    _moved_rows answers None and the whole cache is copied once."""
    beam_idx = torch.arange(4)
    beam_idx[:moving] = (beam_idx[:moving] + 1) % 4  # (R,) the first `moving` rows take another row's
    got = _moved_rows(beam_idx, ((0, 4, 1024),))
    assert (got is not None) == in_place
    if got is not None:
        (moves,) = got
        assert sorted(r for r, _ in moves.copies) == list(range(moving)) and moves.n == 1024


def test_rows_moved_in_place_are_written_only_once_every_row_reading_them_has_been_copied() -> None:
    # A chain: row 0 takes row 1's hypothesis, 1 takes 2's, 2 takes 3's (3 keeps its own): 0 first, 2 last.
    assert _copy_order({0: 1, 1: 2, 2: 3}) == (((0, 1), (1, 2), (2, 3)), [])
    # Rows 0 and 1 swap, and row 2 reads row 0: row 2 is copied directly, the swap goes through the spare buffer.
    assert _copy_order({0: 1, 1: 0, 2: 0}) == (((2, 0),), [0, 1])
    assert sorted(_copy_order({1: 0, 2: 0, 3: 0})[0]) == [(1, 0), (2, 0), (3, 0)]  # nobody reads them: any order


@pytest.mark.parametrize("seed", range(20))
@torch.inference_mode()
def test_moving_rows_in_place_equals_gathering_them(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any parents within each sentence (chains, swaps, cycles), in two row ranges: the rows moved in place hold
    what a gather of every row gives."""
    monkeypatch.setattr("model.cache.IN_PLACE_MIN", 0)
    monkeypatch.setattr("model.cache.IN_PLACE_SHARE", 1.0)
    gen = torch.Generator().manual_seed(seed)
    beams, spans = 4, ((0, 12, 7), (12, 20, 3))  # 5 sentences of 4 beams: 3 holding 7 positions, 2 holding 3
    kv = torch.randn(20, 2, 2, 9, 3, generator=gen)  # (R, h, 2, capacity, d_k)
    parents = torch.randint(0, beams, (20,), generator=gen) + torch.arange(20) // beams * beams
    beam_idx = torch.where(torch.rand(20, generator=gen) < 0.3, torch.arange(20), parents)  # (R,)
    want = kv.index_select(0, beam_idx)
    moves = _moved_rows(beam_idx, spans)
    assert moves is not None
    for m in moves:
        m.apply(kv, torch.zeros_like(kv))
    for r0, r1, n in spans:
        torch.testing.assert_close(kv[r0:r1, :, :, :n], want[r0:r1, :, :, :n], rtol=0, atol=0)
