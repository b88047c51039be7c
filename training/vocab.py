"""SentencePiece training: BPE or unigram, one shared or two separate vocabularies."""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sentencepiece as spm

from model.tokenizer import SpecialIds, TokenizerConfig
from training.data import Pair


@dataclass(frozen=True)
class VocabConfig:
    """The subword vocabulary; the paper uses a shared BPE vocabulary of about 37,000 (§5.1)."""

    size: int = 8000
    algorithm: Literal["bpe", "unigram"] = "bpe"  # SentencePiece's model_type
    shared: bool = True
    character_coverage: float = 1.0
    max_sentences: int = 1_000_000  # sampled for training the model

    def __post_init__(self) -> None:
        if self.size < 16:
            raise ValueError("vocabulary size must be at least 16")
        if self.algorithm not in ("bpe", "unigram"):
            raise ValueError(f"vocabulary algorithm must be 'bpe' or 'unigram', got {self.algorithm!r}")


def _train(texts: Sequence[str], prefix: Path, cfg: VocabConfig, seed: int) -> Path:
    special = SpecialIds()
    spm.set_random_generator_seed(seed)  # the same corpus gives the same vocabulary
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=cfg.size,
        model_type=cfg.algorithm,
        character_coverage=cfg.character_coverage,
        pad_id=special.pad,
        unk_id=special.unk,
        bos_id=special.bos,
        eos_id=special.eos,
        hard_vocab_limit=False,
        minloglevel=2,
        input_sentence_size=cfg.max_sentences,
        shuffle_input_sentence=True,
    )
    path = prefix.with_suffix(".model")
    path.write_bytes(model.getvalue())
    return path


def train_vocab(pairs: Sequence[Pair], out_dir: str | Path, cfg: VocabConfig, seed: int = 0) -> TokenizerConfig:
    """Train the SentencePiece model(s) on the training pairs and write them into out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    sample = list(pairs) if len(pairs) <= cfg.max_sentences else rng.sample(list(pairs), cfg.max_sentences)
    if cfg.shared:
        texts = [p.source for p in sample] + [p.target for p in sample]
        name = _train(texts, out_dir / "spm", cfg, seed).name
        return TokenizerConfig(source_model=name, target_model=name)
    source = _train([p.source for p in sample], out_dir / "source", cfg, seed).name
    target = _train([p.target for p in sample], out_dir / "target", cfg, seed).name
    return TokenizerConfig(source_model=source, target_model=target)
