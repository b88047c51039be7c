"""The building blocks against the paper's formulas (§3.2-§3.5) and against torch's own multi-head attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.cache import StepPositions
from model.config import ModelConfig
from model.layers import (
    CrossAttention,
    Dropout,
    FeedForward,
    Residual,
    SelfAttention,
    attention,
    sinusoid_table,
    step_attention,
)
from tests.conftest import build_model, randomize_, tiny_config

D_MODEL = 512
POSITIONS = [0, 1, 2, 7, 50, 333, 511]
INDICES = [0, 1, 5, 100, D_MODEL // 2 - 1]  # i in PE(pos, 2i) and PE(pos, 2i + 1)


def paper_angle(pos: int, i: int, d_model: int = D_MODEL) -> float:
    return pos / 10000 ** (2 * i / d_model)


# -- positional encoding (§3.5) ------------------------------------------------------------------


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("i", INDICES)
def test_sinusoid_interleaved_is_the_papers_formula(pos: int, i: int) -> None:
    pe = sinusoid_table(D_MODEL, D_MODEL)
    assert pe.shape == (D_MODEL, D_MODEL)
    assert pe[pos, 2 * i].item() == pytest.approx(math.sin(paper_angle(pos, i)), abs=1e-6)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(paper_angle(pos, i)), abs=1e-6)


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("i", INDICES)
def test_sinusoid_halves_puts_sin_first_and_cos_second(pos: int, i: int) -> None:
    pe = sinusoid_table(D_MODEL, D_MODEL, "halves")
    half = D_MODEL // 2
    assert pe[pos, i].item() == pytest.approx(math.sin(paper_angle(pos, i)), abs=1e-6)
    assert pe[pos, half + i].item() == pytest.approx(math.cos(paper_angle(pos, i)), abs=1e-6)


def test_sinusoid_small_table_every_entry() -> None:
    d, n = 6, 9
    pe = sinusoid_table(n, d)
    expected = [[(math.sin if j % 2 == 0 else math.cos)(paper_angle(p, j // 2, d)) for j in range(d)] for p in range(n)]
    torch.testing.assert_close(pe, torch.tensor(expected, dtype=torch.float32), atol=1e-6, rtol=0)


@pytest.mark.parametrize("layout", ["interleaved", "halves"])
@pytest.mark.parametrize("scale_embedding", [True, False])
def test_embedding_is_scaled_tokens_plus_positions(layout: str, scale_embedding: bool) -> None:
    cfg = tiny_config(50, position_layout=layout, scale_embedding=scale_embedding)
    model = build_model(cfg, std=None)
    ids = torch.tensor([[5, 9, 3, 17]])
    start = 6
    scale = math.sqrt(cfg.d_model) if scale_embedding else 1.0
    tokens = model.tgt_embed.tokens.weight[ids[0]] * scale
    positions = sinusoid_table(start + 4, cfg.d_model, layout)[start:]
    torch.testing.assert_close(model.tgt_embed(ids, start=start)[0], tokens + positions)


def test_learned_positions_come_from_their_table() -> None:
    model = build_model(tiny_config(50, positions="learned", max_len=20), std=0.5)
    assert model.src_embed.positions is not None
    ids = torch.tensor([[4, 4, 4]])
    expected = model.src_embed.tokens.weight[4] * 8.0 + model.src_embed.positions.weight[2:5]
    torch.testing.assert_close(model.src_embed(ids, start=2)[0], expected)


# -- scaled dot-product attention (§3.2.1) --------------------------------------------------------


def reference_attention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor) -> tuple[Tensor, Tensor]:
    """softmax(QK^T / sqrt(d_k)) V with -inf on disallowed keys, computed in float64."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.masked_fill(~allowed, -math.inf).softmax(-1)
    return (weights @ v).float(), weights.float()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_attention_is_eq_1(causal: bool, need_weights: bool) -> None:
    B, h, T, d_k = 3, 2, 5, 8
    q, k, v = (torch.randn(B, h, T, d_k) for _ in range(3))
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]])[:, None, None, :]
    allowed = mask.expand(B, h, T, T)
    if causal:
        allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
    y, weights = attention(q, k, v, mask, causal=causal, need_weights=need_weights)
    y_ref, w_ref = reference_attention(q, k, v, allowed)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    if need_weights:
        assert weights is not None
        torch.testing.assert_close(weights, w_ref, atol=1e-6, rtol=1e-5)
        assert bool((weights[~allowed] == 0).all())
        torch.testing.assert_close(weights.sum(-1), torch.ones(B, h, T))
    else:
        assert weights is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_step_attention_is_eq_1_with_an_additive_mask(dtype: torch.dtype) -> None:
    """The search steps' attention (K transposed, -inf bias on padding) equals Eq. 1, in bf16 too."""
    B, h, n, S, d_k = 3, 2, 4, 6, 8
    q, k, v = (torch.randn(B, h, length, d_k) for length in (n, S, S))
    mask = torch.tensor([[True] * 6, [True] * 2 + [False] * 4, [True] * 5 + [False]])[:, None, None, :]
    bias = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    y = step_attention(q.to(dtype), k.transpose(-2, -1).contiguous().to(dtype), v.to(dtype), bias.to(dtype))
    y_ref, _ = reference_attention(q, k, v, mask.expand(B, h, n, S))
    assert y.dtype == dtype and y.shape == (B, h, n, d_k)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(y.float(), y_ref, atol=tol, rtol=tol)
    unmasked = step_attention(q, k.transpose(-2, -1), v)
    torch.testing.assert_close(
        unmasked, reference_attention(q, k, v, torch.ones(B, h, n, S, dtype=torch.bool))[0], atol=1e-5, rtol=1e-5
    )


