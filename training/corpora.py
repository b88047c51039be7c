"""Built-in offline corpora: gettext catalogs (translation) and Python docstrings (summarization).

Translation: every installed program's message catalog pairs an English msgid with its translation,
e.g. /usr/share/locale/de/LC_MESSAGES/*.mo; German alone gives tens of thousands of pairs.

Summarization: docstrings of installed Python packages, the description paragraphs (the document)
mapped to their one-line summary (the summary); the packages this project installs (torch, numpy, ...) are
on every machine that runs it. Manual pages and dpkg descriptions are in training.summaries.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
import struct
import sysconfig
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from training.data import CorpusError, Pair

LOCALE_ROOT = Path("/usr/share/locale")
MO_MAGIC = 0x950412DE


def read_mo(path: str | Path) -> list[tuple[str, str]]:
    """(msgid, msgstr) pairs of a compiled gettext catalog, header and untranslated entries left out."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < 20:
        raise CorpusError(path, 0, "too short to be a .mo catalog")
    for order in ("<", ">"):
        if struct.unpack(order + "I", data[:4])[0] == MO_MAGIC:
            break
    else:
        raise CorpusError(path, 0, "not a .mo catalog (bad magic number)")
    _, count, ids_at, strs_at = struct.unpack(order + "4I", data[4:20])

    def entry(table: int, i: int) -> bytes:
        length, offset = struct.unpack(order + "2I", data[table + 8 * i : table + 8 * i + 8])
        if offset + length > len(data):
            raise CorpusError(path, 0, f"entry {i} points past the end of the file (truncated?)")
        return data[offset : offset + length]

    raw = [(entry(ids_at, i), entry(strs_at, i)) for i in range(count)]
    charset = "utf-8"
    for msgid, msgstr in raw:
        if msgid == b"":
            found = re.search(rb"charset=([\w-]+)", msgstr)
            charset = found.group(1).decode("ascii") if found else charset
    pairs = []
    for msgid, msgstr in raw:
        source, target = _decode(msgid, charset), _decode(msgstr, charset)
        source = source.split("\x04")[-1].split("\x00")[0]  # drop the context, keep the singular
        target = target.split("\x00")[0]  # the first plural form
        if source and target:
            pairs.append((source, target))
    return pairs


def _decode(raw: bytes, charset: str) -> str:
    try:
        return raw.decode(charset)
    except (LookupError, UnicodeDecodeError):
        return raw.decode("utf-8", errors="replace")


_PO_STRING = re.compile(r'^"(.*)"\s*$')


def read_po(path: str | Path) -> list[tuple[str, str]]:
    """(msgid, msgstr) pairs of a gettext source catalog; fuzzy, obsolete and empty entries left out."""
    path = Path(path)
    pairs: list[tuple[str, str]] = []
    entry: dict[str, str] = {}
    field: str | None = None
    fuzzy = False

    def flush() -> None:
        nonlocal entry, fuzzy
        source, target = entry.get("msgid", ""), entry.get("msgstr", entry.get("msgstr[0]", ""))
        if source and target and not fuzzy:
            pairs.append((source, target))
        entry, fuzzy = {}, False

    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#~"):
            if not line:
                flush()
            continue
        if line.startswith("#"):
            fuzzy = fuzzy or (line.startswith("#,") and "fuzzy" in line)
            continue
        keyword, _, rest = line.partition(" ")
        if keyword in ("msgctxt", "msgid", "msgid_plural", "msgstr") or keyword.startswith("msgstr["):
            if keyword in ("msgid", "msgctxt") and "msgstr" in entry:
                flush()
            field, line = keyword, rest
        string = _PO_STRING.match(line)
        if string is None or field is None:
            raise CorpusError(path, n, f"cannot parse {line[:40]!r}")
        entry[field] = entry.get(field, "") + _unescape(string.group(1))
    flush()
    return pairs


def _unescape(s: str) -> str:
    return s.replace('\\"', '"').replace("\\n", "\n").replace("\\t", "\t").replace("\\\\", "\\")


