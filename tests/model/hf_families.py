"""Small random models of the public families, made with transformers and saved as the hub has them (config.json,
model.safetensors, the SentencePiece model and the tokenizer's files), for the import tests.

Each is shaped as the Marian fixture (tests/conftest.py): outputs depend on the source, and hypotheses end by
EOS well before the length limit, so that comparing searches means something.
"""

from __future__ import annotations

import json
import random
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sentencepiece as spm
import torch
from torch import Tensor

from model.layers import sinusoid_table
from tests.conftest import MARIAN_CROSS_GAIN, MARIAN_EOS_NORM, MARIAN_INIT_STD, make_words

SOURCE = {"m2m100": ("en", "de"), "nllb": ("eng_Latn", "deu_Latn"), "mbart50": ("en_XX", "de_DE")}
FAMILIES = ("m2m100", "nllb", "mbart50", "pegasus", "bart")
MAX_POSITIONS = 128


@dataclass(frozen=True)
class Size:
    """A fixture model's shape and its tokenizer's vocabulary (benchmarks/families.py builds base-size ones)."""

    d_model: int = 64
    layers: int = 2
    heads: int = 4
    d_ff: int = 128
    vocab: int = 150  # SentencePiece pieces (byte-level BPE merges: vocab + 250)
    words: int = 300  # distinct made-up words in the text it is trained on
    rise_until: int = 0  # EOS's direction rises with the positions up to here (rising); 0: the tests' rule
    eos_norm: float = MARIAN_EOS_NORM


TEST = Size()
BASE = Size(d_model=512, layers=6, heads=8, d_ff=2048, vocab=6000, words=40000, rise_until=64, eos_norm=20.0)


def corpus(size: Size) -> list[str]:
    rng, words = random.Random(7), make_words(size.words)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) for _ in range(max(2000, size.words))]


@dataclass(frozen=True)
class Family:
    name: str
    hf_dir: Path
    model: Any  # the transformers model, in eval mode
    tokenizer: Any  # the transformers tokenizer, set to translate source -> target
    pad: int
    eos: int
    start: int  # the decoder's start id
    forced: int | None  # the forced first output id (the target language), if any
    source: str | None  # the language codes the tokenizer is set to
    target: str | None


