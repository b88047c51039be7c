"""Text files: .txt line by line, and subtitles (.srt, .vtt) cue by cue, their numbers, timestamps, settings and
notes kept as they were."""

from __future__ import annotations

from dataclasses import dataclass

from model.files import FileLimits, decoded
from model.markup import Document, escape, render
from model.output import Hypothesis

TIMING = "-->"  # what a cue's timing line holds, in SRT and WebVTT alike


def newline_of(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


@dataclass(frozen=True)
class Line:
    """A line's text to translate, between the whitespace it keeps at both ends (its line break included)."""

    lead: str
    text: str
    trail: str

    @classmethod
    def of(cls, line: str) -> Line:
        body = line.strip()
        start = line.find(body) if body else len(line)
        return cls(line[:start], body, line[start + len(body) :])

    def rendered(self, output: str) -> str:
        return self.lead + output + self.trail


class Lines:
    """A .txt file: each line that holds a word is a text (sentences within it are the model's to cut)."""

    align = False

    def __init__(self, name: str, fmt: str, data: bytes, limits: FileLimits) -> None:
        self.lines = [Line.of(line) for line in decoded(name, data).splitlines(keepends=True)]
        self.bom = data.startswith(b"\xef\xbb\xbf")

    @property
    def texts(self) -> list[str]:
        return [line.text for line in self.lines if line.text]

    def render(self, outputs: list[Hypothesis]) -> bytes:
        it = iter(outputs)
        out = [line.rendered(next(it).text if line.text else "") for line in self.lines]
        return ("\ufeff" * self.bom + "".join(out)).encode()


@dataclass(frozen=True)
class Cue:
    """A subtitle cue: the lines kept as they are (number, timing) and its text, as markup (<i>, <b>, ...)."""

    head: list[str]
    document: Document
    lines: int  # how many lines its text had: the output is wrapped to as many


class Subtitles:
    """An .srt or .vtt file: blocks between blank lines; a block with a timing line is a cue whose lines after the
    timing are its text, read as one (a sentence often spans a cue's lines). Other blocks (WEBVTT, NOTE, STYLE)
    stay as they are."""

    def __init__(self, name: str, fmt: str, data: bytes, limits: FileLimits) -> None:
        text = decoded(name, data)
        self.newline = newline_of(text)
        self.vtt = fmt == "vtt"
        self.blocks: list[Cue | str] = []
        whole = text.replace("\r\n", "\n")
        self.end = whole[len(whole.rstrip("\n")) :]  # the file's last line breaks, kept
        for block in whole.rstrip("\n").split("\n\n"):
            lines = block.split("\n")
            timing = next((i for i, line in enumerate(lines) if TIMING in line), None)
            body = lines[timing + 1 :] if timing is not None else []
            if timing is None or not any(line.strip() for line in body) or lines[0].startswith("NOTE"):
                self.blocks.append(block)
            else:
                joined = " ".join(line.strip() for line in body)
                self.blocks.append(Cue(lines[: timing + 1], Document(joined), len(body)))
        self.align = any(has_markup(c.document) for c in self.cues)

    @property
    def cues(self) -> list[Cue]:
        return [b for b in self.blocks if isinstance(b, Cue)]

    @property
    def texts(self) -> list[str]:
        return [t for c in self.cues for t in c.document.texts]

    def render(self, outputs: list[Hypothesis]) -> bytes:
        it = iter(outputs)
        out = []
        for block in self.blocks:
            if isinstance(block, str):
                out.append(block)
                continue
            mine = [next(it) for _ in block.document.texts]
            text = render(block.document, mine, escape if self.vtt else str)
            out.append("\n".join([*block.head, *wrapped(text, block.lines)]))
        return self.newline.join(("\n\n".join(out) + self.end).split("\n")).encode()


def has_markup(document: Document) -> bool:
    return any(isinstance(p, str) or p.elements or p.points for p in document.parts)


def wrapped(text: str, lines: int) -> list[str]:
    """Text in at most `lines` lines, cut at the spaces (outside tags) nearest to equal shares of it."""
    spaces, depth = [], 0
    for i, ch in enumerate(text):
        depth += (ch == "<") - (ch == ">")
        if ch == " " and depth <= 0:
            spaces.append(i)
    cuts: list[int] = []
    for k in range(1, lines):
        target = len(text) * k // lines
        free = [s for s in spaces if s not in cuts and (not cuts or s > cuts[-1])]
        if free:
            cuts.append(min(free, key=lambda s: abs(s - target)))
    bounds = [-1, *cuts, len(text)]
    return [text[a + 1 : b] for a, b in zip(bounds, bounds[1:], strict=False)]