def gettext_catalogs(lang: str, root: str | Path = LOCALE_ROOT) -> list[Path]:
    """The .mo and .po files for lang under root (root/LANG/LC_MESSAGES, or root itself)."""
    root = Path(root)
    folder = root / lang / "LC_MESSAGES"
    if not folder.is_dir():
        folder = root
    files = sorted(p for p in folder.iterdir() if p.suffix in (".mo", ".po")) if folder.is_dir() else []
    if not files:
        raise CorpusError(folder, 0, f"no gettext catalogs (.mo or .po) for language {lang!r}")
    return files


def gettext_pairs(lang: str, root: str | Path = LOCALE_ROOT) -> Iterator[Pair]:
    """English -> lang message pairs from every catalog; origin is the catalog's name (e.g. 'coreutils')."""
    for path in gettext_catalogs(lang, root):
        pairs = read_mo(path) if path.suffix == ".mo" else read_po(path)
        for source, target in pairs:
            yield Pair(source, target, path.stem)


DEFAULT_PACKAGES = ("stdlib", "torch", "numpy", "sympy", "networkx")
# A section starts at a header line ("Args:", "Returns", "See also: f"), a directive, a doctest or a field list;
# a sentence that only begins with such a word ("Returns a pair ...", "Note that ...", "raised when ...") does not.
_SECTION = re.compile(
    r"^((args|arguments|parameters|params|returns?|yields?|raises?|examples?|notes?|see also|attributes|"
    r"references|warnings?|keyword arguments|shape)\s*(:.*)?$|\.\. |>>>|:param|:return|-{3,}|={3,})",
    re.IGNORECASE,
)


def split_docstring(doc: str) -> tuple[str, str] | None:
    """(description, summary) of a docstring: the paragraphs after the first line, up to the first
    section (Args, Returns, examples, ...), and the first line. None when either is missing."""
    lines = inspect.cleandoc(doc).splitlines()
    if len(lines) < 3 or lines[1].strip():
        return None
    summary = lines[0].strip()
    if _SECTION.match(summary):  # ".. warning::", ">>> f()": the docstring has no summary line
        return None
    body: list[str] = []
    for line in lines[2:]:
        if _SECTION.match(line.strip()):
            break
        body.append(line.strip())
    description = " ".join(" ".join(body).split())
    return (description, summary) if description and summary else None


def package_files(package: str) -> list[Path]:
    """The .py files of an installed package; "stdlib" is Python's standard library (tests left out)."""
    if package == "stdlib":
        root = Path(sysconfig.get_paths()["stdlib"])
        skip = {"site-packages", "dist-packages", "test", "tests", "idlelib", "lib2to3"}
        return sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(package, 0, "package is not installed")
    return sorted(p for root in spec.submodule_search_locations for p in Path(root).rglob("*.py"))


def docstring_pairs(packages: tuple[str, ...] = DEFAULT_PACKAGES, titles: bool = False) -> Iterator[Pair]:
    """(description, summary) pairs from the docstrings of installed packages, read with ast:
    no package code is imported or run. origin is the top-level package. With titles, a description starts
    with its definition's qualified name in words ("log record get message: ..."), as help() shows the name
    above the text."""
    for package in packages:
        root = package_root(package)
        for path in package_files(package):
            module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            yield from _file_docstrings(path, package, module if titles else None)


def package_root(package: str) -> Path:
    """The folder that module paths of package are relative to."""
    if package == "stdlib":
        return Path(sysconfig.get_paths()["stdlib"])
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(package, 0, "package is not installed")
    return Path(next(iter(spec.submodule_search_locations))).parent


def _file_docstrings(path: Path, package: str, module: str | None) -> Iterator[Pair]:
    """The pairs of one file; with a module name (None: no titles), each description starts with its
    definition's name within the module (Class.method), a module's own with the module's dotted name."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    from training.summaries import title_words, titled

    definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    queue: deque[tuple[ast.AST, str]] = deque([(tree, "")])  # ast.walk's order, with qualified names
    while queue:
        node, name = queue.popleft()
        doc = ast.get_docstring(node, clean=False) if isinstance(node, (*definitions, ast.Module)) else None
        parts = split_docstring(doc) if doc else None
        if parts:
            title = "" if module is None else title_words(name or module)
            yield Pair(titled(title, parts[0]), parts[1], package)
        queue.extend(
            (c, f"{name}.{c.name}".lstrip(".") if isinstance(c, definitions) else name)
            for c in ast.iter_child_nodes(node)
        )
