"""What the decode and train benchmarks share: the model shapes, the random OPUS-MT-like Marian config,
and a quiet start."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

SHAPES: dict[str, dict[str, int]] = {
    "small": {"N": 3, "d_model": 256, "d_ff": 1024, "h": 4},
    "base": {"N": 6, "d_model": 512, "d_ff": 2048, "h": 8},
}
EOS, UNK = 0, 1  # Marian's ids; <pad> is the last id (vocab_size - 1) and also the decoder's start symbol


def marian_config(shape: dict[str, int], vocab_size: int, init_std: float, **extra: Any) -> Any:
    """A MarianConfig as OPUS-MT's (swish, scaled embeddings shared by encoder, decoder and output), <pad> last."""
    from transformers import MarianConfig

    pad = vocab_size - 1
    return MarianConfig(
        vocab_size=vocab_size,
        d_model=shape["d_model"],
        encoder_layers=shape["N"],
        decoder_layers=shape["N"],
        encoder_attention_heads=shape["h"],
        decoder_attention_heads=shape["h"],
        encoder_ffn_dim=shape["d_ff"],
        decoder_ffn_dim=shape["d_ff"],
        max_position_embeddings=512,
        activation_function="swish",
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=pad,
        eos_token_id=EOS,
        decoder_start_token_id=pad,
        forced_eos_token_id=EOS,
        init_std=init_std,
        **extra,
    )


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(run: Callable[[argparse.Namespace], dict[str, Any]], args: argparse.Namespace) -> None:
    """Run a benchmark with transformers' warnings, logging and progress bars off; write --json if given."""
    root = str(Path(__file__).resolve().parents[1])
    if root not in sys.path:  # run as a script from a checkout that is not installed
        sys.path.insert(0, root)
    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    summary = run(args)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
