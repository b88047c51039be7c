"""The Transformer's building blocks, in the paper's reading order (§3.2-§3.5)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.cache import LayerCache, StepPositions
from model.config import ModelConfig
from model.masks import MASKED, future_mask

KV = tuple[Tensor, Tensor]


def attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False, need_weights: bool = False
) -> tuple[Tensor, Tensor | None]:
    """Scaled dot-product attention, softmax(QK^T / sqrt(d_k)) V (§3.2.1, Eq. 1).

    q: (B, h, T, d_k); k, v: (B, h, S, d_k); mask: bool, True where a key may be attended,
    broadcastable to (B, h, T, S). Weights are computed explicitly only when asked for.
    """
    if not need_weights:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal), None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, T, S)
    if causal:
        T, S = scores.shape[-2:]
        scores = scores.masked_fill(future_mask(T, S, q.device), MASKED)
    if mask is not None:
        scores = scores.masked_fill(~mask, MASKED)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def step_attention(q: Tensor, k_t: Tensor, v: Tensor, bias: Tensor | None = None) -> Tensor:
    """Eq. 1 for the few queries of a search step: q (..., n, d_k), k_t (..., d_k, S) the keys transposed,
    v (..., S, d_k), bias broadcastable to (..., n, S), -inf on keys not to attend.

    On the CPU it is two batched matrix products: for a handful of queries per key set they are several
    times faster than F.scaled_dot_product_attention's fused kernel, which is built for long query blocks.
    """
    if q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k_t.transpose(-2, -1), v, attn_mask=bias)
    scores = torch.matmul(q, k_t).mul_(q.size(-1) ** -0.5)  # (..., n, S)
    if bias is not None:
        scores = scores.add_(bias)
    if v.dtype in (torch.float32, torch.float64):
        return torch.matmul(scores.softmax(dim=-1), v)  # (..., n, d_k)
    # Sums in float32 at least, as the fused kernel.
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(v.dtype)
    return torch.matmul(weights, v)  # (..., n, d_k)


def merge_heads(x: Tensor) -> Tensor:
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_k)  # (B, T, d_model)


@dataclass(frozen=True)
class Tokens:
    """Where the real tokens of a padded (B, T) batch are, so that position-wise layers (projections, FFN,
    LayerNorm) can work on them alone, (n, d_model), and attention on them padded, (B, T, d_model)."""

    index: Tensor  # (n,) flat positions b * T + t of the real tokens, in row-major order
    B: int
    T: int

    @staticmethod
    def of(mask: Tensor) -> Tokens:
        """mask: (B, T) bool, True on real tokens."""
        return Tokens(mask.flatten().nonzero().squeeze(1), mask.size(0), mask.size(1))

    def pack(self, x: Tensor) -> Tensor:
        """(B, T, ...) -> (n, ...), the real positions only."""
        return x.flatten(0, 1).index_select(0, self.index)

    def unpack(self, x: Tensor) -> Tensor:
        """(n, ...) -> (B, T, ...), zeros on the padding."""
        padded = x.new_zeros(self.B * self.T, *x.shape[1:])
        return padded.index_copy(0, self.index, x).view(self.B, self.T, *x.shape[1:])


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused Q/K/V projection (§3.2.2)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.h = cfg.h
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        tokens: Tokens | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """All positions at once. x: (B, T, d_model), or with tokens (n, d_model), the real ones."""
        qkv = self.qkv(x) if tokens is None else tokens.unpack(self.qkv(x))  # (B, T, 3 * d_model)
        B, T, _ = qkv.shape
        q, k, v = qkv.view(B, T, 3, self.h, -1).permute(2, 0, 3, 1, 4).unbind(0)  # 3 x (B, h, T, d_k)
        y, weights = attention(q, k, v, mask, causal, need_weights)
        y = merge_heads(y)  # (B, T, d_model)
        return self.out(y if tokens is None else tokens.pack(y)), weights

    def step(self, x: Tensor, cache: LayerCache, where: StepPositions) -> Tensor:
        """One new position per row (where). x: (R, d_model); its keys and values go into the cache."""
        R, d_model = x.shape
        qkv = self.qkv(x).view(R, 3, self.h, d_model // self.h)  # (R, 3, h, d_k)
        k, v = cache.append(qkv[:, 1:].transpose(1, 2), where)  # (R, h, 2, d_k) in; each (R, h, t + 1, d_k) out
        q = qkv[:, 0, :, None]  # (R, h, 1, d_k)
        if len(where.spans) <= 1:
            y = step_attention(q, k.transpose(-2, -1), v, where.bias)  # (R, h, 1, d_k)
        else:  # each range of rows reads only as many keys as its rows hold
            bias = where.bias
            assert bias is not None, "rows at different positions have a bias"
            y = torch.cat(
                [
                    step_attention(q[r0:r1], k[r0:r1, :, :n].transpose(-2, -1), v[r0:r1, :, :n], bias[r0:r1, ..., :n])
                    for r0, r1, n in where.spans
                ]
            )  # (R, h, 1, d_k)
        return self.out(y.reshape(R, d_model))  # (R, d_model): one query a row, so its heads are its row


class CrossAttention(nn.Module):
    """Encoder-decoder attention: queries from the decoder, keys and values from the encoder (§3.2.3)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.h = cfg.h
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def project_kv(self, memory: Tensor) -> KV:
        """Keys and values of the encoder output, computed once per source sentence."""
        B, S, d_model = memory.shape
        kv = self.kv(memory).view(B, S, 2, self.h, d_model // self.h)  # (B, S, 2, h, d_k)
        k, v = kv.permute(2, 0, 3, 1, 4).unbind(0)  # 2 x (B, h, S, d_k)
        return k, v

    def project_kv_for_steps(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """K^T (B, h, d_k, S) and V (B, h, S, d_k), contiguous as the matrix products of step want them."""
        k, v = self.project_kv(memory)
        return k.transpose(-2, -1).contiguous(), v.contiguous()

    def step(self, x: Tensor, k_t: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        """One position per row, x: (R, d_model) with the rows of a sentence together, in the order of the
        sentences' keys and values: the cached K^T (B, h, d_k, S) and V of project_kv_for_steps; bias: (B, 1, 1,
        S), 0 on tokens and -inf on padding."""
        R, d_model = x.shape
        B, h, d_k, S = k_t.shape
        q = self.q(x).view(B, R // B, h, d_k).transpose(1, 2)  # (B, h, beams, d_k)
        y = step_attention(q, k_t, v, bias).transpose(1, 2).reshape(R, d_model)  # (R, d_model)
        return self.out(y)

    def forward(self, x: Tensor, kv: KV, mask: Tensor, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x: (R, T, d_model) where R = B * beams rows share each of the B sources in kv."""
        R, T, d_model = x.shape
        B = kv[0].size(0)
        # Beams of one sentence attend to the same keys: fold them into the query axis.
        q = self.q(x).view(B, R // B * T, self.h, d_model // self.h).transpose(1, 2)  # (B, h, beams*T, d_k)
        y, weights = attention(q, kv[0], kv[1], mask, need_weights=need_weights)
        y = y.transpose(1, 2).reshape(R, T, d_model)  # (R, T, d_model)
        if weights is not None:
            S = weights.size(-1)
            weights = weights.view(B, self.h, R // B, T, S).transpose(1, 2).reshape(R, self.h, T, S)
        return self.out(y), weights


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


class FeedForward(nn.Module):
    """Position-wise feed-forward network, max(0, xW1 + b1)W2 + b2 (§3.3, Eq. 2)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.act = ACTIVATIONS[cfg.activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.act(self.w1(x)))


class Dropout(nn.Dropout):
    """Dropout (§5.4). On the CPU the keep mask is drawn as uniform >= p, the same distribution as
    torch's bernoulli_ but drawn in about half the time; elsewhere it is torch's fused kernel."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0 or x.device.type != "cpu":
            return super().forward(x)
        keep = (torch.rand_like(x) >= self.p).to(x.dtype).mul_(1.0 / (1.0 - self.p))
        return x * keep


class Residual(nn.LayerNorm):
    """LayerNorm(x + Dropout(Sublayer(x))) around each sub-layer (§3.1, §5.4); pre-LN as an option."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg.d_model, eps=cfg.ln_eps)
        self.pre = cfg.norm == "pre"
        self.drop = Dropout(cfg.p_drop)

    def enter(self, x: Tensor) -> Tensor:
        """The sub-layer's input: x itself (post-LN) or LayerNorm(x) (pre-LN)."""
        return self._norm(x) if self.pre else x

    def exit(self, x: Tensor, y: Tensor) -> Tensor:
        """Add the sub-layer's output y back onto x. (Dropout is the identity outside training: not called,
        since a search step runs this nine times or more.)"""
        x = x + (self.drop(y) if self.training else y)
        return x if self.pre else self._norm(x)

    def _norm(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


def sinusoid_table(max_len: int, d_model: int, layout: str = "interleaved", offset: int = 0) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...) (§3.5), for pos = offset ..
    offset + max_len - 1.

    layout "halves" puts every sin first and every cos second, as Marian does; "fairseq" does too, at fairseq's
    frequencies 10000^(-i / (d_model/2 - 1)) (M2M100, NLLB).
    """
    half = d_model // 2
    if layout == "fairseq":  # in float32, step by step as fairseq computes it, so that imports match exactly
        freq = torch.exp(torch.arange(half).float() * -(math.log(10000) / max(half - 1, 1)))  # (d_model / 2,)
        angle = torch.arange(offset, offset + max_len).float()[:, None] * freq[None]  # (max_len, d_model / 2)
        return torch.cat([angle.sin(), angle.cos()], dim=1)
    pos = torch.arange(offset, offset + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model / 2,)
    angle = pos / 10000.0 ** (two_i / d_model)  # (max_len, d_model / 2)
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    if layout == "interleaved":
        pe[:, 0::2], pe[:, 1::2] = angle.sin(), angle.cos()
    else:
        pe[:, :half], pe[:, half:] = angle.sin(), angle.cos()
    return pe.float()


class Embedding(nn.Module):
    """Token embedding times sqrt(d_model), plus positions, then dropout (§3.4, §3.5, §5.4)."""

    def __init__(self, cfg: ModelConfig, tokens: nn.Embedding) -> None:
        super().__init__()
        self.tokens = tokens
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.positions: nn.Embedding | None = None
        if cfg.positions == "learned":
            self.positions = nn.Embedding(cfg.max_len, cfg.d_model)
        else:
            self.register_buffer(
                "table",
                sinusoid_table(cfg.max_len, cfg.d_model, cfg.position_layout, cfg.position_offset),
                persistent=False,
            )
        # Not in the paper: BART's and mBART's LayerNorm over embeddings plus positions (ModelConfig.embed_norm).
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps) if cfg.embed_norm else None
        self.drop = Dropout(cfg.p_drop)
        self.cfg = cfg

    def reset_table(self) -> None:
        """Recompute the sinusoid table (a model built on the meta device has none: Transformer.for_loading)."""
        if self.positions is None:
            cfg = self.cfg
            table = sinusoid_table(cfg.max_len, cfg.d_model, cfg.position_layout, cfg.position_offset)
            self.register_buffer("table", table.to(self.get_buffer("table").device), persistent=False)

    def vectors(self) -> Tensor:
        """Every position's vector, (max_len, d_model): learned, or the sinusoid table."""
        return self.positions.weight if self.positions is not None else self.get_buffer("table")

    def position(self, start: int, length: int) -> Tensor:
        """Position vectors for positions start .. start + length - 1: (length, d_model)."""
        return self.vectors()[start : start + length]

    def at(self, ids: Tensor, where: StepPositions) -> Tensor:
        """ids: (R,), one token per row at the step's positions -> (R, d_model). A search step keeps its rows as
        matrices, (R, d_model), not (R, 1, d_model): each linear layer then takes them as they are."""
        at = self.position(where.t, 1) if where.index is None else self.vectors().index_select(0, where.index)
        x = self.tokens(ids) * self.scale + at  # (R, d_model)
        return self._dropped(self._norm(x))

    def forward(self, ids: Tensor, start: int = 0) -> Tensor:
        """ids: (B, T) -> (B, T, d_model), for positions start .. start + T - 1."""
        x = self.tokens(ids) * self.scale + self.position(start, ids.size(1))
        return self._dropped(self._norm(x))

    def _dropped(self, x: Tensor) -> Tensor:
        return self.drop(x) if self.training else x

    def _norm(self, x: Tensor) -> Tensor:
        return x if self.norm is None else self.norm(x)
