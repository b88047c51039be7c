"""Weight memory of int8 (model.quantize) against float32, for the small and the base shapes; and the int8
checkpoint (`transformer quantize`) against quantizing the float32 one at load: file size and load time.

    python benchmarks/int8_memory.py

Counts the bytes the weights take once loaded: float32 parameters and buffers, and for int8 the int8 tables,
the packed int8 matrices (one byte per weight) with their float32 scales and biases, and what stays float32
(LayerNorm, the logits bias). The sinusoid position table is not a weight and is left out of both.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import SHAPES
from torch import nn

from model.checkpoint import WEIGHTS_FILE, CheckpointMeta, load_checkpoint, save_checkpoint
from model.config import ModelConfig
from model.int8_checkpoint import load_int8_checkpoint, save_int8_checkpoint
from model.quantize import Int8Linear, quantize_transformer
from model.transformer import Transformer

VOCAB = {"small": 4000, "base": 32000}
CONFIGS = {name: ModelConfig(src_vocab_size=VOCAB[name], tgt_vocab_size=VOCAB[name], **SHAPES[name]) for name in VOCAB}


def tensor_bytes(model: nn.Module) -> int:
    """Bytes of the model's distinct parameters and buffers, the position table left out."""
    seen = {id(t): t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()]}
    table = model.get_buffer("src_embed.table") if hasattr(model.src_embed, "table") else None
    return sum(seen.values()) - (0 if table is None else seen.get(id(table), 0))


def int8_bytes(model: nn.Module) -> int:
    """tensor_bytes plus the packed int8 matrices: a byte per weight, a float32 scale and bias per output."""
    packed = sum(
        m.in_features * m.out_features + 8 * m.out_features for m in model.modules() if isinstance(m, Int8Linear)
    )
    return tensor_bytes(model) + packed


def best_seconds(load: Callable[[], Any], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        load()
        times.append(time.perf_counter() - start)
    return min(times)


def quantize_at_load(path: Path) -> None:
    model, _ = load_checkpoint(path)
    quantize_transformer(model)


def files(name: str, cfg: ModelConfig) -> None:
    """The int8 checkpoint's file size and load time against the float32 one's quantized at load."""
    with tempfile.TemporaryDirectory() as tmp:
        f32_dir, int8_dir = Path(tmp) / "f32", Path(tmp) / "int8"
        model = Transformer(cfg).eval()
        save_checkpoint(f32_dir, model, CheckpointMeta(cfg))
        save_int8_checkpoint(int8_dir, model, CheckpointMeta(cfg))
        f32_size, int8_size = ((d / WEIGHTS_FILE).stat().st_size for d in (f32_dir, int8_dir))
        at_load = best_seconds(lambda: quantize_at_load(f32_dir))
        from_file = best_seconds(lambda: load_int8_checkpoint(int8_dir))
    print(
        f"{name}: file float32 {f32_size / 2**20:.1f} MiB, int8 {int8_size / 2**20:.1f} MiB "
        f"({int8_size / f32_size:.2f}x); load as int8 from float32 {at_load * 1000:.0f} ms, "
        f"from the int8 file {from_file * 1000:.0f} ms ({at_load / from_file:.2f}x faster)"
    )


def main() -> None:
    warnings.filterwarnings("ignore")
    for name, cfg in CONFIGS.items():
        model = Transformer(cfg).eval()
        f32 = tensor_bytes(model)
        quantize_transformer(model)
        q = int8_bytes(model)
        print(f"{name}: float32 {f32 / 2**20:.1f} MiB, int8 {q / 2**20:.1f} MiB ({q / f32:.2f}x)")
    for name, cfg in CONFIGS.items():
        files(name, cfg)


if __name__ == "__main__":
    main()
