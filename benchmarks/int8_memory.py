"""Weight memory of int8 (model.quantize) against float32, for the small and the base shapes.

    python benchmarks/int8_memory.py

Counts the bytes the weights take once loaded: float32 parameters and buffers, and for int8 the int8 tables,
the packed int8 matrices (one byte per weight) with their float32 scales and biases, and what stays float32
(LayerNorm, the logits bias). The sinusoid position table is not a weight and is left out of both.
"""

from __future__ import annotations

import warnings

from torch import nn

from model.config import ModelConfig
from model.quantize import Int8Linear, quantize_transformer
from model.transformer import Transformer

SHAPES = {
    "small": ModelConfig(src_vocab_size=4000, tgt_vocab_size=4000, N=3, d_model=256, d_ff=1024, h=4),
    "base": ModelConfig(src_vocab_size=32000, tgt_vocab_size=32000, N=6, d_model=512, d_ff=2048, h=8),
}


def tensor_bytes(model: nn.Module) -> int:
    """Bytes of the model's distinct parameters and buffers, the position table left out."""
    seen = {id(t): t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()]}
    table = model.get_buffer("src_embed.table") if hasattr(model.src_embed, "table") else None
    return sum(seen.values()) - (0 if table is None else seen.get(id(table), 0))


def int8_bytes(model: nn.Module) -> int:
    """tensor_bytes plus the packed int8 matrices: a byte per weight, a float32 scale and bias per output."""
    packed = sum(m.in_features * m.out_features + 8 * m.out_features for m in model.modules()
                 if isinstance(m, Int8Linear))
    return tensor_bytes(model) + packed


def main() -> None:
    warnings.filterwarnings("ignore")
    for name, cfg in SHAPES.items():
        model = Transformer(cfg).eval()
        f32 = tensor_bytes(model)
        quantize_transformer(model)
        q = int8_bytes(model)
        print(f"{name}: float32 {f32 / 2**20:.1f} MiB, int8 {q / 2**20:.1f} MiB ({q / f32:.2f}x)")


if __name__ == "__main__":
    main()
