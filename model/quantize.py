"""int8 inference on the CPU (dtype "int8"), a deviation from the paper's float arithmetic for speed and memory.

Every linear weight and the shared embedding matrix are quantized symmetrically per output channel (per row) at
load time from the float32 checkpoint: W ~ q * scale, q in [-127, 127]. The products run on fbgemm's int8
kernel that torch ships (torch.ops.quantized.linear_dynamic), which quantizes each input per call (dynamic
quantization, one scale per call) and returns float32. LayerNorm, softmax, attention over the cache, the
positions and the log-probabilities stay float32. The embedding rows are looked up as int8 times their
scale, and the pre-softmax linear (tied to them, §3.4) is an int8 product too.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.cpu import processor
from model.errors import ConfigError

if TYPE_CHECKING:
    from model.transformer import Transformer

ENGINE = "fbgemm"  # torch's x86 int8 GEMM library
# fbgemm's AVX2 and plain AVX-512 kernels sum pairs of u8 x s8 products in int16, which can saturate: inputs are
# then quantized to 7 bits (torch's reduce_range). On processors with AVX512-VNNI (this /proc/cpuinfo flag; every
# one with AMX has it) fbgemm sums in int32, and inputs keep all 8 bits: on a trained model, int8 outputs equal to
# float32's went from 84% to 90% (benchmarks/README). torch's get_cpu_capability says "AVX512" with or without
# VNNI, so it cannot tell.
FULL_RANGE_FLAG = "avx512_vnni"


def int8_unsupported(device: str | torch.device) -> str | None:
    """Why int8 cannot run on this device and processor, or None when it can."""
    if torch.device(device).type != "cpu":
        return f"int8 runs on the CPU only, not on {device}; use bfloat16 or float16 there"
    if ENGINE not in torch.backends.quantized.supported_engines:
        return f"this torch build has no {ENGINE} int8 kernel (it has {torch.backends.quantized.supported_engines})"
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith("AVX2") and not capability.startswith("AVX512") and capability != "AMX":
        return f"the int8 kernel needs a processor with AVX2 or AVX-512; this one reports {capability}"
    return None


def reduce_range(flags: frozenset[str] | None = None) -> bool:
    """Whether inputs are quantized to 7 bits on a processor with these flags (default: this one's;
    FULL_RANGE_FLAG)."""
    return FULL_RANGE_FLAG not in (processor().flags if flags is None else flags)


def quantize_rows(w: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric per-row int8: (q int8 (N, K), scale float32 (N,)) with w ~ q * scale[:, None]."""
    w = w.detach().float()
    scale = w.abs().amax(dim=1) / 127.0  # (N,)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero row stays zero
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


def pack_int8(q: Tensor, scale: Tensor, bias: Tensor | None, engine: str = ENGINE) -> Any:
    """fbgemm's packed form of an int8 weight with per-row scales (and a float32 bias); engine: another of torch's
    quantized engines (benchmarks/int8_kernels.py compares their packed weights)."""
    torch.backends.quantized.engine = engine
    zero = torch.zeros(q.size(0), dtype=torch.long)
    with warnings.catch_warnings():  # quantized tensors are the kernel's only entry point
        warnings.simplefilter("ignore", UserWarning)
        qweight = torch._make_per_channel_quantized_tensor(q, scale.double(), zero, 0)
    return torch.ops.quantized.linear_prepack(qweight, None if bias is None else bias.detach().float())


class Int8Linear(nn.Module):
    """x W^T + b with W int8 per output channel and x quantized per call (float32 in and out)."""

    def __init__(self, q: Tensor, scale: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        self.in_features, self.out_features = q.size(1), q.size(0)
        self.packed = pack_int8(q, scale, bias)
        self.reduce_range = reduce_range()

    @staticmethod
    def of(linear: nn.Linear) -> Int8Linear:
        q, scale = quantize_rows(linear.weight)
        return Int8Linear(q, scale, linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        y = torch.ops.quantized.linear_dynamic(x.reshape(-1, self.in_features), self.packed, self.reduce_range)
        return cast(Tensor, y).view(*lead, self.out_features)  # (..., out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


class Int8Embedding(nn.Module):
    """An embedding table held as int8 rows and a scale per row; lookups return float32 rows."""

    def __init__(self, q: Tensor, scale: Tensor) -> None:
        super().__init__()
        self.register_buffer("q", q)
        self.register_buffer("scale", scale)

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.get_buffer("q")).float() * F.embedding(ids, self.get_buffer("scale")[:, None])


Rows = dict[str, tuple[Tensor, Tensor]]  # a float weight's name -> its int8 rows and their scales


def int8_names(model: Transformer) -> list[str]:
    """The weights int8 holds as rows: every linear layer's and embedding table's (a shared table once)."""
    return [f"{name}.weight" for name, m in model.named_modules() if isinstance(m, nn.Linear | nn.Embedding)]


def int8_rows(model: Transformer) -> Rows:
    """The float model's weights quantized per row (quantize_rows), by name."""
    weights = dict(model.named_parameters())
    return {name: quantize_rows(weights[name]) for name in int8_names(model)}


def quantize_transformer(model: Transformer, rows: Rows | None = None) -> None:
    """Make model an int8 CPU inference model, in place, from rows (default: its own weights quantized): its
    nn.Linear layers become Int8Linear, its embedding tables Int8Embedding (a shared table stays shared), and
    the pre-softmax linear an Int8Linear of the target table when tied (§3.4), else of the output projection."""
    rows = int8_rows(model) if rows is None else rows
    names = {id(m): name for name, m in model.named_modules()}  # each module under its first name

    def of(module: nn.Module) -> tuple[Tensor, Tensor]:
        return rows[f"{names[id(module)]}.weight"]

    tables: dict[int, Int8Embedding] = {}
    for embed in (model.src_embed, model.tgt_embed):
        tokens = embed.tokens
        if id(tokens) not in tables:
            tables[id(tokens)] = Int8Embedding(*of(tokens))
        embed.tokens = tables[id(tokens)]  # type: ignore[assignment]
    if model.out_proj is None:
        table = cast(Int8Embedding, model.tgt_embed.tokens)
        q, scale = table.get_buffer("q"), table.get_buffer("scale")
    else:
        q, scale = of(model.out_proj)
        model.out_proj = None
    model.int8_logits = Int8Linear(q, scale, model.logits_bias)
    model.packed_logits = None
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8Linear(*of(child), child.bias))


def check_int8(device: str | torch.device) -> None:
    """ConfigError when int8 cannot run here."""
    why = int8_unsupported(device)
    if why is not None:
        raise ConfigError(why)
