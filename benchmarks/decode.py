"""Decoding speed of our beam search against transformers and CTranslate2, on the same weights.

Two workloads:

- real (`--hf-dir DIR --text FILE --refs FILE`): a trained Marian model (benchmarks/marian.py trains one on
  the machine's own corpus) and held-out sentences; every engine translates the text (tokenization
  included) with natural stopping and the same options: beam --beam-size, length penalty |Y|^alpha
  (--alpha), at most --max-output tokens, and each sentence ends once beam_size hypotheses have ended
  (CTranslate2's and fairseq's rule; transformers' early_stopping=True). Only the lines our Translator reads
  whole are decoded (common.read_whole: one sentence, nothing kept out), since the peers read every line
  whole and would otherwise do different work on the others. Reported: sentences/s and BLEU
  against the references; a speed ratio means something only where the engines' BLEU agree (within 0.3).
- forced (the default): a random Hugging Face Marian model (and a SentencePiece tokenizer trained on the
  fly); every engine decodes the same source ids and every output is forced to exactly --out-tokens tokens:
  EOS is banned before that length and the search stops there. Tokens/s counts the tokens of each
  sentence's best hypothesis, EOS not counted. Random weights with forced lengths hide what natural stopping
  costs: keep it as a second table.

    python benchmarks/decode.py --hf-dir bench/marian --text bench/marian/test.en --refs bench/marian/test.de
    python benchmarks/decode.py --shape base --threads 2 --sentences 64 --json base.json

A warm-up batch is run first and not timed, and the best (fastest) of --repeats repeats is reported. The
engines take turns within each repeat so that noise from other processes falls on all of them alike.

Each engine lives in a process of its own and only one decodes at a time. In one process they disturb each
other: with CTranslate2 loaded and run once in the same process, our engine's speed fell from about 420 to
about 315 tokens/s and transformers' from 265 to 235 (CTranslate2 brings its own OpenMP runtime and
thread pool).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import common
import torch
from common import EOS, SHAPES, UNK, EngineResult, log, synchronize

ENGINES = ("ours", "transformers", "ctranslate2")
TEXT_ONLY = ("ours-batched",)  # real mode only: ours without refilling the search, for before/after
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Skip(Exception):
    """An engine that cannot run here (not installed, no CUDA build, unsupported dtype)."""


@dataclass(frozen=True)
class Workload:
    """What every engine decodes: the same batches of source ids, each ending in EOS."""

    batches: list[list[list[int]]]
    beam_size: int
    out_tokens: int
    pad: int  # also the decoder start symbol

    @property
    def sentences(self) -> int:
        return sum(len(b) for b in self.batches)


@dataclass
class Decoded(EngineResult):
    """An engine's decoding of the workload: its timing, and the best hypothesis per sentence."""

    outputs: list[list[int]] = field(default_factory=list)  # best hypothesis per sentence, ids without EOS
    skipped: str | None = None


# -- the shared model ---------------------------------------------------------------------------------


