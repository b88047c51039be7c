"""Files translated whole, keeping their structure: a file is read into the texts to translate (FileText.texts,
each a paragraph, a line, a cue or a run of text with inline markup) and written back with their outputs in
place (FileText.render). Nothing here decodes: the caller translates the texts (Translator.translate, or a
batch job of the service) and hands back each text's best hypothesis, with its word alignment where
FileText.align says that inline markup is placed by it (model.markup).

Formats, by the file name's extension (FORMATS): .txt; .srt and .vtt (cue numbers and timestamps kept); .md
(markdown-it-py's token stream); .html and .htm; .epub (its XHTML documents); .docx, .pptx, .odt and .odp (runs
and styles kept: model.files.office). A zip-based file is a zip a user hands us: model.files.zipped bounds it
before anything is unpacked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

from model.errors import ConfigError, FileError
from model.output import Hypothesis


@dataclass(frozen=True)
class FileLimits:
    """What a file may hold: its own bytes, its unpacked bytes and entries (zip-based formats), and its texts."""

    max_bytes: int = 10 * 1024 * 1024
    max_unzipped_bytes: int = 100 * 1024 * 1024
    max_entries: int = 10_000
    max_texts: int = 50_000

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_unzipped_bytes", "max_entries", "max_texts"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")


class FileText(Protocol):
    """A file read for translation."""

    @property
    def texts(self) -> list[str]:
        """What to translate, in order; each holds a word."""

    @property
    def align(self) -> bool:
        """Whether render needs each hypothesis' word alignment (inline markup placed by it)."""

    def render(self, outputs: list[Hypothesis]) -> bytes:
        """The file with each text replaced by its output (one per text, in order)."""


MEDIA_TYPES = {
    "txt": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
    "md": "text/markdown; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "htm": "text/html; charset=utf-8",
    "epub": "application/epub+zip",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "odt": "application/vnd.oasis.opendocument.text",
    "odp": "application/vnd.oasis.opendocument.presentation",
}
FORMATS = tuple(MEDIA_TYPES)


def format_of(name: str) -> str:
    """The format of a file by its name's extension; FileError for one we do not read."""
    ext = PurePath(name).suffix.lower().lstrip(".")
    if ext not in MEDIA_TYPES:
        shown = f".{ext}" if ext else "no extension"
        raise FileError(name, f"{shown} is not a format we translate; we read .{', .'.join(FORMATS)}")
    return ext


def read_file(name: str, data: bytes, limits: FileLimits) -> FileText:
    """The file's texts to translate, by its format; FileError for a file too large, corrupt or not its format."""
    from model.files import markdown, office, plain, web

    fmt = format_of(name)
    if len(data) > limits.max_bytes:
        raise FileError(name, f"{len(data):,} bytes, more than the limit of {limits.max_bytes:,}")
    readers: dict[str, Callable[[str, str, bytes, FileLimits], FileText]] = {
        "txt": plain.Lines,
        "srt": plain.Subtitles,
        "vtt": plain.Subtitles,
        "md": markdown.Markdown,
        "html": web.Page,
        "htm": web.Page,
        "epub": web.Epub,
        "docx": office.Office,
        "pptx": office.Office,
        "odt": office.Office,
        "odp": office.Office,
    }
    read = readers[fmt](name, fmt, data, limits)
    if len(read.texts) > limits.max_texts:
        raise FileError(name, f"{len(read.texts):,} texts to translate, more than the limit of {limits.max_texts:,}")
    return read


def decoded(name: str, data: bytes) -> str:
    """A text file's characters: UTF-8 (a byte-order mark is dropped); FileError naming the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FileError(name, f"not UTF-8 text (byte {e.start:,} is {data[e.start : e.start + 1]!r})") from None
