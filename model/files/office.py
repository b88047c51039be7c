"""Office documents (.docx, .pptx: Office Open XML; .odt, .odp: OpenDocument), paragraph by paragraph, with their
runs and styles kept: a paragraph's text is translated whole and its formatting put back by the alignment.

A paragraph is read as a model.markup Run: its text, with an inline element for each stretch of runs formatted
unlike most of the paragraph (the base) and for each hyperlink or span, and a point for everything else
(tabs, breaks, images, fields, bookmarks, notes), which stays as it is. Written back, the output's words
aligned with an element's source words get its formatting, the rest the base's; points go where their
neighbours went. The XML is edited in place with lxml (zipfile + lxml: one reader for the three families);
a paragraph inside another's point (a text box, a note) is translated too, before the paragraph that holds
it. A paragraph without a word is left untouched."""

from __future__ import annotations

import copy
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from lxml import etree

from model.errors import FileError
from model.files import FileLimits
from model.files.zipped import Zipped, xml_bytes
from model.markup import Element, Event, Run, layout
from model.output import Hypothesis

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
T = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
SPACE = "{http://www.w3.org/XML/1998/namespace}space"
SPACES = re.compile(" {2,}")
# Tabs and line breaks part words: the model reads a space for each (taken out again after it is put back).
SEPARATORS = frozenset({f"{W}tab", f"{W}br", f"{W}cr", f"{A}br", f"{T}tab", f"{T}line-break"})


@dataclass(frozen=True)
class Dialect:
    """How a family writes paragraphs: which elements are runs of text, containers, or kept at either end."""

    parts: re.Pattern[str]  # the members that hold text
    main: str  # the member every such file has
    paragraph: tuple[str, ...]
    run: str | None  # a run holding text children (OOXML); None: text is mixed content (OpenDocument)
    run_props: str | None
    text: str | None
    containers: frozenset[str]  # hyperlinks, spans: an element of the run, holding runs or text
    head: frozenset[str]  # paragraph properties, kept first
    tail: frozenset[str] = frozenset()  # kept last


