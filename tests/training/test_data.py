"""Corpus readers and built-in corpora: streaming, and errors that name the file and line."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from training.corpora import docstring_pairs, gettext_pairs, read_mo, read_po, split_docstring
from training.data import CorpusError, Pair, read_jsonl, read_parallel, read_tsv


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_parallel_files_are_read_line_by_line(tmp_path: Path) -> None:
    src = write(tmp_path / "a.en", "one\ntwo\n")
    tgt = write(tmp_path / "a.de", "eins\nzwei\n")
    assert [(p.source, p.target) for p in read_parallel(src, tgt)] == [("one", "eins"), ("two", "zwei")]


@pytest.mark.parametrize(
    ("src", "tgt", "bad", "line"),
    [
        ("one\ntwo\n", "eins\n", "a.de", 2),
        ("one\n", "eins\nzwei\n", "a.de", 2),
    ],
)
def test_parallel_files_of_different_lengths_name_the_file(
    tmp_path: Path, src: str, tgt: str, bad: str, line: int
) -> None:
    with pytest.raises(CorpusError) as e:
        list(read_parallel(write(tmp_path / "a.en", src), write(tmp_path / "a.de", tgt)))
    assert e.value.path.endswith(bad) and e.value.line == line
    assert f"{bad}:{line}" in str(e.value)


def test_tsv_columns_and_a_short_line(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", "id1\thello\thallo\nid2\tbye\n")
    it = read_tsv(path, source_column=1, target_column=2)
    assert next(it) == Pair("hello", "hallo", "c.tsv")
    with pytest.raises(CorpusError, match=r"c\.tsv:2: has 2 tab-separated column"):
        next(it)


def test_jsonl_with_configured_fields(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", '{"document": "long text", "summary": "short"}\n\n')
    assert list(read_jsonl(path, "document", "summary")) == [Pair("long text", "short", "s.jsonl")]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"source": "a", ', "not valid JSON"),
        ('["a", "b"]', "not a JSON object"),
        ('{"source": "a"}', "field 'target' is missing"),
        ('{"source": "a", "target": 3}', "field 'target' is missing or not a string"),
    ],
)
def test_corrupt_jsonl_line_is_named(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path / "x.jsonl", '{"source": "ok", "target": "ok"}\n' + line + "\n")
    it = read_jsonl(path)
    next(it)
    with pytest.raises(CorpusError, match=rf"x\.jsonl:2: .*{message}"):
        next(it)


def test_invalid_utf8_is_named(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.tsv", b"fine\tgut\n\xff\xfe\tx\n")
    with pytest.raises(CorpusError, match=r"bad\.tsv:2: not valid UTF-8"):
        list(read_tsv(path))


def test_missing_file_is_a_corpus_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="cannot open"):
        list(read_tsv(tmp_path / "nope.tsv"))


PO = """msgid ""
msgstr ""
"Content-Type: text/plain; charset=UTF-8\\n"

msgid "Open file"
msgstr "Datei öffnen"

#, fuzzy
msgid "Close"
msgstr "Schließen"

msgctxt "menu"
msgid "Quit"
msgstr "Beenden"

msgid "%d file"
msgid_plural "%d files"
msgstr[0] "%d Datei"
msgstr[1] "%d Dateien"

msgid "Untranslated"
msgstr ""

msgid "two "
"lines"
msgstr "zwei "
"Zeilen"
"""

EXPECTED = [("Open file", "Datei öffnen"), ("Quit", "Beenden"), ("%d file", "%d Datei"), ("two lines", "zwei Zeilen")]


def test_po_catalog(tmp_path: Path) -> None:
    assert read_po(write(tmp_path / "demo.po", PO)) == EXPECTED


def test_mo_catalog_compiled_by_msgfmt(tmp_path: Path) -> None:
    po = write(tmp_path / "demo.po", PO)
    mo = tmp_path / "demo.mo"
    subprocess.run(["msgfmt", "-o", str(mo), str(po)], check=True)
    assert sorted(read_mo(mo)) == sorted(p for p in EXPECTED)


def test_truncated_mo_catalog_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="bad magic number|too short"):
        read_mo(write(tmp_path / "x.mo", b"\x00" * 40))


def test_gettext_pairs_from_a_named_directory(tmp_path: Path) -> None:
    folder = tmp_path / "fr" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    write(folder / "app.po", 'msgid "Yes"\nmsgstr "Oui"\n')
    assert list(gettext_pairs("fr", tmp_path)) == [Pair("Yes", "Oui", "app")]
    with pytest.raises(CorpusError, match="no gettext catalogs"):
        list(gettext_pairs("xx", tmp_path / "empty"))


def test_the_machines_german_catalogs_give_thousands_of_pairs() -> None:
    pairs = list(gettext_pairs("de"))
    assert len(pairs) > 5000
    assert all(p.source and p.target for p in pairs)


def test_docstring_split() -> None:
    doc = """Add two numbers.

    The numbers may be ints or floats; the result
    has the wider type.

    Args:
        a: the first
    """
    assert split_docstring(doc) == (
        "The numbers may be ints or floats; the result has the wider type.",
        "Add two numbers.",
    )
    assert split_docstring("Only a summary.") is None


@pytest.mark.parametrize(
    "line",
    [
        "Returns a pair (n, d) of integers.",
        "Note that the order is kept.",
        "raised when it is caused.",
        "Example usage follows below.",
    ],
)
def test_a_sentence_that_begins_like_a_section_header_stays_in_the_description(line: str) -> None:
    doc = f"Summary line.\n\nFirst part.\n{line}\nLast part.\n\nReturns:\n    a value\n"
    assert split_docstring(doc) == (f"First part. {line} Last part.", "Summary line.")


@pytest.mark.parametrize(
    "header",
    [
        "Returns",
        "Returns:",
        "Notes",
        "See also: other",
        "Example::",
        ">>> f(1)",
        ".. note::",
        ":param x: the input",
        "-------",
    ],
)
def test_a_section_header_ends_the_description(header: str) -> None:
    assert split_docstring(f"Summary line.\n\nThe description.\n{header}\nmore\n") == (
        "The description.",
        "Summary line.",
    )


def test_a_directive_or_doctest_is_not_a_summary() -> None:
    assert split_docstring(".. deprecated:: 3.5\n\nUse g instead.\n") is None
    assert split_docstring(">>> f()\n\nCalls f.\n") is None


def test_docstring_corpus_reads_source_without_importing_it() -> None:
    pairs = list(docstring_pairs(("json",)))
    assert pairs and all(p.origin == "json" for p in pairs)
    assert any("JSON" in p.target or "json" in p.target.lower() for p in pairs)


def test_docstring_titles_name_the_definition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "toypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "records.py").write_text(
        textwrap.dedent('''
        """Records of events.

        Each record holds one event's message and its arguments.
        """
        import sys

        class LogRecord:
            def getMessage(self):
                """Return the message for this LogRecord.

                The user-supplied arguments are merged into the message first.
                """

        if sys.platform:
            def ensure_running():
                """Make sure that a fork server is running.

                This can be called from any process.
                """
        ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    titled = {p.target: p.source for p in docstring_pairs(("toypkg",), titles=True)}
    assert titled == {
        "Records of events.": "toypkg records: Each record holds one event's message and its arguments.",
        "Return the message for this LogRecord.": "log record get message: The user-supplied arguments are merged "
        "into the message first.",
        "Make sure that a fork server is running.": "ensure running: This can be called from any process.",
    }
    plain = [(p.source, p.target) for p in docstring_pairs(("toypkg",))]
    assert plain == [(s.split(": ", 1)[1], t) for t, s in titled.items()]
