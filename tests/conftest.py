"""Shared builders and fixtures: generated text, SentencePiece models trained on the fly, tiny random models.

Nothing is downloaded: every file a test needs is made here, in pytest's temporary directories.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sentencepiece as spm
import torch
from torch import Tensor, nn

from model.checkpoint import CheckpointMeta, Task, save_checkpoint
from model.config import ModelConfig
from model.layers import sinusoid_table
from model.tokenizer import SpecialIds, TokenizerConfig
from model.transformer import Transformer


def pytest_configure(config: pytest.Config) -> None:
    """The embedded queue's workers as threads of the test's process unless a test asks for child processes
    (tests/service/test_processes.py): hundreds of servers start here, and a child process takes seconds to
    start, while many tests reach into the worker beside the API."""
    os.environ.setdefault("TRANSFORMER_WORKER_PROCESSES", "false")


SPECIAL = SpecialIds()  # pad 0, unk 1, bos 2 (= decoder start), eos 3
SPM_VOCAB = 160
SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "sa",
    "ti",
    "vo",
    "ze",
    "pa",
    "do",
    "gu",
    "fi",
    "he",
    "ja",
    "bo",
    "an",
    "el",
    "is",
    "or",
    "um",
    "ye",
    "wa",
    "qi",
)


# -- text ----------------------------------------------------------------------------------------


def make_words(n: int = 300, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(n)]


def make_sentences(n: int, seed: int = 0, min_words: int = 3, max_words: int = 15) -> list[str]:
    """n sentences of made-up words, the same for the same seed."""
    rng, words = random.Random(seed), make_words()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(min_words, max_words))) for _ in range(n)]


def train_sentencepiece(directory: Path, prefix: str, vocab_size: int, **ids: int) -> Path:
    """Train a unigram SentencePiece model on generated text; returns directory/prefix.model (and .vocab)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = directory / f"{prefix}.txt"
    text.write_text("\n".join(make_sentences(2000, seed=7)) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(directory / prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
        **ids,
    )
    return directory / f"{prefix}.model"


# -- models --------------------------------------------------------------------------------------


def tiny_config(vocab_size: int, tgt_vocab_size: int | None = None, **overrides: Any) -> ModelConfig:
    return ModelConfig.from_preset("tiny", vocab_size, tgt_vocab_size, **overrides)


@torch.no_grad()
def randomize_(model: nn.Module, seed: int, std: float = 0.2) -> nn.Module:
    """Give every parameter random values (LayerNorms near identity), so that nothing is trivially zero
    or one and every input, position and option visibly changes the outputs."""
    gen = torch.Generator().manual_seed(seed)
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            noise = torch.randn(p.shape, generator=gen)
            if isinstance(module, nn.LayerNorm):
                p.copy_((1.0 if name == "weight" else 0.0) + 0.1 * noise)
            else:
                p.copy_(std * noise)
    return model


def build_model(cfg: ModelConfig, seed: int = 0, std: float | None = 0.2) -> Transformer:
    """A Transformer in eval mode; std=None keeps the paper's initialisation, else randomize_(std)."""
    torch.manual_seed(seed)
    model = Transformer(cfg)
    if std is not None:
        randomize_(model, seed, std)
    return model.eval()


def pad_ids(seqs: list[list[int]], pad: int = SPECIAL.pad) -> tuple[Tensor, Tensor]:
    """Right-pad id lists: (B, S) ids and a (B, S) bool mask, True on tokens."""
    S = max(len(s) for s in seqs)
    src = torch.tensor([s + [pad] * (S - len(s)) for s in seqs])
    mask = torch.tensor([[True] * len(s) + [False] * (S - len(s)) for s in seqs])
    return src, mask


def random_source(gen: torch.Generator, length: int, vocab_size: int, eos: int = SPECIAL.eos) -> list[int]:
    """length - 1 ordinary ids (no special ids) then EOS."""
    ids = torch.randint(4, vocab_size, (length - 1,), generator=gen).tolist()
    return ids + [eos]


def save_random_checkpoint(
    directory: Path,
    spm_dir: Path,
    vocab_size: int,
    seed: int = 0,
    std: float | None = 0.2,
    task: Task = "translation",
    source_lang: str | None = None,
    target_lang: str | None = None,
    **overrides: Any,
) -> Path:
    """A tiny random model saved with the shared SentencePiece model of spm_dir."""
    model = build_model(tiny_config(vocab_size, **overrides), seed=seed, std=std)
    meta = CheckpointMeta(
        model=model.cfg,
        tokenizer=TokenizerConfig(source_model="spm.model", target_model="spm.model"),
        task=task,
        source_lang=source_lang,
        target_lang=target_lang,
    )
    return save_checkpoint(directory, model, meta, tokenizer_dir=spm_dir)


# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding spm.model, trained with our special ids (pad 0, unk 1, bos 2, eos 3)."""
    directory = tmp_path_factory.mktemp("spm")
    train_sentencepiece(
        directory, "spm", SPM_VOCAB, pad_id=SPECIAL.pad, unk_id=SPECIAL.unk, bos_id=SPECIAL.bos, eos_id=SPECIAL.eos
    )
    return directory


@pytest.fixture(scope="session")
def vocab_size(spm_dir: Path) -> int:
    return int(spm.SentencePieceProcessor(model_file=str(spm_dir / "spm.model")).get_piece_size())


@pytest.fixture(scope="session")
def checkpoint_dir(tmp_path_factory: pytest.TempPathFactory, spm_dir: Path, vocab_size: int) -> Path:
    """A tiny random checkpoint (max_len 64) whose outputs depend on its input. Do not modify it."""
    return save_random_checkpoint(tmp_path_factory.mktemp("ckpt"), spm_dir, vocab_size, seed=3, max_len=64)


@pytest.fixture(scope="session")
def sentences() -> list[str]:
    return make_sentences(40, seed=11, min_words=1, max_words=12)


# -- a Hugging Face Marian model, built and saved locally ----------------------------------------


@dataclass
class MarianFixture:
    hf_dir: Path  # what MarianMTModel.save_pretrained and MarianTokenizer.save_pretrained wrote
    model: Any  # the MarianMTModel, in eval mode
    tokenizer: Any  # the MarianTokenizer
    vocab_size: int
    pad: int
    eos: int


# How the random Marian model is shaped so that beam search comparisons mean something (see test_marian.py):
# hypotheses must end by EOS well before the length limit, and different sources must give different outputs.
MARIAN_INIT_STD = 0.05
MARIAN_CROSS_GAIN = 2.0  # decoder cross-attention value/output projections scaled up: outputs follow the source
MARIAN_EOS_NORM = 8.0  # EOS embedding along a direction of growing positions: P(EOS) rises over the steps
MARIAN_EOS_BIAS = -1.0
MARIAN_BIAS_STD = 0.3  # final_logits_bias is random, so that importing it matters


def eos_direction(d_model: int, max_len: int = 64) -> Tensor:
    """A unit vector v with <PE(t), v> increasing in t for t up to about 15 (Marian's sin|cos layout):
    PE(10) - PE(0), restricted to the slow frequencies (i >= 8)."""
    pe = sinusoid_table(max_len, d_model, "halves")
    v = pe[10] - pe[0]
    half = d_model // 2
    v[:8] = 0
    v[half : half + 8] = 0
    return v / v.norm()


def build_marian_dir(directory: Path, seed: int = 0) -> MarianFixture:
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    work = directory / "spm"
    model_file = train_sentencepiece(work, "m", 120, eos_id=0, unk_id=1, bos_id=-1, pad_id=-1)
    pieces = [line.split("\t")[0] for line in (work / "m.vocab").read_text(encoding="utf-8").splitlines()]
    vocab = {piece: i for i, piece in enumerate(pieces)}
    vocab["<pad>"] = len(pieces)
    V, pad, eos = len(vocab), len(pieces), 0
    src = directory / "tokenizer_src"
    src.mkdir()
    shutil.copyfile(model_file, src / "source.spm")
    shutil.copyfile(model_file, src / "target.spm")
    (src / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses."
        tokenizer = MarianTokenizer(
            source_spm=str(src / "source.spm"), target_spm=str(src / "target.spm"), vocab=str(src / "vocab.json")
        )
    torch.manual_seed(seed)
    config = MarianConfig(
        vocab_size=V,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_position_embeddings=128,
        pad_token_id=pad,
        eos_token_id=eos,
        decoder_start_token_id=pad,
        activation_function="swish",
        scale_embedding=True,
        init_std=MARIAN_INIT_STD,
    )
    model = MarianMTModel(config).eval()
    with torch.no_grad():
        for layer in model.model.decoder.layers:
            layer.encoder_attn.v_proj.weight.mul_(MARIAN_CROSS_GAIN)
            layer.encoder_attn.out_proj.weight.mul_(MARIAN_CROSS_GAIN)
        model.final_logits_bias.normal_(0.0, MARIAN_BIAS_STD)
        model.final_logits_bias[0, eos] = MARIAN_EOS_BIAS
        model.model.shared.weight[eos] = MARIAN_EOS_NORM * eos_direction(config.d_model)
    hf_dir = directory / "hf"
    tokenizer.save_pretrained(str(hf_dir))
    model.save_pretrained(str(hf_dir))
    return MarianFixture(hf_dir, model, tokenizer, V, pad, eos)


@pytest.fixture(scope="session")
def marian(tmp_path_factory: pytest.TempPathFactory) -> MarianFixture:
    return build_marian_dir(tmp_path_factory.mktemp("marian"))


@pytest.fixture(scope="session")
def marian_imported(tmp_path_factory: pytest.TempPathFactory, marian: MarianFixture) -> Path:
    """Our checkpoint directory, imported from the Marian fixture."""
    from model.marian import import_marian

    return import_marian(marian.hf_dir, tmp_path_factory.mktemp("marian_ours") / "ckpt")