def synthetic_text(lines: int, seed: int) -> list[str]:
    """Lines of made-up words from consonant-vowel syllables (no 'x': padding pieces use it)."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]

    def word() -> str:
        return "".join(rng.choice(syllables) for _ in range(rng.randint(1, 4)))

    return [" ".join(word() for _ in range(12)) for _ in range(lines)]


def write_tokenizer(hf_dir: Path, vocab_size: int, seed: int) -> None:
    """source.spm = target.spm trained on made-up text, and vocab.json padded with synthetic pieces up to
    vocab_size (common.write_marian_tokenizer)."""
    common.write_marian_tokenizer(
        hf_dir, synthetic_text(3000, seed), vocab_size, min(1000, vocab_size - 1), "unigram", ("src", "tgt")
    )


def write_hf_model(hf_dir: Path, shape: dict[str, int], vocab_size: int, init_std: float, seed: int) -> None:
    """A random OPUS-MT-like MarianMTModel (swish, scaled and tied embeddings) saved with safetensors.

    A large init_std makes the output distributions peaky, so that engines rarely face near-ties.
    """
    from transformers import MarianMTModel

    config = common.marian_config(shape, vocab_size, init_std)
    torch.manual_seed(seed)
    MarianMTModel(config).save_pretrained(hf_dir)


def make_workload(
    vocab_size: int,
    sentences: int,
    batch_size: int,
    beam_size: int,
    out_tokens: int,
    min_len: int,
    max_len: int,
    seed: int,
) -> Workload:
    """Random source ids (no special ids), min_len..max_len tokens each counting the final EOS."""
    rng = random.Random(seed)
    pad = vocab_size - 1
    ids = [
        [rng.randrange(UNK + 1, pad) for _ in range(rng.randint(min_len, max_len) - 1)] + [EOS]
        for _ in range(sentences)
    ]
    batches = [ids[i : i + batch_size] for i in range(0, sentences, batch_size)]
    return Workload(batches, beam_size, out_tokens, pad)


# -- the engines: each turns one batch of source ids into the best hypothesis' ids per sentence --------

Decode = Callable[[list[list[int]]], list[list[int]]]


def ours_engine(hf_dir: Path, work: Path, wl: Workload, args: argparse.Namespace) -> tuple[str, Decode]:
    from model.beam import beam_search, pad_batch
    from model.config import DecodingConfig
    from model.marian import import_marian
    from model.translator import Translator

    import_marian(hf_dir, work / "ours")
    translator = Translator.load(work / "ours", device=args.device, dtype=args.dtype, threads=args.threads)
    model, special = translator.model, translator.tokenizer.special
    assert special.eos == EOS and special.pad == wl.pad, special
    cfg = DecodingConfig(
        beam_size=wl.beam_size,
        n_best=1,
        min_length=wl.out_tokens,
        max_len_a=0,
        max_len_b=wl.out_tokens,
        length_penalty=1.0,
        length_penalty_form="average",
    )
    device = next(model.parameters()).device

    def decode(batch: list[list[int]]) -> list[list[int]]:
        src, src_mask = pad_batch(batch, special.pad, device)
        hyps = beam_search(model, src, src_mask, cfg, special)
        synchronize(args.device)
        return [nbest[0].tokens for nbest in hyps]

    return f"{args.device} {args.dtype}", decode


def transformers_engine(hf_dir: Path, work: Path, wl: Workload, args: argparse.Namespace) -> tuple[str, Decode]:
    from transformers import MarianMTModel

    torch.set_num_threads(args.threads)
    model = MarianMTModel.from_pretrained(hf_dir, dtype=TORCH_DTYPES[args.dtype]).to(args.device).eval()
    options = dict(
        num_beams=wl.beam_size,
        num_return_sequences=1,
        do_sample=False,
        length_penalty=1.0,
        early_stopping=True,
        min_new_tokens=wl.out_tokens,
        max_new_tokens=wl.out_tokens,
        use_cache=True,
        forced_eos_token_id=None,  # Marian's config forces EOS at the last step otherwise
        bad_words_ids=[[wl.pad]],
        decoder_start_token_id=wl.pad,
        pad_token_id=wl.pad,
        eos_token_id=EOS,
    )

    def decode(batch: list[list[int]]) -> list[list[int]]:
        src, mask = _pad(batch, wl.pad, args.device)
        with torch.inference_mode():
            out = model.generate(input_ids=src, attention_mask=mask, **options)
        synchronize(args.device)
        return [_until(row[1:].tolist(), (EOS, wl.pad)) for row in out]  # row[0] is the start symbol

    return f"{args.device} {args.dtype}", decode


def ctranslate2_engine(hf_dir: Path, work: Path, wl: Workload, args: argparse.Namespace) -> tuple[str, Decode]:
    try:
        import ctranslate2
    except ImportError as e:
        raise Skip(f"ctranslate2 is not installed ({e})") from e
    if args.device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise Skip("this CTranslate2 build has no CUDA support (or sees no GPU)")
    if args.dtype not in ctranslate2.get_supported_compute_types(args.device):
        raise Skip(f"compute type {args.dtype} is not supported on {args.device}")
    ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(str(work / "ct2"), force=True)
    translator = ctranslate2.Translator(
        str(work / "ct2"), device=args.device, inter_threads=1, intra_threads=args.threads, compute_type=args.dtype
    )
    vocab: dict[str, int] = json.loads((hf_dir / "vocab.json").read_text(encoding="utf-8"))
    pieces = {i: p for p, i in vocab.items()}

    def decode(batch: list[list[int]]) -> list[list[int]]:
        # CTranslate2 adds no EOS to the source of a converted Marian model (add_source_eos is false), so
        # the source ends in '</s>' as for the other engines. max_decoding_length counts output tokens
        # without EOS and stops there, so min = max = out_tokens gives exactly out_tokens tokens.
        results = translator.translate_batch(
            [[pieces[i] for i in ids] for ids in batch],
            beam_size=wl.beam_size,
            num_hypotheses=1,
            length_penalty=1.0,
            min_decoding_length=wl.out_tokens,
            max_decoding_length=wl.out_tokens,
            return_end_token=False,
            max_batch_size=0,
        )
        return [[vocab[p] for p in r.hypotheses[0]] for r in results]

    return f"{args.device} {args.dtype}", decode


# -- real mode: each engine turns a batch of texts into the best translation of each --------------------

TextDecode = Callable[[list[str]], list[str]]


def _ours(hf_dir: Path, work: Path, args: argparse.Namespace) -> tuple[Any, Any]:
    """Our Translator on the imported Marian weights, and the DecodingConfig of the real workload."""
    from model.config import DecodingConfig
    from model.marian import import_marian
    from model.translator import Translator

    import_marian(hf_dir, work / "ours")
    translator = Translator.load(work / "ours", device=args.device, dtype=args.dtype, threads=args.threads)
    cfg = DecodingConfig(
        beam_size=args.beam_size,
        length_penalty=args.alpha,
        length_penalty_form="average",
        early_stopping=not args.bound,
    ).with_max_length(args.max_output)
    return translator, cfg


def ours_text_engine(hf_dir: Path, work: Path, args: argparse.Namespace) -> tuple[str, TextDecode]:
    """Translator.translate: one continuous search, refilled as sentences finish."""
    translator, cfg = _ours(hf_dir, work, args)

    def decode(texts: list[str]) -> list[str]:
        out = [t.text for t in translator.translate(texts, cfg, max_batch_size=args.batch_size, truncate=True)]
        synchronize(args.device)
        return out

    return f"{args.device} {args.dtype}", decode


def ours_batched_text_engine(hf_dir: Path, work: Path, args: argparse.Namespace) -> tuple[str, TextDecode]:
    """Ours as before continuous batching: length-sorted batches, each searched until its last sentence ends."""
    translator, cfg = _ours(hf_dir, work, args)

    def decode(texts: list[str]) -> list[str]:
        ids = translator.encode(texts, truncate=True)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = [""] * len(ids)
        for start in range(0, len(order), args.batch_size):
            batch = order[start : start + args.batch_size]
            for i, nbest in zip(batch, translator.search([ids[i] for i in batch], cfg), strict=True):
                out[i] = translator.tokenizer.decode_target(nbest[0].tokens)
        synchronize(args.device)
        return out

    return f"{args.device} {args.dtype}", decode


def transformers_text_engine(hf_dir: Path, work: Path, args: argparse.Namespace) -> tuple[str, TextDecode]:
    from transformers import MarianMTModel, MarianTokenizer

    torch.set_num_threads(args.threads)
    tokenizer = MarianTokenizer.from_pretrained(hf_dir)
    model = MarianMTModel.from_pretrained(hf_dir, dtype=TORCH_DTYPES[args.dtype]).to(args.device).eval()

    def decode(texts: list[str]) -> list[str]:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # batches of similar length, as ours
        out = [""] * len(texts)
        for start in range(0, len(order), args.batch_size):
            batch = order[start : start + args.batch_size]
            enc = tokenizer([texts[i] for i in batch], return_tensors="pt", padding=True).to(args.device)
            with torch.inference_mode():
                ids = model.generate(
                    **enc,
                    num_beams=args.beam_size,
                    length_penalty=args.alpha,
                    early_stopping=not args.bound,
                    max_new_tokens=args.max_output + 1,
                    bad_words_ids=[[tokenizer.pad_token_id]],
                )
            for i, text in zip(batch, tokenizer.batch_decode(ids, skip_special_tokens=True), strict=True):
                out[i] = text
        synchronize(args.device)
        return out

    return f"{args.device} {args.dtype}", decode


def ctranslate2_text_engine(hf_dir: Path, work: Path, args: argparse.Namespace) -> tuple[str, TextDecode]:
    try:
        import ctranslate2
    except ImportError as e:
        raise Skip(f"ctranslate2 is not installed ({e})") from e
    import sentencepiece as spm

    if args.bound:
        raise Skip("CTranslate2 has no exact-bound stopping rule")
    if args.device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise Skip("this CTranslate2 build has no CUDA support (or sees no GPU)")
    ctranslate2.converters.TransformersConverter(str(hf_dir)).convert(str(work / "ct2"), force=True)
    translator = ctranslate2.Translator(
        str(work / "ct2"),
        device=args.device,
        inter_threads=1,
        intra_threads=args.threads,
        compute_type=args.ct2_compute or args.dtype,
    )
    source = spm.SentencePieceProcessor(model_file=str(hf_dir / "source.spm"))
    target = spm.SentencePieceProcessor(model_file=str(hf_dir / "target.spm"))

    def decode(texts: list[str]) -> list[str]:
        pieces = [source.encode(t, out_type=str) + ["</s>"] for t in texts]
        results = translator.translate_batch(
            pieces,
            beam_size=args.beam_size,
            length_penalty=args.alpha,
            max_decoding_length=args.max_output,
            max_batch_size=args.batch_size,
        )
        return [target.decode_pieces(r.hypotheses[0]) for r in results]

    return f"{args.device} {args.ct2_compute or args.dtype}", decode


BUILDERS = {"ours": ours_engine, "transformers": transformers_engine, "ctranslate2": ctranslate2_engine}
TEXT_BUILDERS = {
    "ours": ours_text_engine,
    "ours-batched": ours_batched_text_engine,
    "transformers": transformers_text_engine,
    "ctranslate2": ctranslate2_text_engine,
}


def _pad(batch: list[list[int]], pad: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    S = max(len(ids) for ids in batch)
    src = torch.tensor([ids + [pad] * (S - len(ids)) for ids in batch], device=device)
    mask = torch.tensor([[1] * len(ids) + [0] * (S - len(ids)) for ids in batch], device=device)
    return src, mask


def _until(ids: list[int], stops: tuple[int, ...]) -> list[int]:
    for n, i in enumerate(ids):
        if i in stops:
            return ids[:n]
    return ids


# -- the run ------------------------------------------------------------------------------------------


class EngineProcess:
    """One engine, built and warmed up in a process of its own, decoding the workload when asked."""

    def __init__(self, name: str, hf_dir: Path, work: Path, wl: Any, args: argparse.Namespace) -> None:
        self.name = name
        spawn = multiprocessing.get_context("spawn")
        self.conn, child = spawn.Pipe()
        self.process = spawn.Process(target=_engine_main, args=(name, hf_dir, work, wl, args, child), daemon=True)
        self.process.start()
        child.close()

    def ready(self) -> tuple[str, str | None]:
        """(compute, None) once built and warmed up, or ("-", why) when the engine cannot run here."""
        kind, value = self._receive()
        return ("-", value) if kind == "skip" else (value, None)

    def decode_all(self) -> tuple[float, list[list[int]]]:
        """Wall seconds to decode every batch, and the best hypothesis of every sentence."""
        self.conn.send("run")
        seconds, outputs = self._receive()
        return seconds, outputs

    def profile(self, rows: int) -> None:
        self.conn.send(("profile", rows))
        self._receive()

    def _receive(self) -> Any:
        try:
            return self.conn.recv()
        except EOFError:
            self.process.join(timeout=5)
            raise RuntimeError(
                f"the {self.name} engine's process died (exit code {self.process.exitcode}); its traceback is above"
            ) from None

    def close(self) -> None:
        self.conn.send("stop")
        self.process.join(timeout=30)


def _engine_main(name: str, hf_dir: Path, work: Path, wl: Any, args: argparse.Namespace, conn: Connection) -> None:
    """The engine process: build, warm up, then decode the workload on every "run"."""
    warnings.filterwarnings("ignore")
    base, _, compute_type = name.partition(":")
    if compute_type:  # "ours:int8", "ctranslate2:int8_float32": this engine's own compute type
        args = argparse.Namespace(**{**vars(args), "dtype": compute_type, "ct2_compute": compute_type})
    try:
        if args.text is not None:
            compute, decode = TEXT_BUILDERS[base](hf_dir, work, args)
        else:
            compute, decode = BUILDERS[base](hf_dir, work, wl, args)
    except Skip as e:
        conn.send(("skip", str(e)))
        return
    decode(wl.batches[0][:32])  # warm-up, not timed
    conn.send(("ready", compute))
    while (message := conn.recv()) != "stop":
        if message == "run":
            start = time.perf_counter()
            outputs = [hyp for batch in wl.batches for hyp in decode(batch)]
            conn.send((time.perf_counter() - start, outputs))
        else:
            profile(decode, wl.batches[0], message[1], args.device)
            sys.stdout.flush()
            conn.send(None)


def run(args: argparse.Namespace) -> dict[str, Any]:
    shape = SHAPES[args.shape]
    wl = make_workload(
        args.vocab_size,
        args.sentences,
        args.batch_size,
        args.beam_size,
        args.out_tokens,
        args.min_src,
        args.max_src,
        args.seed,
    )
    results: dict[str, Decoded] = {}
    engines: dict[str, EngineProcess] = {}
    with tempfile.TemporaryDirectory(prefix="decode-bench-") as tmp:
        work = Path(tmp)
        hf_dir = work / "hf"
        hf_dir.mkdir()
        log(f"building a random Marian model ({args.shape}, vocab {args.vocab_size}) in {hf_dir}")
        write_tokenizer(hf_dir, args.vocab_size, args.seed)
        write_hf_model(hf_dir, shape, args.vocab_size, args.init_std, args.seed)
        for name in args.engines:  # one at a time, so that no build or warm-up overlaps another's
            engine = EngineProcess(name, hf_dir, work, wl, args)
            compute, skipped = engine.ready()
            results[name] = Decoded(name, compute, skipped=skipped)
            if skipped:
                log(f"{name}: skipped: {skipped}")
                continue
            engines[name] = engine
            log(f"{name}: ready ({compute})")
        try:
            for r in range(args.repeats):
                for name, engine in engines.items():  # engines take turns, so load from elsewhere hits all alike
                    time.sleep(0.25)  # let the previous engine's idle worker threads stop spinning
                    seconds, outputs = engine.decode_all()
                    results[name].seconds.append(seconds)
                    results[name].outputs = outputs
                    results[name].tokens = sum(len(hyp) for hyp in outputs)
                    log(f"repeat {r + 1}/{args.repeats} {name}: {seconds:.2f} s")
            summary = report(args, wl, results)
            if args.profile and "ours" in engines:
                engines["ours"].profile(args.profile)
        finally:
            for engine in engines.values():
                engine.close()
    return summary


def run_text(args: argparse.Namespace) -> dict[str, Any]:
    """The real workload: every engine translates the held-out text; sentences/s and BLEU."""
    import sacrebleu

    from model.marian import import_marian

    texts = [line.strip() for line in args.text.read_text(encoding="utf-8").splitlines()][: args.sentences or None]
    refs = [line.strip() for line in args.refs.read_text(encoding="utf-8").splitlines()][: len(texts)]
    seconds: dict[str, list[float]] = {}
    outputs: dict[str, list[str]] = {}
    computes: dict[str, str] = {}
    engines: dict[str, EngineProcess] = {}
    with tempfile.TemporaryDirectory(prefix="decode-bench-") as tmp:
        import_marian(args.hf_dir, Path(tmp) / "whole")
        whole = common.read_whole(Path(tmp) / "whole", texts)
        log(f"{len(whole)} of {len(texts)} texts are one sentence with nothing kept out: those are decoded")
        texts, refs = [texts[i] for i in whole], [refs[i] for i in whole]
        wl = TextWorkload([texts])
        for name in args.engines:
            engine = EngineProcess(name, args.hf_dir, Path(tmp), wl, args)
            compute, skipped = engine.ready()
            if skipped:
                log(f"{name}: skipped: {skipped}")
                continue
            engines[name], computes[name], seconds[name] = engine, compute, []
            log(f"{name}: ready ({compute})")
        try:
            for r in range(args.repeats):
                for name, engine in engines.items():
                    time.sleep(0.25)
                    took, outputs[name] = engine.decode_all()
                    seconds[name].append(took)
                    log(f"repeat {r + 1}/{args.repeats} {name}: {took:.2f} s")
        finally:
            for engine in engines.values():
                engine.close()
    rule = "the exact bound" if args.bound else "beam_size ended"
    print(
        f"real text: {len(texts)} sentences of {args.text}, beam {args.beam_size}, |Y|^{args.alpha:g}, at most "
        f"{args.max_output} tokens, stopping at {rule}, batches of {args.batch_size}, {args.threads} threads; "
        f"best of {args.repeats} repeats after a warm-up batch"
    )
    print(f"{'engine':<14} {'compute':<16} {'sentences/s':>11} {'median':>8} {'BLEU':>6}  identical to ours")
    summary: dict[str, Any] = {
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "sentences": len(texts),
        "engines": {},
        "ratios": {},
    }
    for name, out in outputs.items():
        rate, median = len(texts) / min(seconds[name]), len(texts) / statistics.median(seconds[name])
        bleu = sacrebleu.corpus_bleu(out, [refs]).score
        same = sum(a == b for a, b in zip(outputs.get("ours", []), out, strict=False))
        summary["engines"][name] = {
            "compute": computes[name],
            "sentences_per_s": rate,
            "median_sentences_per_s": median,
            "bleu": bleu,
            "seconds": seconds[name],
            "identical_to_ours": same,
        }
        print(f"{name:<14} {computes[name]:<16} {rate:>11.1f} {median:>8.1f} {bleu:>6.2f}  {same}/{len(texts)}")
    for mine, ours in summary["engines"].items():
        if mine.partition(":")[0] != "ours":
            continue
        for name, e in summary["engines"].items():
            if name != mine and name.partition(":")[0] not in ("ours", "ours-batched"):
                ratio = ours["sentences_per_s"] / e["sentences_per_s"]
                agree = abs(ours["bleu"] - e["bleu"]) <= 0.3
                summary["ratios"][f"{mine}/{name}"] = ratio
                verdict = "agrees" if agree else "DIFFERS: do not trust the ratio"
                print(f"{mine} / {name}: {ratio:.2f}x (BLEU {verdict})")
    return summary


@dataclass(frozen=True)
class TextWorkload:
    """The real workload: one batch holding every text (each engine batches it its own way)."""

    batches: list[list[str]]


def report(args: argparse.Namespace, wl: Workload, results: dict[str, Decoded]) -> dict[str, Any]:
    shape = SHAPES[args.shape]
    print(
        f"shape {args.shape} (N={shape['N']}, d_model {shape['d_model']}, d_ff {shape['d_ff']}, h {shape['h']}, "
        f"vocab {args.vocab_size}), {args.threads} threads, {wl.sentences} sentences in batches of "
        f"{args.batch_size}, beam {wl.beam_size}, {wl.out_tokens} output tokens forced, source "
        f"{args.min_src}-{args.max_src} tokens; best of {args.repeats} repeats after a warm-up batch"
    )
    base = results.get("ours")
    print(
        f"{'engine':<14} {'compute':<16} {'tokens/s':>9} {'median':>9} {'best s':>8} {'tokens':>7} "
        f"{'distinct/out':>12}  identical to ours"
    )
    identical: dict[str, int] = {}
    for name, r in results.items():
        if r.skipped:
            print(f"{name:<14} skipped: {r.skipped}")
            continue
        same = "-"
        if base is not None and not base.skipped and name != "ours":
            identical[name] = sum(a == b for a, b in zip(base.outputs, r.outputs, strict=True))
            same = f"{identical[name]}/{wl.sentences}"
        distinct = statistics.mean(len(set(hyp)) for hyp in r.outputs)
        print(
            f"{name:<14} {r.compute:<16} {r.tokens_per_s:>9.1f} {r.median_tokens_per_s:>9.1f} "
            f"{min(r.seconds):>8.2f} {r.tokens:>7} {distinct:>12.1f}  {same}"
        )
    peers = [r for name, r in results.items() if name.partition(":")[0] != "ours" and not r.skipped]
    if len(peers) == 2:  # the peers against each other, to tell our differences from theirs
        identical[f"{peers[0].name}/{peers[1].name}"] = same_peers = sum(
            a == b for a, b in zip(peers[0].outputs, peers[1].outputs, strict=True)
        )
        print(f"{peers[0].name} and {peers[1].name} identical: {same_peers}/{wl.sentences}")
    ratios = {}
    for mine, m in results.items():
        if mine.partition(":")[0] != "ours" or m.skipped:
            continue
        for name, r in results.items():
            if name.partition(":")[0] != "ours" and not r.skipped:
                ratios[f"{mine}/{name}"] = m.tokens_per_s / r.tokens_per_s
                print(f"{mine} / {name}: {ratios[f'{mine}/{name}']:.2f}x")
    return {
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "shape": shape,
        "engines": {
            name: {k: v for k, v in asdict(r).items() if k != "outputs"}
            | {"tokens_per_s": r.tokens_per_s, "median_tokens_per_s": r.median_tokens_per_s}
            for name, r in results.items()
        },
        "ratios": ratios,
        "identical": identical,
        "sentences": wl.sentences,
    }


def profile(decode: Decode, batch: list[list[int]], rows: int, device: str) -> None:
    """torch.profiler over one batch of our engine: the ops with the most self time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = device.startswith("cuda")
    with torch_profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        decode(batch)
    print(prof.key_averages().table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total", row_limit=rows))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--shape", choices=sorted(SHAPES), default="base")
    p.add_argument("--threads", type=int, default=2, help="CPU threads of every engine")
    p.add_argument("--sentences", type=int, default=64, help="timed sentences per repeat (real: 0 is all)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--out-tokens", type=int, default=48, help="output length forced on every engine")
    p.add_argument("--repeats", type=int, default=3, help="the fastest repeat is reported")
    p.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated subset of {','.join(ENGINES)}")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--dtype",
        choices=sorted(TORCH_DTYPES),
        default="float32",
        help="our engine's dtype; the peers use it too where they can",
    )
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--init-std", type=float, default=0.15, help="std of the random weights")
    p.add_argument("--min-src", type=int, default=10, help="shortest source, EOS included")
    p.add_argument("--max-src", type=int, default=40, help="longest source, EOS included")
    common.add_run_options(p, "one batch of our engine")
    real = p.add_argument_group("real workload (trained model, held-out text, natural stopping)")
    real.add_argument("--hf-dir", type=Path, help="a trained Hugging Face Marian directory (benchmarks/marian.py)")
    real.add_argument("--text", type=Path, help="source sentences, one per line")
    real.add_argument("--refs", type=Path, help="reference translations, one per line")
    real.add_argument("--alpha", type=float, default=0.6, help="length penalty |Y|^alpha")
    real.add_argument("--max-output", type=int, default=128, help="most output tokens")
    real.add_argument(
        "--bound",
        action="store_true",
        help="stop by the exact bound (early_stopping=False) instead of at beam_size ended",
    )
    real.add_argument("--ct2-compute", default=None, help="CTranslate2's compute type (default: --dtype)")
    args = p.parse_args(argv)
    if args.text is not None and (args.hf_dir is None or args.refs is None):
        p.error("--text needs --hf-dir and --refs")
    given = argv if argv is not None else sys.argv
    if args.text is not None and "--batch-size" not in given:
        args.batch_size = 32
    if args.text is not None and "--sentences" not in given:
        args.sentences = 0  # every line
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    known = ENGINES + (TEXT_ONLY if args.text is not None else ())
    unknown = sorted({e for e in args.engines if e.partition(":")[0] not in known})
    if unknown:
        p.error(f"unknown engines {unknown}; choose from {list(known)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda, but torch sees no GPU")
    if not 2 <= args.min_src <= args.max_src:
        p.error("need 2 <= --min-src <= --max-src")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    common.main(run_text if args.text is not None else run, args)


if __name__ == "__main__":
    main()
