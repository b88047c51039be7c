"""A CPU inference speed-up: linear weights pre-packed into oneDNN's blocked layout once, at load time,
instead of on every call. Same products and sums; float32 on the CPU, without gradients, only."""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def packing_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def pack_weight(weight: Tensor, rows_hint: int = 64) -> Tensor:
    """weight (out, in) in oneDNN's layout for inputs of about rows_hint rows (any number works)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), rows_hint)


def packed_ok(x: Tensor) -> bool:
    """Whether x may go through a packed weight: CPU float32 inference."""
    return not torch.is_grad_enabled() and x.device.type == "cpu" and x.dtype == torch.float32


def packed_linear(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    """x W^T + b with W packed by pack_weight; x: (..., in) -> (..., out)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, None if bias is None else bias.detach(), "none", [], "")


class PackedLinear(nn.Linear):
    """An nn.Linear (same parameters, same state_dict) that multiplies by a packed copy of its weight
    where packed_ok; elsewhere (training, CUDA, other dtypes) it is a plain nn.Linear."""

    packed: Tensor

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = weight.size(1), weight.size(0)
        self.register_parameter("weight", cast(nn.Parameter, weight))
        self.register_parameter("bias", cast(nn.Parameter | None, bias))
        self.register_buffer("packed", pack_weight(weight), persistent=False)
        self.packed_bias: Tensor | None  # the bias without its autograd history, as the packed product takes it
        self.register_buffer("packed_bias", None if bias is None else bias.detach(), persistent=False)
        self.released = False

    def release(self) -> None:
        """Keep only the packed copy of the weight, for a model that only ever runs inference on the CPU in
        float32 (a Translator's): the linear weights' memory halves. It then always multiplies by the packed copy,
        and can neither train nor be saved."""
        self.weight = nn.Parameter(self.packed.new_empty(0), requires_grad=False)  # (0,): no plain weight kept
        self.released = True

    def forward(self, x: Tensor) -> Tensor:
        if self.released or packed_ok(x):
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.packed_bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)


def pack_linears(model: nn.Module, release: bool = False) -> int:
    """Replace every float32 CPU nn.Linear of model by a PackedLinear sharing its parameters; with release,
    keep only their packed weights (PackedLinear.release)."""
    count = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear and child.weight.device.type == "cpu" and child.weight.dtype == torch.float32:
                packed = PackedLinear(child.weight, child.bias)
                if release:
                    packed.release()
                setattr(module, name, packed)
                count += 1
    return count


def released(model: nn.Module) -> bool:
    """Whether some linear of model keeps only its packed weight (PackedLinear.release)."""
    return any(isinstance(m, PackedLinear) and m.released for m in model.modules())
