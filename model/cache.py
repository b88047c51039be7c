"""Typed decoder state for incremental decoding: passed in, returned, reorderable for beam search.

Sentences may join a running search (continuous batching), so each sentence has its own number of decoded
positions; a row's keys and values sit at its own positions 0 .. length - 1 of a shared time axis, and the
positions past its length are masked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

JOIN_ROOM = 32  # free positions a joined cache starts with; it grows as needed


@dataclass(frozen=True)
class LayerCache:
    """One decoder layer's state.

    kv: self-attention keys and values of the steps so far, in a buffer with room to grow,
    (capacity, 2, R, h, d_k) with one row per hypothesis: a view of the first R rows of a buffer that may hold
    more (rows of sentences that left). Time-major, so that reordering copies only the filled prefix.
    Positions a row has not written hold finite values (zeros or another row's), never read unmasked.
    spare: a second buffer of the same shape that reordering writes into (the two swap).
    cross_k_t, cross_v: encoder-decoder keys, transposed, (B, h, d_k, S), and values, (B, h, S, d_k),
    one row per source sentence, computed once; the beams of a sentence share them.
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
class StepPositions:
    """Where one step writes: position t for every row (all sentences equally far), or each row at its own
    position (index, (R,)) with keys past it masked by bias, (R, 1, 1, t + 1) of 0 and -inf."""

    t: int  # the largest position written this step; keys 0 .. t are read
    index: Tensor | None = None  # (R,) each row's position
    rows: Tensor | None = None  # (R,) 0 .. R - 1, to write one position per row
    bias: Tensor | None = None  # (R, 1, 1, t + 1)


@dataclass(frozen=True)
class DecoderCache:
    """Every layer's state plus what all layers share: the source padding and each sentence's length."""

    layers: tuple[LayerCache, ...]
    cross_bias: Tensor  # (B, 1, 1, S) added to cross-attention scores: 0 on source tokens, -inf on padding
    lengths: tuple[int, ...]  # (B,) target positions already decoded, per sentence

    @property
    def step(self) -> int:
        """Positions filled for the sentence furthest along."""
        return max(self.lengths, default=0)

    @property
    def rows(self) -> int:
        """R, the number of hypotheses being decoded."""
        return self.layers[0].kv.size(2)

    @property
    def sentences(self) -> int:
        """B, the number of source sentences."""
        return self.cross_bias.size(0)

    @property
    def beams(self) -> int:
        return self.rows // max(1, self.sentences)

    @property
    def capacity(self) -> int:
        return self.layers[0].kv.size(0)

    def positions(self) -> StepPositions:
        """Where the next step writes (StepPositions)."""
        t = self.step
        if min(self.lengths, default=0) == t:
            return StepPositions(t)
        kv = self.layers[0].kv
        index = torch.tensor(self.lengths, device=kv.device).repeat_interleave(self.beams)  # (R,)
        later = torch.arange(t + 1, device=kv.device)[None, :] > index[:, None]  # (R, t + 1)
        bias = kv.new_zeros(later.shape).masked_fill_(later, float("-inf"))
        rows = torch.arange(index.numel(), device=kv.device)
        return StepPositions(t, index, rows, bias[:, None, None, :])  # (R, 1, 1, t + 1)

    def advanced(self) -> DecoderCache:
        """The cache after a step wrote one position for every sentence."""
        return replace(self, lengths=tuple(n + 1 for n in self.lengths))

    def grown(self) -> DecoderCache:
        """The same state with room for twice as many positions."""
        size, t = max(1, 2 * self.capacity), self.step
        layers = []
        for layer in self.layers:
            kv = _buffer(layer.kv, size, layer.kv.size(2))
            kv[:t] = layer.kv[:t]
            layers.append(replace(layer, kv=kv, spare=_buffer(layer.kv, size, layer.kv.size(2))))
        return replace(self, layers=tuple(layers))

    def reorder(self, beam_idx: Tensor, beams: int | None = None) -> DecoderCache:
        """Keep hypothesis beam_idx[i] as new row i, with `beams` rows per sentence (default: as now).

        Rows of one sentence stay contiguous; sentences may be dropped (finished) but never
        reordered, and the rows per sentence may change (1 -> beam size after the first step).
        """
        old_beams = self.beams
        new_beams = old_beams if beams is None else beams
        kept = beam_idx.view(-1, new_beams)[:, 0] // old_beams  # (B',) source sentences that remain
        same_sources = kept.numel() == self.sentences
        lengths = self.lengths if same_sources else tuple(self.lengths[i] for i in kept.tolist())
        t, R = self.step, beam_idx.numel()
        layers = []
        for layer in self.layers:
            kv, spare = layer.spare, layer.kv
            if self.rows > R:  # sentences left: the first R rows of the same buffers (no new memory)
                kv, spare = kv.narrow(2, 0, R), spare.narrow(2, 0, R)
            elif self.rows < R:  # more beams per sentence: new buffers
                kv, spare = _buffer(layer.kv, layer.kv.size(0), R), _buffer(layer.kv, layer.kv.size(0), R)
            torch.index_select(layer.kv[:t], 2, beam_idx, out=kv[:t])
            layers.append(LayerCache(
                kv=kv, spare=spare,
                cross_k_t=layer.cross_k_t if same_sources else layer.cross_k_t.index_select(0, kept),
                cross_v=layer.cross_v if same_sources else layer.cross_v.index_select(0, kept),
            ))
        cross_bias = self.cross_bias if same_sources else self.cross_bias.index_select(0, kept)
        return replace(self, layers=tuple(layers), cross_bias=cross_bias, lengths=lengths)

    def trimmed(self, source_length: int) -> DecoderCache:
        """The same state with the source axis cut to source_length, once longer sentences have left."""
        S = source_length
        if self.cross_bias.size(-1) <= S:
            return self
        layers = tuple(replace(layer, cross_k_t=layer.cross_k_t[..., :S].contiguous(),
                               cross_v=layer.cross_v[:, :, :S].contiguous()) for layer in self.layers)
        return replace(self, layers=layers, cross_bias=self.cross_bias[..., :S].contiguous())

    def joined(self, new: DecoderCache) -> DecoderCache:
        """This state with the sentences of `new` (same beams per sentence, nothing decoded yet) after its own.

        The source axis is padded to the longer of the two; the time axis keeps this cache's positions.
        """
        assert new.step == 0 and new.beams == self.beams, "sentences join with their rows, before any step"
        S = max(self.cross_bias.size(-1), new.cross_bias.size(-1))
        t, R = self.step, self.rows + new.rows
        layers = []
        for old, add in zip(self.layers, new.layers, strict=True):
            if _row_capacity(old.kv) >= R and old.kv.size(0) > t:  # rows that left are free: take them
                kv, spare = _with_rows(old.kv, R), _with_rows(old.spare, R)
            else:  # new buffers, with room for as many rows again
                rows = max(R, 2 * _row_capacity(old.kv))
                kv = _with_rows(_buffer(old.kv, t + JOIN_ROOM, rows), R)
                spare = _with_rows(_buffer(old.kv, t + JOIN_ROOM, rows), R)
                kv[:t, :, :self.rows] = old.kv[:t]
            layers.append(LayerCache(
                kv=kv, spare=spare,
                cross_k_t=torch.cat([_pad(old.cross_k_t, -1, S), _pad(add.cross_k_t, -1, S)]),
                cross_v=torch.cat([_pad(old.cross_v, -2, S), _pad(add.cross_v, -2, S)]),
            ))
        bias = torch.cat([_pad(self.cross_bias, -1, S, float("-inf")), _pad(new.cross_bias, -1, S, float("-inf"))])
        return DecoderCache(layers=tuple(layers), cross_bias=bias, lengths=self.lengths + new.lengths)


def _row_capacity(kv: Tensor) -> int:
    """The rows of the buffer that kv (its first R rows) views."""
    return kv.stride(1) // kv.stride(2)


def _with_rows(kv: Tensor, rows: int) -> Tensor:
    """The view of the first `rows` rows of kv's buffer (at most its row capacity)."""
    return kv.as_strided((kv.size(0), 2, rows, *kv.shape[3:]), kv.stride(), kv.storage_offset())


def _buffer(like: Tensor, capacity: int, rows: int) -> Tensor:
    """A new (capacity, 2, rows, h, d_k) buffer of zeros. Rows read (masked) positions they have not written,
    which must hold finite values: zeros, or what another row once wrote there. So no buffer is ever left
    uninitialized, and a row that takes over another's place needs no clearing."""
    return like.new_zeros(capacity, 2, rows, *like.shape[3:])


def _pad(x: Tensor, dim: int, size: int, value: float = 0.0) -> Tensor:
    """x padded at the end of dimension dim (negative) to size."""
    missing = size - x.size(dim)
    if missing == 0:
        return x
    widths = [0, 0] * (-dim - 1) + [0, missing]
    return F.pad(x, widths, value=value)
