"""The decoder cache of incremental decoding: typed, passed in and returned, reorderable for beam search.

Sentences may join a running search (continuous batching), so each sentence has its own number of decoded
positions; a row's keys and values sit at its own positions 0 .. length - 1 of a shared time axis, and the
positions past its length are masked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from model.copy import CopySource
from model.masks import positions_bias

JOIN_ROOM = 32  # free positions a joined cache starts with; it grows as needed
MAX_SPANS = 4  # most row ranges a step's self-attention and reordering are cut into (row_spans)
SPAN_DROP = 0.5  # a new range starts where sentences hold at most this share of the range's longest
SPAN_MIN = 4  # sentences a range holds at least before a new one starts
IN_PLACE_MIN = 2048  # row positions from which a CPU cache is reordered in place (_moved_rows)
IN_PLACE_SHARE = 0.5  # most share of rows taking another row's hypothesis to move in place (more measured no faster)


@dataclass(frozen=True)
class LayerCache:
    """One decoder layer's cache.

    kv: self-attention keys and values of the steps so far, in a buffer with room to grow,
    (R, h, 2, capacity, d_k) with one row per hypothesis: a view of the first R rows of a buffer that may hold
    more (rows of sentences that left). Row-major, so that reordering copies each row's filled positions as
    runs of positions; keys and values apart within each head, so that the (R, h) axes of their views fold
    into one batch axis and the matrix products read them in place, without a copy.
    Positions a row has not written hold finite values (zeros or another row's), never read unmasked.
    spare: a second buffer of the same shape that reordering writes into (the two swap).
    cross_k_t, cross_v: encoder-decoder keys, transposed, (B, h, d_k, S), and values, (B, h, S, d_k), one slot
    per source sentence, computed once; the beams of a sentence share them. Views of the first B slots and S
    positions of buffers with room for more of both, so that sentences join and leave without copying the
    others'. Positions past a sentence's own length hold finite values, masked by the cross bias.
    """

    kv: Tensor
    spare: Tensor
    cross_k_t: Tensor
    cross_v: Tensor

    def append(self, kv: Tensor, where: StepPositions) -> tuple[Tensor, Tensor]:
        """Write one step's keys and values, kv (R, h, 2, d_k), at each row's position (where); return the keys
        and values of positions 0 .. where.t, each (R, h, t + 1, d_k)."""
        if where.index is None:  # every row at position t
            self.kv.select(3, where.t).copy_(kv)
        else:  # row r at position index[r]
            self.kv[where.rows, :, :, where.index] = kv
        return self.keys_values(where.t + 1)

    def keys_values(self, length: int) -> tuple[Tensor, Tensor]:
        """Views of the first `length` positions, each (R, h, length, d_k)."""
        k, v = self.kv.narrow(3, 0, length).unbind(2)  # 2 x (R, h, length, d_k)
        return k, v


Span = tuple[int, int, int]  # rows r0 .. r1 - 1 and the positions n they hold at most


@dataclass(frozen=True)
class StepPositions:
    """Where one step writes: position t for every row (all sentences equally far), or each row at its own
    position (index, (R,)) with keys past it masked by bias, (R, 1, 1, t + 1) of 0 and -inf.

    spans cut the rows into ranges that read only their first n keys (row_spans). The rows are in the order
    their sentences joined, the cross-attention keys and values in slots of their own (DecoderCache.slots):
    in_slot_order and in_row_order put rows in the slots' order and back, where the two differ."""

    t: int  # the largest position written this step; keys 0 .. t are read
    index: Tensor | None = None  # (R,) each row's position
    rows: Tensor | None = None  # (R,) 0 .. R - 1, to write one position per row
    bias: Tensor | None = None  # (R, 1, 1, t + 1)
    spans: tuple[Span, ...] = ()  # (r0, r1, keys read), covering every row; () for one range reading t + 1
    to_slots: Tensor | None = None  # (R,) row i of the slot order is row to_slots[i]
    from_slots: Tensor | None = None  # (R,) and back

    def in_slot_order(self, x: Tensor) -> Tensor:
        """x, (R, ...) in row order, in the order of the cross-attention slots: each sentence's beams at its slot."""
        return x if self.to_slots is None else x.index_select(0, self.to_slots)

    def in_row_order(self, x: Tensor) -> Tensor:
        """x, (R, ...) in slot order, back in row order."""
        return x if self.from_slots is None else x.index_select(0, self.from_slots)


@dataclass(frozen=True)
class DecoderCache:
    """Every layer's cache plus what all layers share: the source padding and each sentence's length."""

    layers: tuple[LayerCache, ...]
    cross_bias: Tensor  # (B, 1, 1, S) added to cross-attention scores, per slot: 0 on tokens, -inf on padding
    lengths: tuple[int, ...]  # (B,) target positions already decoded, per sentence
    slots: tuple[int, ...] | None = None  # (B,) the cross-attention slot of each sentence; None: slot b
    copy: CopySource | None = None  # per slot, like cross_bias: what copying reads (ModelConfig.copy)

    @property
    def step(self) -> int:
        """Positions filled for the sentence furthest along."""
        return max(self.lengths, default=0)

    @property
    def rows(self) -> int:
        """R, the number of hypotheses being decoded."""
        return self.layers[0].kv.size(0)

    @property
    def sentences(self) -> int:
        """B, the number of source sentences."""
        return self.cross_bias.size(0)

    @property
    def beams(self) -> int:
        return self.rows // max(1, self.sentences)

    @property
    def capacity(self) -> int:
        return self.layers[0].kv.size(3)

    def positions(self) -> StepPositions:
        """Where the next step writes (StepPositions)."""
        t, device = self.step, self.cross_bias.device
        to_slots = from_slots = None
        if self.slots is not None:
            beam = torch.arange(self.beams, device=device)
            slot = torch.tensor(self.slots, device=device)
            from_slots = (slot[:, None] * self.beams + beam).flatten()  # (R,) each row's place in slot order
            to_slots = torch.empty_like(from_slots)
            to_slots[from_slots] = torch.arange(from_slots.numel(), device=device)
        if min(self.lengths, default=0) == t:
            return StepPositions(t, to_slots=to_slots, from_slots=from_slots)
        index = torch.tensor(self.lengths, device=device).repeat_interleave(self.beams)  # (R,)
        bias = positions_bias(index, t, like=self.cross_bias)  # (R, 1, 1, t + 1)
        rows = torch.arange(index.numel(), device=device)
        spans = row_spans([n + 1 for n in self.lengths], self.beams)
        return StepPositions(t, index, rows, bias, spans, to_slots, from_slots)

    def advanced(self) -> DecoderCache:
        """The cache after a step wrote one position for every sentence."""
        return replace(self, lengths=tuple(n + 1 for n in self.lengths))

    def grown(self, at_most: int | None = None) -> DecoderCache:
        """The same cache with room for twice as many positions, or at_most (more than are filled) if fewer:
        the most any of its sentences will write. Fresh buffers are zeroed, and each position costs a buffer's
        worth of rows, so room nobody will use is not free."""
        size, t = max(1, 2 * self.capacity), self.step
        if at_most is not None:
            assert at_most > t, "growing must leave room for the next position"
            size = min(size, at_most)
        layers = []
        R, rows = self.rows, _row_capacity(self.layers[0].kv)  # the buffers keep their room for rows
        for layer in self.layers:
            kv = _with_rows(_buffer(layer.kv, size, rows), R)
            kv[:, :, :, :t] = layer.kv[:, :, :, :t]
            layers.append(replace(layer, kv=kv, spare=_with_rows(_buffer(layer.kv, size, rows), R)))
        return replace(self, layers=tuple(layers))

    def reorder(self, beam_idx: Tensor, beams: int | None = None, kept: list[int] | None = None) -> DecoderCache:
        """Keep hypothesis beam_idx[i] as new row i, with `beams` rows per sentence (default: as now).

        Rows of one sentence stay contiguous; sentences may be dropped (finished) and the rows per sentence may
        change (1 -> beam size after the first step). kept: the sentence each new row group holds (default:
        read from beam_idx). Each row's positions are copied up to its own sentence's length, by ranges of
        rows (row_spans). The kept sentences keep their cross-attention slots, except those past the last one
        needed, which move into the slots of sentences that left (one slot copied per sentence gone).
        """
        old_beams = self.beams
        new_beams = old_beams if beams is None else beams
        if kept is None:
            kept = (beam_idx.view(-1, new_beams)[:, 0] // old_beams).tolist()
        R, lengths = beam_idx.numel(), tuple(self.lengths[b] for b in kept)
        slots = [b if self.slots is None else self.slots[b] for b in kept]
        moved = _compacted(slots)
        spans = row_spans(lengths, new_beams)
        in_place = _moved_rows(beam_idx, spans) if self.rows == R and beam_idx.device.type == "cpu" else None
        layers = []
        for layer in self.layers:
            if in_place is not None:  # only the rows whose parent is another row are copied
                kv, spare = layer.kv, layer.spare
                for moves in in_place:
                    moves.apply(kv, spare)
            else:  # every row copied into the spare buffer; the two swap
                kv, spare = layer.spare, layer.kv
                if self.rows > R:  # sentences left: the first R rows of the same buffers (no new memory)
                    kv, spare = kv[:R], spare[:R]
                elif self.rows < R:  # more beams per sentence: new buffers
                    kv, spare = _buffer(layer.kv, self.capacity, R), _buffer(layer.kv, self.capacity, R)
                for r0, r1, n in spans:
                    torch.index_select(layer.kv[:, :, :, :n], 0, beam_idx[r0:r1], out=kv[r0:r1, :, :, :n])
            layers.append(
                replace(
                    layer,
                    kv=kv,
                    spare=spare,
                    cross_k_t=_slots_moved(layer.cross_k_t, moved, len(kept)),
                    cross_v=_slots_moved(layer.cross_v, moved, len(kept)),
                )
            )
        cross_bias = _slots_moved(self.cross_bias, moved, len(kept))
        copy = (
            None
            if self.copy is None
            else CopySource(
                _slots_moved(self.copy.keys_t, moved, len(kept)), _slots_moved(self.copy.ids, moved, len(kept))
            )
        )
        in_order = slots == list(range(len(slots)))
        return replace(
            self,
            layers=tuple(layers),
            cross_bias=cross_bias,
            lengths=lengths,
            slots=None if in_order else tuple(slots),
            copy=copy,
        )

    def trimmed(self, source_length: int) -> DecoderCache:
        """The same cache with the source axis cut to source_length, once longer sentences have left (views:
        nothing is copied)."""
        S = source_length
        if self.cross_bias.size(-1) <= S:
            return self
        layers = tuple(
            replace(layer, cross_k_t=layer.cross_k_t[..., :S], cross_v=layer.cross_v[:, :, :S]) for layer in self.layers
        )
        copy = None if self.copy is None else CopySource(self.copy.keys_t[..., :S], self.copy.ids[..., :S])
        return replace(self, layers=layers, cross_bias=self.cross_bias[..., :S], copy=copy)

    def joined(self, new: DecoderCache, max_sentences: int | None = None) -> DecoderCache:
        """This cache with the sentences of `new` (same beams per sentence, nothing decoded yet) after its own.

        They take the free rows and slots of this cache's buffers, which are replaced by larger ones (copied)
        only when full: with room for as many sentences again, but never for more than max_sentences (the most
        the caller will hold), since each growth of the time axis zeroes every row of room. The source axis
        becomes the longer of the two; the time axis keeps this cache's.
        """
        assert new.step == 0 and new.beams == self.beams, "sentences join with their rows, before any step"
        B, S_old, S_new = self.sentences, self.cross_bias.size(-1), new.cross_bias.size(-1)
        S, t, R = max(S_old, S_new), self.step, self.rows + new.rows
        room = _room(B + new.sentences, max_sentences)
        layers = []
        for old, add in zip(self.layers, new.layers, strict=True):
            if _row_capacity(old.kv) >= R:  # rows that left are free: take them
                kv, spare = _with_rows(old.kv, R), _with_rows(old.spare, R)
            else:  # new buffers, with room for more rows
                kv = _with_rows(_buffer(old.kv, max(self.capacity, t + JOIN_ROOM), room * self.beams), R)
                spare = _with_rows(_buffer(old.kv, kv.size(3), room * self.beams), R)
                kv[: self.rows, :, :, :t] = old.kv[:, :, :, :t]
            k_t = _slots_joined(old.cross_k_t, add.cross_k_t, S, dim=-1, room=room)
            v = _slots_joined(old.cross_v, add.cross_v, S, dim=-2, room=room)
            layers.append(LayerCache(kv=kv, spare=spare, cross_k_t=k_t, cross_v=v))
        bias = _slots_joined(self.cross_bias, new.cross_bias, S, dim=-1, pad=float("-inf"), room=room)
        if S_old < S:  # positions the view now shows were never this cache's sources: masked
            bias[:B, ..., S_old:] = float("-inf")
        slots = None if self.slots is None else self.slots + tuple(range(B, B + new.sentences))
        copy = None
        if self.copy is not None and new.copy is not None:
            copy = CopySource(
                _slots_joined(self.copy.keys_t, new.copy.keys_t, S, dim=-1, room=room),
                _slots_joined(self.copy.ids, new.copy.ids, S, dim=-1, room=room),
            )
        return DecoderCache(
            layers=tuple(layers), cross_bias=bias, lengths=self.lengths + new.lengths, slots=slots, copy=copy
        )


@dataclass(frozen=True)
class _RowMoves:
    """One row range's rows that take another row's hypothesis, moved in place (DecoderCache.reorder): first
    row by row, each row written only after every row that reads it has been copied, so that each is copied
    once; then the rows whose copies wait on one another (beams that swap places, say), gathered through the
    spare buffer (two copies each). Row numbers count from the range's first row, r0."""

    r0: int
    r1: int
    n: int  # positions the range's rows hold
    copies: tuple[tuple[int, int], ...]  # (row, parent), in this order
    looped: tuple[Tensor, Tensor] | None  # (M,) rows gathered through the spare buffer, and (M,) their parents

    def apply(self, kv: Tensor, spare: Tensor) -> None:
        """Move the rows of one layer's cache kv, (R, h, 2, capacity, d_k), in place."""
        filled = kv[self.r0 : self.r1, :, :, : self.n]  # (r1 - r0, h, 2, n, d_k)
        if self.copies:
            rows = filled.unbind(0)  # one view per row, (h, 2, n, d_k) each
            for r, p in self.copies:
                rows[r].copy_(rows[p])
        if self.looped is not None:
            looped, parents = self.looped
            gathered = spare[: looped.numel(), :, :, : self.n]  # (M, h, 2, n, d_k): a new one costs page faults
            torch.index_select(filled, 0, parents, out=gathered)
            filled.index_copy_(0, looped, gathered)


def _moved_rows(beam_idx: Tensor, spans: tuple[Span, ...]) -> list[_RowMoves] | None:
    """For reordering in place, on the CPU, a large cache (at least IN_PLACE_MIN row positions): each span's rows
    whose parent is another row, as _RowMoves. Rows that keep their own hypothesis (most, in a search whose
    beams have settled) are then not copied at all; a copy of every row into the spare buffer costs memory
    traffic for the whole cache. None for a small cache, where a call for each row costs more than the copy,
    and where more than IN_PLACE_SHARE of the rows move."""
    if sum((r1 - r0) * n for r0, r1, n in spans) < IN_PLACE_MIN:
        return None
    moved = {r: p for r, p in enumerate(beam_idx.tolist()) if p != r}
    if len(moved) > IN_PLACE_SHARE * beam_idx.numel():
        return None
    plans = []
    for r0, r1, n in spans:  # a row's parent is a row of its own sentence, so of its own range
        parent = {r - r0: p - r0 for r, p in moved.items() if r0 <= r < r1}
        if parent:
            copies, looped = _copy_order(parent)
            gathered = (torch.tensor(looped), torch.tensor([parent[r] for r in looped])) if looped else None
            plans.append(_RowMoves(r0, r1, n, copies, gathered))
    return plans


def _copy_order(parent: dict[int, int]) -> tuple[tuple[tuple[int, int], ...], list[int]]:
    """An order for in-place row copies (row <- parent[row]) in which no row is written before every row that
    reads it has been copied; and the rows left out of it, in cycles or waiting on one (their parents are rows
    left out too, or rows that do not move)."""
    readers = Counter(p for p in parent.values() if p in parent)  # moved rows that other moved rows read
    ready = [r for r in parent if not readers[r]]
    copies = []
    while ready:
        r = ready.pop()
        copies.append((r, parent[r]))
        p = parent[r]
        if p in parent:
            readers[p] -= 1
            if not readers[p]:
                ready.append(p)
    done = {r for r, _ in copies}
    return tuple(copies), [r for r in parent if r not in done]


def row_spans(lengths: Sequence[int], beams: int) -> tuple[Span, ...]:
    """Ranges of rows (r0, r1, n), n the most positions any of their sentences (lengths, `beams` rows each)
    holds, so that a row range reads and copies n positions rather than the longest sentence's.

    Sentences join a search after those already in it and all grow one position a step, so in join order
    lengths only fall: a range ends where they drop to SPAN_DROP of its first one (at most MAX_SPANS
    ranges, of SPAN_MIN sentences or more). Any order is correct; that one is fast."""
    spans: list[Span] = []
    start, top = 0, 0
    for b, n in enumerate(lengths):
        if b - start >= SPAN_MIN and n <= SPAN_DROP * top and len(spans) < MAX_SPANS - 1:
            spans.append((start * beams, b * beams, top))
            start, top = b, 0
        top = max(top, n)
    spans.append((start * beams, len(lengths) * beams, top))
    return tuple(spans)


def _compacted(slots: list[int]) -> list[tuple[int, int]]:
    """Move the slots numbered len(slots) or more (in place) into free ones below; returns the moves (to, from)."""
    B = len(slots)
    free = sorted(set(range(B)) - set(slots), reverse=True)
    moved = []
    for i, slot in enumerate(slots):
        if slot >= B:
            slots[i] = free.pop()
            moved.append((slots[i], slot))
    return moved


def _room(sentences: int, most: int | None) -> int:
    """Slots (sentences) a new buffer makes room for: twice those it holds, but no more than `most`."""
    assert most is None or sentences <= most, f"{sentences} sentences in a loop that holds at most {most}"
    return 2 * sentences if most is None else min(2 * sentences, most)


def _slots_joined(old: Tensor, add: Tensor, S: int, dim: int, room: int, pad: float = 0.0) -> Tensor:
    """old's B slots then add's, as a (B + B_new, ..., S, ...) view (the source axis `dim`, -1 or -2, of size S) of
    old's buffer when it has room, else of a new buffer with room for `room` slots (_room: B + B_new or more).
    add's slots are written up to its own source length; past it a bias gets pad (-inf), while keys and values
    keep what the buffer held (finite, and masked)."""
    B, n = old.size(0), old.size(0) + add.size(0)
    size = [n, *old.shape[1:]]
    size[dim] = S
    if _has_room(old, size, dim):
        out = old.as_strided(size, old.stride(), old.storage_offset())
    else:
        out = old.new_zeros([room, *size[1:]]).narrow(0, 0, n)
        out.narrow(dim, 0, old.size(dim))[:B] = old
    out[B:].narrow(dim, 0, add.size(dim)).copy_(add)
    if pad and add.size(dim) < S:
        out[B:].narrow(dim, add.size(dim), S - add.size(dim)).fill_(pad)
    return out


def _slots_moved(x: Tensor, moved: list[tuple[int, int]], B: int) -> Tensor:
    """x's first B slots, slot i now holding what slot b (B or more) held for every (i, b) in moved (the
    others stay)."""
    out = x[:B]
    if moved:
        dst, src = zip(*moved, strict=True)
        out.index_copy_(0, torch.tensor(dst, device=x.device), x[list(src)])
    return out


def _has_room(x: Tensor, size: list[int], dim: int) -> bool:
    """Whether the buffer that x views (contiguous, x its first slots and source positions) holds a view of
    this size: no more source positions than its own (along dim) and within its storage."""
    if size[dim] > x.stride(dim - 1) // x.stride(dim):
        return False
    last = x.storage_offset() + sum((n - 1) * st for n, st in zip(size, x.stride(), strict=True))
    return last < x.untyped_storage().nbytes() // x.element_size()


def _row_capacity(kv: Tensor) -> int:
    """The rows of the buffer that kv (its first R rows, from the buffer's start) views."""
    return max(kv.size(0), kv.untyped_storage().nbytes() // kv.element_size() // kv.stride(0))  # empty: its own


def _with_rows(kv: Tensor, rows: int) -> Tensor:
    """The view of the first `rows` rows of kv's buffer (at most its row capacity)."""
    return kv.as_strided((rows, *kv.shape[1:]), kv.stride(), kv.storage_offset())


def _buffer(like: Tensor, capacity: int, rows: int) -> Tensor:
    """A new (rows, h, 2, capacity, d_k) buffer of zeros. Rows read (masked) positions they have not written,
    which must hold finite values: zeros, or what another row once wrote there. So no buffer is ever left
    uninitialized, and a row that takes over another's place needs no clearing."""
    return like.new_zeros(rows, like.size(1), 2, capacity, like.size(4))