def train_spm(directory: Path, model_type: str, size: Size, **ids: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    text = directory / "text.txt"
    text.write_text("\n".join(corpus(size)) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(directory / "m"),
        vocab_size=size.vocab,
        model_type=model_type,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
        **ids,
    )
    return directory / "m.model"


def rising(table: Tensor, until: int = 0) -> Tensor:
    """A unit vector v with <table[t], v> increasing in t over the first steps: table[10] - table[0] on the slow
    frequencies of a sin | cos table; with until, table[until] - table[0] on the dimensions that are monotonic up
    to there, so that it rises all the way (base-size models need the longer rise)."""
    if until:
        steps = table[1 : until + 1] - table[:until]  # (until, d)
        monotonic = (steps >= 0).all(0) | (steps <= 0).all(0)
        v = (table[until] - table[0]) * monotonic
        return v / v.norm()
    v = table[10] - table[0]
    half = v.numel() // 2
    v[:8] = 0
    v[half : half + 8] = 0
    return v / v.norm()


def _tokenizer(name: str, directory: Path, size: Size) -> tuple[Any, str]:
    """The family's transformers tokenizer over a SentencePiece model trained here, and the file name the hub
    gives that model."""
    from transformers import M2M100Tokenizer, MBart50Tokenizer, NllbTokenizer, PegasusTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    work = directory / "spm"
    if name == "bart":
        return _bart_tokenizer(work, size), ""
    if name == "pegasus":
        model_file = train_spm(work, "unigram", size, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
        shutil.copyfile(model_file, work / "spiece.model")
        return PegasusTokenizer.from_pretrained(str(work)), "spiece.model"
    fairseq_ids = {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": -1}
    model_file = train_spm(work, "bpe" if name == "nllb" else "unigram", size, **fairseq_ids)  # as the hub's
    shutil.copyfile(model_file, work / "sentencepiece.bpe.model")
    if name == "m2m100":
        sp = spm.SentencePieceProcessor(model_file=str(model_file))
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        vocab.update({sp.id_to_piece(i): i + 1 for i in range(3, sp.get_piece_size())})
        (work / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
        return M2M100Tokenizer(
            vocab_file=str(work / "vocab.json"),
            spm_file=str(work / "sentencepiece.bpe.model"),
            src_lang=SOURCE[name][0],
            tgt_lang=SOURCE[name][1],
        ), "sentencepiece.bpe.model"
    if name == "nllb":
        return NllbTokenizer.from_pretrained(
            str(work),
            src_lang="eng_Latn",
            tgt_lang="deu_Latn",
            additional_special_tokens=FAIRSEQ_LANGUAGE_CODES,
        ), "sentencepiece.bpe.model"
    return MBart50Tokenizer.from_pretrained(str(work), src_lang="en_XX", tgt_lang="de_DE"), "sentencepiece.bpe.model"


def _bart_tokenizer(work: Path, size: Size) -> Any:
    """BART's tokenizer over a byte-level BPE trained here with the tokenizers library (vocab.json, merges.txt)."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import BartTokenizer

    work.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    texts = corpus(size) + ["Ñandú façade naïve — “quoted” 123 !?"] * 5
    bpe.train_from_iterator(
        texts, vocab_size=size.vocab + 250, min_frequency=2, special_tokens=["<s>", "<pad>", "</s>", "<unk>"]
    )
    bpe.save_model(str(work))
    return BartTokenizer.from_pretrained(str(work))


def _model(name: str, vocab_size: int, pad: int, eos: int, start: int, size: Size) -> Any:
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        M2M100Config,
        M2M100ForConditionalGeneration,
        MBartConfig,
        MBartForConditionalGeneration,
        PegasusConfig,
        PegasusForConditionalGeneration,
    )

    shape: dict[str, Any] = {
        "vocab_size": vocab_size,
        "d_model": size.d_model,
        "encoder_layers": size.layers,
        "decoder_layers": size.layers,
        "encoder_attention_heads": size.heads,
        "decoder_attention_heads": size.heads,
        "encoder_ffn_dim": size.d_ff,
        "decoder_ffn_dim": size.d_ff,
        "max_position_embeddings": MAX_POSITIONS,
        "pad_token_id": pad,
        "eos_token_id": eos,
        "bos_token_id": 0,
        "decoder_start_token_id": start,
        "scale_embedding": True,
        "init_std": MARIAN_INIT_STD,
        "dropout": 0.1,
    }
    if name in ("m2m100", "nllb"):
        return M2M100ForConditionalGeneration(M2M100Config(activation_function="relu", **shape))
    if name == "mbart50":
        return MBartForConditionalGeneration(MBartConfig(activation_function="gelu", **shape))
    if name == "bart":  # BART-large's: no embedding scale, <s> forced as the output's first token
        shape = {**shape, "scale_embedding": False, "forced_bos_token_id": 0}
        return BartForConditionalGeneration(BartConfig(activation_function="gelu", **shape))
    params = {"summarization_test": {"num_beams": 3, "length_penalty": 0.8, "max_length": 30, "min_length": 2}}
    return PegasusForConditionalGeneration(
        PegasusConfig(activation_function="relu", task_specific_params=params, **shape)
    )


@torch.no_grad()
def _shape(name: str, model: Any, eos: int, size: Size) -> None:
    """Cross-attention louder (outputs follow the source), a random logits bias (importing it matters), and EOS's
    embedding along a direction the positions grow in (P(EOS) rises over the steps)."""
    inner = model.model
    for layer in inner.decoder.layers:
        layer.encoder_attn.v_proj.weight.mul_(MARIAN_CROSS_GAIN)
        layer.encoder_attn.out_proj.weight.mul_(MARIAN_CROSS_GAIN)
    d = inner.config.d_model
    if name in ("mbart50", "bart"):  # learned positions: make them a sin | cos table, rising as sinusoids do
        table = sinusoid_table(MAX_POSITIONS, d, "halves")
        for side in (inner.encoder, inner.decoder):
            side.embed_positions.weight[2:] = table
            side.layernorm_embedding.weight.normal_(1.0, 0.1)
        direction = rising(table, size.rise_until)
    elif name == "pegasus":
        direction = rising(sinusoid_table(MAX_POSITIONS, d, "halves"), size.rise_until)
    else:
        direction = rising(sinusoid_table(MAX_POSITIONS, d, "fairseq", 2), size.rise_until)
    if hasattr(model, "final_logits_bias"):
        model.final_logits_bias.normal_(0.0, 0.3)
        model.final_logits_bias[0, eos] = -1.0
    for norm in (inner.encoder, inner.decoder):
        if hasattr(norm, "layer_norm") and norm.layer_norm is not None:
            norm.layer_norm.bias.normal_(0.0, 0.1)  # final LayerNorms that are not the identity
    if name == "bart":  # unscaled embeddings (BART-large's): make them as large as scaled ones, so tokens matter
        inner.shared.weight.mul_(d**0.5)
        model.final_logits_bias[0, 0] = -3.0  # the forced <s> would otherwise repeat itself
    inner.shared.weight[eos] = size.eos_norm * direction


def build_family_dir(name: str, directory: Path, seed: int = 0, size: Size = TEST) -> Family:
    """A saved directory of one family (hub layout), with its model and tokenizer."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokenizer, spm_name = _tokenizer(name, directory, size)
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    start = pad if name == "pegasus" else eos
    torch.manual_seed(seed)
    languages = getattr(tokenizer, "lang_token_to_id", {})  # M2M100's, which its get_vocab() leaves out
    # The tests' models have a spare embedding past the tokenizer's ids (as M2M100's real ones have eight), which
    # must decode as <unk> (Tokenizer.piece); CTranslate2's converter wants none (benchmarks/families.py).
    spare = 1 if size == TEST else 0
    vocab_size = max(len(tokenizer), max([*tokenizer.get_vocab().values(), *languages.values()]) + 1) + spare
    model = _model(name, vocab_size, pad, eos, start, size).eval()
    _shape(name, model, eos, size)
    if name == "bart":  # as bart-large-cnn's: <s> forced after the start symbol
        model.generation_config.forced_bos_token_id = 0
    hf_dir = directory / "hf"
    tokenizer.save_pretrained(str(hf_dir))
    model.save_pretrained(str(hf_dir))
    if spm_name and not (hf_dir / spm_name).exists():  # the hub keeps the SentencePiece model beside tokenizer.json
        shutil.copyfile(directory / "spm" / spm_name, hf_dir / spm_name)
    source, target = SOURCE.get(name, (None, None))
    forced = tokenizer.convert_tokens_to_ids(target if name != "m2m100" else f"__{target}__") if target else None
    if name == "bart":
        forced = 0
    return Family(name, hf_dir, model, tokenizer, pad, eos, start, forced, source, target)
