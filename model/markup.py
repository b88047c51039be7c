"""Inline markup placed by the model's own alignment (as Bergamot does), for format "html" and for files
(model.files): a document is parts, markup kept as it is and runs of text; a run is translated whole, and each
of its inline elements is put back around the output words aligned with the source words it held (layout).

HTML (Document): Block elements end a run of text; inline ones (<b>, <a>, <span>,
...) are taken out of it, and each is put back around the output words aligned with the source words it held.
<script>, <style>, <code>, <pre>, comments and elements with translate="no" are kept as they are; the alt,
title, placeholder and aria-label attributes are translated. Tags keep their nesting, a tag whose words
vanished still opens and closes, and a stray end tag is dropped: what comes out parses.
"""

from __future__ import annotations

import bisect
import html
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser

from model import output

# fmt: off
INLINE = frozenset({
    "a", "abbr", "b", "bdi", "bdo", "cite", "data", "del", "dfn", "em", "font", "i", "img", "ins", "kbd", "label",
    "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time", "tt", "u", "var", "wbr",
})
VOID = frozenset({
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr",
})
# fmt: on
KEPT = frozenset({"script", "style", "code", "pre", "textarea", "svg", "math"})  # no text to translate inside
RAW_TEXT = frozenset({"script", "style"})  # the parser hands their content over unescaped and as it was
ATTRIBUTES = frozenset({"alt", "title", "placeholder", "aria-label"})


@dataclass
class Element:
    """An inline element of a run: the text it holds [start, end), its tags (in HTML; another format's own
    names for its element), and its depth in the run."""

    start: int
    end: int
    open: str
    close: str
    depth: int
    parent: int | None
    place: tuple[int, int] = (0, 0)  # its [start, end) in the output


@dataclass
class Run:
    """Text between block boundaries: its plain text, its inline elements, and what stays as it is at a point
    (<img>, <br/>, kept elements, comments)."""

    text: str = ""
    elements: list[Element] = field(default_factory=list)
    points: list[tuple[int, str]] = field(default_factory=list)
    open: list[int] = field(default_factory=list)  # elements not closed yet

    def start(self, open_: str, close: str) -> Element:
        """Open an element here, inside the innermost open one."""
        parent = self.open[-1] if self.open else None
        self.elements.append(Element(len(self.text), -1, open_, close, len(self.open), parent))
        self.open.append(len(self.elements) - 1)
        return self.elements[-1]

    def close(self) -> Element | None:
        """Close the innermost open element (None when none is open)."""
        if not self.open:
            return None
        element = self.elements[self.open.pop()]
        element.end = len(self.text)
        return element

    def end(self, close: str) -> None:
        """Close the innermost open element that closes with this tag and those inside it; a stray end tag is
        dropped."""
        for i in reversed(range(len(self.open))):
            if self.elements[self.open[i]].close == close:
                for j in self.open[i:]:
                    self.elements[j].end = len(self.text)
                del self.open[i:]
                return

    def finish(self) -> None:
        for j in self.open:  # an element the run never closed ends with it
            self.elements[j].end = len(self.text)
        self.open = []


Part = str | Run  # markup as it is, or a run of text to translate


