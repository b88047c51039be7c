"""Offline summarization corpora from what a Debian or Ubuntu machine holds, nothing downloaded.

- Manual pages (/usr/share/man/man1, about 18,000 pages): the NAME line's description ("ls - list directory
  contents") summarises the DESCRIPTION section. The roff source is read by this module's own small parser
  (man(7) and mdoc(7) macros), .gz or plain; `.so` links and stubs are skipped.
- Package descriptions (/var/lib/dpkg/status): the first line of a Description is a human-written synopsis of
  the paragraphs below it.

origin names the source item (the program or the source package), so that a split by origin keeps near-copies
(gcc-12 and gcc, libfoo1 and libfoo-dev) on one side.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from pathlib import Path

from training.data import Pair

MIN_DOCUMENT_WORDS = 15  # shorter descriptions are stubs ("See the info page")
MAX_DOCUMENT_WORDS = 300  # a document is cut here: the model reads its beginning anyway
MIN_SUMMARY_WORDS = 2
ESCAPES = {
    r"\-": "-",
    r"\(em": "—",
    r"\(en": "–",
    r"\(aq": "'",
    r"\(lq": '"',
    r"\(rq": '"',
    r"\(oq": "'",
    r"\(cq": "'",
    r"\(bu": "•",
    r"\e": "\\",
    r"\&": "",
    r"\ ": " ",
    r"\~": " ",
    r"\|": "",
    r"\^": "",
    r"\:": "",
    r"\%": "",
    r"\c": "",
}
ESCAPE = re.compile(
    r"\\s[-+]?\d+"  # size changes
    r"|\\f(?:\[[^]]*\]|\(..|.)|\\\*(?:\[[^]]*\]|\(..|.)"  # fonts and strings
    r"|\\\[[^]]*\]|\\\(..|\\[-e& ~|^:%c]|\\."
)  # special characters, other escapes
FONT_MACROS = {".B", ".I", ".SM", ".SB"}  # their arguments are words
ALTERNATING = {".BR", ".RB", ".IR", ".RI", ".BI", ".IB"}  # their arguments touch: ".BR ls (1)" is "ls(1)"


def unescape(text: str) -> str:
    """roff text without its escapes: fonts and strings dropped, special characters as themselves."""
    return ESCAPE.sub(lambda m: ESCAPES.get(m.group(0), "" if len(m.group(0)) > 2 else m.group(0)[1:]), text)


def text_of(line: str) -> str:
    """The words a roff line contributes: its text, a font macro's arguments, an mdoc macro's arguments."""
    if not line.startswith((".", "'")):
        return line
    macro, _, rest = line.partition(" ")
    if macro in FONT_MACROS or macro in ALTERNATING:
        args = [a or b for a, b in re.findall(r'"([^"]*)"|(\S+)', rest)]
        return ("" if macro in ALTERNATING else " ").join(args)
    if re.fullmatch(r"\.[A-Z][a-z]", macro):  # mdoc: .Ar file, .Fl l, .Xr ls 1, .Nd ...
        words = [w for w in rest.split() if not re.fullmatch(r"[A-Z][a-z]|[.,;:()]", w)]
        return ("-" if macro == ".Fl" else "") + " ".join(words)
    return ""


def sections(text: str) -> dict[str, list[str]]:
    """The lines of each section (NAME, DESCRIPTION, ...), by upper-case title, comments dropped."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in text.splitlines():
        if raw.startswith(('.\\"', "'\\\"")):
            continue
        head = re.match(r"""\.(SH|Sh)\s+"?([^"]*)"?\s*$""", raw)
        if head:
            current = out.setdefault(head.group(2).strip().upper(), [])
        elif current is not None:
            current.append(raw)
    return out


def parse_manpage(text: str) -> tuple[str, str] | None:
    """(description, summary) of a manual page's roff source, or None when it has no usable pair."""
    parts = sections(text)
    name, description = parts.get("NAME"), parts.get("DESCRIPTION")
    if not name or not description:
        return None
    nd = next((line[4:] for line in name if line.startswith(".Nd ")), None)  # mdoc
    if nd is None:
        line = unescape(" ".join(text_of(x) for x in name)).strip()
        nd = re.split(r"\s+-+\s+|\s+—\s+", line, maxsplit=1)[-1] if re.search(r"\s-+\s|\s—\s", line) else ""
    summary = " ".join(unescape(nd).split())
    words = unescape(" ".join(text_of(x) for x in description)).split()
    if len(words) < MIN_DOCUMENT_WORDS or len(summary.split()) < MIN_SUMMARY_WORDS:
        return None
    return " ".join(words[:MAX_DOCUMENT_WORDS]), summary


def title_words(name: str) -> str:
    """A name as the words it is made of, for a document's title: "cg_annotate" -> "cg annotate",
    "LogRecord.getMessage" -> "log record get message", "python3-numpy" -> "python3 numpy"."""
    spaced = re.sub(r"([a-z0-9])([A-Z])|([A-Z])([A-Z][a-z])", r"\1\3 \2\4", name)
    return " ".join(re.split(r"[\W_]+", spaced.lower())).strip()


def titled(title: str, description: str) -> str:
    """A document that starts with its item's title, as a manual or a reference page shows one above the text."""
    return f"{title}: {description}" if title else description


def item_name(name: str) -> str:
    """A page's or package's source item: gcc-12 -> gcc, libfoo1 -> libfoo, python3.11 -> python."""
    return re.sub(r"([-.]?\d+(\.\d+)*)+$", "", name) or name


def page_item(file_name: str) -> str:
    """A page's source item: the program family its name starts with (git-commit.1.gz -> git, gcloud_compute_...
    -> gcloud, gcc-12.1.gz -> gcc), whose pages are near-copies of one another."""
    return item_name(re.split(r"[-_.]", file_name, maxsplit=1)[0])


def read_page(path: Path) -> str | None:
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    return data.decode("utf-8", errors="replace")


def manpage_pairs(directory: str | Path = "/usr/share/man/man1", titles: bool = False) -> Iterator[Pair]:
    """(DESCRIPTION, NAME description) of every manual page in directory; links and stubs skipped. With
    titles, the DESCRIPTION starts with the page's name in words ("git commit: ...")."""
    root = Path(directory)
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        text = read_page(path)
        if text is None or text.lstrip().startswith(".so "):
            continue
        parsed = parse_manpage(text)
        if parsed:
            title = title_words(item_name(path.name.removesuffix(".gz").rsplit(".", 1)[0])) if titles else ""
            yield Pair(titled(title, parsed[0]), parsed[1], page_item(path.name))


def dpkg_pairs(status: str | Path = "/var/lib/dpkg/status", titles: bool = False) -> Iterator[Pair]:
    """(long description, synopsis) of every package in dpkg's status file with a long enough description;
    with titles, the description starts with the package's name in words ("python3 numpy: ...")."""
    path = Path(status)
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        synopsis, _, body = fields.get("Description", "").partition("\n")
        words = [w for line in body.splitlines() if line.strip() != "." for w in line.split()]
        if len(words) >= MIN_DOCUMENT_WORDS and len(synopsis.split()) >= MIN_SUMMARY_WORDS:
            source = fields.get("Source", fields.get("Package", "")).split()[0] if fields else ""
            title = title_words(item_name(fields.get("Package", ""))) if titles else ""
            yield Pair(titled(title, " ".join(words[:MAX_DOCUMENT_WORDS])), synopsis.strip(), item_name(source))
