"""The paper's optimizer, learning-rate schedule (§5.3) and label-smoothed loss (§5.4)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


def noam_rate(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (§5.3, Eq. 3), times scale."""
    step = max(step, 1)
    return float(scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5))


def make_optimizer(
    model: nn.Module, betas: tuple[float, float], eps: float, weight_decay: float = 0.0
) -> torch.optim.Adam:
    """Adam with beta1 0.9, beta2 0.98, eps 1e-9 in the paper; the rate is set at every step."""
    return torch.optim.Adam(model.parameters(), lr=0.0, betas=betas, eps=eps, weight_decay=weight_decay)


def set_rate(optimizer: torch.optim.Optimizer, rate: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = rate


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-row cross-entropy against the target smoothed by eps_ls, computed from the log-sum-exp without
    materialising log-probabilities; the gradient is softmax - smoothed target, in one pass."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, target: Tensor, eps_ls: float) -> tuple[Tensor, Tensor]:
        lse = torch.logsumexp(logits, dim=-1)  # (N,)
        nll = lse - logits.gather(1, target[:, None]).squeeze(1)  # (N,) -log p(target)
        uniform = lse - logits.mean(dim=-1)  # (N,) cross-entropy against the uniform distribution
        ctx.save_for_backward(logits, lse, target)
        ctx.eps_ls = eps_ls
        ctx.mark_non_differentiable(nll)
        return (1.0 - eps_ls) * nll + eps_ls * uniform, nll

    @staticmethod
    def backward(ctx: Any, grad_loss: Tensor, _: Tensor) -> tuple[Tensor, None, None]:
        logits, lse, target = ctx.saved_tensors
        eps_ls, V = ctx.eps_ls, logits.size(-1)
        grad = torch.sub(logits, lse[:, None]).exp_().sub_(eps_ls / V)  # (N, V) softmax - eps_ls / V
        grad.scatter_add_(1, target[:, None], grad.new_full((target.numel(), 1), eps_ls - 1.0))
        return grad.mul_(grad_loss[:, None]), None, None


def label_smoothed_loss(logits: Tensor, target: Tensor, eps_ls: float, pad: int) -> tuple[Tensor, Tensor]:
    """Summed cross-entropy against targets smoothed by eps_ls (§5.4), and the summed plain NLL.

    logits: (..., V); target: (...) with pad on positions that do not count. The smoothed target puts
    1 - eps_ls on the reference and spreads eps_ls evenly over the whole vocabulary.
    """
    flat = target.reshape(-1)  # (N,)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 / fp16 -> float32
    loss, nll = _SmoothedCrossEntropy.apply(logits.reshape(-1, logits.size(-1)), flat, eps_ls)
    keep = (flat != pad).to(loss.dtype)
    return (loss * keep).sum(), (nll * keep).sum()
