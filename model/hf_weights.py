"""Weights of Hugging Face encoder-decoder checkpoints (Marian, M2M100, NLLB, mBART, BART, Pegasus) in ours, from
one model.safetensors or from the shards that model.safetensors.index.json names.

The families name their tensors alike (BART's layout): `model.{encoder,decoder}.layers.{i}.self_attn.q_proj`, `fc1`,
`final_layer_norm`, `encoder_attn`...; what differs (embedding LayerNorms, final LayerNorms, learned positions
with an offset, a final logits bias) follows the ModelConfig switches that the import set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from model.checkpoint import missing_weights
from model.config import ModelConfig
from model.errors import CheckpointError, check_readable
from model.transformer import Transformer

PAIR = ("weight", "bias")
INDEX_FILE = "model.safetensors.index.json"  # a sharded checkpoint's tensor name -> shard file


def _layer_map(side: str, i: int, cross: bool) -> dict[str, list[str]]:
    """Our tensor name -> the Hugging Face tensors concatenated (along dim 0) to make it."""
    hf, ours = f"model.{side}.layers.{i}", f"{side}.{i}"
    attn = ["q_proj", "k_proj", "v_proj"]
    m = {f"{ours}.self_attn.qkv.{p}": [f"{hf}.self_attn.{a}.{p}" for a in attn] for p in PAIR}
    norms = {"attn_norm" if side == "encoder" else "self_norm": "self_attn_layer_norm", "ffn_norm": "final_layer_norm"}
    for p in PAIR:
        m[f"{ours}.self_attn.out.{p}"] = [f"{hf}.self_attn.out_proj.{p}"]
        m[f"{ours}.ffn.w1.{p}"] = [f"{hf}.fc1.{p}"]
        m[f"{ours}.ffn.w2.{p}"] = [f"{hf}.fc2.{p}"]
        for our_norm, hf_norm in norms.items():
            m[f"{ours}.{our_norm}.{p}"] = [f"{hf}.{hf_norm}.{p}"]
        if cross:
            m[f"{ours}.cross_attn.q.{p}"] = [f"{hf}.encoder_attn.q_proj.{p}"]
            m[f"{ours}.cross_attn.kv.{p}"] = [f"{hf}.encoder_attn.k_proj.{p}", f"{hf}.encoder_attn.v_proj.{p}"]
            m[f"{ours}.cross_attn.out.{p}"] = [f"{hf}.encoder_attn.out_proj.{p}"]
            m[f"{ours}.cross_norm.{p}"] = [f"{hf}.encoder_attn_layer_norm.{p}"]
    return m


def tensor_map(cfg: ModelConfig) -> dict[str, list[str]]:
    """Every layer's tensors, and the stacks' LayerNorms: our name -> the Hugging Face tensors concatenated
    (along dim 0) to make it."""
    mapping: dict[str, list[str]] = {}
    for i in range(cfg.N):
        mapping.update(_layer_map("encoder", i, cross=False))
    for i in range(cfg.n_dec):
        mapping.update(_layer_map("decoder", i, cross=True))
    for p in PAIR:
        if cfg.embed_norm:  # BART's and mBART's layernorm_embedding
            mapping[f"src_embed.norm.{p}"] = [f"model.encoder.layernorm_embedding.{p}"]
            mapping[f"tgt_embed.norm.{p}"] = [f"model.decoder.layernorm_embedding.{p}"]
        if cfg.norm == "pre":  # the pre-LN stacks' final LayerNorms
            mapping[f"encoder_norm.{p}"] = [f"model.encoder.layer_norm.{p}"]
            mapping[f"decoder_norm.{p}"] = [f"model.decoder.layer_norm.{p}"]
    return mapping


class Weights:
    """The tensors of a Hugging Face checkpoint: one model.safetensors, or the shards that its index
    (model.safetensors.index.json, as save_pretrained writes a model over its max_shard_size) names; each file is
    opened once, and a tensor is read only when asked for."""

    def __init__(self, path: Path) -> None:
        self.path = path  # the file or the index: what an error names when a tensor is missing
        self._stack = ExitStack()
        self._where: dict[str, tuple[Any, Path]] = {}

    def __enter__(self) -> Weights:
        files = read_index(self.path) if self.path.name == INDEX_FILE else {}
        try:
            if files:
                opened = {file: self._open(file) for file in sorted(set(files.values()))}
                self._where = {name: (opened[file], file) for name, file in files.items()}
            else:
                handle = self._open(self.path)
                self._where = {name: (handle, self.path) for name in handle.keys()}  # noqa: SIM118 - no dict
        except BaseException:
            self._stack.close()  # the shards opened before the one that failed
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _open(self, file: Path) -> Any:
        check_readable(file)
        if not file.is_file():
            raise CheckpointError(file, f"shard is missing (named in {INDEX_FILE})")
        try:
            return self._stack.enter_context(safe_open(str(file), framework="pt", device="cpu"))
        except SafetensorError as e:
            raise CheckpointError(file, f"not a valid safetensors file ({e})") from e

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def get(self, name: str) -> torch.Tensor:
        handle, file = self._where[name]
        try:
            tensor: torch.Tensor = handle.get_tensor(name)
        except SafetensorError as e:  # an index that places a tensor in a shard without it
            raise CheckpointError(file, f"has no tensor {name} ({INDEX_FILE} places it there; {e})") from e
        return tensor

    def first(self, names: list[str]) -> torch.Tensor:
        """The first of names present."""
        for name in names:
            if name in self:
                return self.get(name)
        raise CheckpointError(self.path, f"none of the tensors {names} is present")


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object file; CheckpointError naming it when it is missing, unreadable, not JSON or not an object."""
    check_readable(path)
    if not path.is_file():
        raise CheckpointError(path, f"{what} is missing")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(path, f"not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(path, "must hold a JSON object")
    return data


def read_index(index: Path) -> dict[str, Path]:
    """Tensor name -> its shard, from a sharded checkpoint's index; shards are files beside it, by plain name."""
    weight_map = read_json(index, "weights index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(index, "has no weight_map of tensor names to shard files")
    files: dict[str, Path] = {}
    for name, file in weight_map.items():
        if not isinstance(file, str) or not file or Path(file).name != file or file in (".", ".."):
            raise CheckpointError(index, f"{name}: {file!r} is not a shard file's name beside the index")
        files[name] = index.parent / file
    return files


def weights_file(hf_dir: Path) -> Path:
    """A Hugging Face directory's weights: model.safetensors, else the index of its shards; CheckpointError when
    neither is there (a pickle beside them is never read)."""
    single, index = hf_dir / "model.safetensors", hf_dir / INDEX_FILE
    for path in (single, index):
        check_readable(path)
    if single.is_file() or not index.is_file():
        if not single.is_file():
            raise missing_weights(single)
        return single
    return index


def _tensors(w: Weights, cfg: ModelConfig, position_offset: int) -> Iterator[tuple[str, torch.Tensor]]:
    """Our name and tensor, each read when its turn comes: no second copy of the whole model is held."""
    for name, parts in tensor_map(cfg).items():
        yield name, torch.cat([w.first([hf]) for hf in parts])
    yield "src_embed.tokens.weight", w.first(["model.shared.weight", "model.encoder.embed_tokens.weight"])
    if not cfg.share_embeddings:
        yield "tgt_embed.tokens.weight", w.first(["model.decoder.embed_tokens.weight"])
    if not cfg.tie_output:
        yield "out_proj.weight", w.first(["lm_head.weight"])
    if cfg.logits_bias:
        yield "logits_bias", w.first(["final_logits_bias"]).reshape(-1)
    if cfg.positions == "learned":  # BART's tables start position_offset rows in (its padding positions)
        for ours, side in (("src_embed", "encoder"), ("tgt_embed", "decoder")):
            table = w.first([f"model.{side}.embed_positions.weight"])
            yield f"{ours}.positions.weight", table[position_offset : position_offset + cfg.max_len]


def convert_weights(cfg: ModelConfig, path: Path, position_offset: int = 0) -> Transformer:
    """A Transformer filled from a Hugging Face model.safetensors or its shards' index (weights_file); learned
    position tables are read from row position_offset on (BART's 2)."""
    model = Transformer(cfg)
    # Our layers live in ModuleLists named encoder / decoder: "encoder.0.x" is "encoder.0.x" already.
    ours = dict(model.named_parameters())
    filled: set[str] = set()
    with Weights(path) as w, torch.no_grad():
        for name, tensor in _tensors(w, cfg, position_offset):
            if ours[name].shape != tensor.shape:
                raise CheckpointError(path, f"{name}: shape {tuple(tensor.shape)}, expected {tuple(ours[name].shape)}")
            ours[name].copy_(tensor)
            filled.add(name)
    missing = sorted(set(ours) - filled)
    if missing:
        raise CheckpointError(path, f"no tensors for {missing[:5]}")
    return model
