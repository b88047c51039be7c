"""Weights of Hugging Face encoder-decoder checkpoints (Marian, M2M100, NLLB, mBART, BART, Pegasus) in ours.

The families name their tensors alike (BART's layout): `model.{encoder,decoder}.layers.{i}.self_attn.q_proj`, `fc1`,
`final_layer_norm`, `encoder_attn`...; what differs (embedding LayerNorms, final LayerNorms, learned positions
with an offset, a final logits bias) follows the ModelConfig switches that the import set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from model.config import ModelConfig
from model.errors import CheckpointError
from model.transformer import Transformer

PAIR = ("weight", "bias")


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


def _first(f: Any, names: list[str], path: Path) -> torch.Tensor:
    for name in names:
        if name in f.keys():  # noqa: SIM118 - a safetensors handle is no dict
            tensor: torch.Tensor = f.get_tensor(name)
            return tensor
    raise CheckpointError(path, f"none of the tensors {names} is present")


def _tensors(f: Any, cfg: ModelConfig, path: Path, position_offset: int) -> dict[str, torch.Tensor]:
    """Our name -> tensor, read from an open safetensors file."""
    tensors = {name: torch.cat([_first(f, [hf], path) for hf in parts]) for name, parts in tensor_map(cfg).items()}
    shared = ["model.shared.weight", "model.encoder.embed_tokens.weight"]
    tensors["src_embed.tokens.weight"] = _first(f, shared, path)
    if not cfg.share_embeddings:
        tensors["tgt_embed.tokens.weight"] = _first(f, ["model.decoder.embed_tokens.weight"], path)
    if not cfg.tie_output:
        tensors["out_proj.weight"] = _first(f, ["lm_head.weight"], path)
    if cfg.logits_bias:
        tensors["logits_bias"] = _first(f, ["final_logits_bias"], path).reshape(-1)
    if cfg.positions == "learned":  # BART's tables start position_offset rows in (its padding positions)
        for ours, side in (("src_embed", "encoder"), ("tgt_embed", "decoder")):
            table = _first(f, [f"model.{side}.embed_positions.weight"], path)
            tensors[f"{ours}.positions.weight"] = table[position_offset : position_offset + cfg.max_len]
    return tensors


def convert_weights(cfg: ModelConfig, path: Path, position_offset: int = 0) -> Transformer:
    """A Transformer filled from a Hugging Face model.safetensors; learned position tables are read from row
    position_offset on (BART's 2)."""
    model = Transformer(cfg)
    ours = dict(model.named_parameters())
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            tensors = _tensors(f, cfg, path, position_offset)
    except SafetensorError as e:
        raise CheckpointError(path, f"not a valid safetensors file ({e})") from e
    # Our layers live in ModuleLists named encoder / decoder: "encoder.0.x" is "encoder.0.x" already.
    missing = sorted(set(ours) - set(tensors))
    if missing:
        raise CheckpointError(path, f"no tensors for {missing[:5]}")
    with torch.no_grad():
        for name, tensor in tensors.items():
            if ours[name].shape != tensor.shape:
                raise CheckpointError(path, f"{name}: shape {tuple(tensor.shape)}, expected {tuple(ours[name].shape)}")
            ours[name].copy_(tensor)
    return model
