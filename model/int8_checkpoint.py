"""The int8 checkpoint (`transformer quantize`): a float checkpoint's directory whose linear and embedding weights
are int8 rows, each with a float32 scale (model.quantize), for int8 inference on the CPU; the weights file holds
the rows under the weights' own names and the scales beside them, and config.json says `"weights": "int8"`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from model.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    CheckpointMeta,
    float_tensors,
    load_checkpoint,
    read_meta,
    read_tensors,
    unique_tensors,
    write_checkpoint,
)
from model.errors import CheckpointError
from model.quantize import Rows, int8_names, int8_rows, quantize_transformer
from model.transformer import Transformer

SCALE_SUFFIX = ".int8_scale"  # the scales of the int8 tensor named before the suffix


def save_int8_checkpoint(
    directory: str | Path, model: Transformer, meta: CheckpointMeta, tokenizer_dir: str | Path | None = None
) -> Path:
    """Write the float model as an int8 checkpoint: each weight of int8_names as int8 rows (under its own
    name) and their float32 scales (under the name + SCALE_SUFFIX); the rest as float32."""
    tensors = float_tensors(model)
    for name, (q, scale) in int8_rows(model).items():
        tensors[name], tensors[name + SCALE_SUFFIX] = q.cpu(), scale.cpu()
    return write_checkpoint(directory, tensors, model, replace(meta, weights="int8"), tokenizer_dir)


def load_int8_weights(model: Transformer, path: Path) -> Rows:
    """Fill model's float32 tensors from an int8 checkpoint file and return its int8 rows by name."""
    targets = unique_tensors(model)
    quantized = set(int8_names(model))
    expected: dict[str, tuple[tuple[int, ...], torch.dtype | None]] = {}
    for name, t in targets.items():
        expected[name] = (tuple(t.shape), torch.int8 if name in quantized else None)
        if name in quantized:
            expected[name + SCALE_SUFFIX] = ((t.size(0),), torch.float32)
    tensors: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, tensor in read_tensors(path, expected):
            if name in quantized or name.endswith(SCALE_SUFFIX):  # a copy: a tensor read stays in the file's
                tensors[name] = tensor.clone()  # mapping, and one kept keeps the whole file mapped (resident)
            else:
                targets[name].copy_(tensor)
    rows: Rows = {}
    for name in quantized:
        q, scale = tensors[name], tensors[name + SCALE_SUFFIX]
        if not bool(torch.isfinite(scale).all()) or not bool((scale > 0).all()) or int(q.min()) < -127:
            raise CheckpointError(
                path, f"tensor {name}: int8 rows must lie in [-127, 127] with positive, finite scales"
            )
        rows[name] = (q, scale)
    return rows


def load_int8_checkpoint(directory: str | Path) -> tuple[Transformer, CheckpointMeta]:
    """An int8 CPU inference model (model.quantize) from an int8 checkpoint, its rows used as written."""
    directory = Path(directory)
    meta = read_meta(directory)
    if meta.weights != "int8":
        raise CheckpointError(directory / CONFIG_FILE, "holds float32 weights, not int8 ones")
    model = Transformer.for_loading(meta.model)
    rows = load_int8_weights(model, directory / WEIGHTS_FILE)
    quantize_transformer(model, rows)
    return model.eval(), meta


def quantize_checkpoint(src: str | Path, out: str | Path, force: bool = False) -> tuple[int, int]:
    """Write the float checkpoint src as an int8 checkpoint out (`transformer quantize`); the weight files'
    sizes in bytes, before and after. A checkpoint already in out is replaced only with force."""
    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise CheckpointError(out, "is the checkpoint being quantized; write the int8 copy elsewhere")
    if (out / CONFIG_FILE).exists() and not force:
        raise CheckpointError(out, "already holds a checkpoint; pass --force to replace it")
    if out.exists() and not out.is_dir():
        raise CheckpointError(out, "exists and is not a directory")
    model, meta = load_checkpoint(src)
    try:
        save_int8_checkpoint(out, model, meta, tokenizer_dir=src)
    except OSError as e:  # no room, no permission: nothing half-written replaces a file (atomic_path)
        raise CheckpointError(out, f"cannot be written ({e.strerror or e})") from e
    return (src / WEIGHTS_FILE).stat().st_size, (out / WEIGHTS_FILE).stat().st_size
