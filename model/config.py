"""Frozen configs for the architecture (§3, Table 3) and for decoding (§6.1)."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from model.errors import ConfigError, InputTooLongError

# The weight types a model loads in, by name, for Translator.load and the service's settings alike: "auto" is
# float32 on the CPU and bfloat16 on CUDA; "int8" runs on the CPU only (model.quantize).
DTYPE_NAMES = ("auto", "float32", "bfloat16", "float16", "int8")
DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")  # a device setting; model.translator checks that it exists

T = TypeVar("T")

Norm = Literal["post", "pre"]
Activation = Literal["relu", "gelu", "swish"]
Positions = Literal["sinusoidal", "learned"]
PositionLayout = Literal["interleaved", "halves", "fairseq"]
LengthPenalty = Literal["gnmt", "average"]


@dataclass(frozen=True)
class ModelConfig:
    """The Transformer's hyper-parameters, named as in Table 3 of the paper."""

    src_vocab_size: int
    tgt_vocab_size: int
    N: int = 6  # encoder layers
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    p_drop: float = 0.1  # residual dropout and dropout on embeddings + positions (§5.4)
    N_dec: int | None = None  # decoder layers; None means N, as in the paper
    max_len: int = 1024  # longest source or target sequence, in tokens
    # Deviations from the paper, each a named option (the paper's choice is the default):
    norm: Norm = "post"  # "pre": LayerNorm before each sub-layer, plus a final LayerNorm per stack
    activation: Activation = "relu"  # OPUS-MT uses "swish"
    positions: Positions = "sinusoidal"  # "learned": a trained table (Table 3, row E)
    position_layout: PositionLayout = "interleaved"  # "halves": Marian's and Pegasus's sin | cos layout;
    # "fairseq": sin | cos at frequencies 10000^(-i / (d_model/2 - 1)), M2M100's and NLLB's
    position_offset: int = 0  # sinusoidal positions start at this row of the table (M2M100: padding index + 1)
    embed_norm: bool = False  # a LayerNorm over embeddings plus positions, before dropout (BART's layernorm_embedding)
    scale_embedding: bool = True  # multiply embeddings by sqrt(d_model) (§3.4)
    share_embeddings: bool = True  # one matrix for source and target embeddings (§3.4)
    tie_output: bool = True  # target embedding doubles as the pre-softmax linear (§3.4)
    logits_bias: bool = False  # Marian's final_logits_bias
    copy: bool = False  # pointer-generator copying from the source (See et al., 2017; model.copy), for summaries
    # Copying favours the source token that follows the last one output (a learnt bonus), so that runs of tokens
    # are copied whole: CopyNet's selective read (Gu et al., 2016, §3.3) in its simplest form. Needs copy.
    copy_follow: bool = False
    # Summaries: the encoder reads a document's first read_first tokens (EOS included) and no more, in training
    # and in use, as See et al. (2017) truncate articles to 400 tokens; 0 reads the whole source.
    read_first: int = 0
    ln_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("src_vocab_size", "tgt_vocab_size", "N", "d_model", "d_ff", "h", "max_len"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.N_dec is not None and self.N_dec < 1:
            raise ConfigError(f"N_dec must be positive, got {self.N_dec}")
        if self.d_model % self.h:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by h ({self.h})")
        if self.d_model % 2:
            raise ConfigError(f"d_model ({self.d_model}) must be even for sinusoidal positions")
        if not 0.0 <= self.p_drop < 1.0:
            raise ConfigError(f"p_drop must be in [0, 1), got {self.p_drop}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                "share_embeddings needs one vocabulary, but src_vocab_size "
                f"({self.src_vocab_size}) != tgt_vocab_size ({self.tgt_vocab_size})"
            )
        if self.read_first != 0 and not 2 <= self.read_first <= self.max_len:
            raise ConfigError(
                f"read_first must be 0 (read all) or from 2 to max_len ({self.max_len}), got {self.read_first}"
            )
        if self.copy and not self.share_embeddings:
            raise ConfigError("copy needs one vocabulary for source and target (share_embeddings)")
        if self.copy_follow and not self.copy:
            raise ConfigError("copy_follow needs copy")
        _check_choice("norm", self.norm, ("post", "pre"))
        _check_choice("activation", self.activation, ("relu", "gelu", "swish"))
        _check_choice("positions", self.positions, ("sinusoidal", "learned"))
        _check_choice("position_layout", self.position_layout, ("interleaved", "halves", "fairseq"))
        if self.position_offset < 0 or (self.position_offset and self.positions != "sinusoidal"):
            raise ConfigError(
                f"position_offset must be 0, or positive with sinusoidal positions, got {self.position_offset}"
            )

    @property
    def d_k(self) -> int:
        """Per-head width d_k = d_v = d_model / h (§3.2.2)."""
        return self.d_model // self.h

    @property
    def n_dec(self) -> int:
        return self.N if self.N_dec is None else self.N_dec

    def read(self, ids: list[int], eos: int) -> list[int]:
        """The source ids (ending in EOS) the encoder reads: the first read_first of them, still ending in EOS."""
        if not self.read_first or len(ids) <= self.read_first:
            return ids
        return [*ids[: self.read_first - 1], eos]

    def source_ids(self, ids: list[int], eos: int, truncate: bool) -> list[int]:
        """The source ids the encoder takes (read), at most max_len of them: a longer input is cut there, still
        ending in EOS, with truncate, and refused without (InputTooLongError)."""
        ids = self.read(ids, eos)
        if len(ids) <= self.max_len:
            return ids
        if not truncate:
            raise InputTooLongError(len(ids), self.max_len)
        return [*ids[: self.max_len - 1], eos]

    @classmethod
    def from_preset(
        cls, name: str, src_vocab_size: int, tgt_vocab_size: int | None = None, **overrides: Any
    ) -> ModelConfig:
        """A Table 3 preset (``base`` or ``big``) or the small CPU ``tiny``/``small`` shapes."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        tgt = src_vocab_size if tgt_vocab_size is None else tgt_vocab_size
        return cls(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt, **{**PRESETS[name], **overrides})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        return _from_dict(cls, data, "model config keys")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: dict[str, dict[str, Any]] = {
    # Table 3: N, d_model, d_ff, h, P_drop
    "base": {"N": 6, "d_model": 512, "d_ff": 2048, "h": 8, "p_drop": 0.1},
    "big": {"N": 6, "d_model": 1024, "d_ff": 4096, "h": 16, "p_drop": 0.3},
    # Not in the paper: shapes that train in minutes on a laptop CPU.
    "small": {"N": 3, "d_model": 256, "d_ff": 1024, "h": 4, "p_drop": 0.1},
    "tiny": {"N": 2, "d_model": 64, "d_ff": 128, "h": 4, "p_drop": 0.0},
}


@dataclass(frozen=True)
class DecodingConfig:
    """Beam search settings; the defaults are the paper's (§6.1)."""

    # The fields a request (service.schemas.DecodeOptions) or a command line flag sets one by one over a model's
    # own options; max_length, for both, sets max_len_a and max_len_b (with_max_length).
    OPTIONS: ClassVar[tuple[str, ...]] = (
        "beam_size",
        "n_best",
        "length_penalty",
        "length_penalty_form",
        "min_length",
        "no_repeat_ngram_size",
        "early_stopping",
    )

    beam_size: int = 4
    n_best: int = 1
    length_penalty: float = 0.6  # alpha
    length_penalty_form: LengthPenalty = "gnmt"  # "gnmt": ((5+|Y|)/6)^a; "average": |Y|^a
    max_len_a: float = 1.0  # longest output = a * source length + b tokens; one that long ends without EOS
    max_len_b: int = 50
    min_length: int = 0  # EOS is banned before this many tokens
    no_repeat_ngram_size: int = 0  # 0 disables
    # Deviation from tensor2tensor (the paper's code), which stops a sentence only once no live hypothesis can
    # beat the beam_size-th best ended one ("the exact bound", early_stopping=False). True stops as soon as
    # beam_size hypotheses have ended, as fairseq, Marian and CTranslate2 do: under |Y|^alpha the bound almost
    # never ends a sentence before its limit, so it costs 1.5-3x the decoding time for about 0.1 BLEU.
    early_stopping: bool = True
    banned_ids: tuple[int, ...] = field(default=())  # never generated (pad, decoder start)
    # Ids every output starts with, each forced with log P 0: a multilingual model's target language token,
    # BART's <s> (transformers' forced_bos_token_id, CTranslate2's target_prefix). They count in |Y|.
    target_prefix: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.beam_size < 1:
            raise ConfigError(f"beam_size must be at least 1, got {self.beam_size}")
        if not 1 <= self.n_best <= self.beam_size:
            raise ConfigError(f"n_best must be between 1 and beam_size ({self.beam_size}), got {self.n_best}")
        numbers = {"length_penalty": self.length_penalty, "max_len_a": self.max_len_a, "max_len_b": self.max_len_b}
        for name, value in numbers.items():
            if not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value}")
        if self.max_len_a < 0 or self.max_len_b < 0:
            raise ConfigError("max_len_a and max_len_b must not be negative")
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise ConfigError("max_len_a and max_len_b cannot both be 0")
        if self.min_length < 0 or self.no_repeat_ngram_size < 0:
            raise ConfigError("min_length and no_repeat_ngram_size must not be negative")
        _check_choice("length_penalty_form", self.length_penalty_form, ("gnmt", "average"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecodingConfig:
        """From plain JSON values (banned_ids as a list); unknown names are errors."""
        if not isinstance(data, dict):
            raise ConfigError(f"decoding options must be a JSON object, got {type(data).__name__}")
        tuples = {name: tuple(data.get(name, ())) for name in ("banned_ids", "target_prefix")}
        return _from_dict(cls, {**data, **tuples}, "decoding options")

    def to_dict(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "banned_ids": list(self.banned_ids),
            "target_prefix": list(self.target_prefix),
        }

    def changed(self) -> dict[str, Any]:
        """The fields that differ from the defaults, as plain JSON values."""
        default = DecodingConfig().to_dict()
        return {k: v for k, v in self.to_dict().items() if v != default[k]}

    def with_max_length(self, max_length: int | None) -> DecodingConfig:
        """The same options with the output limit a fixed max_length (None keeps a * |x| + b)."""
        return self if max_length is None else dataclasses.replace(self, max_len_a=0.0, max_len_b=max_length)

    def output_limit(self, source_length: int, model_max_len: int) -> int:
        """Most output tokens (EOS not counted) for a source of source_length tokens: a * |x| + b, within the
        model's positions; with a target_prefix, room for one token after it."""
        limit = min(int(self.max_len_a * source_length + self.max_len_b), model_max_len - 1)
        return max(limit, len(self.target_prefix) + 1) if self.target_prefix else limit

    def length_penalty_of(self, length: int) -> float:
        """lp(Y): GNMT's ((5+|Y|)/6)^alpha as in the paper, or fairseq's |Y|^alpha."""
        if self.length_penalty_form == "gnmt":
            return float(((5.0 + length) / 6.0) ** self.length_penalty)
        return float(length**self.length_penalty)


def _from_dict(cls: type[T], data: dict[str, Any], what: str) -> T:
    """A config dataclass from a dict whose keys must all be its fields."""
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})  # type: ignore[arg-type]
    if unknown:
        raise ConfigError(f"unknown {what}: {unknown}")
    try:
        return cls(**data)
    except TypeError as e:
        raise ConfigError(str(e)) from e


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {choices}, got {value!r}")
