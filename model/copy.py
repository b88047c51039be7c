"""Pointer-generator copying (See et al., 2017), a named deviation from the paper (ModelConfig.copy).

The output distribution mixes the softmax over the vocabulary with an attention over the source tokens, so
that a summary can take a word from its document even before the model has learnt to spell it. Source and
target share one vocabulary (ModelConfig checks it), so a source token is copied as its own id.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig

TINY = 1e-12  # P(w) floor before the log: a word neither generated nor in the source gets log P = -27.6


class Copy(nn.Module):
    """P(w) = p_gen P_vocab(w) + (1 - p_gen) sum_{i: x_i = w} a_i (See et al., 2017, Eq. 9).

    One attention head over the encoder output gives a, and p_gen = sigmoid(w . h + b) comes from the decoder
    output h, which already holds the stack's own attention context."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.k = nn.Linear(cfg.d_model, cfg.d_model)
        self.gate = nn.Linear(cfg.d_model, 1)
        self.scale = cfg.d_model**-0.5
        self.follow = nn.Parameter(torch.zeros(())) if cfg.copy_follow else None  # ModelConfig.copy_follow

    def keys_t(self, memory: Tensor) -> Tensor:
        """The copy attention's keys of the encoder output, transposed: (B, S, d_model) -> (B, d_model, S)."""
        return self.k(memory).transpose(1, 2).contiguous()

    def attend(self, hidden: Tensor, keys_t: Tensor, bias: Tensor, last: Tensor, src: Tensor) -> tuple[Tensor, Tensor]:
        """hidden (B, n, d_model), keys_t (B, d_model, S), bias (B, 1, S) of 0 and -inf, the id each output
        position last read, (B, n), and the source ids, (B, S) -> the copy weights a, (B, n, S), and p_gen,
        (B, n, 1)."""
        dtype = torch.promote_types(hidden.dtype, torch.float32)  # the mixture in float32 at least
        scores = torch.baddbmm(bias.to(dtype), self.q(hidden).to(dtype), keys_t.to(dtype), alpha=self.scale)
        if self.follow is not None:  # the source token after one that equals the last output gets the bonus
            before = F.pad(src[:, :-1], (1, 0), value=-1)  # (B, S): the id before each source position
            scores = scores + self.follow.to(dtype) * (before[:, None, :] == last[:, :, None])  # (B, n, S)
        return torch.softmax(scores, dim=-1), torch.sigmoid(self.gate(hidden).to(dtype))  # (B, n, S), (B, n, 1)

    def mix(self, logits: Tensor, a: Tensor, p_gen: Tensor, ids: Tensor) -> Tensor:
        """log P(w) of n outputs: logits (n, V), copy weights a (n, S) over source ids (n, S), p_gen (n, 1).
        The result is normalised log-probabilities, which log_softmax leaves as they are: the loss and the
        search read them as logits."""
        p = torch.softmax(logits.to(p_gen.dtype), dim=-1) * p_gen  # (n, V)
        return p.scatter_add(1, ids, a * (1.0 - p_gen)).clamp_min(TINY).log()


@dataclass(frozen=True)
class CopySource:
    """What copying needs at each step, one slot per source sentence like the cross-attention keys: the copy
    keys (B, d_model, S) and the source ids (B, S). Positions past a sentence's length are masked by the
    cross bias."""

    keys_t: Tensor
    ids: Tensor
