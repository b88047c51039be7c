"""Typed decoder state for incremental decoding: passed in, returned, reorderable for beam search."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor


@dataclass(frozen=True)
class LayerCache:
    """One decoder layer's state.

    kv: self-attention keys and values of the steps so far, in a buffer with room to grow,
    (capacity, 2, R, h, d_k) with one row per hypothesis; positions < DecoderCache.step are filled.
    Time-major, so that reordering copies only the filled prefix, in one contiguous block.
    spare: a second buffer of the same shape that reordering writes into (the two swap).
    cross_k_t, cross_v: encoder-decoder keys, transposed, (B, h, d_k, S), and values, (B, h, S, d_k),
    one row per source sentence, computed once; the R = B * beams hypotheses of a sentence share them.
    """

    kv: Tensor
    spare: Tensor
    cross_k_t: Tensor
    cross_v: Tensor

    def keys_values(self, length: int) -> tuple[Tensor, Tensor]:
        """Views of the first `length` positions, each (R, h, length, d_k)."""
        kv = self.kv[:length]  # (length, 2, R, h, d_k)
        return kv[:, 0].permute(1, 2, 0, 3), kv[:, 1].permute(1, 2, 0, 3)


@dataclass(frozen=True)
class DecoderCache:
    """Every layer's state plus what all layers share: the source padding and the next position."""

    layers: tuple[LayerCache, ...]
    cross_bias: Tensor  # (B, 1, 1, S) added to cross-attention scores: 0 on source tokens, -inf on padding
    step: int  # number of target positions already decoded

    @property
    def rows(self) -> int:
        """R, the number of hypotheses being decoded."""
        return self.layers[0].kv.size(2)

    @property
    def sentences(self) -> int:
        """B, the number of source sentences."""
        return self.cross_bias.size(0)

    @property
    def capacity(self) -> int:
        return self.layers[0].kv.size(0)

    def grown(self) -> DecoderCache:
        """The same state with room for twice as many positions."""
        size = max(1, 2 * self.capacity)
        layers = []
        for layer in self.layers:
            kv = layer.kv.new_empty(size, *layer.kv.shape[1:])
            kv[:self.step] = layer.kv[:self.step]
            layers.append(replace(layer, kv=kv, spare=torch.empty_like(kv)))
        return replace(self, layers=tuple(layers))

    def reorder(self, beam_idx: Tensor, beams: int | None = None) -> DecoderCache:
        """Keep hypothesis beam_idx[i] as new row i, with `beams` rows per sentence (default: as now).

        Rows of one sentence stay contiguous; sentences may be dropped (finished) but never
        reordered, and the rows per sentence may change (1 -> beam size after the first step).
        """
        old_beams = self.rows // self.sentences
        new_beams = old_beams if beams is None else beams
        kept = beam_idx.view(-1, new_beams)[:, 0] // old_beams  # (B',) source sentences that remain
        same_sources = kept.numel() == self.sentences
        t = self.step
        layers = []
        for layer in self.layers:
            kv, spare = layer.spare, layer.kv
            if beam_idx.numel() != self.rows:  # a new number of rows: new buffers
                kv = layer.kv.new_empty(layer.kv.size(0), 2, beam_idx.numel(), *layer.kv.shape[3:])
                spare = torch.empty_like(kv)
            torch.index_select(layer.kv[:t], 2, beam_idx, out=kv[:t])
            layers.append(LayerCache(
                kv=kv, spare=spare,
                cross_k_t=layer.cross_k_t if same_sources else layer.cross_k_t.index_select(0, kept),
                cross_v=layer.cross_v if same_sources else layer.cross_v.index_select(0, kept),
            ))
        cross_bias = self.cross_bias if same_sources else self.cross_bias.index_select(0, kept)
        return replace(self, layers=tuple(layers), cross_bias=cross_bias)
