"""Import of the public encoder-decoder families from Hugging Face directories, by config.json's model_type.

marian (OPUS-MT), m2m_100 (M2M100 and NLLB), mbart (mBART-50), bart (BART, distilBART) and pegasus are each the
paper's Transformer with a few ModelConfig switches. Their SentencePiece tokenizers map pieces to ids by each
family's rule (a vocab.json, fairseq's offset of one, Pegasus's 103 reserved ids); the import writes that map as
one vocabulary, so that our Tokenizer reads every family alike. Weights are read from safetensors only.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from model import language_codes
from model.checkpoint import CheckpointMeta, Task, atomic_path, save_checkpoint
from model.config import DecodingConfig, ModelConfig
from model.errors import CheckpointError, ConfigError, check_readable
from model.hf_weights import convert_weights, read_json, weights_file
from model.hub import fetch, is_hub_id
from model.marian import activation_of, import_marian
from model.tokenizer import SpecialIds, TokenizerConfig, load_sentencepiece

SPM_FILE, VOCAB_FILE, BPE_FILE = "spm.model", "vocab.json", "tokenizer.json"  # our copies in the checkpoint
LEARNED_OFFSET = 2  # BART's and mBART's position tables keep two rows for padding positions
FAMILIES = ("marian", "m2m_100", "mbart", "bart", "pegasus")


@dataclass(frozen=True)
class Vocabulary:
    """A family's tokenizer as our checkpoint holds it: pieces -> ids, the SentencePiece file, the special ids."""

    spm_file: Path  # the tokenizer's model in the Hugging Face directory (SentencePiece, or BART's tokenizer.json)
    vocab: dict[str, int]  # written as vocab.json beside a SentencePiece model; a byte-level BPE file holds its own
    tokenizer: TokenizerConfig

    def write(self, out: Path) -> None:
        """Our copies of the tokenizer's files, in the checkpoint directory out."""
        with atomic_path(out / self.tokenizer.source_model) as tmp:
            shutil.copyfile(self.spm_file, tmp)
        if self.tokenizer.kind == "sentencepiece":
            with atomic_path(out / VOCAB_FILE) as tmp:
                tmp.write_text(json.dumps(self.vocab, ensure_ascii=False), encoding="utf-8")


def model_config(kind: str, hf: dict[str, Any], path: Path) -> ModelConfig:
    """Our ModelConfig for a Hugging Face config of the BART layout (m2m_100, mbart, bart, pegasus)."""
    activation = activation_of(hf, path)
    switches: dict[str, Any] = {
        # M2M100, NLLB: pre-LN with final LayerNorms, fairseq's sinusoids from row padding index + 1
        "m2m_100": {
            "norm": "pre",
            "position_layout": "fairseq",
            "position_offset": hf.get("pad_token_id", 1) + 1,
        },
        # mBART: pre-LN with final LayerNorms, learned positions, a LayerNorm on the embeddings, a logits bias
        "mbart": {"norm": "pre", "positions": "learned", "embed_norm": True, "logits_bias": True},
        # BART: post-LN as the paper, learned positions, a LayerNorm on the embeddings, a logits bias
        "bart": {"positions": "learned", "embed_norm": True, "logits_bias": True},
        # Pegasus: pre-LN with final LayerNorms, Marian's sin | cos positions, a logits bias
        "pegasus": {"norm": "pre", "position_layout": "halves", "logits_bias": True},
    }[kind]
    try:
        return ModelConfig(
            src_vocab_size=hf["vocab_size"],
            tgt_vocab_size=hf["vocab_size"],
            N=hf["encoder_layers"],
            N_dec=hf["decoder_layers"],
            d_model=hf["d_model"],
            d_ff=hf["encoder_ffn_dim"],
            h=hf["encoder_attention_heads"],
            p_drop=float(hf.get("dropout", 0.1)),
            max_len=hf.get("max_position_embeddings", 1024),
            activation=activation,
            scale_embedding=bool(hf.get("scale_embedding", False)),
            tie_output=bool(hf.get("tie_word_embeddings", True)),
            **switches,
        )
    except ConfigError as e:
        raise CheckpointError(path, str(e)) from e


