"""The checkpoint format: a directory of config.json, model.safetensors and SentencePiece files.

Loading never unpickles anything: weights are read with safetensors only. The int8 checkpoint that `transformer
quantize` writes is model.int8_checkpoint's.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from model.config import DecodingConfig, ModelConfig
from model.errors import CheckpointError, ModelError, check_readable
from model.packing import released
from model.tokenizer import TokenizerConfig
from model.transformer import Transformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT_VERSION = 1
PICKLE_FILES = ("pytorch_model.bin", "model.pt", "checkpoint.pt")
Task = Literal["translation", "summarization"]
TASKS = ("translation", "summarization")
Weights = Literal["float32", "int8"]
WEIGHTS = ("float32", "int8")


@dataclass(frozen=True)
class CheckpointMeta:
    """Everything in config.json: the model, its tokenizer, its task and its languages."""

    model: ModelConfig
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    task: Task = "translation"
    source_lang: str | None = None
    target_lang: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # free-form provenance (training run, import source)
    weights: Weights = "float32"  # int8: written by `transformer quantize`, for int8 inference only
    decoding: DecodingConfig = field(default_factory=DecodingConfig)  # the model's own defaults (the recipe's
    # `decoding`), like a generation config: what a request or a command does not set. Default: the paper's.

    def __post_init__(self) -> None:
        if self.weights not in WEIGHTS:
            raise ValueError(f"weights must be one of {WEIGHTS}, got {self.weights!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "task": self.task,
            "source_lang": self.source_lang,
            "target_lang": self.target_lang,
            "model": self.model.to_dict(),
            "tokenizer": self.tokenizer.to_dict(),
            "extra": self.extra,
            **({"weights": self.weights} if self.weights != "float32" else {}),
            **({"decoding": changed} if (changed := self.decoding.changed()) else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckpointMeta:
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"format_version {data.get('format_version')!r} is not {FORMAT_VERSION}")
        if data.get("task") not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {data.get('task')!r}")
        return cls(
            model=ModelConfig.from_dict(data["model"]),
            tokenizer=TokenizerConfig.from_dict(data["tokenizer"]),
            task=data["task"],
            source_lang=data.get("source_lang"),
            target_lang=data.get("target_lang"),
            extra=dict(data.get("extra") or {}),
            weights=data.get("weights", "float32"),
            decoding=DecodingConfig.from_dict(data.get("decoding") or {}),
        )


def read_meta(directory: str | Path) -> CheckpointMeta:
    """Parse and check config.json, naming the file in every error."""
    directory = Path(directory)
    check_readable(directory)
    if not directory.is_dir():
        raise CheckpointError(directory, "no such checkpoint directory")
    path = directory / CONFIG_FILE
    check_readable(path)
    if not path.is_file():
        pickles = [n for n in PICKLE_FILES if (directory / n).exists()]
        hint = f"; found {pickles[0]}, a pickle, which is never loaded" if pickles else ""
        raise CheckpointError(path, f"config file is missing{hint}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise CheckpointError(path, "must hold a JSON object")
        return CheckpointMeta.from_dict(data)
    except json.JSONDecodeError as e:
        raise CheckpointError(path, f"not valid JSON: {e}") from e
    except (KeyError, TypeError, ValueError, ModelError) as e:
        raise CheckpointError(path, f"bad config: {e}") from e


def unique_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """Parameters and persistent buffers, each tied tensor under its first name only."""
    assert not released(model), "a model whose linears kept only their packed weights cannot be saved"
    tensors: dict[str, torch.Tensor] = dict(model.named_parameters())
    persistent = model.state_dict(keep_vars=True)
    tensors.update({n: b for n, b in model.named_buffers() if n in persistent})
    return {n: t.detach().contiguous() for n, t in tensors.items()}


def float_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """unique_tensors on the CPU, floating ones as float32: what a checkpoint file holds."""
    return {n: t.float().cpu() if t.is_floating_point() else t.cpu() for n, t in unique_tensors(model).items()}


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` that replaces it only once the caller is done writing."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600: a service running as another user must read it
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_checkpoint(
    directory: str | Path, model: Transformer, meta: CheckpointMeta, tokenizer_dir: str | Path | None = None
) -> Path:
    """Write a checkpoint; each file is replaced atomically. Tokenizer files are copied from tokenizer_dir."""
    if meta.weights != "float32":
        raise ValueError("save_checkpoint writes float32 weights; save_int8_checkpoint writes int8 ones")
    return write_checkpoint(directory, float_tensors(model), model, meta, tokenizer_dir)


def write_checkpoint(
    directory: str | Path,
    tensors: dict[str, torch.Tensor],
    model: Transformer,
    meta: CheckpointMeta,
    tokenizer_dir: str | Path | None,
) -> Path:
    """Write tokenizer files, weights and config.json, each replaced atomically and readable by all (0644)."""
    directory = Path(directory)
    if not directory.is_dir():
        directory.mkdir(parents=True)
        directory.chmod(0o755)  # whatever the umask: a service running as another user reads it
    if meta.model != model.cfg:
        raise ValueError("meta.model differs from the model's own config")
    if tokenizer_dir is not None and Path(tokenizer_dir).resolve() != directory.resolve():
        for name in meta.tokenizer.files():
            with atomic_path(directory / name) as tmp:
                shutil.copyfile(Path(tokenizer_dir) / name, tmp)
    with atomic_path(directory / WEIGHTS_FILE) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    with atomic_path(directory / CONFIG_FILE) as tmp:
        tmp.write_text(json.dumps(meta.to_dict(), indent=2) + "\n", encoding="utf-8")
    return directory


def missing_weights(path: Path) -> CheckpointError:
    pickles = [n for n in PICKLE_FILES if (path.parent / n).exists()]
    hint = f"; found {pickles[0]}, a pickle, which is never loaded" if pickles else ""
    return CheckpointError(path, f"weights file is missing{hint}")


def read_tensors(
    path: Path, expected: dict[str, tuple[tuple[int, ...], torch.dtype | None]]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor of a safetensors file that holds exactly the expected names, shapes and dtypes (None: any
    floating dtype)."""
    check_readable(path)
    if not path.is_file():
        raise missing_weights(path)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            found = set(f.keys())
            missing, unexpected = sorted(set(expected) - found), sorted(found - set(expected))
            if missing or unexpected:
                raise CheckpointError(
                    path, f"tensors do not match the config: missing {missing[:5]}, unexpected {unexpected[:5]}"
                )
            for name, (shape, dtype) in expected.items():
                tensor = f.get_tensor(name)
                if tuple(tensor.shape) != shape:
                    raise CheckpointError(
                        path, f"tensor {name} has shape {tuple(tensor.shape)}, the config needs {shape}"
                    )
                if tensor.dtype != dtype and not (dtype is None and tensor.is_floating_point()):
                    raise CheckpointError(path, f"tensor {name} is {tensor.dtype}, not {dtype or 'a floating type'}")
                yield name, tensor
    except SafetensorError as e:
        raise CheckpointError(path, f"not a valid safetensors file, truncated or of another format ({e})") from e


def load_weights(model: Transformer, path: Path) -> None:
    """Copy tensors from a float safetensors file into model, checking names, shapes and types."""
    targets = unique_tensors(model)
    expected = {n: (tuple(t.shape), None if t.is_floating_point() else t.dtype) for n, t in targets.items()}
    with torch.no_grad():
        for name, tensor in read_tensors(path, expected):
            targets[name].copy_(tensor)


def load_checkpoint(
    directory: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[Transformer, CheckpointMeta]:
    """Build the model of config.json and fill it from model.safetensors, in eval mode."""
    directory = Path(directory)
    meta = read_meta(directory)
    if meta.weights != "float32":
        raise CheckpointError(
            directory / CONFIG_FILE,
            f"holds {meta.weights} weights (written by `transformer "
            f"quantize`), for {meta.weights} inference only: load it "
            f"with dtype {meta.weights}, or use the float checkpoint",
        )
    model = Transformer.for_loading(meta.model)
    load_weights(model, directory / WEIGHTS_FILE)
    return model.to(device=device, dtype=dtype).eval(), meta
