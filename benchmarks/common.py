"""What the benchmarks share: the model shapes, an engine's timed result, the random OPUS-MT-like Marian config,
and a quiet start."""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

SHAPES: dict[str, dict[str, int]] = {  # the paper's names; "small" is model.config's small preset
    "small": {"N": 3, "d_model": 256, "d_ff": 1024, "h": 4},
    "base": {"N": 6, "d_model": 512, "d_ff": 2048, "h": 8},
}
EOS, UNK = 0, 1  # Marian's ids; <pad> is the last id (vocab_size - 1) and also the decoder's start symbol


@dataclass
class EngineResult:
    """One engine's timed work: its name, how it computes (dtype, threads), the wall time of each repeat and the
    tokens each repeat processed."""

    name: str
    compute: str
    seconds: list[float] = field(default_factory=list)  # wall time of one round of the work, per repeat
    tokens: int = 0  # tokens of one round: output tokens (decoding), target tokens (training)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / min(self.seconds) if self.seconds else math.nan

    @property
    def median_tokens_per_s(self) -> float:
        return self.tokens / statistics.median(self.seconds) if self.seconds else math.nan


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


def write_marian_tokenizer(
    hf_dir: Path, sentences: list[str], vocab_size: int, pieces: int, model_type: str, langs: tuple[str, str]
) -> dict[str, int]:
    """One SentencePiece model of `pieces` pieces trained on sentences, as source.spm and target.spm in
    Marian's layout (</s> 0, <unk> 1), and vocab.json padded with synthetic pieces up to vocab_size, '<pad>'
    last; the tokenizer files transformers' MarianTokenizer writes beside them. Returns the vocabulary."""
    import sentencepiece as spm
    from transformers import MarianTokenizer

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=pieces,
        model_type=model_type,
        eos_id=EOS,
        unk_id=UNK,
        bos_id=-1,
        pad_id=-1,
        character_coverage=1.0,
        minloglevel=2,
        num_threads=2,
    )
    for name in ("source.spm", "target.spm"):
        (hf_dir / name).write_bytes(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    k = 0
    while len(vocab) < vocab_size - 1:
        vocab.setdefault(f"\u2581x{k}", len(vocab))
        k += 1
    vocab["<pad>"] = vocab_size - 1
    (hf_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    paths = {name: str(hf_dir / f"{name}.spm") for name in ("source", "target")}
    tokenizer = MarianTokenizer(
        source_spm=paths["source"],
        target_spm=paths["target"],
        vocab=str(hf_dir / "vocab.json"),
        source_lang=langs[0],
        target_lang=langs[1],
    )
    assert tokenizer.pad_token_id == vocab_size - 1 and tokenizer.eos_token_id == EOS
    tokenizer.save_pretrained(hf_dir)
    return vocab


def read_whole(checkpoint: Path, texts: list[str]) -> list[int]:
    """The indices of the texts that the service reads as they are: one sentence (model.segment), nothing kept out
    of it (model.protect). The service translates the others sentence by sentence and puts numbers, URLs and
    code spans back itself, where the peers (CTranslate2, transformers) read each line whole: they would not do
    the same work."""
    from model.translator import Translator

    tr = Translator.load(checkpoint, device="cpu")
    return [
        i
        for i, segmented in enumerate(tr.segment(texts))
        if len(segmented.sentences) == 1 and not tr.encode_segments([segmented])[0].protected.kept
    ]


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def add_run_options(p: argparse.ArgumentParser, profiled: str) -> None:
    """The options every engine comparison takes: the seed, a profile of `profiled` afterwards, a JSON copy."""
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="ROWS",
        help=f"afterwards, profile {profiled} and print this many ops by self time",
    )
    p.add_argument("--json", type=Path, help="also write the results here")


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
