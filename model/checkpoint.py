"""The checkpoint format: a directory of config.json, model.safetensors and SentencePiece files.

Loading never unpickles anything: weights are read with safetensors only.
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

from model.config import ModelConfig
from model.errors import CheckpointError, ModelError
from model.tokenizer import TokenizerConfig
from model.transformer import Transformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT_VERSION = 1
PICKLE_FILES = ("pytorch_model.bin", "model.pt", "checkpoint.pt")
Task = Literal["translation", "summarization"]
TASKS = ("translation", "summarization")


@dataclass(frozen=True)
class CheckpointMeta:
    """Everything in config.json: the model, its tokenizer, its task and its languages."""

    model: ModelConfig
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    task: Task = "translation"
    source_lang: str | None = None
    target_lang: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # free-form provenance (training run, import source)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION, "task": self.task, "source_lang": self.source_lang,
            "target_lang": self.target_lang, "model": self.model.to_dict(),
            "tokenizer": self.tokenizer.to_dict(), "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckpointMeta:
        if data.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"format_version {data.get('format_version')!r} is not {FORMAT_VERSION}")
        if data.get("task") not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {data.get('task')!r}")
        return cls(
            model=ModelConfig.from_dict(data["model"]), tokenizer=TokenizerConfig.from_dict(data["tokenizer"]),
            task=data["task"], source_lang=data.get("source_lang"), target_lang=data.get("target_lang"),
            extra=dict(data.get("extra") or {}),
        )


def read_meta(directory: str | Path) -> CheckpointMeta:
    """Parse and check config.json, naming the file in every error."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(directory, "no such checkpoint directory")
    path = directory / CONFIG_FILE
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
    tensors: dict[str, torch.Tensor] = dict(model.named_parameters())
    persistent = model.state_dict(keep_vars=True)
    tensors.update({n: b for n, b in model.named_buffers() if n in persistent})
    return {n: t.detach().contiguous() for n, t in tensors.items()}


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` that replaces it only once the caller is done writing."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_checkpoint(directory: str | Path, model: Transformer, meta: CheckpointMeta,
                    tokenizer_dir: str | Path | None = None) -> Path:
    """Write a checkpoint; each file is replaced atomically. Tokenizer files are copied from tokenizer_dir."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if meta.model != model.cfg:
        raise ValueError("meta.model differs from the model's own config")
    if tokenizer_dir is not None and Path(tokenizer_dir).resolve() != directory.resolve():
        for name in meta.tokenizer.files():
            with atomic_path(directory / name) as tmp:
                shutil.copyfile(Path(tokenizer_dir) / name, tmp)
    tensors = {n: t.float().cpu() if t.is_floating_point() else t.cpu() for n, t in unique_tensors(model).items()}
    with atomic_path(directory / WEIGHTS_FILE) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    with atomic_path(directory / CONFIG_FILE) as tmp:
        tmp.write_text(json.dumps(meta.to_dict(), indent=2) + "\n", encoding="utf-8")
    return directory


def load_weights(model: Transformer, path: Path) -> None:
    """Copy tensors from a safetensors file into model, checking names and shapes."""
    if not path.is_file():
        pickles = [n for n in PICKLE_FILES if (path.parent / n).exists()]
        hint = f"; found {pickles[0]}, a pickle, which is never loaded" if pickles else ""
        raise CheckpointError(path, f"weights file is missing{hint}")
    expected = unique_tensors(model)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            found = set(f.keys())
            missing, unexpected = sorted(set(expected) - found), sorted(found - set(expected))
            if missing or unexpected:
                raise CheckpointError(path, f"tensors do not match the config: missing {missing[:5]}, "
                                            f"unexpected {unexpected[:5]}")
            for name, target in expected.items():
                tensor = f.get_tensor(name)
                if tensor.shape != target.shape:
                    raise CheckpointError(path, f"tensor {name} has shape {tuple(tensor.shape)}, "
                                                f"the config needs {tuple(target.shape)}")
                with torch.no_grad():
                    target.copy_(tensor)
    except SafetensorError as e:
        raise CheckpointError(path, f"not a valid safetensors file, truncated or of another format ({e})") from e


def load_checkpoint(directory: str | Path, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32) -> tuple[Transformer, CheckpointMeta]:
    """Build the model of config.json and fill it from model.safetensors, in eval mode."""
    directory = Path(directory)
    meta = read_meta(directory)
    model = Transformer(meta.model)
    load_weights(model, directory / WEIGHTS_FILE)
    return model.to(device=device, dtype=dtype).eval(), meta