def _sentencepiece(path: Path) -> list[str]:
    """The pieces of a SentencePiece model, by its own ids."""
    sp = load_sentencepiece(path)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def _fairseq(pieces: list[str], codes: tuple[str, ...]) -> dict[str, int]:
    """fairseq's dictionary over a SentencePiece model (NLLB, mBART-50): <s> <pad> </s> <unk>, then the pieces
    after SentencePiece's own <unk> <s> </s> one id up, then the language codes, then <mask>."""
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({piece: i + 1 for i, piece in enumerate(pieces) if i >= 3})
    vocab.update({code: len(pieces) + 1 + j for j, code in enumerate(codes)})
    vocab["<mask>"] = len(pieces) + 1 + len(codes)
    return vocab


def added_tokens(hf_dir: Path) -> dict[str, int]:
    """The tokens the directory's tokenizer files list with their ids (language codes, <mask>): tokenizer.json's
    added_tokens, else tokenizer_config.json's added_tokens_decoder. Where they are listed, their ids win over
    the family's rule (tokenizers converted by other tools have put <mask> before the languages)."""
    fast, slow = hf_dir / "tokenizer.json", hf_dir / "tokenizer_config.json"
    try:
        if fast.is_file():
            entries = read_json(fast, "tokenizer").get("added_tokens") or []
            return {str(e["content"]): int(e["id"]) for e in entries}
        if slow.is_file():
            decoder = read_json(slow, "tokenizer config").get("added_tokens_decoder") or {}
            return {str(e["content"]): int(i) for i, e in decoder.items()}
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(fast if fast.is_file() else slow, f"unreadable added tokens ({e!r})") from e
    return {}


def _special(hf: dict[str, Any], vocab: dict[str, int], unk: str = "<unk>") -> SpecialIds:
    eos = hf.get("eos_token_id", 2)
    return SpecialIds(
        pad=hf.get("pad_token_id", 1),
        unk=vocab[unk],
        bos=hf.get("bos_token_id", 0),
        eos=eos,
        decoder_start=hf.get("decoder_start_token_id", eos),
    )


def _tokenizer_class(hf_dir: Path) -> str:
    path = hf_dir / "tokenizer_config.json"
    return str(read_json(path, "tokenizer config").get("tokenizer_class") or "") if path.is_file() else ""


def m2m_100_vocabulary(hf_dir: Path, hf: dict[str, Any]) -> Vocabulary:
    """M2M100: vocab.json plus __xx__ language tokens after it. NLLB (no vocab.json, or an NllbTokenizer): fairseq's
    dictionary with NLLB's codes. Both read [source language] text </s> and force the target language token."""
    spm_file = hf_dir / "sentencepiece.bpe.model"
    pieces = _sentencepiece(spm_file)
    if (hf_dir / "vocab.json").is_file() and not _tokenizer_class(hf_dir).startswith("Nllb"):
        vocab = {str(k): int(v) for k, v in read_json(hf_dir / "vocab.json", "vocabulary").items()}
        size = len(vocab)
        languages = {code: f"__{code}__" for code in language_codes.M2M100}
        vocab.update({token: size + j for j, token in enumerate(languages.values())})
    else:
        vocab = _fairseq(pieces, language_codes.NLLB)
        languages = {code: code for code in language_codes.NLLB}
    return _multilingual(spm_file, {**vocab, **added_tokens(hf_dir)}, languages, hf)


