"""Token-budget batches of similar lengths (§5.1), padding counted, in shuffled order."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor


@dataclass
class EncodedCorpus:
    """Token ids of every pair, held compactly: one flat int32 array per side plus offsets."""

    src: np.ndarray
    src_offsets: np.ndarray
    tgt: np.ndarray
    tgt_offsets: np.ndarray

    @classmethod
    def build(cls, sources: Sequence[list[int]], targets: Sequence[list[int]]) -> EncodedCorpus:
        def flat(seqs: Sequence[list[int]]) -> tuple[np.ndarray, np.ndarray]:
            offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
            offsets[1:] = np.cumsum([len(s) for s in seqs])
            data = np.fromiter((i for s in seqs for i in s), dtype=np.int32, count=int(offsets[-1]))
            return data, offsets

        return cls(*flat(sources), *flat(targets))

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    def src_len(self, i: int) -> int:
        return int(self.src_offsets[i + 1] - self.src_offsets[i])

    def tgt_len(self, i: int) -> int:
        return int(self.tgt_offsets[i + 1] - self.tgt_offsets[i])

    def source(self, i: int) -> np.ndarray:
        return self.src[self.src_offsets[i] : self.src_offsets[i + 1]]

    def target(self, i: int) -> np.ndarray:
        return self.tgt[self.tgt_offsets[i] : self.tgt_offsets[i + 1]]


def token_batches(corpus: EncodedCorpus, max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """Example indices grouped by length so that each batch holds at most max_tokens source plus
    max_tokens target tokens, padding included; the batch order is shuffled per epoch."""
    rng = random.Random(seed * 1_000_003 + epoch)
    src_len = np.diff(corpus.src_offsets)
    tgt_len = np.diff(corpus.tgt_offsets)  # ids end in EOS; the decoder input has the same length
    noise = np.array([rng.random() for _ in range(len(corpus))])  # random order among equal lengths
    order = np.lexsort((noise, tgt_len, src_len))
    batches: list[list[int]] = []
    batch: list[int] = []
    longest_src = longest_tgt = 0
    for i in order.tolist():
        s, t = int(src_len[i]), int(tgt_len[i])
        new_src, new_tgt = max(longest_src, s), max(longest_tgt, t)
        if batch and (len(batch) + 1) * max(new_src, new_tgt) > max_tokens:
            batches.append(batch)
            batch, new_src, new_tgt = [], s, t
        batch.append(i)
        longest_src, longest_tgt = new_src, new_tgt
    if batch:
        batches.append(batch)
    rng.shuffle(batches)
    return batches


@dataclass(frozen=True)
class Batch:
    """Padded tensors for one batch: the decoder reads tgt_in and predicts tgt_out (shifted by one)."""

    src: Tensor  # (B, S)
    src_mask: Tensor  # (B, S) bool
    tgt_in: Tensor  # (B, T): start symbol, y_1 .. y_{T-1}
    tgt_out: Tensor  # (B, T): y_1 .. y_T (ending in EOS), pad elsewhere

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device, non_blocking=True) for t in (self.src, self.src_mask, self.tgt_in, self.tgt_out)))


def collate(corpus: EncodedCorpus, indices: list[int], pad: int, start: int) -> Batch:
    """Pad the examples of one batch into tensors."""
    B = len(indices)
    S = max(corpus.src_len(i) for i in indices)
    T = max(corpus.tgt_len(i) for i in indices)
    src = torch.full((B, S), pad, dtype=torch.long)
    tgt_in = torch.full((B, T), pad, dtype=torch.long)
    tgt_out = torch.full((B, T), pad, dtype=torch.long)
    for row, i in enumerate(indices):
        s, t = torch.from_numpy(corpus.source(i).astype(np.int64)), torch.from_numpy(corpus.target(i).astype(np.int64))
        src[row, : len(s)] = s
        tgt_out[row, : len(t)] = t
        tgt_in[row, 0] = start
        tgt_in[row, 1 : len(t)] = t[:-1]
    return Batch(src, src != pad, tgt_in, tgt_out)
