"""SentencePiece tokenization with one shared or two separate vocabularies; special ids live here."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import sentencepiece as spm

from model.config import ModelConfig
from model.errors import CheckpointError, ConfigError, InputError, UnknownLanguageError, check_readable
from model.language_codes import matching, public_codes

TokenizerKind = Literal["sentencepiece", "bpe"]
SourceLanguage = Literal["none", "prefix"]
TargetLanguage = Literal["none", "forced", "source"]


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
        """Ids that search never emits: padding and the decoder's start symbol, unless that is EOS (BART, M2M100)."""
        return tuple(sorted({self.pad, self.decoder_start} - {self.eos}))


@dataclass(frozen=True)
class TokenizerConfig:
    """Which files in a checkpoint hold the tokenizer, and how pieces map to ids."""

    # "sentencepiece": SentencePiece models (every family but BART); "bpe": a byte-level BPE tokenizer.json that
    # the tokenizers library reads (BART's), source_model naming it

    source_model: str = "spm.model"
    target_model: str = "spm.model"  # the same file when the vocabulary is shared
    # Marian checkpoints map SentencePiece pieces to ids through JSON vocabularies instead of the
    # SentencePiece ids; None means the SentencePiece ids are the model's ids.
    source_vocab: str | None = None
    target_vocab: str | None = None
    special: SpecialIds = field(default_factory=SpecialIds)
    kind: TokenizerKind = "sentencepiece"
    # A multilingual model's language tokens, by the codes it knows: "de" -> "__de__" (M2M100), "deu_Latn" ->
    # "deu_Latn" (NLLB), "deu" -> ">>deu<<" (multilingual Marian). Empty for a model of one language pair.
    languages: dict[str, str] = field(default_factory=dict)
    source_language: SourceLanguage = "none"  # "prefix": the source's language token starts the source
    # "forced": the target's language token is the output's first (M2M100, NLLB, mBART-50); "source": it starts
    # the source (multilingual Marian)
    target_language: TargetLanguage = "none"
    source_prefix: tuple[str, ...] = ()  # pieces before every source (BART's <s>)
    target_prefix: tuple[str, ...] = ()  # pieces every output starts with, forced (BART's <s>)

    def __post_init__(self) -> None:
        if self.kind not in ("sentencepiece", "bpe"):
            raise ConfigError(f"tokenizer type must be sentencepiece or bpe, got {self.kind!r}")
        if self.kind == "bpe" and not self.shared:
            raise ConfigError("a byte-level BPE tokenizer is one file for source and target")
        if self.source_language not in ("none", "prefix") or self.target_language not in ("none", "forced", "source"):
            raise ConfigError(f"bad language placement {self.source_language!r}, {self.target_language!r}")
        if (self.source_language != "none" or self.target_language != "none") and not self.languages:
            raise ConfigError("language tokens placed but no languages given")

    @property
    def shared(self) -> bool:
        return self.source_model == self.target_model and self.source_vocab == self.target_vocab

    def files(self) -> list[str]:
        names = [self.source_model, self.target_model, self.source_vocab, self.target_vocab]
        return sorted({n for n in names if n is not None})

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "source_model": self.source_model,
            "target_model": self.target_model,
            "source_vocab": self.source_vocab,
            "target_vocab": self.target_vocab,
            "special": self.special.__dict__.copy(),
            **(
                {"languages": self.languages, "source_language": self.source_language}
                | {"target_language": self.target_language}
                if self.languages
                else {}
            ),
            **({"source_prefix": list(self.source_prefix)} if self.source_prefix else {}),
            **({"target_prefix": list(self.target_prefix)} if self.target_prefix else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenizerConfig:
        data = dict(data)
        data["kind"] = data.pop("type", "sentencepiece")
        try:
            special = SpecialIds(**data.pop("special", {}))
            for name in ("source_prefix", "target_prefix"):
                data[name] = tuple(data.get(name, ()))
            return cls(special=special, **data)
        except TypeError as e:
            raise ConfigError(f"bad tokenizer config: {e}") from e


LANGUAGE_CODE = re.compile(r"^\s*(>>[^<>\s]+<<)\s*")  # Marian's target-language token, e.g. ">>fra<<"


def check_unicode(text: str) -> None:
    """InputError for text SentencePiece cannot take: a lone surrogate is not a character. One of U+DC80-U+DCFF
    is how Python's surrogateescape keeps a byte that is not UTF-8 (`transformer translate` reads stdin so): the
    message names the byte too."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        byte = (
            f" (what byte 0x{code - 0xDC00:02X} becomes in input that is not UTF-8)" if 0xDC80 <= code <= 0xDCFF else ""
        )
        raise InputError(f"invalid Unicode: a lone surrogate U+{code:04X} at character {e.start}{byte}") from None


class _Pieces:
    """What both kinds of tokenizer side share: the pieces by id, and <unk>'s id."""

    pieces: list[str]
    unk: int

    def __len__(self) -> int:
        return len(self.pieces)

    def piece(self, i: int) -> str:
        """The piece of id i; <unk>'s for an id past the vocabulary (a model may have more embeddings: M2M100)."""
        return self.pieces[i] if i < len(self.pieces) else self.pieces[self.unk]


class _Side(_Pieces):
    """One side's SentencePiece model plus its optional piece -> id vocabulary."""

    def __init__(self, directory: Path, model_file: str, vocab_file: str | None, unk: int) -> None:
        self.sp = load_sentencepiece(directory / model_file)
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
        return str(self.sp.decode_pieces([self.piece(i) for i in ids]))


@dataclass(frozen=True)
class Languages:
    """The ids one request's sources and outputs carry for its language pair (TokenizerConfig.languages)."""

    source: tuple[int, ...] = ()  # before the source text
    target: tuple[int, ...] = ()  # every output's first ids, forced (DecodingConfig.target_prefix)


NO_LANGUAGES = Languages()  # a model of one language pair, with no fixed prefixes


class _ByteLevel(_Pieces):
    """A byte-level BPE tokenizer (BART's), read by the tokenizers library from a tokenizer.json: _Side's
    interface. Its pieces are bytes written as characters, a word's first starting with Ġ (a space)."""

    def __init__(self, path: Path, unk: int) -> None:
        from tokenizers import Tokenizer as Bpe

        check_readable(path)
        if not path.is_file():
            raise CheckpointError(path, "tokenizer file is missing")
        try:
            self.bpe = Bpe.from_file(str(path))
        except Exception as e:  # the library raises its own exception type for a malformed file
            raise CheckpointError(path, f"not a valid tokenizer.json ({str(e)[:200]})") from e
        vocab = self.bpe.get_vocab(with_added_tokens=True)
        self.pieces = [""] * (max(vocab.values()) + 1)
        for piece, i in vocab.items():
            self.pieces[i] = piece
        self.unk = unk

    def encode(self, text: str) -> list[str]:
        check_unicode(text)
        return list(self.bpe.encode(text, add_special_tokens=False).tokens)

    def to_ids(self, pieces: list[str]) -> list[int]:
        ids = (self.bpe.token_to_id(p) for p in pieces)
        return [self.unk if i is None else i for i in ids]

    def decode(self, ids: list[int]) -> str:
        return str(self.bpe.decode(ids, skip_special_tokens=False))


class Tokenizer:
    """Turns source text into ids (pieces plus EOS) and target ids back into text."""

    def __init__(self, directory: str | Path, cfg: TokenizerConfig) -> None:
        directory = Path(directory)
        self.cfg = cfg
        self.special = cfg.special
        self.source: _Side | _ByteLevel
        self.target: _Side | _ByteLevel
        if cfg.kind == "bpe":
            self.source = self.target = _ByteLevel(directory / cfg.source_model, cfg.special.unk)
        else:
            self.source = _Side(directory, cfg.source_model, cfg.source_vocab, cfg.special.unk)
            self.target = (
                self.source if cfg.shared else _Side(directory, cfg.target_model, cfg.target_vocab, cfg.special.unk)
            )
        self.word_mark = "Ġ" if cfg.kind == "bpe" else "▁"  # the mark of a piece that starts a word
        # By the model's own codes, and by the ISO 639-1 code of each language that has one (language_codes).
        self.public = public_codes(list(cfg.languages))  # own code -> the code users name it by
        self.own_codes = {code: code for code in cfg.languages} | {p: own for own, p in self.public.items()}
        ids = {own: self._token_id(self.source, token) for own, token in cfg.languages.items()}
        self.language_ids = {code: ids[own] for code, own in self.own_codes.items()}
        # The fixed prefixes (BART's <s>), the same for every request.
        self.fixed = Languages(
            tuple(self.source.to_ids(list(cfg.source_prefix))),
            tuple(self._token_id(self.target, piece) for piece in cfg.target_prefix),
        )
        target_language_ids = {self._token_id(self.target, t) for t in cfg.languages.values()}
        special = cfg.special
        self.hidden = {special.pad, special.eos, special.bos, special.decoder_start} | target_language_ids
        self.hidden |= set(self.fixed.target)

    @property
    def multilingual(self) -> bool:
        return bool(self.language_ids)

    def _token_id(self, side: _Side | _ByteLevel, piece: str) -> int:
        """The id of a special piece (a language token), which the vocabulary must hold."""
        (i,) = side.to_ids([piece])
        if i == self.special.unk and piece != side.pieces[self.special.unk]:
            raise CheckpointError(self.cfg.source_vocab or self.cfg.source_model, f"the vocabulary has no {piece!r}")
        return i

    def languages(self, source: str | None, target: str | None) -> Languages:
        """The language ids of a request from source to target (codes as TokenizerConfig.languages has them);
        UnknownLanguageError for a code the model does not know, or none where the model needs one."""
        cfg = self.cfg
        src = [self._language("source", source)] if cfg.source_language == "prefix" else []
        tgt = self._language("target", target) if cfg.target_language != "none" else None
        if cfg.target_language == "source" and tgt is not None:
            src.insert(0, tgt)
        forced = (tgt,) if cfg.target_language == "forced" and tgt is not None else ()
        return Languages(self.fixed.source + tuple(src), self.fixed.target + forced)

    def _language(self, side: str, code: str | None) -> int:
        own = None if code is None else self.own_code(code)
        if own is None:
            raise UnknownLanguageError(side, code, sorted(self.public.values()))
        return self.language_ids[own]

    def iso_code(self, code: str | None) -> str | None:
        """The ISO 639-1 code of a language named by the model's own code or by its ISO one, which sentence rules
        go by (model.segment): "eng_Latn" is "en"; None where the language has none. A model of one pair names
        its languages as they are."""
        if code is None or not self.multilingual:
            return code
        own = self.own_code(code)
        public = None if own is None else self.public[own]
        return public if public is not None and len(public) == 2 else None

    def own_code(self, code: str) -> str | None:
        """The model's own code for a language named by its own or its ISO 639-1 code, in any case, or by a BCP 47
        tag of one of its languages and scripts ("en-US", "zh-TW": language_codes.matching); None if it has none."""
        found = matching(code, self.own_codes)
        return None if found is None else self.own_codes[found]

    @functools.cached_property
    def source_characters(self) -> frozenset[str]:
        """Every character of the source vocabulary's pieces: a character not among them is unknown to the model."""
        return frozenset("".join(self.source.pieces))

    def readable(self, character: str) -> bool:
        """Whether the model reads this character (model.protect keeps a word with one it does not); a byte-level
        BPE reads every one."""
        return self.cfg.kind == "bpe" or character in self.source_characters or character.isspace()

    def source_pieces(self, text: str) -> list[str]:
        return self.source.encode(text) + [self.source.pieces[self.special.eos]]

    def encode_source(self, text: str, prefix: tuple[int, ...] = ()) -> list[int]:
        """Source ids of text after prefix (Languages.source), ending in EOS."""
        return [*prefix, *self.source.to_ids(self.source.encode(text)), self.special.eos]

    def source_ids(self, text: str, model: ModelConfig, truncate: bool, prefix: tuple[int, ...] = ()) -> list[int]:
        """Source ids of text as the model's encoder takes them (ModelConfig.source_ids: its length limit, and
        the first tokens of a document for a summarizer that reads only those), after prefix (Languages.source)."""
        return model.source_ids(self.encode_source(text, prefix), self.special.eos, truncate)

    def encode_target(self, text: str) -> list[int]:
        """Target ids of text, ending in EOS (the decoder's training labels)."""
        return self.target.to_ids(self.target.encode(text)) + [self.special.eos]

    def target_pieces(self, ids: list[int]) -> list[str]:
        return [self.target.piece(i) for i in ids]

    def decode_target(self, ids: list[int]) -> str:
        """Text of target ids, special tokens left out."""
        return self.target.decode([i for i in ids if i not in self.hidden])


def load_sentencepiece(path: Path) -> spm.SentencePieceProcessor:
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
