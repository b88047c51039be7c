"""Speed of the imported public families (NLLB, of model_type m2m_100 as M2M100; BART) against transformers and
CTranslate2.

No public weights reach this machine, so each model is random, base-size (d_model 512, 6 + 6 layers, d_ff 2048,
8 heads, a 6,000-piece tokenizer), made with transformers and shaped as the tests' fixtures are
(tests/model/hf_families.py): outputs follow the source and every sentence stops on its own. The same weights
go to every engine: `transformer import` for ours, the directory for transformers, CTranslate2's converter.
Every engine translates the same held-out made-up sentences, tokenization included, with the same options: beam
--beam, |Y|^1 length penalty, a sentence done once beam hypotheses have ended, at most --max-new tokens, the
target language forced (NLLB: eng_Latn into deu_Latn) or <s> (BART, as bart-large-cnn). NLLB stands for
model_type m2m_100 here: CTranslate2 4.8's converter misses M2M100's language tokens with transformers 5. A speed
ratio means something only where the outputs agree: the report gives each engine's outputs equal to ours.

Each engine runs in a process of its own (CTranslate2's OpenMP runtime slows the others in one), and the rounds
alternate the engines' order; reported: sentences/s per round, and ours over each peer per round.

    python benchmarks/families.py --family nllb bart --dtype float32 int8 --json families.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: model/ and the tests' fixtures

ENGINES = ("ours", "transformers", "ctranslate2")
SOURCE = {"nllb": ("eng_Latn", "deu_Latn")}  # the pair, as the tokenizer names it
Decode = Callable[[list[str]], list[str]]


def build(family: str, work: Path) -> Path:
    """A base-size random model of the family, saved as the hub has it; its directory."""
    from tests.model.hf_families import BASE, build_family_dir

    return build_family_dir(family, work / family, size=BASE).hf_dir


def texts(n: int) -> list[str]:
    """Held-out sentences: the fixtures' made-up words, in sentences the tokenizer was not trained on."""
    import random

    from tests.conftest import make_words
    from tests.model.hf_families import BASE

    rng, words = random.Random(99), make_words(BASE.words)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(4, 20))) for _ in range(n)]


def ours(hf_dir: Path, work: Path, args: argparse.Namespace) -> Decode:
    from model.families import import_model
    from model.translator import Translator

    task = "summarization" if args.family == "bart" else None  # as bart-large-cnn's
    tr = Translator.load(
        import_model(hf_dir, work / "ours", task=task), device="cpu", dtype=args.dtype, threads=args.threads
    )
    pair = {"source_lang": "en", "target_lang": "de"} if tr.tokenizer.multilingual else {}
    # At the limit, transformers ends BART's outputs with a forced EOS (its forced_eos_token_id), one of the
    # --max-new tokens; NLLB's and CTranslate2's end without one, as ours do: so ours' limit is one less for BART.
    limit = args.max_new - 1 if args.family == "bart" else args.max_new
    options = {"length_penalty": 1.0, "length_penalty_form": "average", "max_len_a": 0, "max_len_b": limit}

    def decode(batch: list[str]) -> list[str]:
        out = tr.translate(batch, beam_size=args.beam, early_stopping=True, max_batch_size=32, **pair, **options)
        return [o.text for o in out]

    return decode


def transformers_engine(hf_dir: Path, work: Path, args: argparse.Namespace) -> Decode:
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    model = AutoModelForSeq2SeqLM.from_pretrained(str(hf_dir)).eval()
    if args.dtype == "int8":  # what a transformers user does for int8 on the CPU: dynamic quantization
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    forced = {}
    if SOURCE.get(args.family):  # a multilingual model: from English into German
        source, target = SOURCE[args.family]
        tok.src_lang = source
        forced = {"forced_bos_token_id": tok.convert_tokens_to_ids(target)}

    def decode(batch: list[str]) -> list[str]:
        order = sorted(range(len(batch)), key=lambda i: len(batch[i]))
        out: list[str] = [""] * len(batch)
        for start in range(0, len(order), 32):
            chunk = order[start : start + 32]
            enc = tok([batch[i] for i in chunk], return_tensors="pt", padding=True)
            with torch.inference_mode():
                ids = model.generate(
                    **enc,
                    num_beams=args.beam,
                    length_penalty=1.0,
                    early_stopping=True,
                    max_new_tokens=args.max_new,
                    do_sample=False,
                    **forced,
                )
            for i, text in zip(chunk, tok.batch_decode(ids, skip_special_tokens=True), strict=True):
                out[i] = text
        return out

    return decode


