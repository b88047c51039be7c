"""SentencePiece tokenization with one shared or two separate vocabularies; special ids live here."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sentencepiece as spm

from model.config import ModelConfig
from model.errors import CheckpointError, ConfigError, InputError, check_readable


@dataclass(frozen=True)
class SpecialIds:
    """Ids of the special tokens. The defaults are those our own SentencePiece models are trained with."""

    pad: int = 0
    unk: int = 1
    bos: int = 2
    eos: int = 3
    decoder_start: int = 2  # the first decoder input; Marian models start from pad instead of bos

    @property
    def never_generated(self) -> tuple[int, ...]:
        """Ids that search never emits: padding and the decoder's start symbol."""
        return tuple(sorted({self.pad, self.decoder_start}))


@dataclass(frozen=True)
class TokenizerConfig:
    """Which files in a checkpoint hold the tokenizer, and how pieces map to ids."""

    source_model: str = "spm.model"
    target_model: str = "spm.model"  # the same file when the vocabulary is shared
    # Marian checkpoints map SentencePiece pieces to ids through JSON vocabularies instead of the
    # SentencePiece ids; None means the SentencePiece ids are the model's ids.
    source_vocab: str | None = None
    target_vocab: str | None = None
    special: SpecialIds = field(default_factory=SpecialIds)

    @property
    def shared(self) -> bool:
        return self.source_model == self.target_model and self.source_vocab == self.target_vocab

    def files(self) -> list[str]:
        names = [self.source_model, self.target_model, self.source_vocab, self.target_vocab]
        return sorted({n for n in names if n is not None})

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "sentencepiece",
            "source_model": self.source_model,
            "target_model": self.target_model,
            "source_vocab": self.source_vocab,
            "target_vocab": self.target_vocab,
            "special": self.special.__dict__.copy(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenizerConfig:
        data = dict(data)
        if data.pop("type", "sentencepiece") != "sentencepiece":
            raise ConfigError("only SentencePiece tokenizers are supported")
        try:
            special = SpecialIds(**data.pop("special", {}))
            return cls(special=special, **data)
        except TypeError as e:
            raise ConfigError(f"bad tokenizer config: {e}") from e


LANGUAGE_CODE = re.compile(r"^\s*(>>[^<>\s]+<<)\s*")  # Marian's target-language token, e.g. ">>fra<<"


def check_unicode(text: str) -> None:
    """InputError for text SentencePiece cannot take: a lone surrogate is not a character."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(
            f"invalid Unicode: a lone surrogate U+{ord(text[e.start]):04X} at character {e.start}"
        ) from None


class _Side:
    """One side's SentencePiece model plus its optional piece -> id vocabulary."""

    def __init__(self, directory: Path, model_file: str, vocab_file: str | None, unk: int) -> None:
        self.sp = _load_sentencepiece(directory / model_file)
        self.vocab: dict[str, int] | None = None
        self.pieces: list[str]
        if vocab_file is None:
            self.pieces = [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]
        else:
            self.vocab = _load_vocab(directory / vocab_file)
            self.pieces = [""] * (max(self.vocab.values()) + 1)
            for piece, i in self.vocab.items():
                self.pieces[i] = piece
        self.unk = unk

    def __len__(self) -> int:
        return len(self.pieces)

    def encode(self, text: str) -> list[str]:
        check_unicode(text)
        code = LANGUAGE_CODE.match(text) if self.vocab is not None else None
        prefix = [code.group(1)] if code else []
        rest = text[code.end() :] if code else text
        return prefix + list(self.sp.encode(rest, out_type=str))

    def to_ids(self, pieces: list[str]) -> list[int]:
        if self.vocab is None:
            return [self.sp.piece_to_id(p) for p in pieces]
        return [self.vocab.get(p, self.unk) for p in pieces]

    def decode(self, ids: list[int]) -> str:
        if self.vocab is None:
            return str(self.sp.decode(ids))
        return str(self.sp.decode_pieces([self.pieces[i] for i in ids]))


class Tokenizer:
    """Turns source text into ids (pieces plus EOS) and target ids back into text."""

    def __init__(self, directory: str | Path, cfg: TokenizerConfig) -> None:
        directory = Path(directory)
        self.cfg = cfg
        self.special = cfg.special
        self.source = _Side(directory, cfg.source_model, cfg.source_vocab, cfg.special.unk)
        self.target = (
            self.source if cfg.shared else _Side(directory, cfg.target_model, cfg.target_vocab, cfg.special.unk)
        )

    @functools.cached_property
    def source_characters(self) -> frozenset[str]:
        """Every character of the source vocabulary's pieces: a character not among them is unknown to the model."""
        return frozenset("".join(self.source.pieces))

    def readable(self, character: str) -> bool:
        """Whether the model reads this character (model.protect keeps a word with one it does not)."""
        return character in self.source_characters or character.isspace()

    def source_pieces(self, text: str) -> list[str]:
        return self.source.encode(text) + [self.source.pieces[self.special.eos]]

    def encode_source(self, text: str) -> list[int]:
        """Source ids of text, ending in EOS."""
        return self.source.to_ids(self.source.encode(text)) + [self.special.eos]

    def source_ids(self, text: str, model: ModelConfig, truncate: bool) -> list[int]:
        """Source ids of text as the model's encoder takes them (ModelConfig.source_ids: its length limit, and
        the first tokens of a document for a summarizer that reads only those)."""
        return model.source_ids(self.encode_source(text), self.special.eos, truncate)

    def encode_target(self, text: str) -> list[int]:
        """Target ids of text, ending in EOS (the decoder's training labels)."""
        return self.target.to_ids(self.target.encode(text)) + [self.special.eos]

    def target_pieces(self, ids: list[int]) -> list[str]:
        return [self.target.pieces[i] for i in ids]

    def decode_target(self, ids: list[int]) -> str:
        """Text of target ids, special tokens left out."""
        skip = {self.special.pad, self.special.eos, self.special.bos, self.special.decoder_start}
        return self.target.decode([i for i in ids if i not in skip])


def _load_sentencepiece(path: Path) -> spm.SentencePieceProcessor:
    check_readable(path)
    if not path.is_file():
        raise CheckpointError(path, "SentencePiece model file is missing")
    sp = spm.SentencePieceProcessor()
    try:
        sp.load(str(path))
    except (OSError, RuntimeError) as e:
        raise CheckpointError(path, f"not a valid SentencePiece model ({e})") from e
    return sp


def _load_vocab(path: Path) -> dict[str, int]:
    check_readable(path)
    if not path.is_file():
        raise CheckpointError(path, "vocabulary file is missing")
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(path, f"not a valid JSON vocabulary ({e})") from e
    if not isinstance(vocab, dict) or not all(isinstance(i, int) and i >= 0 for i in vocab.values()):
        raise CheckpointError(path, "a vocabulary must map pieces to non-negative integer ids")
    return vocab