def mbart_vocabulary(hf_dir: Path, hf: dict[str, Any]) -> Vocabulary:
    """mBART-50: fairseq's dictionary with its 52 codes; [source language] text </s>, target language forced."""
    kind = _tokenizer_class(hf_dir)
    if kind and not kind.startswith("MBart50"):
        raise CheckpointError(hf_dir / "tokenizer_config.json", f"{kind} is not mBART-50's; only mBART-50 is imported")
    spm_file = hf_dir / "sentencepiece.bpe.model"
    vocab = {**_fairseq(_sentencepiece(spm_file), language_codes.MBART50), **added_tokens(hf_dir)}
    return _multilingual(spm_file, vocab, {code: code for code in language_codes.MBART50}, hf)


def _multilingual(spm_file: Path, vocab: dict[str, int], languages: dict[str, str], hf: dict[str, Any]) -> Vocabulary:
    tokenizer = TokenizerConfig(
        source_model=SPM_FILE,
        target_model=SPM_FILE,
        source_vocab=VOCAB_FILE,
        target_vocab=VOCAB_FILE,
        special=_special(hf, vocab),
        languages=languages,
        source_language="prefix",
        target_language="forced",
    )
    return Vocabulary(spm_file, vocab, tokenizer)


def pegasus_vocabulary(hf_dir: Path, hf: dict[str, Any]) -> Vocabulary:
    """Pegasus: <pad> </s> <mask_1> <mask_2> <unk_2> .. <unk_102> take ids 0-104, and SentencePiece's pieces
    (its own <pad> </s> left out) their ids plus 103; text </s>."""
    spm_file = hf_dir / "spiece.model"
    pieces = _sentencepiece(spm_file)
    offset = 103
    vocab = {"<pad>": 0, "</s>": 1, "<mask_1>": 2, "<mask_2>": 3}
    vocab.update({f"<unk_{i}>": i + 2 for i in range(2, offset)})
    vocab.update({piece: i + offset for i, piece in enumerate(pieces) if i >= 2})
    vocab.update(added_tokens(hf_dir))
    special = replace(_special(hf, vocab), bos=hf.get("pad_token_id", 0))  # Pegasus has no <s>
    tokenizer = TokenizerConfig(SPM_FILE, SPM_FILE, VOCAB_FILE, VOCAB_FILE, special)
    return Vocabulary(spm_file, vocab, tokenizer)


def bart_vocabulary(hf_dir: Path, hf: dict[str, Any]) -> Vocabulary:
    """BART: byte-level BPE (GPT-2's, through the tokenizers library: tokenizer.json, else vocab.json and
    merges.txt); <s> text </s>, and the output forced to start with forced_bos_token_id where the config says."""
    from tokenizers import Tokenizer as Bpe

    path = hf_dir / "tokenizer.json"
    try:
        bpe = Bpe.from_file(str(path)) if path.is_file() else _bpe_from_vocab_and_merges(hf_dir)
    except CheckpointError:
        raise
    except Exception as e:  # the tokenizers library raises its own exception type for a malformed file
        raise CheckpointError(path, f"not a byte-level BPE tokenizer ({str(e)[:200]})") from e
    vocab = bpe.get_vocab(with_added_tokens=True)
    for name in ("<s>", "</s>", "<pad>", "<unk>"):
        if name not in vocab:
            raise CheckpointError(path, f"the tokenizer has no {name}")
    forced = _forced_bos(hf_dir, hf)
    if forced is not None and forced not in vocab.values():
        raise CheckpointError(hf_dir / "config.json", f"forced_bos_token_id {forced} is not in the tokenizer")
    pieces = {i: piece for piece, i in vocab.items()}
    tokenizer = TokenizerConfig(
        source_model=BPE_FILE,
        target_model=BPE_FILE,
        special=_special(hf, vocab),
        kind="bpe",
        source_prefix=("<s>",),
        target_prefix=() if forced is None else (pieces[forced],),
    )
    if not path.is_file():
        path = Path(tempfile.mkdtemp()) / BPE_FILE
        bpe.save(str(path))
    return Vocabulary(path, vocab, tokenizer)