def ctranslate2_engine(hf_dir: Path, work: Path, args: argparse.Namespace) -> Decode:
    import ctranslate2
    from transformers import AutoTokenizer

    # CTranslate2 4.8's BART loader reads normalize_before, which transformers 5's BartConfig dropped (False in
    # BART): a copy of the directory says so.
    source = work / "for-ct2"
    shutil.copytree(hf_dir, source, dirs_exist_ok=True)
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    (source / "config.json").write_text(json.dumps({"normalize_before": False, **config}), encoding="utf-8")
    ctranslate2.converters.TransformersConverter(str(source)).convert(str(work / "ct2"), force=True)
    compute = "int8" if args.dtype == "int8" else "float32"
    translator = ctranslate2.Translator(
        str(work / "ct2"), device="cpu", compute_type=compute, inter_threads=1, intra_threads=args.threads
    )
    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    prefix = ["<s>"]
    if SOURCE.get(args.family):
        tok.src_lang, target = SOURCE[args.family]
        prefix = [target]

    def decode(batch: list[str]) -> list[str]:
        source = [tok.convert_ids_to_tokens(tok(t).input_ids) for t in batch]
        results = translator.translate_batch(
            source,
            target_prefix=[prefix] * len(batch),
            beam_size=args.beam,
            length_penalty=1.0,
            max_decoding_length=args.max_new,
            max_batch_size=32,
        )
        ids = [tok.convert_tokens_to_ids(r.hypotheses[0]) for r in results]
        return list(tok.batch_decode(ids, skip_special_tokens=True))

    return decode


BUILDERS: dict[str, Callable[[Path, Path, argparse.Namespace], Decode]] = {
    "ours": ours,
    "transformers": transformers_engine,
    "ctranslate2": ctranslate2_engine,
}


def _engine(name: str, hf_dir: Path, work: Path, args: argparse.Namespace, todo: list[str], conn: Connection) -> None:
    """An engine's process: build, warm up, then translate the sentences on every "run"."""
    warnings.filterwarnings("ignore")
    decode = BUILDERS[name](hf_dir, work, args)
    decode(todo[:16])  # warm-up, not timed
    conn.send("ready")
    while conn.recv() == "run":
        start = time.perf_counter()
        out = decode(todo)
        conn.send((time.perf_counter() - start, out))


def run_family(family: str, dtype: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    hf_dir = build(family, work)
    todo = texts(args.sentences)
    run_args = argparse.Namespace(**{**vars(args), "dtype": dtype, "family": family})
    spawn = multiprocessing.get_context("spawn")
    procs, conns = {}, {}
    for name in ENGINES:
        conns[name], child = spawn.Pipe()
        procs[name] = spawn.Process(target=_engine, args=(name, hf_dir, work / name, run_args, todo, child))
        procs[name].start()
        assert conns[name].recv() == "ready"
    rates: dict[str, list[float]] = {name: [] for name in ENGINES}
    outputs: dict[str, list[str]] = {}
    for r in range(args.rounds):
        order = ENGINES[r % 3 :] + ENGINES[: r % 3]  # each engine first in turn
        for name in order:
            conns[name].send("run")
            seconds, outputs[name] = conns[name].recv()
            rates[name].append(len(todo) / seconds)
            print(f"{family} {dtype} round {r + 1}: {name} {rates[name][-1]:.1f} sentences/s", file=sys.stderr)
    for name in ENGINES:
        conns[name].send("stop")
        procs[name].join(timeout=30)
    agree = {p: sum(a == b for a, b in zip(outputs["ours"], outputs[p], strict=True)) / len(todo) for p in ENGINES[1:]}
    ratios = {p: [a / b for a, b in zip(rates["ours"], rates[p], strict=True)] for p in ENGINES[1:]}
    return {
        "family": family,
        "dtype": dtype,
        "sentences": len(todo),
        "sentences_per_s": rates,
        "ours_over": {p: {"rounds": r, "median": statistics.median(r)} for p, r in ratios.items()},
        "outputs_equal_to_ours": agree,
        "words_per_output": {n: statistics.mean(len(o.split()) for o in outs) for n, outs in outputs.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", nargs="+", default=["nllb", "bart"], choices=["nllb", "bart"])
    p.add_argument("--dtype", nargs="+", default=["float32", "int8"], choices=["float32", "int8"])
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--max-new", type=int, default=100)  # the fixtures have 128 positions
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.family:
            for dtype in args.dtype:
                results.append(run_family(family, dtype, args, Path(tmp) / f"{family}-{dtype}"))
                print(json.dumps(results[-1]), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