WORD = Dialect(
    re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes)\.xml"),
    "word/document.xml",
    (f"{W}p",),
    f"{W}r",
    f"{W}rPr",
    f"{W}t",
    frozenset({f"{W}hyperlink", f"{W}ins", f"{W}smartTag", f"{W}fldSimple", f"{W}customXml", f"{W}dir", f"{W}bdo"}),
    frozenset({f"{W}pPr"}),
)
SLIDES = Dialect(
    re.compile(r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml"),
    "ppt/presentation.xml",
    (f"{A}p",),
    f"{A}r",
    f"{A}rPr",
    f"{A}t",
    frozenset(),
    frozenset({f"{A}pPr"}),
    frozenset({f"{A}endParaRPr"}),
)
OPEN_DOCUMENT = Dialect(
    re.compile(r"(content|styles)\.xml"),
    "content.xml",
    (f"{T}p", f"{T}h"),
    None,
    None,
    None,
    frozenset({f"{T}span", f"{T}a"}),
    frozenset(),
)
DIALECTS = {"docx": WORD, "pptx": SLIDES, "odt": OPEN_DOCUMENT, "odp": OPEN_DOCUMENT}


def natural(name: str) -> list[str | int]:
    """slide2 before slide10."""
    return [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", name)]


class Paragraph:
    """A paragraph as a markup Run (its shells: each element's XML, empty; its points: what stays as it is)."""

    def __init__(self, p: etree._Element, d: Dialect) -> None:
        self.p, self.d = p, d
        self.run = Run()
        self.shells: list[etree._Element] = []
        self.points: list[tuple[etree._Element | None, etree._Element]] = []  # (the run it was in, itself)
        self.head = [c for c in p if c.tag in d.head]
        self.tail = [c for c in p if c.tag in d.tail]
        self.base = self.base_run()
        self.key = props_key(self.base, d)
        self.last: tuple[Element, bytes] | None = None  # the run element just closed, while it may go on
        if d.run is None:
            self.add_text(p.text)
        self.walk(p)
        self.run.finish()

    def base_run(self) -> etree._Element | None:
        """An empty run formatted as most of the paragraph's text is (OOXML)."""
        if self.d.run is None:
            return None
        weights: Counter[bytes] = Counter()
        first: dict[bytes, etree._Element] = {}
        for r in runs_in(self.p, self.d):
            key = props_key(r, self.d)
            weights[key] += sum(len(t.text or "") for t in r.iter(self.d.text or ""))
            first.setdefault(key, r)
        if not weights:
            return etree.Element(self.d.run)
        return shell(first[weights.most_common(1)[0][0]], self.d)

    def walk(self, parent: etree._Element) -> None:
        for child in parent:
            if child.tag in self.d.head or child.tag in self.d.tail:
                continue
            if child.tag == self.d.run:
                self.add_run(child)
            elif child.tag in self.d.containers:
                self.open(copy_empty(child))
                if self.d.run is None:
                    self.add_text(child.text)
                self.walk(child)
                self.run.close()
            elif child.tag == f"{T}s":  # OpenDocument's run of spaces
                self.add_text(" " * int(child.get(f"{T}c", "1") or "1"))
            else:
                self.point(None, child)
            if self.d.run is None:
                self.add_text(child.tail)

    def add_run(self, r: etree._Element) -> None:
        key = props_key(r, self.d)
        styled = key != self.key
        if styled:
            if self.last is not None and self.last[1] == key and self.last[0].end == len(self.run.text):
                self.run.open.append(self.run.elements.index(self.last[0]))  # the same formatting goes on
            else:
                self.open(shell(r, self.d))
        for child in r:
            if child.tag == self.d.text:
                self.add_text(child.text)
            elif child.tag != self.d.run_props:
                self.point(r, child)
        if styled:
            closed = self.run.close()
            assert closed is not None  # opened above
            self.last = (closed, key)

    def open(self, element: etree._Element) -> None:
        self.last = None
        key = str(len(self.shells))
        self.shells.append(element)
        self.run.start(key, key)

    def add_text(self, text: str | None) -> None:
        if text:
            self.run.text += text

    def point(self, owner: etree._Element | None, element: etree._Element) -> None:
        self.last = None
        self.run.points.append((len(self.run.text), str(len(self.points))))
        self.points.append((owner, element))
        if element.tag in SEPARATORS:
            self.add_text(" ")

    def rebuild(self, h: Hypothesis) -> None:
        """The paragraph's children replaced by its output, formatted by the alignment."""
        p, d = self.p, self.d
        for child in list(p):
            p.remove(child)
        p.text = None
        p.extend(self.head)
        stack: list[tuple[etree._Element, etree._Element | None]] = [(p, self.base)]
        for kind, value in self.unspaced(layout(self.run, h.text, list(h.alignment))):
            container, run_shell = stack[-1]
            if kind == "text":
                self.put_text(container, run_shell, value)
            elif kind == "point":
                owner, element = self.points[int(value)]
                element.tail = None
                container.append(element if owner is None else wrapped_point(owner, element, d))
            elif kind == "open":
                made = self.shells[int(value)]
                if made.tag == d.run:  # a run's formatting: the text that follows takes it
                    stack.append((container, made))
                else:
                    inner = copy.copy(made)
                    container.append(inner)
                    stack.append((inner, run_shell))
            else:
                stack.pop()
        p.extend(self.tail)

    def unspaced(self, events: list[Event]) -> list[Event]:
        """The events with the spaces beside each tab or break taken out: the one read for it, and the one that
        layout spaces a point with."""
        out = list(events)
        for i, (kind, value) in enumerate(out):
            if kind != "point" or self.points[int(value)][1].tag not in SEPARATORS:
                continue
            if i and out[i - 1][0] == "text" and out[i - 1][1].endswith(" "):
                out[i - 1] = ("text", out[i - 1][1][:-1])
            if i + 1 < len(out) and out[i + 1][0] == "text" and out[i + 1][1].startswith(" "):
                out[i + 1] = ("text", out[i + 1][1][1:])
        return [e for e in out if e != ("text", "")]

    def put_text(self, container: etree._Element, run_shell: etree._Element | None, text: str) -> None:
        d = self.d
        if d.run is None or d.text is None or run_shell is None:  # OpenDocument: mixed content, spaces as text:s
            for i, piece in enumerate(SPACES.split(text)):
                if i:
                    gap = etree.SubElement(container, f"{T}s")
                    gap.set(f"{T}c", str(len(SPACES.findall(text)[i - 1]) - 1))
                    piece = " " + piece
                if len(container):
                    container[-1].tail = (container[-1].tail or "") + piece
                else:
                    container.text = (container.text or "") + piece
            return
        r = copy.deepcopy(run_shell)
        t = etree.SubElement(r, d.text)
        t.text = text
        if d is WORD:
            t.set(SPACE, "preserve")
        container.append(r)


def runs_in(parent: etree._Element, d: Dialect) -> Iterator[etree._Element]:
    for child in parent:
        if child.tag == d.run:
            yield child
        elif child.tag in d.containers:
            yield from runs_in(child, d)


def props_key(r: etree._Element | None, d: Dialect) -> bytes:
    props = r.find(d.run_props) if r is not None and d.run_props else None
    return b"" if props is None else bytes(etree.tostring(props))


def copy_empty(element: etree._Element) -> etree._Element:
    """The element's tag and attributes, without children or text."""
    return element.makeelement(element.tag, dict(element.attrib))


def shell(r: etree._Element, d: Dialect) -> etree._Element:
    """A run's tag, attributes and formatting, without its text."""
    made = copy_empty(r)
    props = r.find(d.run_props) if d.run_props else None
    if props is not None:
        made.append(copy.deepcopy(props))
    return made


def wrapped_point(owner: etree._Element, element: etree._Element, d: Dialect) -> etree._Element:
    """What was inside a run (a tab, a break, a picture) in a run of its own, formatted as that one was."""
    made = shell(owner, d)
    made.append(element)
    return made


class Office:
    """A .docx, .pptx, .odt or .odp file."""

    align = True

    def __init__(self, name: str, fmt: str, data: bytes, limits: FileLimits) -> None:
        self.zipped = Zipped(name, data, limits)
        d = self.d = DIALECTS[fmt]
        if d.main not in self.zipped.members:
            raise FileError(name, f"not a .{fmt} file: it has no {d.main}")
        self.trees = {
            member: self.zipped.xml(member)
            for member in sorted(self.zipped.members, key=natural)
            if d.parts.fullmatch(member)
        }
        self.paragraphs = [
            paragraph
            for tree in self.trees.values()
            for p in tree.iter(*d.paragraph)
            if (paragraph := Paragraph(p, d)).run.text.strip()
        ]

    @property
    def texts(self) -> list[str]:
        return [p.run.text for p in self.paragraphs]

    def render(self, outputs: list[Hypothesis]) -> bytes:
        # the last first: a paragraph inside another's point (a text box, a note) before the one that holds it
        for paragraph, h in reversed(list(zip(self.paragraphs, outputs, strict=True))):
            paragraph.rebuild(h)
        return self.zipped.write({member: xml_bytes(tree) for member, tree in self.trees.items()})
