"""The `transformer translate`, `transformer import` and `transformer quantize` subcommands."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import io
import sys
from collections.abc import Iterator
from itertools import islice
from typing import TYPE_CHECKING, TextIO

from model.config import DecodingConfig
from model.errors import ConfigError

if TYPE_CHECKING:
    from model.output import Output
    from model.tokenizer import Languages
    from model.translator import Translator


def add_decoding_options(p: argparse.ArgumentParser) -> None:
    """Beam search options shared by every command that decodes. One not given is the checkpoint's own
    (its recipe's `decoding`), else the paper's (§6.1), shown here."""
    d = DecodingConfig()

    def own(default: object) -> str:
        return f"(default: the model's own, else {default})"

    p.add_argument("--beam-size", type=int, default=None, help=own(d.beam_size))
    p.add_argument(
        "--n-best", type=int, default=None, help="hypotheses printed per input, tab-separated " + own(d.n_best)
    )
    p.add_argument("--length-penalty", type=float, default=None, help="alpha " + own(d.length_penalty))
    p.add_argument(
        "--length-penalty-form",
        choices=["gnmt", "average"],
        default=None,
        help="gnmt: ((5+|Y|)/6)^alpha as in the paper; average: |Y|^alpha as in fairseq " + own(d.length_penalty_form),
    )
    p.add_argument(
        "--max-len-a", type=float, default=None, help="longest output: a * input tokens + b " + own(d.max_len_a)
    )
    p.add_argument("--max-len-b", type=int, default=None, help=own(d.max_len_b))
    p.add_argument("--max-length", type=int, default=None, help="longest output in tokens, instead of a and b")
    p.add_argument("--min-length", type=int, default=None, help=own(d.min_length))
    p.add_argument("--no-repeat-ngram-size", type=int, default=None, help=own(d.no_repeat_ngram_size))
    p.add_argument(
        "--early-stopping",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="stop an input once beam-size hypotheses have ended (fairseq, CTranslate2); "
        "--no-early-stopping searches until no live hypothesis can beat them (tensor2tensor) " + own(d.early_stopping),
    )


def decoding_config(args: argparse.Namespace, base: DecodingConfig) -> DecodingConfig:
    """base (the checkpoint's own options) with the options add_decoding_options added that were given."""
    names = (*DecodingConfig.OPTIONS, "max_len_a", "max_len_b")
    given = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    if args.max_length is not None and args.min_length is not None and args.min_length > args.max_length:
        raise ConfigError(f"--min-length {args.min_length} is more than --max-length {args.max_length}")
    return dataclasses.replace(base, **given).with_max_length(args.max_length)


def add_language_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--source-lang", default=None, help=what)
    p.add_argument("--target-lang", default=None)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "translate", help="translate lines from stdin to stdout, batched; or a file, keeping its structure (--file)"
    )
    p.add_argument("--model", required=True, help="checkpoint directory")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16, or int8 (CPU only)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads")
    p.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    p.add_argument("--scores", action="store_true", help="print each hypothesis' score before it")
    p.add_argument("--truncate", action="store_true", help="cut inputs longer than the model's limit")
    p.add_argument(
        "--no-segment",
        action="store_true",
        help="read each line as one sentence (input split already); by default a line is cut into sentences, "
        "translated one by one and joined back",
    )
    p.add_argument(
        "--skip-errors",
        action="store_true",
        help="write an empty line for an input the model cannot take (too long, invalid Unicode) "
        "and go on, instead of stopping there",
    )
    p.add_argument(
        "--file",
        default=None,
        help="translate this file instead of stdin, keeping its structure: .txt, .srt, .vtt, .md, .html, .epub, "
        ".docx, .pptx, .odt or .odp (needs --out)",
    )
    p.add_argument("--out", default=None, help="where --file's translation is written (same format)")
    add_language_options(p, "a multilingual model's source and target language, as it names them (default: its own)")
    add_decoding_options(p)
    p.set_defaults(run=run_translate)

    p = sub.add_parser(
        "import",
        help="convert a Hugging Face directory into our checkpoint: marian, m2m_100 (M2M100, NLLB), mbart "
        "(mBART-50) or pegasus, by its config.json",
    )
    p.add_argument(
        "paths", nargs="+", metavar="SRC OUT", help="the directory to import and the checkpoint directory to write"
    )
    p.add_argument("--task", choices=["translation", "summarization"], default=None, help="where SRC does not say")
    add_language_options(p, "the languages the checkpoint translates between by default (a multilingual one)")
    p.set_defaults(run=run_import)

    p = sub.add_parser("quantize", help="write an int8 copy of a checkpoint, for int8 inference on the CPU")
    p.add_argument("src", help="the float checkpoint directory")
    p.add_argument("out", help="the int8 checkpoint directory to write")
    p.add_argument("--force", action="store_true", help="replace a checkpoint already in OUT")
    p.set_defaults(run=run_quantize)


def chunks(lines: TextIO, size: int) -> Iterator[list[str]]:
    it = (line.rstrip("\n") for line in lines)
    while chunk := list(islice(it, size)):
        yield chunk


def run_translate(args: argparse.Namespace) -> int:
    """Translate stdin to stdout line by line, in chunks. A line the model cannot take (too long, invalid
    Unicode) is named by its number: the run stops there after writing every line before it, or, with
    --skip-errors, writes an empty line for it and goes on. With --file, a file (run_translate_file)."""
    from model.errors import InputError
    from model.translator import Translator

    if (args.file is None) != (args.out is None):
        raise InputError("--file and --out go together: the file to translate and where its translation goes")
    tr = Translator.load(args.model, device=args.device, dtype=args.dtype, threads=args.threads)
    cfg = decoding_config(args, tr.meta.decoding)
    languages = tr.languages(args.source_lang, args.target_lang)  # an unknown language stops here
    if args.file is not None:
        return run_translate_file(tr, cfg, args)
    # Bytes that are not UTF-8 become lone surrogates, which the tokenizer refuses with a clear InputError.
    source = (
        io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
        if hasattr(sys.stdin, "buffer")
        else sys.stdin
    )
    translate = functools.partial(
        tr.translate,
        config=cfg,
        truncate=args.truncate,
        segment=not args.no_segment,
        max_batch_size=args.batch_size,
        source_lang=args.source_lang,
        target_lang=args.target_lang,
    )
    done = 0  # lines before this chunk
    for lines in chunks(source, max(args.batch_size * 8, 64)):
        problems = {
            i: problem
            for i, line in enumerate(lines)
            if (problem := line_problem(tr, line, done + i + 1, args, languages)) is not None
        }
        first = min(problems, default=None)
        if first is not None and not args.skip_errors:
            write(translate(lines[:first]), args)
            raise InputError(f"{problems[first]}; pass --skip-errors to leave such lines empty and go on")
        good = [line for i, line in enumerate(lines) if i not in problems]
        results = iter(translate(good))
        for i in range(len(lines)):
            if i in problems:
                print(f"warning: {problems[i]}: its line is left empty", file=sys.stderr)
                print("", flush=True)
            else:
                write([next(results)], args)
        done += len(lines)
    return 0


FILE_CHUNK = 256  # texts of a file translated at a time: memory holds one chunk's search, not the file's
CLI_LIMITS = dict(max_bytes=2**31, max_unzipped_bytes=2**33, max_entries=10**6, max_texts=10**8)  # a user's own


def run_translate_file(tr: Translator, cfg: DecodingConfig, args: argparse.Namespace) -> int:
    """Translate --file into --out in the same format, its structure kept (model.files), showing progress."""
    from pathlib import Path

    from tqdm import tqdm

    from model.errors import FileError, InputTooLongError
    from model.files import FileLimits, read_file

    source = Path(args.file)
    try:
        data = source.read_bytes()
    except OSError as e:
        raise FileError(str(source), e.strerror or str(e)) from None
    read = read_file(source.name, data, FileLimits(**CLI_LIMITS))
    outputs = []
    with tqdm(total=len(read.texts), unit="text", desc=source.name, file=sys.stderr) as progress:
        for start in range(0, len(read.texts), FILE_CHUNK):
            chunk = read.texts[start : start + FILE_CHUNK]
            try:
                done = tr.translate(
                    chunk,
                    cfg,
                    align=read.align,
                    truncate=args.truncate,
                    max_batch_size=args.batch_size,
                    source_lang=args.source_lang,
                    target_lang=args.target_lang,
                )
            except InputTooLongError as e:
                where = start + (e.index or 0) + 1
                raise FileError(source.name, f"text {where} (a line, paragraph or cue): {e}") from None
            outputs += [o.best for o in done]
            progress.update(len(chunk))
    Path(args.out).write_bytes(read.render(outputs))
    print(f"{source.name}: {len(read.texts)} texts translated into {args.out}", file=sys.stderr)
    return 0


def line_problem(tr: Translator, line: str, number: int, args: argparse.Namespace, languages: Languages) -> str | None:
    """Why the model cannot take this input line, naming it by its number, or None."""
    from model.errors import InputError, InputTooLongError
    from model.segment import whole

    try:
        texts = [whole(line)] if args.no_segment else tr.segment([line], args.source_lang)
        tr.encode_segments(texts, args.truncate, languages)
    except InputTooLongError as e:
        where = f"line {number}" if e.sentence is None else f"line {number}, sentence {e.sentence},"
        return f"{where} has {e.length} tokens, more than the model's limit of {e.limit} (--truncate cuts it)"
    except InputError as e:
        return f"line {number}: {e}"
    return None


def write(outputs: list[Output], args: argparse.Namespace) -> None:
    for t in outputs:
        fields = [f"{h.score:.4f}\t{h.text}" if args.scores else h.text for h in t.hypotheses]
        print("\t".join(fields), flush=True)


def run_import(args: argparse.Namespace) -> int:
    """transformer import SRC OUT (the family read from SRC's config.json), or the older import marian SRC OUT."""
    from model.errors import InputError
    from model.families import import_model
    from model.marian import import_marian

    paths = args.paths
    if len(paths) == 3 and paths[0] == "marian":
        out = import_marian(paths[1], paths[2], source_lang=args.source_lang, target_lang=args.target_lang)
    elif len(paths) == 2:
        out = import_model(paths[0], paths[1], args.source_lang, args.target_lang, args.task)
    else:
        raise InputError(f"import takes SRC OUT (or marian SRC OUT), got {' '.join(paths)}")
    print(f"wrote {out}", file=sys.stderr)
    return 0


def run_quantize(args: argparse.Namespace) -> int:
    from model.int8_checkpoint import quantize_checkpoint

    src, out = quantize_checkpoint(args.src, args.out, force=args.force)
    print(
        f"wrote {args.out}: weights {src / 2**20:.1f} MiB -> {out / 2**20:.1f} MiB ({out / src:.2f}x)", file=sys.stderr
    )
    return 0
