"""Import of Hugging Face Marian (OPUS-MT) checkpoints into our checkpoint format.

What differs from the paper (sin|cos halves, swish, final logits bias, pad as decoder start)
becomes named ModelConfig options; see the notes on the Marian format.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model.checkpoint import CheckpointMeta, save_checkpoint
from model.config import Activation, ModelConfig
from model.errors import CheckpointError, check_readable
from model.hf_weights import convert_weights, weights_file
from model.tokenizer import SpecialIds, TokenizerConfig

ACTIVATIONS: dict[str, Activation] = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}


def activation_of(hf: dict[str, Any], path: Path) -> Activation:
    """The activation of a Hugging Face config of the BART layout (every family we import), checked along with
    the one width its encoder and decoder must share."""
    if hf["encoder_attention_heads"] != hf["decoder_attention_heads"] or hf["encoder_ffn_dim"] != hf["decoder_ffn_dim"]:
        raise CheckpointError(path, "encoder and decoder of different widths are not supported")
    activation = ACTIVATIONS.get(hf.get("activation_function", "gelu"))
    if activation is None:
        raise CheckpointError(path, f"activation {hf.get('activation_function')!r} is not supported")
    return activation


def marian_config(hf: dict[str, Any], path: Path) -> ModelConfig:
    """Our ModelConfig for a Hugging Face MarianConfig dict."""
    if hf.get("model_type") != "marian":
        raise CheckpointError(path, f"model_type is {hf.get('model_type')!r}, not 'marian'")
    if hf.get("normalize_before", False) or hf.get("add_final_layer_norm", False):
        raise CheckpointError(path, "pre-LN Marian variants are not supported")
    activation = activation_of(hf, path)
    vocab = hf["vocab_size"]
    shared = hf.get("share_encoder_decoder_embeddings", True)
    return ModelConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab if shared else hf.get("decoder_vocab_size") or vocab,
        N=hf["encoder_layers"],
        N_dec=hf["decoder_layers"],
        d_model=hf["d_model"],
        d_ff=hf["encoder_ffn_dim"],
        h=hf["encoder_attention_heads"],
        p_drop=float(hf.get("dropout", 0.1)),
        max_len=hf.get("max_position_embeddings", 512),
        activation=activation,
        position_layout="halves",
        scale_embedding=bool(hf.get("scale_embedding", False)),
        share_embeddings=shared,
        tie_output=bool(hf.get("tie_word_embeddings", True)),
        logits_bias=True,
        ln_eps=1e-5,
    )


def import_marian(
    hf_dir: str | Path, out_dir: str | Path, source_lang: str | None = None, target_lang: str | None = None
) -> Path:
    """Convert a saved Hugging Face Marian directory into our checkpoint directory."""
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    for path in (hf_dir, hf_dir / "config.json"):
        check_readable(path)
    weights = weights_file(hf_dir)
    config_path = hf_dir / "config.json"
    try:
        hf = json.loads(config_path.read_text(encoding="utf-8"))
        cfg = marian_config(hf, config_path)
    except FileNotFoundError as e:
        raise CheckpointError(config_path, "config file is missing") from e
    except (json.JSONDecodeError, KeyError) as e:
        raise CheckpointError(config_path, f"not a Marian config ({e!r})") from e
    pad = hf.get("pad_token_id", cfg.tgt_vocab_size - 1)
    special = SpecialIds(
        pad=pad,
        unk=1,
        bos=hf.get("decoder_start_token_id", pad),
        eos=hf.get("eos_token_id", 0),
        decoder_start=hf.get("decoder_start_token_id", pad),
    )
    target_vocab = "target_vocab.json" if (hf_dir / "target_vocab.json").is_file() else "vocab.json"
    tok = TokenizerConfig(
        source_model="source.spm",
        target_model="target.spm",
        source_vocab="vocab.json",
        target_vocab=target_vocab,
        special=special,
    )
    for name in tok.files():
        check_readable(hf_dir / name)
        if not (hf_dir / name).is_file():
            raise CheckpointError(hf_dir / name, "tokenizer file is missing")
    model = convert_weights(cfg, weights)
    langs = _languages(hf_dir)
    meta = CheckpointMeta(
        model=cfg,
        tokenizer=tok,
        task="translation",
        source_lang=source_lang or langs[0],
        target_lang=target_lang or langs[1],
        extra={"imported_from": "marian", "source": str(hf_dir.resolve())},
    )
    return save_checkpoint(out_dir, model, meta, tokenizer_dir=hf_dir)


def _languages(hf_dir: Path) -> tuple[str | None, str | None]:
    """Source and target languages from tokenizer_config.json, when it names them."""
    path = hf_dir / "tokenizer_config.json"
    if not path.is_file():
        return None, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None, None
    return data.get("source_lang"), data.get("target_lang")
