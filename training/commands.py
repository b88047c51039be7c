"""The `transformer train`, `transformer corpus` and `transformer average` subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "train",
        help="train a model (the paper's recipe, §5)",
        description="Train from a YAML config plus KEY=VALUE overrides, e.g. max_steps=2000 "
        "data.lang=fr. Resumes from the run directory's newest checkpoint.",
    )
    p.add_argument("--config", default=None, help="YAML file, e.g. training/configs/demo-en-de.yaml")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides (dotted keys)")
    p.add_argument("--no-resume", action="store_true", help="start over even if checkpoints exist")
    p.set_defaults(run=run_train)

    p = sub.add_parser("corpus", help="build the corpus and vocabulary of a config, without training")
    p.add_argument("--config", default=None)
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    p.set_defaults(run=run_corpus)

    p = sub.add_parser("average", help="average the last N checkpoints of a run into a new checkpoint")
    p.add_argument("run_dir", help="a training run directory (with checkpoints/) or checkpoint directories", nargs="+")
    p.add_argument("--last", type=int, default=5, help="how many of the newest checkpoints (paper: 5)")
    p.add_argument("--out", required=True, help="the checkpoint directory to write")
    p.set_defaults(run=run_average)

    p = sub.add_parser("evaluate", help="score a checkpoint on held-out pairs (BLEU and chrF, or ROUGE)")
    p.add_argument("--model", required=True, help="checkpoint directory")
    p.add_argument("--data", required=True, help="JSONL with source and target fields (e.g. RUN/data/test.jsonl)")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--device", default=None)
    p.set_defaults(run=run_evaluate)


def run_train(args: argparse.Namespace) -> int:
    from training.config import load_config
    from training.extras import require_train_extra
    from training.trainer import train

    require_train_extra("train")
    cfg = load_config(args.config, args.overrides)
    run_dir = train(cfg, resume=not args.no_resume)
    print(f"done: {run_dir} (best checkpoint in {run_dir / 'best'})", file=sys.stderr)
    return 0


def run_corpus(args: argparse.Namespace) -> int:
    from training.config import load_config
    from training.prepare import build_corpus

    cfg = load_config(args.config, args.overrides)
    data_dir = Path(cfg.run_dir) / "data"
    build_corpus(cfg, data_dir)
    print(json.dumps(json.loads((data_dir / "stats.json").read_text())))
    return 0


def run_average(args: argparse.Namespace) -> int:
    from training.checkpoints import average_checkpoints, list_checkpoints

    paths = [Path(p) for p in args.run_dir]
    if len(paths) == 1 and (paths[0] / "checkpoints").is_dir():
        paths = list_checkpoints(paths[0])[-args.last :]
    out = average_checkpoints(paths, Path(args.out))
    print(f"averaged {len(paths)} checkpoints into {out}", file=sys.stderr)
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    from training.config import TrainConfigError
    from training.data import read_jsonl
    from training.evaluate import evaluate_checkpoint
    from training.extras import require_train_extra

    require_train_extra("evaluate", ("sacrebleu", "rouge_score"))
    if not Path(args.data).is_file():
        raise TrainConfigError(f"{args.data}: no such file")
    pairs = list(read_jsonl(args.data))
    if not pairs:
        raise TrainConfigError(f"{args.data}: holds no pairs to evaluate")
    scores = evaluate_checkpoint(args.model, pairs, args.beam_size, args.device)
    print(json.dumps(scores, indent=1))
    return 0
