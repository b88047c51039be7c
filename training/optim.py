"""The paper's optimizer, learning-rate schedule (§5.3) and label-smoothed loss (§5.4)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def noam_rate(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (§5.3, Eq. 3), times scale."""
    step = max(step, 1)
    return float(scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5))


def make_optimizer(model: nn.Module, betas: tuple[float, float], eps: float,
                   weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam with beta1 0.9, beta2 0.98, eps 1e-9 in the paper; the rate is set at every step."""
    return torch.optim.Adam(model.parameters(), lr=0.0, betas=betas, eps=eps, weight_decay=weight_decay)


def set_rate(optimizer: torch.optim.Optimizer, rate: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = rate


def label_smoothed_loss(logits: Tensor, target: Tensor, eps_ls: float, pad: int) -> tuple[Tensor, Tensor]:
    """Summed cross-entropy against targets smoothed by eps_ls (§5.4), and the summed plain NLL.

    logits: (..., V); target: (...) with pad on positions that do not count.
    """
    logp = torch.log_softmax(logits.float(), dim=-1).reshape(-1, logits.size(-1))  # (N, V)
    flat = target.reshape(-1)  # (N,)
    keep = (flat != pad).to(logp.dtype)
    nll = -logp.gather(1, flat[:, None]).squeeze(1) * keep  # (N,)
    uniform = -logp.mean(dim=-1) * keep  # (N,) cross-entropy against the uniform distribution
    loss = (1.0 - eps_ls) * nll + eps_ls * uniform
    return loss.sum(), nll.detach().sum()
