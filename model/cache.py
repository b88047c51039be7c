"""Typed decoder state for incremental decoding: passed in, returned, reorderable for beam search."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor


@dataclass(frozen=True)
class LayerCache:
    """One decoder layer's state.

    k, v: self-attention keys and values of the steps so far, (R, h, t, d_k), one row per hypothesis.
    cross_k, cross_v: encoder-decoder keys and values, (B, h, S, d_k), one row per source sentence,
    computed once; the R = B * beams hypotheses of a sentence share them.
    """

    k: Tensor
    v: Tensor
    cross_k: Tensor
    cross_v: Tensor


@dataclass(frozen=True)
class DecoderCache:
    """Every layer's state plus what all layers share: the source mask and the next position."""

    layers: tuple[LayerCache, ...]
    src_mask: Tensor  # (B, 1, 1, S) bool, True on real source tokens
    step: int  # number of target positions already decoded

    @property
    def rows(self) -> int:
        """R, the number of hypotheses being decoded."""
        return self.layers[0].k.size(0)

    @property
    def sentences(self) -> int:
        """B, the number of source sentences."""
        return self.src_mask.size(0)

    def reorder(self, beam_idx: Tensor) -> DecoderCache:
        """Keep row beam_idx[i] of the current hypotheses as new row i.

        Rows of one sentence stay contiguous; sentences may be dropped (finished) but never
        reordered, and the number of rows per sentence may change (1 -> beam size after step 0).
        """
        beams = self.rows // self.sentences
        kept = torch.unique_consecutive(beam_idx // beams)  # source sentences that remain, in order
        assert bool((kept[1:] > kept[:-1]).all()), "beam_idx must keep sentences in order"
        same_sources = kept.numel() == self.sentences
        layers = tuple(
            LayerCache(
                k=layer.k.index_select(0, beam_idx),
                v=layer.v.index_select(0, beam_idx),
                cross_k=layer.cross_k if same_sources else layer.cross_k.index_select(0, kept),
                cross_v=layer.cross_v if same_sources else layer.cross_v.index_select(0, kept),
            )
            for layer in self.layers
        )
        src_mask = self.src_mask if same_sources else self.src_mask.index_select(0, kept)
        return replace(self, layers=layers, src_mask=src_mask)
