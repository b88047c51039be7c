"""Masks: which keys a query may attend to (§3.2.3). A bool mask is True where a key may be attended; a bias is
added to the attention scores, 0 there and -inf elsewhere, so that softmax gives those keys no weight."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

MASKED = float("-inf")  # a bias on a key no query may attend to


def pad_batch(batch: Sequence[Sequence[int]], pad: int, device: torch.device | str) -> tuple[Tensor, Tensor]:
    """Right-pad id lists into (B, S) ids and their padding mask, (B, S) bool, True on real tokens."""
    S = max(len(ids) for ids in batch)
    src = torch.full((len(batch), S), pad, dtype=torch.long)
    for i, ids in enumerate(batch):
        src[i, : len(ids)] = torch.tensor(ids)
    mask = torch.arange(S)[None, :] < torch.tensor([len(ids) for ids in batch])[:, None]
    return src.to(device), mask.to(device)


def key_mask(src_mask: Tensor) -> Tensor:
    """A (B, S) padding mask over the keys of every head and query: (B, 1, 1, S)."""
    return src_mask[:, None, None, :]


def future_mask(T: int, S: int, device: torch.device) -> Tensor:
    """(T, S) bool, True on the keys after each query's own position: what the decoder may not see (§3.2.3)."""
    return torch.ones(T, S, dtype=torch.bool, device=device).triu(1)


def bias_of(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """The additive bias of a bool mask: 0 where it is True, MASKED where it is False."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, MASKED)


def positions_bias(positions: Tensor, t: int, like: Tensor) -> Tensor:
    """For rows at their own positions, (R,), reading keys 0 .. t: MASKED on the keys past each row's position,
    (R, 1, 1, t + 1), in like's dtype (continuous batching: sentences joined the search at different steps)."""
    later = torch.arange(t + 1, device=positions.device)[None, :] > positions[:, None]  # (R, t + 1)
    return like.new_zeros(later.shape).masked_fill_(later, MASKED)[:, None, None, :]  # (R, 1, 1, t + 1)
