"""Corpus building: read, clean, split, train the vocabulary, encode; cached under run_dir/data."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from model.config import ModelConfig
from model.tokenizer import Tokenizer, TokenizerConfig
from training.batching import EncodedCorpus
from training.clean import CleanStats, clean, split, supported
from training.config import DataConfig, TrainConfig, TrainConfigError
from training.corpora import docstring_pairs, gettext_pairs
from training.data import Pair, read_jsonl, read_parallel, read_tsv, write_jsonl
from training.summaries import dpkg_pairs, manpage_pairs

SPLITS = ("train", "dev", "test")


def read_pairs(cfg: DataConfig) -> Iterator[Pair]:
    """The configured corpus as a stream of pairs."""
    if cfg.corpus == "gettext":
        pairs: Iterable[Pair] = gettext_pairs(cfg.lang, cfg.locale_dir)
    elif cfg.corpus == "docstrings":
        pairs = docstring_pairs(cfg.packages, cfg.titles)
    elif cfg.corpus == "manpages":
        pairs = manpage_pairs(cfg.man_dir, cfg.titles)
    elif cfg.corpus == "dpkg":
        pairs = dpkg_pairs(cfg.dpkg_status, cfg.titles)
    elif cfg.corpus == "summaries":  # duplicates across the three go with clean.dedup
        docstrings = (
            Pair(p.source, p.target, f"{p.origin}: {p.target}") for p in docstring_pairs(cfg.packages, cfg.titles)
        )
        pairs = itertools.chain(
            manpage_pairs(cfg.man_dir, cfg.titles), dpkg_pairs(cfg.dpkg_status, cfg.titles), docstrings
        )
    elif cfg.corpus == "parallel":
        pairs = read_parallel(cfg.paths[0], cfg.paths[1])
    elif cfg.corpus == "tsv":
        pairs = itertools.chain.from_iterable(read_tsv(p, cfg.source_column, cfg.target_column) for p in cfg.paths)
    else:
        pairs = itertools.chain.from_iterable(read_jsonl(p, cfg.source_field, cfg.target_field) for p in cfg.paths)
    for p in pairs:
        yield Pair(p.target, p.source, p.origin) if cfg.reverse else p


@dataclass
class Prepared:
    """The encoded training data, the raw dev and test pairs, and the tokenizer."""

    tokenizer_dir: Path
    tokenizer: Tokenizer
    train: EncodedCorpus
    dev: EncodedCorpus
    dev_pairs: list[Pair]
    test_pairs: list[Pair]


def build_corpus(cfg: TrainConfig, data_dir: Path, progress: bool = True) -> None:
    """Read, clean, split and write train/dev/test.jsonl, then train the SentencePiece model(s)."""
    from training.vocab import train_vocab

    data_dir.mkdir(parents=True, exist_ok=True)
    stats = CleanStats()
    pairs = tqdm(read_pairs(cfg.data), desc="reading corpus", unit=" pairs", disable=not progress)
    splits = split(clean(pairs, cfg.clean, stats), cfg.split)
    splits.train = supported(splits.train, cfg.clean, stats)  # held-out pairs stay as they are
    for name in SPLITS:
        with (data_dir / f"{name}.jsonl").open("w", encoding="utf-8") as f:
            write_jsonl(getattr(splits, name), f)
    counts = {name: len(getattr(splits, name)) for name in SPLITS}
    if counts["train"] == 0:
        raise TrainConfigError(
            f"the corpus has no training pairs left after cleaning ({stats.as_dict()}): check "
            "data.paths and the clean section's limits"
        )
    (data_dir / "stats.json").write_text(json.dumps({"clean": stats.as_dict(), "splits": counts}, indent=1))
    if progress:
        print(f"corpus: {counts} after cleaning {stats.as_dict()}", flush=True)
    tok_cfg = train_vocab(splits.train, data_dir / "tokenizer", cfg.vocab, seed=cfg.seed)
    (data_dir / "tokenizer" / "tokenizer.json").write_text(json.dumps(tok_cfg.to_dict(), indent=1))
    (data_dir / "key").write_text(cfg.data_key())


def load_split(data_dir: Path, name: str) -> list[Pair]:
    return list(read_jsonl(data_dir / f"{name}.jsonl"))


def encode(tokenizer: Tokenizer, pairs: list[Pair], model: ModelConfig, desc: str, progress: bool) -> EncodedCorpus:
    """Token ids of both sides, sources as the model reads them (ModelConfig.read_first); pairs longer than
    the model's max_len tokens on either side are left out."""
    sources, targets = [], []
    for p in tqdm(pairs, desc=desc, unit=" pairs", disable=not progress, mininterval=1.0):
        s = model.read(tokenizer.encode_source(p.source), tokenizer.special.eos)
        t = tokenizer.encode_target(p.target)
        if len(s) <= model.max_len and len(t) <= model.max_len:
            sources.append(s)
            targets.append(t)
    return EncodedCorpus.build(sources, targets)


def prepare(cfg: TrainConfig, model: ModelConfig, progress: bool = True, build: bool = True) -> Prepared:
    """Build the corpus and vocabulary unless cached for the same data settings, then encode them for the
    model (its max_len and read_first; the vocabulary sizes are not read)."""
    data_dir = Path(cfg.run_dir) / "data"
    key = data_dir / "key"
    if not (key.is_file() and key.read_text() == cfg.data_key()):
        if not build:
            raise FileNotFoundError(f"{data_dir} holds no corpus for this config")
        build_corpus(cfg, data_dir, progress)
    tok_dir = data_dir / "tokenizer"
    tok_cfg = TokenizerConfig.from_dict(json.loads((tok_dir / "tokenizer.json").read_text()))
    tokenizer = Tokenizer(tok_dir, tok_cfg)
    train_pairs, dev_pairs, test_pairs = (load_split(data_dir, name) for name in SPLITS)
    return Prepared(
        tokenizer_dir=tok_dir,
        tokenizer=tokenizer,
        train=encode(tokenizer, train_pairs, model, "encoding train", progress),
        dev=encode(tokenizer, dev_pairs, model, "encoding dev", False),
        dev_pairs=dev_pairs,
        test_pairs=test_pairs,
    )
