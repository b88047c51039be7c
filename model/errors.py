"""Exceptions raised at the model package's boundaries (user input, files on disk)."""

from __future__ import annotations


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


class InputError(ModelError, ValueError):
    """Input text cannot be translated as given (empty list element, too long, ...)."""


class InputTooLongError(InputError):
    """An input has more tokens than the model accepts and truncation was not asked for."""

    def __init__(self, index: int, length: int, limit: int) -> None:
        super().__init__(
            f"input {index} has {length} tokens, more than the model's limit of {limit}; "
            "shorten it or pass truncate=True"
        )
        self.index = index
        self.length = length
        self.limit = limit


class SearchStopped(ModelError):
    """A search was stopped by its caller before it finished (nobody wants its outputs any more)."""
