"""The encoder-decoder: cached decoding equals recomputation, masks hide the future and the padding,
attention weights are distributions, and the parameter counts are the paper's."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from model.config import ModelConfig
from model.transformer import Transformer
from tests.conftest import build_model, pad_ids, random_source, tiny_config

SRC_V, TGT_V = 60, 80  # for the variants with two vocabularies

VARIANTS: dict[str, dict[str, Any]] = {
    "paper": {},
    "pre_ln": {"norm": "pre"},
    "learned_positions": {"positions": "learned"},
    "halves_layout": {"position_layout": "halves"},
    "separate_vocab_untied": {"share_embeddings": False, "tie_output": False},
    "separate_vocab_tied_output": {"share_embeddings": False},
    "gelu": {"activation": "gelu"},
    "swish": {"activation": "swish"},
    "logits_bias": {"logits_bias": True},
    "unscaled_embedding": {"scale_embedding": False},
    "deeper_decoder": {"N_dec": 3},
    "marian_like": {"activation": "swish", "position_layout": "halves", "logits_bias": True, "norm": "post"},
    "copy": {"copy": True},
}


def variant_model(name: str, seed: int = 0, **extra: Any) -> Transformer:
    overrides = {**VARIANTS[name], **extra}
    tgt = TGT_V if overrides.get("share_embeddings", True) is False else SRC_V
    return build_model(tiny_config(SRC_V, tgt, **overrides), seed=seed)


def padded_batch(lengths: list[int], vocab: int = SRC_V, seed: int = 0) -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return pad_ids([random_source(gen, n, vocab) for n in lengths])


def random_target(batch: int, length: int, vocab: int, seed: int = 1, start: int = 2) -> Tensor:
    """Decoder inputs: the start symbol, then random ids."""
    gen = torch.Generator().manual_seed(seed)
    tgt = torch.randint(4, vocab, (batch, length), generator=gen)
    tgt[:, 0] = start
    return tgt


def cached_logits(model: Transformer, src: Tensor, src_mask: Tensor, tgt: Tensor) -> Tensor:
    """Logits of every target position, one Transformer.step at a time: (B, T, V)."""
    memory, _ = model.encode(src, src_mask)
    cache = model.start_cache(memory, src_mask, src=src)
    out = []
    for t in range(tgt.size(1)):
        logits, cache = model.step(tgt[:, t], cache)
        out.append(logits)
    return torch.stack(out, dim=1)


# -- incremental decoding ------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@torch.no_grad()
def test_cached_steps_equal_full_recomputation(variant: str) -> None:
    model = variant_model(variant)
    src, src_mask = padded_batch([9, 4, 6, 1])  # padded rows, one of them only EOS
    assert not bool(src_mask.all())
    tgt = random_target(4, 7, model.cfg.tgt_vocab_size)
    full = model(src, src_mask, tgt)
    assert full.shape == (4, 7, model.cfg.tgt_vocab_size)
    torch.testing.assert_close(cached_logits(model, src, src_mask, tgt), full, atol=1e-5, rtol=0)
    memory, _ = model.encode(src, src_mask)
    hidden, _ = model.decode(tgt, memory, src_mask)
    if model.copy is None:
        torch.testing.assert_close(model.logits(hidden), full, atol=1e-6, rtol=0)
    else:  # log P of the mixture: a distribution of its own, and not the vocabulary's softmax
        torch.testing.assert_close(full.exp().sum(-1), torch.ones(4, 7), atol=1e-5, rtol=0)
        assert not torch.allclose(torch.log_softmax(model.logits(hidden), -1), full, atol=1e-3)


@torch.no_grad()
def test_cached_steps_equal_full_recomputation_over_many_positions() -> None:
    model = build_model(tiny_config(SRC_V, max_len=100), seed=5)
    src, src_mask = padded_batch([12, 5])
    tgt = random_target(2, 90, SRC_V)
    torch.testing.assert_close(cached_logits(model, src, src_mask, tgt), model(src, src_mask, tgt), atol=1e-5, rtol=0)


@pytest.mark.parametrize("capacity", [0, 1, 3, 64])
@torch.no_grad()
def test_cache_of_any_starting_capacity_grows_as_needed(capacity: int) -> None:
    """Transformer.start_cache takes the number of positions to make room for; decoding past it must work."""
    model = variant_model("paper")
    src, src_mask = padded_batch([6, 3])
    tgt = random_target(2, 10, SRC_V)
    memory, _ = model.encode(src, src_mask)
    cache = model.start_cache(memory, src_mask, capacity)
    steps = []
    for t in range(tgt.size(1)):
        logits, cache = model.step(tgt[:, t], cache)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, 1), model(src, src_mask, tgt), atol=1e-5, rtol=0)


@torch.no_grad()
def test_step_advances_the_position() -> None:
    model = variant_model("paper")
    src, src_mask = padded_batch([5])
    memory, _ = model.encode(src, src_mask)
    cache = model.start_cache(memory, src_mask)
    assert cache.step == 0
    same = torch.tensor([7])
    first, cache = model.step(same, cache)
    second, cache = model.step(same, cache)
    assert cache.step == 2
    assert not torch.allclose(first, second)  # same token, new position and new context


@pytest.mark.parametrize("seed", [0, 1, 2])
@torch.no_grad()
def test_reordered_cache_equals_recomputing_the_reordered_histories(seed: int) -> None:
    """Beam search's use of the cache: 1 -> 3 rows per sentence, then new parents each step (a row may take
    the history of a row that is itself overwritten), then a finished sentence leaves."""
    model, beams = variant_model("paper"), 3
    src, src_mask = padded_batch([7, 4])
    gen = torch.Generator().manual_seed(seed)
    memory, _ = model.encode(src, src_mask)
    cache = model.start_cache(memory, src_mask, capacity=2)  # grows on the way
    history = torch.full((2, 1), 2)
    _, cache = model.step(history[:, -1], cache)
    rows = torch.arange(2).repeat_interleave(beams)
    history, cache = history[rows], cache.reorder(rows, beams=beams)
    for _ in range(6):
        history = torch.cat([history, torch.randint(4, SRC_V, (history.size(0), 1), generator=gen)], dim=1)
        _, cache = model.step(history[:, -1], cache)
        parents = rows * beams + torch.randint(0, beams, (2 * beams,), generator=gen)
        history, cache = history[parents], cache.reorder(parents)
    survivors = torch.arange(beams, 2 * beams)  # sentence 0 is finished
    history, cache = history[survivors], cache.reorder(survivors)
    history = torch.cat([history, torch.randint(4, SRC_V, (beams, 1), generator=gen)], dim=1)
    logits, _ = model.step(history[:, -1], cache)
    full = model(src[1:].repeat_interleave(beams, 0), src_mask[1:].repeat_interleave(beams, 0), history)
    torch.testing.assert_close(logits, full[:, -1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", ["paper", "pre_ln", "learned_positions", "marian_like"])
def test_inference_encoder_on_the_real_tokens_equals_the_padded_encoder(variant: str) -> None:
    """Without gradients the encoder's position-wise layers skip the padding: the same memory on the real
    tokens, zeros on the padding (which attention masks out)."""
    model = variant_model(variant).eval()
    src, src_mask = padded_batch([9, 4, 6, 1])
    padded, _ = model.encode(src, src_mask)  # gradients enabled: every position computed
    with torch.no_grad():
        packed, _ = model.encode(src, src_mask)
    torch.testing.assert_close(packed[src_mask], padded[src_mask].detach(), atol=1e-5, rtol=0)
    assert packed[~src_mask].abs().max() == 0


# -- masks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["paper", "pre_ln", "learned_positions"])
@torch.no_grad()
def test_no_information_flows_from_future_targets(variant: str) -> None:
    model = variant_model(variant)
    src, src_mask = padded_batch([8, 5])
    tgt = random_target(2, 8, model.cfg.tgt_vocab_size)
    logits = model(src, src_mask, tgt)
    gen = torch.Generator().manual_seed(9)
    for t in range(tgt.size(1) - 1):
        changed = tgt.clone()
        changed[:, t + 1 :] = torch.randint(4, model.cfg.tgt_vocab_size, changed[:, t + 1 :].shape, generator=gen)
        assert not torch.equal(changed, tgt)
        other = model(src, src_mask, changed)
        torch.testing.assert_close(other[:, : t + 1], logits[:, : t + 1], atol=1e-6, rtol=0)
        assert not torch.allclose(other[:, t + 1 :], logits[:, t + 1 :], atol=1e-3)  # the future does change


@torch.no_grad()
def test_need_weights_path_gives_the_same_outputs() -> None:
    """Explicit attention weights (need_weights=True) and the fused kernel compute the same function."""
    model = variant_model("paper")
    src, src_mask = padded_batch([7, 3])
    tgt = random_target(2, 6, SRC_V)
    memory, _ = model.encode(src, src_mask)
    memory_w, _ = model.encode(src, src_mask, need_weights=True)
    # (on the real tokens: the encoder leaves zeros on the padding when it computes no weights)
    torch.testing.assert_close(memory_w[src_mask], memory[src_mask], atol=1e-5, rtol=0)
    hidden, _ = model.decode(tgt, memory, src_mask)
    hidden_w, _ = model.decode(tgt, memory, src_mask, need_weights=True)
    torch.testing.assert_close(hidden_w, hidden, atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", ["paper", "pre_ln", "separate_vocab_untied"])
@torch.no_grad()
def test_padded_source_positions_change_nothing(variant: str) -> None:
    model = variant_model(variant)
    src, src_mask = padded_batch([9, 4, 6])
    tgt = random_target(3, 5, model.cfg.tgt_vocab_size)
    logits = model(src, src_mask, tgt)
    memory, _ = model.encode(src, src_mask)
    garbage = src.clone()
    garbage[~src_mask] = torch.randint(4, SRC_V, (int((~src_mask).sum()),))
    assert not torch.equal(garbage, src)
    torch.testing.assert_close(model(garbage, src_mask, tgt), logits, atol=1e-6, rtol=0)
    memory_g, _ = model.encode(garbage, src_mask)
    torch.testing.assert_close(memory_g[src_mask], memory[src_mask], atol=1e-6, rtol=0)
    # More padding columns change nothing either.
    wider, wider_mask = (
        torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], 1),
        torch.cat([src_mask, torch.zeros(3, 4, dtype=torch.bool)], 1),
    )
    torch.testing.assert_close(model(wider, wider_mask, tgt), logits, atol=1e-5, rtol=0)
    # ... while a real source token does matter.
    changed = src.clone()
    changed[0, 0] = 4 if int(src[0, 0]) != 4 else 5
    assert not torch.allclose(model(changed, src_mask, tgt)[0], logits[0], atol=1e-4)


@torch.no_grad()
def test_padded_sentence_equals_the_same_sentence_alone() -> None:
    model = variant_model("paper")
    src, src_mask = padded_batch([9, 4])
    tgt = random_target(2, 5, SRC_V)
    batch = model(src, src_mask, tgt)
    alone = model(src[1:, :4], src_mask[1:, :4], tgt[1:])
    torch.testing.assert_close(batch[1:], alone, atol=1e-5, rtol=0)


# -- attention weights ---------------------------------------------------------------------------


@torch.no_grad()
def test_attention_weights_are_distributions_over_allowed_keys() -> None:
    model = variant_model("paper")
    cfg = model.cfg
    src, src_mask = padded_batch([7, 3, 5])
    tgt = random_target(3, 6, SRC_V)
    memory, enc = model.encode(src, src_mask, need_weights=True)
    _, attn = model.decode(tgt, memory, src_mask, need_weights=True)
    B, S, T = 3, src.size(1), tgt.size(1)
    assert len(enc) == cfg.N and len(attn.decoder) == cfg.n_dec and len(attn.cross) == cfg.n_dec
    padded_keys = ~src_mask[:, None, None, :]
    for w in enc:
        assert w.shape == (B, cfg.h, S, S)
        torch.testing.assert_close(w.sum(-1), torch.ones(B, cfg.h, S))
        assert bool((w.masked_select(padded_keys) == 0).all())
        assert bool((w >= 0).all())
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    for w in attn.decoder:
        assert w.shape == (B, cfg.h, T, T)
        torch.testing.assert_close(w.sum(-1), torch.ones(B, cfg.h, T))
        assert bool((w[..., future] == 0).all())
        assert bool((w[..., ~future] > 0).all())
    for w in attn.cross:
        assert w.shape == (B, cfg.h, T, S)
        torch.testing.assert_close(w.sum(-1), torch.ones(B, cfg.h, T))
        assert bool((w.masked_select(padded_keys) == 0).all())
        assert bool((w.masked_select(~padded_keys.expand(B, cfg.h, T, S)) > 0).all())


@torch.no_grad()
def test_no_weights_unless_asked() -> None:
    model = variant_model("paper")
    src, src_mask = padded_batch([4])
    memory, enc = model.encode(src, src_mask)
    _, attn = model.decode(random_target(1, 3, SRC_V), memory, src_mask)
    assert enc == [] and attn.decoder == [] and attn.cross == []


# -- shapes, ties and sizes ----------------------------------------------------------------------


def test_tied_embeddings_share_one_matrix() -> None:
    model = variant_model("paper")
    assert model.src_embed.tokens.weight is model.tgt_embed.tokens.weight
    assert model.out_proj is None  # the target embedding is the pre-softmax linear (§3.4)
    untied = variant_model("separate_vocab_untied")
    assert untied.src_embed.tokens.weight.shape == (SRC_V, 64)
    assert untied.tgt_embed.tokens.weight.shape == (TGT_V, 64)
    assert untied.out_proj is not None and untied.out_proj.weight.shape == (TGT_V, 64)


def test_tied_output_uses_the_embedding_matrix() -> None:
    model = variant_model("logits_bias")
    hidden = torch.randn(2, 3, 64)
    assert model.logits_bias is not None
    expected = hidden @ model.tgt_embed.tokens.weight.T + model.logits_bias
    torch.testing.assert_close(model.logits(hidden), expected, atol=1e-5, rtol=1e-5)


def parameter_count(cfg: ModelConfig) -> int:
    with torch.device("meta"):  # no memory, no initialisation cost
        model = Transformer(cfg)
    return sum(p.numel() for p in model.parameters())


def expected_count(V: int, N: int, d: int, d_ff: int) -> int:
    """Weights and biases of Figure 1 with one shared V x d embedding matrix."""
    attention = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return V * d + N * (encoder_layer + decoder_layer)


def test_base_model_has_about_65M_parameters() -> None:
    n = parameter_count(ModelConfig.from_preset("base", 37000))
    assert 60e6 < n < 66e6  # Table 3: 65M
    assert n == expected_count(37000, 6, 512, 2048)


def test_big_model_has_about_213M_parameters() -> None:
    n = parameter_count(ModelConfig.from_preset("big", 37000))
    assert 200e6 < n < 220e6  # Table 3: 213M
    assert n == expected_count(37000, 6, 1024, 4096)


def test_untied_embeddings_add_their_matrices() -> None:
    tied = parameter_count(ModelConfig.from_preset("tiny", 100))
    untied = parameter_count(ModelConfig.from_preset("tiny", 100, 120, share_embeddings=False, tie_output=False))
    assert untied - tied == 120 * 64 + 120 * 64


@torch.no_grad()
def test_paper_initialisation() -> None:
    model = build_model(tiny_config(500), std=None)
    emb = model.src_embed.tokens.weight
    assert abs(float(emb.std()) - 64**-0.5) < 0.01
    linear = model.encoder[0].ffn.w1
    assert bool((linear.bias == 0).all())
    bound = (6 / (64 + 128)) ** 0.5  # Xavier uniform
    assert float(linear.weight.abs().max()) <= bound
