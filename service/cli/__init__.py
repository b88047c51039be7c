"""The one `transformer` command; each package adds its subcommands."""

from __future__ import annotations

import argparse
import sys
from importlib import metadata

from model import commands as model_commands
from model.errors import ModelError
from service.cli import attention, demo, serve
from service.settings import SettingsError
from training import commands as training_commands
from training.config import TrainConfigError
from training.data import CorpusError
from training.extras import MissingExtraError


class DefaultsFormatter(argparse.HelpFormatter):
    """Help with each option's default, where it has one worth showing and its text does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (action.help or "").strip()
        shown = action.default not in (None, False, argparse.SUPPRESS) and action.option_strings
        if shown and "default" not in text:
            text = f"{text} (default: %(default)s)".strip()
        return text


def version() -> str:
    try:
        return metadata.version("transformer-service")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transformer", description="Train, run and serve Transformer models.")
    parser.add_argument("--version", action="version", version=f"transformer {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    model_commands.register(sub)
    training_commands.register(sub)
    serve.register(sub)
    attention.register(sub)
    demo.register(sub)
    for command in sub.choices.values():  # every --help shows the defaults, of options with no help text too
        command.formatter_class = DefaultsFormatter
        for action in command._actions:
            if action.help is None and action.default not in (None, False) and action.option_strings:
                action.help = "(default: %(default)s)"
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (ModelError, TrainConfigError, CorpusError, MissingExtraError, SettingsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