def _bpe_from_vocab_and_merges(hf_dir: Path) -> Any:
    """GPT-2's byte-level BPE from vocab.json and merges.txt, as BART's tokenizer builds it."""
    from tokenizers import ByteLevelBPETokenizer

    for name in ("vocab.json", "merges.txt"):
        check_readable(hf_dir / name)
        if not (hf_dir / name).is_file():
            raise CheckpointError(hf_dir / name, "tokenizer file is missing (and there is no tokenizer.json)")
    return ByteLevelBPETokenizer(str(hf_dir / "vocab.json"), str(hf_dir / "merges.txt"))


def _forced_bos(hf_dir: Path, hf: dict[str, Any]) -> int | None:
    path = hf_dir / "generation_config.json"
    gen = read_json(path, "generation config") if path.is_file() else {}
    forced = gen.get("forced_bos_token_id", hf.get("forced_bos_token_id"))
    return None if forced is None else int(forced)


VOCABULARIES: dict[str, Callable[[Path, dict[str, Any]], Vocabulary]] = {
    "m2m_100": m2m_100_vocabulary,
    "mbart": mbart_vocabulary,
    "bart": bart_vocabulary,
    "pegasus": pegasus_vocabulary,
}


def check_vocabulary(vocabulary: Vocabulary, cfg: ModelConfig, hf_dir: Path) -> None:
    """CheckpointError naming the tokenizer file when its ids do not fit the model's embeddings."""
    top = max(vocabulary.vocab.values())
    if top >= cfg.src_vocab_size:
        raise CheckpointError(
            hf_dir / vocabulary.spm_file.name,
            f"the tokenizer gives ids up to {top}, but the model has {cfg.src_vocab_size} embeddings: "
            "it is not this model's tokenizer",
        )


def task_of(kind: str, hf: dict[str, Any], task: str | None, path: Path) -> Task:
    """The task: given, or said by the checkpoint (task_specific_params), or a translation family's."""
    if task is not None:
        if task not in ("translation", "summarization"):
            raise CheckpointError(path, f"task must be translation or summarization, got {task!r}")
        return task  # type: ignore[return-value]
    said = [k for k in hf.get("task_specific_params") or {} if k.startswith(("summarization", "translation"))]
    if said:
        return "summarization" if said[0].startswith("summarization") else "translation"
    if kind in ("m2m_100", "mbart"):
        return "translation"
    raise CheckpointError(path, "does not say its task; give --task translation or --task summarization")


def decoding_of(hf_dir: Path, hf: dict[str, Any], task: Task) -> DecodingConfig:
    """The checkpoint's own generation settings (generation_config.json, else config.json, and for a summarizer
    its task_specific_params) as our DecodingConfig, with transformers' |Y|^alpha length penalty."""
    path = hf_dir / "generation_config.json"
    gen = read_json(path, "generation config") if path.is_file() else hf
    if task == "summarization":
        params = hf.get("task_specific_params") or {}
        gen = {**gen, **next((v for k, v in params.items() if k.startswith("summarization")), {})}
    options: dict[str, Any] = {"length_penalty_form": "average"}
    if gen.get("num_beams"):
        options["beam_size"] = int(gen["num_beams"])
    if gen.get("length_penalty") is not None:
        options["length_penalty"] = float(gen["length_penalty"])
    if gen.get("max_length"):  # transformers counts the decoder's start token and EOS in it
        options.update(max_len_a=0.0, max_len_b=max(int(gen["max_length"]) - 2, 1))
    if gen.get("min_length"):
        options["min_length"] = max(int(gen["min_length"]) - 1, 0)
    if gen.get("no_repeat_ngram_size"):
        options["no_repeat_ngram_size"] = int(gen["no_repeat_ngram_size"])
    options["early_stopping"] = gen.get("early_stopping") is True
    try:
        return DecodingConfig(**options)
    except ConfigError as e:
        raise CheckpointError(path, f"generation settings: {e}") from e


