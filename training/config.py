"""The training config: one frozen dataclass per concern, read from YAML plus key=value overrides."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from model.config import DEVICE_NAME, PRESETS, DecodingConfig, ModelConfig
from model.errors import ConfigError
from training.clean import CleanConfig, SplitConfig
from training.vocab import VocabConfig

CorpusName = Literal["gettext", "docstrings", "manpages", "dpkg", "summaries", "parallel", "tsv", "jsonl"]
CORPORA = ("gettext", "docstrings", "manpages", "dpkg", "summaries", "parallel", "tsv", "jsonl")
# Corpus settings added after runs were made with the corpus key (TrainConfig.data_key): (section, name, default).
KEYED_LATER = (("clean", "min_overlap", 0.0), ("data", "titles", False))


class TrainConfigError(ValueError):
    """A bad value or key in a training config file or override."""


@dataclass(frozen=True)
class DataConfig:
    """Where the pairs come from. gettext: English -> lang catalogs; docstrings, manpages (man_dir), dpkg
    (dpkg_status): description -> summary, and summaries: all three (training.summaries); parallel: paths =
    [source file, target file]; tsv / jsonl: one or more files."""

    corpus: CorpusName = "gettext"
    lang: str = "de"
    locale_dir: str = "/usr/share/locale"
    packages: tuple[str, ...] = ("stdlib", "torch", "numpy", "sympy", "networkx")
    man_dir: str = "/usr/share/man/man1"
    dpkg_status: str = "/var/lib/dpkg/status"
    paths: tuple[str, ...] = ()
    source_field: str = "source"
    target_field: str = "target"
    source_column: int = 0
    target_column: int = 1
    reverse: bool = False  # swap source and target, e.g. de -> en from English -> German catalogs
    # Summaries: each document starts with its item's title in words, as a reference page shows one above its
    # text ("log record get message: ...", "git commit: ...", "python3 numpy: ..."); the lead baselines
    # read the same documents.
    titles: bool = False

    def __post_init__(self) -> None:
        if self.corpus not in CORPORA:
            raise TrainConfigError(f"data.corpus must be one of {CORPORA}, got {self.corpus!r}")
        if self.corpus == "parallel" and len(self.paths) != 2:
            raise TrainConfigError("data.paths must name two files (source, target) for a parallel corpus")
        if self.corpus in ("tsv", "jsonl") and not self.paths:
            raise TrainConfigError(f"data.paths must name at least one {self.corpus} file")


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs; the defaults follow the paper (§5) where it says."""

    run_dir: str = "runs/default"
    task: Literal["translation", "summarization"] = "translation"
    source_lang: str | None = "en"
    target_lang: str | None = "de"
    data: DataConfig = field(default_factory=DataConfig)
    clean: CleanConfig = field(default_factory=CleanConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    preset: str = "base"  # Table 3 preset (base, big) or a small CPU shape (small, tiny)
    model: dict[str, Any] = field(default_factory=dict)  # ModelConfig fields overriding the preset
    decoding: dict[str, Any] = field(default_factory=dict)  # DecodingConfig fields: the model's own decoding
    # options, saved in its checkpoints (CheckpointMeta.decoding) and used by evaluation, the CLI and the service
    batch_tokens: int = 4096  # source and target tokens per batch each, padding included (§5.1)
    accumulate: int = 1  # batches per optimizer step; 25,000 tokens a step in the paper
    max_steps: int = 100_000
    max_minutes: float = 0.0  # stop (with a checkpoint) after this much training time; 0: no limit
    warmup: int = 4000  # §5.3
    lr_scale: float = 1.0  # multiplies the paper's rate; 1.0 is the paper
    betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    eps_ls: float = 0.1  # label smoothing (§5.4)
    clip_norm: float = 0.0  # 0: no gradient clipping, as in the paper
    seed: int = 1
    device: str = "auto"  # auto: cuda when available
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bf16 autocast on CUDA, fp32 on CPU
    log_every: int = 50
    eval_every: int = 1000
    save_every: int = 1000
    keep_last: int = 5
    eval_beam_size: int = 4
    eval_max_sentences: int = 500
    progress: bool = True

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise TrainConfigError(f"preset must be one of {sorted(PRESETS)}, got {self.preset!r}")
        positive = (
            "batch_tokens",
            "accumulate",
            "max_steps",
            "warmup",
            "log_every",
            "eval_every",
            "save_every",
            "keep_last",
            "eval_beam_size",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise TrainConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0 <= self.eps_ls < 1:
            raise TrainConfigError(f"eps_ls must be in [0, 1), got {self.eps_ls}")
        for name in ("max_minutes", "clip_norm"):
            if getattr(self, name) < 0:
                raise TrainConfigError(f"{name} must not be negative (0: no limit), got {getattr(self, name)}")
        if self.lr_scale <= 0 or self.adam_eps <= 0 or self.eval_max_sentences < 1:
            raise TrainConfigError("lr_scale and adam_eps must be positive, eval_max_sentences at least 1")
        if not all(0 <= b < 1 for b in self.betas):
            raise TrainConfigError(f"betas must both be in [0, 1), got {list(self.betas)}")
        if not DEVICE_NAME.fullmatch(self.device):
            raise TrainConfigError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        unknown = set(self.model) - {f.name for f in dataclasses.fields(ModelConfig)}
        if unknown:
            raise TrainConfigError(f"unknown model options: {sorted(unknown)}")
        try:
            self.model_config(16, 16)
        except ConfigError as e:
            raise TrainConfigError(f"model: {e}") from e
        try:
            self.decoding_config()
        except ConfigError as e:
            raise TrainConfigError(f"decoding: {e}") from e

    def model_config(self, src_vocab_size: int, tgt_vocab_size: int) -> ModelConfig:
        shared = self.vocab.shared
        return ModelConfig.from_preset(
            self.preset, src_vocab_size, tgt_vocab_size, **{"share_embeddings": shared, **self.model}
        )

    def decoding_config(self) -> DecodingConfig:
        return DecodingConfig.from_dict(self.decoding)

    def data_key(self) -> str:
        """A digest of what decides the corpus and vocabulary, to know when a cached one is stale."""
        parts = {k: dataclasses.asdict(getattr(self, k)) for k in ("data", "clean", "split", "vocab")}
        for section, name, default in KEYED_LATER:  # at its default, as before it existed: older runs resume
            if parts[section][name] == default:
                del parts[section][name]
        parts["vocab"]["kind"] = parts["vocab"].pop("algorithm")  # digested under its former name: runs resume
        return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SECTIONS: dict[str, type] = {"data": DataConfig, "clean": CleanConfig, "split": SplitConfig, "vocab": VocabConfig}


def _number(value: Any, key: str, integer: bool) -> int | float:
    """An int or float from YAML's int, float or a numeric string (YAML reads 1e4 as a string)."""
    if isinstance(value, bool):
        raise TrainConfigError(f"{key}: expected a number, got {value!r}")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise TrainConfigError(
                f"{key}: expected {'an integer' if integer else 'a number'}, got {value!r}"
            ) from None
    if not isinstance(value, int | float) or not math.isfinite(value):  # NaN, or infinity (int() raised on it)
        raise TrainConfigError(f"{key}: expected {'an integer' if integer else 'a finite number'}, got {value!r}")
    if integer:
        if float(value) != int(value):
            raise TrainConfigError(f"{key}: expected an integer, got {value!r}")
        return int(value)
    return float(value)


def coerce(value: Any, hint: Any, key: str) -> Any:
    """value as the field's type (hint): numbers coerced, the rest checked; TrainConfigError naming key."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, UnionType):  # X | None
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return coerce(value, inner, key)
    if origin is Literal:
        if value not in args:
            raise TrainConfigError(f"{key} must be one of {', '.join(map(str, args))}, got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise TrainConfigError(f"{key}: expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise TrainConfigError(f"{key}: expected a list of {len(args)}, got {value!r}")
        return tuple(coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args, strict=True)))
    if hint is bool:
        if not isinstance(value, bool):
            raise TrainConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if hint in (int, float):
        return _number(value, key, integer=hint is int)
    if hint is str:
        if not isinstance(value, str):
            raise TrainConfigError(f"{key}: expected a string, got {value!r}")
        return value
    return value  # dicts (model options) are checked by the model's own config


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise TrainConfigError(
            f"unknown keys in {where.rstrip('.') or 'the config'}: {unknown}; known: {sorted(names)}"
        )
    hints = get_type_hints(cls)
    built = SECTIONS if cls is TrainConfig else {}  # sections arrive as their dataclasses already
    kwargs = {k: v if k in built else coerce(v, hints[k], f"{where}{k}") for k, v in values.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        message = str(e)  # a section's own check names its keys already ("data.paths must ...")
        raise TrainConfigError(message if message.startswith(where) and where else f"{where}{message}") from e


def from_dict(values: dict[str, Any]) -> TrainConfig:
    values = dict(values)
    for name, cls in SECTIONS.items():
        section = values.get(name) or {}
        if not isinstance(section, dict):
            raise TrainConfigError(f"{name} must be a mapping")
        values[name] = _build(cls, section, f"{name}.")
    for name, what in (("model", "ModelConfig"), ("decoding", "DecodingConfig")):
        if name in values and not isinstance(values[name], dict):
            raise TrainConfigError(f"{name} must be a mapping of {what} fields")
    cfg: TrainConfig = _build(TrainConfig, values, "")
    return cfg


def apply_override(values: dict[str, Any], override: str) -> None:
    """Apply one KEY=VALUE (KEY may be dotted, e.g. data.lang=fr); VALUE is parsed as YAML."""
    key, sep, raw = override.partition("=")
    if not sep or not key:
        raise TrainConfigError(f"override {override!r} is not KEY=VALUE")
    *parents, leaf = key.strip().split(".")
    node = values
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise TrainConfigError(f"override {override!r}: {part} is not a section")
    try:
        node[leaf] = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise TrainConfigError(
            f"override {override!r}: its value is not valid YAML ({problem}); quote it, e.g. {key}='\"...\"'"
        ) from None


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """A TrainConfig from a YAML file (or the defaults) plus KEY=VALUE overrides."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise TrainConfigError(f"{path}: cannot read ({e.strerror})") from e
        except yaml.YAMLError as e:
            raise TrainConfigError(f"{path}: not valid YAML ({e})") from e
        if not isinstance(loaded, dict):
            raise TrainConfigError(f"{path}: must hold a mapping")
        values = loaded
    for override in overrides:
        apply_override(values, override)
    return from_dict(values)
