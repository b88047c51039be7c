"""The encoder-decoder Transformer (§3.1, Figure 1), with incremental decoding for search."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.cache import DecoderCache, LayerCache, StepPositions
from model.config import ModelConfig
from model.copy import Copy, CopySource
from model.layers import KV, CrossAttention, Embedding, FeedForward, Residual, SelfAttention, Tokens
from model.masks import bias_of, key_mask
from model.packing import (
    Layout,
    PackedLinear,
    default_layout,
    pack_linears,
    pack_weight,
    packed_linear,
    packed_ok,
)
from model.quantize import Int8Linear


class EncoderLayer(nn.Module):
    """Self-attention, then the position-wise FFN, each a residual sub-layer (§3.1)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = SelfAttention(cfg)
        self.attn_norm = Residual(cfg)
        self.ffn = FeedForward(cfg)
        self.ffn_norm = Residual(cfg)

    def forward(
        self, x: Tensor, mask: Tensor, need_weights: bool = False, tokens: Tokens | None = None
    ) -> tuple[Tensor, Tensor | None]:
        a, weights = self.self_attn(self.attn_norm.enter(x), mask=mask, need_weights=need_weights, tokens=tokens)
        x = self.attn_norm.exit(x, a)
        x = self.ffn_norm.exit(x, self.ffn(self.ffn_norm.enter(x)))
        return x, weights


@dataclass(frozen=True)
class DecoderLayerOutput:
    x: Tensor  # (B, T, d_model)
    self_weights: Tensor | None  # (B, h, T, T)
    cross_weights: Tensor | None  # (B, h, T, S)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, then the FFN (§3.1)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = SelfAttention(cfg)
        self.self_norm = Residual(cfg)
        self.cross_attn = CrossAttention(cfg)
        self.cross_norm = Residual(cfg)
        self.ffn = FeedForward(cfg)
        self.ffn_norm = Residual(cfg)

    def forward(self, x: Tensor, cross_kv: KV, src_mask: Tensor, need_weights: bool = False) -> DecoderLayerOutput:
        """All target positions at once; position i sees positions <= i only (§3.2.3)."""
        a, self_w = self.self_attn(self.self_norm.enter(x), causal=True, need_weights=need_weights)
        x = self.self_norm.exit(x, a)
        return self._cross_and_ffn(x, cross_kv, src_mask, need_weights, self_w)

    def step(self, x: Tensor, cache: LayerCache, cross_bias: Tensor, where: StepPositions) -> Tensor:
        """The next position of every hypothesis, x: (R, d_model), reading and extending the cache."""
        x = self.self_norm.exit(x, self.self_attn.step(self.self_norm.enter(x), cache, where))
        q = where.in_slot_order(self.cross_norm.enter(x))  # the rows of each sentence at its keys' slot
        c = where.in_row_order(self.cross_attn.step(q, cache.cross_k_t, cache.cross_v, cross_bias))
        x = self.cross_norm.exit(x, c)
        return self.ffn_norm.exit(x, self.ffn(self.ffn_norm.enter(x)))

    def _cross_and_ffn(
        self, x: Tensor, cross_kv: KV, src_mask: Tensor, need_weights: bool = False, self_w: Tensor | None = None
    ) -> DecoderLayerOutput:
        c, cross_w = self.cross_attn(self.cross_norm.enter(x), cross_kv, src_mask, need_weights)
        x = self.cross_norm.exit(x, c)
        x = self.ffn_norm.exit(x, self.ffn(self.ffn_norm.enter(x)))
        return DecoderLayerOutput(x, self_w, cross_w)


@dataclass(frozen=True)
class Attentions:
    """Attention weights per layer, each (B, h, queries, keys); returned only when asked for."""

    encoder: list[Tensor]
    decoder: list[Tensor]
    cross: list[Tensor]