def import_model(
    src: str | Path,
    out: str | Path,
    source_lang: str | None = None,
    target_lang: str | None = None,
    task: str | None = None,
) -> Path:
    """Convert a saved Hugging Face directory of any family we know into our checkpoint directory; src may be a
    hub id, whose files are fetched first (model.hub)."""
    if is_hub_id(str(src)):
        src = fetch(str(src))
    hf_dir, out = Path(src), Path(out)
    check_readable(hf_dir)
    if not hf_dir.is_dir():
        raise CheckpointError(hf_dir, "no such directory")
    config_path = hf_dir / "config.json"
    hf = read_json(config_path, "config file")
    kind = hf.get("model_type")
    if kind == "marian":
        return import_marian(hf_dir, out, source_lang, target_lang)
    if kind not in VOCABULARIES:
        raise CheckpointError(config_path, f"model_type {kind!r} is not one we import ({', '.join(FAMILIES)})")
    weights = weights_file(hf_dir)
    try:
        cfg = model_config(kind, hf, config_path)
    except KeyError as e:
        raise CheckpointError(config_path, f"not a {kind} config: no {e}") from e
    vocabulary = VOCABULARIES[kind](hf_dir, hf)
    check_vocabulary(vocabulary, cfg, hf_dir)
    the_task = task_of(kind, hf, task, config_path)
    tokenizer = vocabulary.tokenizer
    for code in (source_lang, target_lang):
        if code is not None and tokenizer.languages and code not in tokenizer.languages:
            raise ConfigError(f"unknown language {code!r}: {hf_dir} knows {', '.join(sorted(tokenizer.languages))}")
    model = convert_weights(cfg, weights, LEARNED_OFFSET if cfg.positions == "learned" else 0)
    meta = CheckpointMeta(
        model=cfg,
        tokenizer=tokenizer,
        task=the_task,
        source_lang=source_lang,
        target_lang=target_lang,
        extra={"imported_from": kind, "source": str(hf_dir.resolve())},
        decoding=decoding_of(hf_dir, hf, the_task),
    )
    out.mkdir(parents=True, exist_ok=True)
    vocabulary.write(out)
    return save_checkpoint(out, model, meta)


def import_models(specs: list[str], models_dir: str | Path) -> list[Path]:
    """A models directory's copies of models named SRC or SRC=NAME (SRC: a hub id, a Hugging Face directory, or
    one of our checkpoints; NAME, its id there: SRC's last part by default), imported the first time and reused
    after. Each is written beside the directory's models, and all are moved in once all are whole, so that a
    service scanning the directory never sees half of one, nor (but for an instant) some of them."""
    models_dir = Path(models_dir)
    staged = [_staged(spec, models_dir) for spec in specs]
    for staging, target in staged:
        if staging is not None:
            staging.rename(target)
    return [target for _, target in staged]


def import_once(spec: str, models_dir: str | Path) -> Path:
    """import_models of one model."""
    [path] = import_models([spec], models_dir)
    return path


def _staged(spec: str, models_dir: Path) -> tuple[Path | None, Path]:
    """The model imported into a hidden directory beside its place (None where its place holds it already)."""
    src, _, name = spec.partition("=")
    name = name or Path(src.rstrip("/")).name
    if not src or not name or name.startswith(".") or "/" in name:
        raise ConfigError(f"bad model {spec!r}: give SRC or SRC=NAME, NAME a directory name")
    target = models_dir / name
    if (target / "config.json").is_file():
        return None, target
    models_dir.mkdir(parents=True, exist_ok=True)
    staging = models_dir / f".{name}.importing"
    shutil.rmtree(staging, ignore_errors=True)
    ours = Path(src) / "config.json"
    if ours.is_file() and "format_version" in read_json(ours, "config file"):  # one of our checkpoints: a copy
        shutil.copytree(src, staging)
    else:
        import_model(src, staging)
    return staging, target
