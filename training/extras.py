"""The `train` extra: what training, evaluation and plots need beyond serving (pyproject.toml), checked before a
command starts rather than failing minutes into it."""

from __future__ import annotations

import importlib.util

TRAIN_MODULES = {"matplotlib": "matplotlib", "sacrebleu": "sacrebleu", "rouge_score": "rouge-score"}


class MissingExtraError(Exception):
    """A command needs packages of an extra that is not installed."""


def require_train_extra(command: str, modules: tuple[str, ...] = tuple(TRAIN_MODULES)) -> None:
    """MissingExtraError naming the packages `command` needs and how to install them, when any is missing."""
    missing = [TRAIN_MODULES[m] for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtraError(
            f"`transformer {command}` needs {', '.join(missing)}, of the train extra: "
            "pip install 'transformer-service[train]' (or pip install -e '.[train]' in a "
            "checkout)"
        )
