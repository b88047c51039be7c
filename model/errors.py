"""Exceptions raised at the model package's boundaries (user input, files on disk)."""

from __future__ import annotations

import os
from pathlib import Path


class ModelError(Exception):
    """Base class of every error the model package raises on purpose."""


class ConfigError(ModelError, ValueError):
    """A configuration value is invalid (e.g. ``d_model % h != 0``)."""


class CheckpointError(ModelError):
    """A checkpoint file is missing, truncated, pickled or does not match its config."""

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


def check_readable(path: Path) -> None:
    """CheckpointError naming the permission problem when path exists but this user cannot read it (or, for a
    directory, list and enter it), instead of the "missing file" that readers report then."""
    try:
        is_dir = path.is_dir()
        exists = is_dir or path.exists()
    except PermissionError:  # a directory above it cannot be entered
        raise CheckpointError(
            path,
            f"permission denied: user {os.getuid()} cannot reach it; make its "
            "directories readable by the service's user (chmod a+rx)",
        ) from None
    if exists and not os.access(path, os.R_OK | (os.X_OK if is_dir else 0)):
        raise CheckpointError(
            path,
            f"permission denied: user {os.getuid()} cannot read it; a service running as "
            "another user needs the model's files readable by it (chmod -R a+rX)",
        )


class InputError(ModelError, ValueError):
    """Input text cannot be translated as given (empty list element, too long, ...)."""


class InputTooLongError(InputError):
    """An input has more tokens than the model accepts and truncation was not asked for."""

    def __init__(self, length: int, limit: int, index: int | None = None, sentence: int | None = None) -> None:
        where = ([] if index is None else [f"input {index}"]) + ([] if sentence is None else [f"sentence {sentence}"])
        which = f"{', '.join(where)} has " if where else ""
        super().__init__(
            f"{which}{length} tokens, more than the model's limit of {limit}; shorten it or ask for "
            "truncation (truncate)"
        )
        self.index = index
        self.sentence = sentence  # of a segmented text (model.segment), when it has several
        self.length = length
        self.limit = limit


class UnknownLanguageError(InputError):
    """A multilingual model was asked for a language it does not know, or not told one it needs."""

    def __init__(self, side: str, code: str | None, known: list[str]) -> None:
        shown = ", ".join(known[:12]) + (f", ... ({len(known)} in all)" if len(known) > 12 else "")
        what = f"unknown {side} language {code!r}" if code is not None else f"this model needs a {side} language"
        super().__init__(f"{what}; the model knows: {shown}")
        self.side = side
        self.code = code


class HubError(ModelError):
    """A model could not be fetched by its hub id (model.hub)."""

    def __init__(self, repo_id: str, reason: str) -> None:
        super().__init__(f"{repo_id}: {reason}")
        self.repo_id = repo_id


class SearchStopped(ModelError):
    """A search was stopped by its caller before it finished (nobody wants its outputs any more)."""


class FileError(InputError):
    """A file to translate is too large, corrupt, or not in a format we read (model.files)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason
