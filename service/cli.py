"""The one `transformer` command; each package adds its subcommands."""

from __future__ import annotations

import argparse
import sys

from model import commands as model_commands
from model.errors import ModelError
from service import commands as service_commands
from service import demo
from training import commands as training_commands
from training.config import TrainConfigError
from training.data import CorpusError
from training.extras import MissingExtraError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transformer", description="Train, run and serve Transformer models.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    model_commands.register(sub)
    training_commands.register(sub)
    service_commands.register(sub)
    demo.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (ModelError, TrainConfigError, CorpusError, MissingExtraError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