class Document(HTMLParser):
    """A document as parts: markup kept as it is, runs of text, and the attribute values to translate."""

    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[Part] = []
        self.run = Run()
        self.kept: list[str] = []  # the names of the kept elements we are in, innermost last
        self.kept_raw: list[str] = []
        self.attributes: list[str] = []  # values to translate, in order
        self.feed(source)
        while self.cdata_elem is None and self.rawdata.startswith("<!["):
            # A marked section never closed is, as browsers read it, a bogus comment that ends at the first ">" (or
            # the end; HTML's bogus comment state); the parser would hand it, and all after it, over as text.
            end = self.rawdata.find(">") + 1 or len(self.rawdata)
            section, rest = self.rawdata[:end], self.rawdata[end:]
            self.rawdata = ""
            self.markup(section)
            self.feed(rest)
        if self.cdata_elem is None and self.rawdata.startswith("<!--"):
            # A comment never closed runs to the end, as browsers read it (HTML's eof-in-comment); the parser would
            # hand it over as text, and its words would be translated into the page.
            self.markup(self.rawdata)
            self.rawdata = ""
        self.close()
        if self.rawdata:  # the content of a <script> or <style> never closed, which the parser holds back
            self.kept_raw.append(self.rawdata)
            self.rawdata = ""
        self.flush()

    # -- what the parser finds ---------------------------------------------------------------------

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tag(tag, attrs, empty=False)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tag(tag, attrs, empty=True)

    def handle_endtag(self, tag: str) -> None:
        raw = f"</{tag}>"
        if self.kept:
            self.kept_raw.append(raw)
            if tag == self.kept[-1]:
                self.kept.pop()
                if not self.kept:
                    self.point("".join(self.kept_raw))
                    self.kept_raw = []
        elif tag in INLINE:
            self.run.end(f"</{tag}>")
        else:
            self.block(raw)

    def handle_data(self, data: str) -> None:
        if self.kept:
            self.kept_raw.append(data if self.kept[-1] in RAW_TEXT else html.escape(data, quote=False))
        else:
            self.run.text += data

    def handle_comment(self, data: str) -> None:
        self.markup(f"<!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self.markup(f"<!{decl}>")

    def handle_pi(self, data: str) -> None:
        self.markup(f"<?{data}>")

    def unknown_decl(self, data: str) -> None:
        """A marked section that reached here without parse_marked_section (a parser of another Python version):
        "CDATA[ x " ends in "]]>", Office's "if !IE" in "]>"."""
        self.markup(f"<![{data}{']]>' if '[' in data else ']>'}")

    def parse_marked_section(self, i: int, report: bool = True) -> int:
        """<![keyword[ ... ]]> (and Office's <![if ...]>) kept as it is, to the letter: unknown_decl is handed it
        without its end, which is "]]>" or "]>" by the keyword; and whatever the keyword, since the standard
        library's parser fails an assertion on one it does not know (<![foo[)."""
        try:
            j = super().parse_marked_section(i, report=False)
        except AssertionError:
            end = self.rawdata.find("]]>", i)
            j = -1 if end < 0 else end + 3
        if j >= 0:  # else incomplete: the parser waits for more, and close() hands it over as data
            self.markup(self.rawdata[i:j])
        return j

    # -- into parts --------------------------------------------------------------------------------

    def tag(self, name: str, attrs: list[tuple[str, str | None]], empty: bool) -> None:
        raw = self.start_tag(name, attrs, empty)
        if self.kept:
            self.kept_raw.append(raw)
            if name == self.kept[-1] and not empty:
                self.kept.append(name)
        elif (name in KEPT or dict(attrs).get("translate") == "no") and not empty and name not in VOID:
            self.kept, self.kept_raw = [name], [raw]
        elif name in INLINE and (empty or name in VOID):
            self.point(raw)
        elif name in INLINE:
            self.run.start(raw, f"</{name}>")
        else:
            self.block(raw)

    def start_tag(self, name: str, attrs: list[tuple[str, str | None]], empty: bool) -> str:
        """The tag as it was, or rebuilt with placeholders for the attribute values to translate."""
        raw = self.get_starttag_text() or f"<{name}>"
        if self.kept or not any(k in ATTRIBUTES and v for k, v in attrs):
            return raw
        parts = [name]
        for k, v in attrs:
            if v is None:
                parts.append(k)
            elif k in ATTRIBUTES and v.strip():
                parts.append(f'{k}="\x00attribute {len(self.attributes)}\x00"')  # filled in by render
                self.attributes.append(v)
            else:
                parts.append(f'{k}="{html.escape(v, quote=True)}"')
        return f"<{' '.join(parts)}{' /' if empty else ''}>"

    def point(self, raw: str) -> None:
        self.run.points.append((len(self.run.text), raw))

    def markup(self, raw: str) -> None:
        if self.kept:
            self.kept_raw.append(raw)
        else:
            self.point(raw)

    def block(self, raw: str) -> None:
        self.flush()
        self.parts.append(raw)

    def flush(self) -> None:
        if self.kept:  # an element kept to the end of the document
            self.point("".join(self.kept_raw))
            self.kept, self.kept_raw = [], []
        self.run.finish()
        if self.run.text or self.run.points or self.run.elements:
            self.parts.append(self.run)
        self.run = Run()

    @property
    def texts(self) -> list[str]:
        """What to translate: the runs' texts that hold a word, then the attribute values."""
        return [p.text for p in self.parts if isinstance(p, Run) and p.text.strip()] + self.attributes


class Alignment:
    """A run's word alignment (Hypothesis.alignment: source start, end, output start, end, sorted and apart),
    with what placing asks of it answered in logarithmic time: a document may hold thousands of tags."""

    def __init__(self, pairs: list[tuple[int, int, int, int]], output: str, source: str) -> None:
        self.starts = [a for a, _, _, _ in pairs]
        self.ends = [b for _, b, _, _ in pairs]
        self.low = RangeExtreme([c for _, _, c, _ in pairs], min)
        self.high = RangeExtreme([d for _, _, _, d in pairs], max)
        self.output, self.source = output, source

    def span(self, start: int, end: int) -> tuple[int, int] | None:
        """The output span of the source words that overlap [start, end), if any."""
        first, last = bisect.bisect_right(self.ends, start), bisect.bisect_left(self.starts, end)
        return (self.low.of(first, last), self.high.of(first, last)) if first < last else None

    def trimmed(self, span: tuple[int, int], start: int, end: int) -> tuple[int, int]:
        """An output span without the punctuation at its ends that the source text [start, end) lacks at its own
        (the alignment is of whole words: "file." to "Datei." gives <b>Datei</b>. for <b>file</b>.); never empty."""
        a, b = span
        text = self.source[start:end].strip()
        if text and in_word(text[-1]):
            while b - 1 > a and not in_word(self.output[b - 1]):
                b -= 1
        if text and in_word(text[0]):
            while a + 1 < b and not in_word(self.output[a]):
                a += 1
        return a, b

    def point(self, at: int) -> int:
        """Where a place in the source goes in the output: before the first word or after the last one as in the
        source (markup around a run's text stays around it), else before the output word aligned with the next
        source word."""
        following = bisect.bisect_left(self.starts, at)
        preceding = bisect.bisect_right(self.ends, at)
        n = len(self.starts)
        if not preceding:
            return min(at, self.low.of(0, n) if n else len(self.output))
        if following >= n:
            return max(len(self.output) - (len(self.source) - at), self.high.of(0, n))
        return self.low.of(following, following + 1)


def in_word(c: str) -> bool:
    """Whether the character c belongs to a word: a letter or digit, or a combining mark (the vowel signs of
    Devanagari, accents written apart), which must stay with the letter before it."""
    return c.isalnum() or unicodedata.category(c)[0] == "M"


class RangeExtreme:
    """The least (or greatest) of values[i:j], in constant time after n log n of building (a sparse table)."""

    def __init__(self, values: list[int], pick: Callable[[int, int], int]) -> None:
        self.pick = pick
        self.table = [values]
        width = 1
        while 2 * width <= len(values):
            row = self.table[-1]
            self.table.append([pick(row[i], row[i + width]) for i in range(len(row) - width)])
            width *= 2

    def of(self, i: int, j: int) -> int:
        level = (j - i).bit_length() - 1
        row = self.table[level]
        return self.pick(row[i], row[j - (1 << level)])


def place(run: Run, aligned: Alignment) -> None:
    """Each element's place in the output: around the output words aligned with its source words, within its
    parent's place and clear of its earlier siblings' (kept sorted and apart: a place that would cross one
    starts after it and ends before the next); where none of its words is aligned, an empty place where they
    would have been."""
    taken: dict[int | None, list[tuple[int, int]]] = {}
    for e in run.elements:  # parents come before their children
        low, high = (0, len(aligned.output)) if e.parent is None else run.elements[e.parent].place
        span = aligned.span(e.start, e.end)
        start, end = aligned.trimmed(span, e.start, e.end) if span is not None else (aligned.point(e.start),) * 2
        start, end = min(max(start, low), high), min(max(end, low), high)
        siblings = taken.setdefault(e.parent, [])
        i = bisect.bisect_right(siblings, (start, len(aligned.output) + 1))
        if i and siblings[i - 1][1] > start:  # inside an earlier sibling: start after it
            start = siblings[i - 1][1]
        if i < len(siblings):
            end = min(end, siblings[i][0])
        e.place = (start, max(start, end))
        bisect.insort(siblings, e.place)


Event = tuple[str, str]  # ("text", output text), or ("open" | "close" | "point", the markup as the run holds it)


def layout(run: Run, output: str, alignment: list[tuple[int, int, int, int]]) -> list[Event]:
    """The run's output as text and markup in order: closing tags before points before opening tags at one
    place, inner ones closing first and opening last."""
    aligned = Alignment(alignment, output, run.text)
    place(run, aligned)
    marks: list[tuple[int, tuple[int, int], list[Event]]] = []
    for e in run.elements:
        a, b = e.place
        if a == b:
            marks.append((a, (2, e.depth), [("open", e.open), ("close", e.close)]))
        else:
            marks += [(a, (2, e.depth), [("open", e.open)]), (b, (0, -e.depth), [("close", e.close)])]
    for at, raw in run.points:  # spaced as in the source, where the output's words would touch it
        where = aligned.point(at)
        before = run.text[at - 1 : at].isspace() and where > 0 and not output[where - 1].isspace()
        after = run.text[at : at + 1].isspace() and output[where : where + 1].isalnum()
        marks.append((where, (1, 0), [("text", " ")] * before + [("point", raw)] + [("text", " ")] * after))
    out: list[Event] = []
    at = 0
    for where, _, events in sorted(marks, key=lambda x: (x[0], x[1])):
        out += [("text", output[at:where]), *events]
        at = where
    out.append(("text", output[at:]))
    return [e for e in out if e != ("text", "")]


def escape(text: str) -> str:
    """Text as HTML text: &, < and > escaped."""
    return html.escape(text, quote=False)


def render_run(
    run: Run, output: str, alignment: list[tuple[int, int, int, int]], escaped: Callable[[str], str] = escape
) -> str:
    """The run's output with its markup as it was, its text escaped (as HTML by default)."""
    return "".join(escaped(v) if k == "text" else v for k, v in layout(run, output, alignment))


def render(document: Document, translations: list[output.Hypothesis], escaped: Callable[[str], str] = escape) -> str:
    """The document with each run and attribute value replaced by its translation (Document.texts' order), its
    text escaped (as HTML by default)."""
    it = iter(translations)
    out = []
    for part in document.parts:
        if isinstance(part, str):
            out.append(part)
        elif part.text.strip():
            h = next(it)
            out.append(render_run(part, h.text, list(h.alignment), escaped))
        else:
            out.append(render_run(part, part.text, [], escaped))
    values = [html.escape(next(it).text, quote=True) for _ in document.attributes]
    text = "".join(out)
    for i, value in enumerate(values):
        text = text.replace(f"\x00attribute {i}\x00", value, 1)
    return text
