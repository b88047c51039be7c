"""Markdown (.md): each paragraph, heading, list item and table cell translated whole, its inline markup
(emphasis, links, images, code spans, inline HTML) placed by the alignment (model.markup); everything else
(code blocks, HTML blocks, list markers, quote marks, the table's rules) stays as it is.

markdown-it-py (CommonMark, with tables and strikethrough) finds each block's inline content and its source
lines; the translation replaces the content in those lines, on its first line (a paragraph's soft line breaks
become spaces: it is one sentence or more, not one per line)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from model.files import FileLimits, decoded
from model.files.plain import newline_of
from model.markup import Run, layout
from model.output import Hypothesis

SPECIAL = re.compile(r"([\\`*_\[\]<])")  # what would turn translated text into markup
EMPHASIS = {"strong": "**", "em": "*", "s": "~~"}  # written with * always: _ does not work inside words


@dataclass
class Block:
    """An inline content: its run, and where it sits: (line, start, end) of each of its source lines."""

    run: Run
    spans: list[tuple[int, int, int]]


class Markdown:
    align = True

    def __init__(self, name: str, fmt: str, data: bytes, limits: FileLimits) -> None:
        text = decoded(name, data)
        self.newline = newline_of(text)
        self.lines = text.replace("\r\n", "\n").split("\n")
        md = MarkdownIt("commonmark").enable("table").enable("strikethrough")
        self.blocks: list[Block] = []
        cursor: dict[int, int] = {}  # where the next content of a line is looked for (table cells share one)
        for token in md.parse(text.replace("\r\n", "\n")):
            if token.type != "inline" or token.map is None or not token.children:
                continue
            spans = self.locate(token.content, token.map[0], cursor)
            run = inline_run(token.children)
            if spans is not None and run.text.strip():
                self.blocks.append(Block(run, spans))

    def locate(self, content: str, first: int, cursor: dict[int, int]) -> list[tuple[int, int, int]] | None:
        """Each line of the content in the source lines from `first` on; None where one is not there as it is."""
        spans = []
        for i, piece in enumerate(content.split("\n")):
            line = first + i
            if line >= len(self.lines):
                return None
            start = self.lines[line].find(piece, cursor.get(line, 0))
            if start < 0:
                return None
            spans.append((line, start, start + len(piece)))
        for line, _, end in spans:
            cursor[line] = end
        return spans

    @property
    def texts(self) -> list[str]:
        return [b.run.text for b in self.blocks]

    def render(self, outputs: list[Hypothesis]) -> bytes:
        lines = list(self.lines)
        dropped: set[int] = set()
        edits: list[tuple[int, int, int, str]] = []
        for block, h in zip(self.blocks, outputs, strict=True):
            text = "".join(
                SPECIAL.sub(r"\\\1", v) if k == "text" else v for k, v in layout(block.run, h.text, list(h.alignment))
            )
            for i, (line, start, end) in enumerate(block.spans):
                edits.append((line, start, end, text if i == 0 else ""))
        for line, start, end, new in sorted(edits, reverse=True):  # right to left: earlier places stay put
            lines[line] = lines[line][:start] + new + lines[line][end:]
            if not new and not lines[line].strip(" \t>"):
                dropped.add(line)  # a continuation line left with nothing but its quote marks
        return self.newline.join(line for i, line in enumerate(lines) if i not in dropped).encode()


def inline_run(tokens: list[Token]) -> Run:
    """A run from markdown-it's inline tokens: emphasis and links are elements, the rest of the markup points."""
    run = Run()
    autolink = False
    for t in tokens:
        kind = t.type.removesuffix("_open").removesuffix("_close")
        if t.type == "text":
            if autolink:
                run.points.append((len(run.text), f"<{t.content}>"))
            else:
                run.text += t.content
        elif t.type == "softbreak":
            run.text += " "
        elif t.type == "hardbreak":
            run.points.append((len(run.text), "<br>"))
            run.text += " "
        elif t.type == "link_open" and t.markup == "autolink":
            autolink = True
        elif t.type == "link_close" and autolink:
            autolink = False
        elif t.type == "link_open":
            href, title = str(t.attrs.get("href", "")), t.attrs.get("title")
            run.start("[", f"]({href}" + (f' "{title}"' if title else "") + ")")
        elif kind in EMPHASIS and t.type.endswith("_open"):
            run.start(EMPHASIS[kind], EMPHASIS[kind])
        elif t.type.endswith("_close"):
            run.close()
        elif t.type == "image":
            src, title = str(t.attrs.get("src", "")), t.attrs.get("title")
            run.points.append((len(run.text), f"![{t.content}]({src}" + (f' "{title}"' if title else "") + ")"))
        elif t.type == "code_inline":
            run.points.append((len(run.text), f"{t.markup}{t.content}{t.markup}"))
        else:  # html_inline and anything else: as it was
            run.points.append((len(run.text), t.content))
    run.finish()
    return run