# -- multi-head attention (§3.2.2) against torch.nn.MultiheadAttention ----------------------------


def torch_mha(cfg: ModelConfig, in_weight: Tensor, in_bias: Tensor, out: nn.Linear) -> nn.MultiheadAttention:
    """torch's MultiheadAttention with the given projections: in_weight stacks W_Q, W_K, W_V."""
    mha = nn.MultiheadAttention(cfg.d_model, cfg.h, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(in_weight)
        mha.in_proj_bias.copy_(in_bias)
        mha.out_proj.weight.copy_(out.weight)
        mha.out_proj.bias.copy_(out.bias)
    return mha


def test_self_attention_matches_torch_multihead_attention() -> None:
    cfg = tiny_config(10)
    layer = randomize_(SelfAttention(cfg), seed=1).eval()
    mha = torch_mha(cfg, layer.qkv.weight, layer.qkv.bias, layer.out)
    x = torch.randn(2, 6, cfg.d_model)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    ours = layer(x, mask=mask[:, None, None, :])[0]
    theirs, _ = mha(x, x, x, key_padding_mask=~mask, need_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_causal_self_attention_matches_torch_multihead_attention() -> None:
    cfg = tiny_config(10)
    layer = randomize_(SelfAttention(cfg), seed=2).eval()
    mha = torch_mha(cfg, layer.qkv.weight, layer.qkv.bias, layer.out)
    x = torch.randn(2, 6, cfg.d_model)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    ours = layer(x, causal=True)[0]
    theirs, _ = mha(x, x, x, attn_mask=future, need_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def cross_attention_reference(
    layer: CrossAttention, cfg: ModelConfig, x: Tensor, memory: Tensor, mask: Tensor
) -> Tensor:
    mha = torch_mha(
        cfg, torch.cat([layer.q.weight, layer.kv.weight]), torch.cat([layer.q.bias, layer.kv.bias]), layer.out
    )
    y, _ = mha(x, memory, memory, key_padding_mask=~mask, need_weights=False)
    return y


def test_cross_attention_matches_torch_multihead_attention() -> None:
    cfg = tiny_config(10)
    layer = randomize_(CrossAttention(cfg), seed=3).eval()
    x, memory = torch.randn(2, 4, cfg.d_model), torch.randn(2, 7, cfg.d_model)
    mask = torch.tensor([[True] * 7, [True] * 2 + [False] * 5])
    ours, _ = layer(x, layer.project_kv(memory), mask[:, None, None, :])
    torch.testing.assert_close(ours, cross_attention_reference(layer, cfg, x, memory, mask), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_cross_attention_with_beams_sharing_a_source(need_weights: bool) -> None:
    """R = B * beams query rows, the rows of sentence b all attending to source b (as in beam search)."""
    cfg, beams = tiny_config(10), 3
    layer = randomize_(CrossAttention(cfg), seed=4).eval()
    x, memory = torch.randn(2 * beams, 1, cfg.d_model), torch.randn(2, 5, cfg.d_model)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    ours, weights = layer(x, layer.project_kv(memory), mask[:, None, None, :], need_weights=need_weights)
    expanded = memory.repeat_interleave(beams, dim=0)
    expected = cross_attention_reference(layer, cfg, x, expanded, mask.repeat_interleave(beams, dim=0))
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    if need_weights:
        assert weights is not None and weights.shape == (2 * beams, cfg.h, 1, 5)
        assert bool((weights[beams:, :, :, 3:] == 0).all())
        torch.testing.assert_close(weights.sum(-1), torch.ones(2 * beams, cfg.h, 1))


def test_cross_attention_step_equals_forward() -> None:
    """The search step's path (K^T and V kept contiguous, an additive mask) gives forward's output."""
    cfg, beams = tiny_config(10), 3
    layer = randomize_(CrossAttention(cfg), seed=5).eval()
    x, memory = torch.randn(2 * beams, 1, cfg.d_model), torch.randn(2, 5, cfg.d_model)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    bias = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    expected, _ = layer(x, layer.project_kv(memory), mask)
    x, expected = x[:, 0], expected[:, 0]  # a step's rows are (R, d_model)
    torch.testing.assert_close(layer.step(x, *layer.project_kv_for_steps(memory), bias), expected, atol=1e-5, rtol=1e-5)
    # The sentences' slots swapped: the cache's positions put rows in their sentence's slot and back.
    swapped = torch.tensor([3, 4, 5, 0, 1, 2])
    where = StepPositions(0, to_slots=swapped, from_slots=swapped)
    got = where.in_row_order(
        layer.step(where.in_slot_order(x), *layer.project_kv_for_steps(memory.flip(0)), bias.flip(0))
    )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


# -- feed-forward (§3.3) and residual sub-layers (§3.1) -------------------------------------------


@pytest.mark.parametrize(
    ("activation", "fn"),
    [
        ("relu", lambda z: z.clamp(min=0)),
        ("gelu", lambda z: 0.5 * z * (1 + torch.erf(z / math.sqrt(2)))),
        ("swish", lambda z: z * torch.sigmoid(z)),
    ],
)
def test_feed_forward_is_eq_2(activation: str, fn: object) -> None:
    cfg = tiny_config(10, activation=activation)
    ffn = randomize_(FeedForward(cfg), seed=5).eval()
    x = torch.randn(2, 3, cfg.d_model)
    hidden = fn(x @ ffn.w1.weight.T + ffn.w1.bias)  # type: ignore[operator]
    torch.testing.assert_close(ffn(x), hidden @ ffn.w2.weight.T + ffn.w2.bias, atol=1e-5, rtol=1e-5)


def layer_norm(x: Tensor, norm: nn.LayerNorm) -> Tensor:
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_residual_sublayer(norm: str) -> None:
    cfg = tiny_config(10, norm=norm)
    res = randomize_(Residual(cfg), seed=6).eval()
    x = torch.randn(2, 3, cfg.d_model)
    sublayer = nn.Linear(cfg.d_model, cfg.d_model)
    y = sublayer(res.enter(x))
    if norm == "post":  # LayerNorm(x + Sublayer(x))
        torch.testing.assert_close(res.enter(x), x)
        torch.testing.assert_close(res.exit(x, y), layer_norm(x + sublayer(x), res), atol=1e-5, rtol=1e-5)
    else:  # x + Sublayer(LayerNorm(x))
        torch.testing.assert_close(res.enter(x), layer_norm(x, res), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(res.exit(x, y), x + sublayer(layer_norm(x, res)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_keeps_1_minus_p_scaled_by_its_inverse_and_passes_gradients_through_the_kept(p: float) -> None:
    torch.manual_seed(0)
    drop = Dropout(p).train()
    x = (torch.rand(200, 500) + 1.0).requires_grad_()  # no zeros of its own
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.005
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    y.sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, kept.float() / (1 - p))
    assert not torch.equal(drop(x), drop(x))  # a new mask each call
    torch.testing.assert_close(drop.eval()(x), x)


def test_dropout_only_in_training() -> None:
    cfg = tiny_config(10, p_drop=0.5)
    res = Residual(cfg)
    x, y = torch.randn(4, 8, cfg.d_model), torch.randn(4, 8, cfg.d_model)
    res.train()
    assert not torch.allclose(res.exit(x, y), res.exit(x, y))
    res.eval()
    torch.testing.assert_close(res.exit(x, y), res.exit(x, y))
    torch.testing.assert_close(res.exit(x, y), F.layer_norm(x + y, (cfg.d_model,), res.weight, res.bias, res.eps))