class Transformer(nn.Module):
    """Encoder and decoder stacks with tied embeddings and pre-softmax linear (§3, §3.4)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        src_tokens = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        tgt_tokens = src_tokens if cfg.share_embeddings else nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        self.src_embed = Embedding(cfg, src_tokens)
        self.tgt_embed = Embedding(cfg, tgt_tokens)
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.N))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_dec))
        # Pre-LN stacks end in a LayerNorm of their own; post-LN ones already end normalised.
        self.encoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps) if cfg.norm == "pre" else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.ln_eps) if cfg.norm == "pre" else nn.Identity()
        self.out_proj = None if cfg.tie_output else nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        self.logits_bias = nn.Parameter(torch.zeros(cfg.tgt_vocab_size)) if cfg.logits_bias else None
        self.copy = Copy(cfg) if cfg.copy else None  # not in the paper: ModelConfig.copy
        self.packed_logits: Tensor | None  # the pre-softmax weight packed for CPU inference (pack_for_cpu)
        self.register_buffer("packed_logits", None, persistent=False)
        self.packed_layout: Layout = "onednn"  # packed_logits' layout
        self.int8_logits: Int8Linear | None = None  # the pre-softmax linear in int8 (model.quantize)
        self.reset_parameters()

    @classmethod
    def for_loading(cls, cfg: ModelConfig) -> Transformer:
        """A CPU model whose weights hold whatever memory held, to be filled from a checkpoint: built on the meta
        device, it skips the random initialisation (seconds for the base shape)."""
        with torch.device("meta"):
            model = cls(cfg)
        model.to_empty(device="cpu")
        for embed in (model.src_embed, model.tgt_embed):
            embed.reset_table()
        return model

    @property
    def decoder_layers(self) -> list[DecoderLayer]:
        return cast(list[DecoderLayer], list(self.decoder))

    def reset_parameters(self) -> None:
        """Xavier-uniform matrices, zero biases, N(0, d_model^-0.5) embeddings."""
        for name, p in self.named_parameters():
            if "tokens" in name or "positions" in name:
                nn.init.normal_(p, std=self.cfg.d_model**-0.5)
            elif p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    # -- encoder ----------------------------------------------------------------------------

    def encode(self, src: Tensor, src_mask: Tensor, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """src: (B, S) ids, src_mask: (B, S) bool -> memory (B, S, d_model) and per-layer weights.

        For inference the position-wise layers see the real tokens only (padding costs them nothing;
        attention still sees the batch padded and masked), and the memory is zero on the padding.
        """
        tokens = None if need_weights or torch.is_grad_enabled() else Tokens.of(src_mask)
        x, mask, weights = self.src_embed(src), key_mask(src_mask), []
        if tokens is not None:
            x = tokens.pack(x)  # (n, d_model)
        for layer in self.encoder:
            x, w = layer(x, mask, need_weights, tokens)
            if w is not None:
                weights.append(w)
        x = self.encoder_norm(x)
        return (x if tokens is None else tokens.unpack(x)), weights

    # -- decoder, all positions at once (training, forced decoding) -------------------------

    def decode(
        self, tgt: Tensor, memory: Tensor, src_mask: Tensor, need_weights: bool = False
    ) -> tuple[Tensor, Attentions]:
        """tgt: (B, T) shifted-right ids -> hidden states (B, T, d_model) and attention weights."""
        x, mask = self.tgt_embed(tgt), key_mask(src_mask)
        attn = Attentions([], [], [])
        for layer in self.decoder_layers:
            out = layer(x, layer.cross_attn.project_kv(memory), mask, need_weights=need_weights)
            x = out.x
            if out.self_weights is not None and out.cross_weights is not None:
                attn.decoder.append(out.self_weights)
                attn.cross.append(out.cross_weights)
        return self.decoder_norm(x), attn

    def logits(self, hidden: Tensor) -> Tensor:
        """The pre-softmax linear, sharing the target embedding matrix (§3.4)."""
        if self.int8_logits is not None:
            return self.int8_logits(hidden)
        released = isinstance(self.out_proj, PackedLinear) and self.out_proj.released  # no plain weight left
        if self.packed_logits is not None and (released or packed_ok(hidden)):
            bias = None if self.logits_bias is None else self.logits_bias.detach()
            return packed_linear(hidden, self.packed_logits, bias, self.packed_layout)
        weight = self.tgt_embed.tokens.weight if self.out_proj is None else self.out_proj.weight
        return F.linear(hidden, weight, self.logits_bias)

    def pack_for_cpu(self, release: bool = False, layout: Layout | None = None) -> bool:
        """Pre-pack every linear weight, the tied pre-softmax one included, for fast CPU float32 inference
        (model.packing; layout: this machine's by default); the parameters and the arithmetic stay the same. With
        release, the linears keep only their packed weights (an inference-only model: PackedLinear.release); the
        embeddings stay."""
        weight = self.tgt_embed.tokens.weight if self.out_proj is None else self.out_proj.weight
        layout = layout or default_layout()
        if layout is None or weight.dtype != torch.float32 or weight.device.type != "cpu":
            return False
        pack_linears(self, layout, release)
        # An untied pre-softmax linear is a PackedLinear now: its packed weight serves, not a second copy.
        out = self.out_proj
        self.packed_logits = out.packed if isinstance(out, PackedLinear) else pack_weight(weight, layout)
        self.packed_layout = layout
        return True

    def forward(self, src: Tensor, src_mask: Tensor, tgt: Tensor, keep: Tensor | None = None) -> Tensor:
        """Teacher-forced logits (B, T, tgt_vocab_size) for training; with keep, a (B, T) bool mask,
        only those positions' logits, (n, tgt_vocab_size): training skips the padding. With copying, the
        logits are log P of the mixed distribution (model.copy)."""
        memory, _ = self.encode(src, src_mask)
        hidden, _ = self.decode(tgt, memory, src_mask)
        if self.copy is None:
            return self.logits(hidden if keep is None else hidden[keep])
        bias = bias_of(src_mask, memory.dtype)[:, None, :]  # (B, 1, S)
        a, p_gen = self.copy.attend(hidden, self.copy.keys_t(memory), bias, tgt, src)  # (B, T, S), (B, T, 1)
        B, T, S = a.shape
        ids = src[:, None, :].expand(B, T, S)
        if keep is None:
            mixed = self.copy.mix(
                self.logits(hidden).flatten(0, 1), a.flatten(0, 1), p_gen.flatten(0, 1), ids.flatten(0, 1)
            )  # (B * T, V)
            return mixed.view(B, T, -1)  # (B, T, V)
        return self.copy.mix(self.logits(hidden[keep]), a[keep], p_gen[keep], ids[keep])

    # -- decoder, one step at a time (search) -----------------------------------------------

    def start_cache(
        self, memory: Tensor, src_mask: Tensor, capacity: int = 64, beams: int = 1, src: Tensor | None = None
    ) -> DecoderCache:
        """Cross-attention keys and values for every layer, computed once per source, and room for
        `capacity` target positions (it grows when needed) of `beams` rows per sentence. A copying model also
        needs the source ids, src (B, S)."""
        B = memory.size(0)
        kv = memory.new_zeros(B * beams, self.cfg.h, 2, capacity, self.cfg.d_k)  # (R, h, 2, capacity, d_k)
        layers = tuple(
            LayerCache(kv=torch.zeros_like(kv), spare=torch.zeros_like(kv), cross_k_t=k_t, cross_v=v)
            for k_t, v in (layer.cross_attn.project_kv_for_steps(memory) for layer in self.decoder_layers)
        )
        bias = bias_of(key_mask(src_mask), memory.dtype)  # (B, 1, 1, S)
        copy = None
        if self.copy is not None:
            assert src is not None, "a copying model's cache needs the source ids"
            copy = CopySource(self.copy.keys_t(memory), src)
        return DecoderCache(layers=layers, cross_bias=bias, lengths=(0,) * B, copy=copy)

    def step(self, tokens: Tensor, cache: DecoderCache, positions: int | None = None) -> tuple[Tensor, DecoderCache]:
        """tokens: (R,) the last token of each hypothesis -> logits (R, V) and the grown cache; positions, if
        given, is the most any row will write (its output limit), which the cache then grows no further than.

        The cache passed in is consumed: its buffers are written in place.
        """
        if cache.step == cache.capacity:
            cache = cache.grown(positions)
        where = cache.positions()
        x = self.tgt_embed.at(tokens, where)  # (R, d_model)
        for layer, layer_cache in zip(self.decoder_layers, cache.layers, strict=True):
            x = layer.step(x, layer_cache, cache.cross_bias, where)
        hidden = self.decoder_norm(x)  # (R, d_model)
        logits = self.logits(hidden)
        if self.copy is not None and cache.copy is not None:
            logits = self.copy_step(hidden, tokens, logits, cache, where)
        return logits, cache.advanced()

    def copy_step(
        self, hidden: Tensor, tokens: Tensor, logits: Tensor, cache: DecoderCache, where: StepPositions
    ) -> Tensor:
        """The step's logits mixed with copying (model.copy): each row attends over its sentence's slot."""
        assert self.copy is not None and cache.copy is not None
        R, B = hidden.size(0), cache.sentences
        hidden, tokens = where.in_slot_order(hidden), where.in_slot_order(tokens)
        bias = cache.cross_bias[:, 0]  # (B, 1, S)
        a, p_gen = self.copy.attend(
            hidden.view(B, R // B, -1), cache.copy.keys_t, bias, tokens.view(B, R // B), cache.copy.ids
        )  # (B, beams, S), (B, beams, 1)
        ids = cache.copy.ids[:, None, :].expand(B, R // B, -1).reshape(R, -1)  # (R, S)
        a, p_gen = a.reshape(R, -1), p_gen.reshape(R, 1)  # (R, S), (R, 1)
        a, p_gen, ids = where.in_row_order(a), where.in_row_order(p_gen), where.in_row_order(ids)
        return self.copy.mix(logits, a, p_gen, ids)
