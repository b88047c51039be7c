"""The offline summarization corpora: manual pages (man(7) and mdoc(7) roff, .gz or plain, links and stubs
skipped) and dpkg package descriptions; a split by origin keeps a source item's pairs on one side."""

from __future__ import annotations

import gzip
from pathlib import Path

from training.clean import SplitConfig, split
from training.data import Pair
from training.summaries import dpkg_pairs, item_name, manpage_pairs, page_item, parse_manpage, title_words, unescape

DESCRIPTION = (
    "List information about the FILEs (the current directory by default). Sort entries "
    "alphabetically if none of the sorting options is given."
)
MAN = f""".\\" a comment
.TH LS "1" "September 2022" "GNU coreutils 9.1" "User Commands"
.SH NAME
ls \\- list directory contents
.SH SYNOPSIS
.B ls
[\\fI\\,OPTION\\/\\fR]... [\\fI\\,FILE\\/\\fR]...
.SH DESCRIPTION
.\\" Add any additional description here
.PP
{DESCRIPTION.replace("FILEs", "FILEs").replace("(the", "(the")}
.TP
\\fB\\-a\\fR, \\fB\\-\\-all\\fR
do not ignore entries starting with .
.SH AUTHOR
Written by Richard M. Stallman.
"""
MDOC = """.Dd March 1, 2021
.Dt TOUCH 1
.Sh NAME
.Nm touch
.Nd change file access and modification times
.Sh DESCRIPTION
The
.Nm
utility sets the modification and access times of files.
If any file does not exist, it is created with default permissions, unless the
.Fl c
option is given.
"""


def test_man_and_mdoc_pages_parse_into_description_and_summary() -> None:
    description, summary = parse_manpage(MAN) or ("", "")
    assert summary == "list directory contents"
    assert description.startswith("List information about the FILEs") and "do not ignore entries" in description
    assert "\\" not in description and "AUTHOR" not in description and "Stallman" not in description
    description, summary = parse_manpage(MDOC) or ("", "")
    assert summary == "change file access and modification times"
    assert "unless the -c option is given" in description
    assert parse_manpage(".SH NAME\nfoo \\- a stub\n.SH DESCRIPTION\nSee the info page.\n") is None
    assert unescape(r"\s-1CA\s0.pl \fBx\fR \(lqy\(rq") == 'CA.pl x "y"'


def test_pages_are_read_gzipped_or_plain_and_links_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "ls.1.gz").write_bytes(gzip.compress(MAN.encode()))
    (tmp_path / "touch.1").write_text(MDOC)
    (tmp_path / "dir.1.gz").write_bytes(gzip.compress(b".so man1/ls.1\n"))
    (tmp_path / "vdir.1.gz").symlink_to(tmp_path / "ls.1.gz")
    (tmp_path / "broken.1.gz").write_bytes(b"not gzip")
    pairs = list(manpage_pairs(tmp_path))
    assert page_item("gcloud_compute_instances_list.1.gz") == "gcloud" and page_item("git-commit.1") == "git"
    assert [(p.origin, p.target) for p in pairs] == [
        ("ls", "list directory contents"),
        ("touch", "change file access and modification times"),
    ]


def test_dpkg_descriptions(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text(
        "Package: libfoo1\nSource: foo (1.2-3)\nDescription: the foo library\n"
        " Foo computes bar from baz quickly and correctly, with care for memory and for threads.\n .\n"
        " This package holds the shared library of foo.\n\n"
        "Package: tiny\nDescription: too short\n Nothing much.\n"
    )
    pairs = list(dpkg_pairs(status))
    assert len(pairs) == 1 and pairs[0].target == "the foo library" and pairs[0].origin == "foo"
    assert pairs[0].source.startswith("Foo computes bar") and " . " not in pairs[0].source


def test_a_split_by_origin_keeps_an_items_pairs_together() -> None:
    assert item_name("gcc-12") == "gcc" and item_name("python3.11") == "python" and item_name("libfoo1") == "libfoo"
    pairs = [Pair(f"document {i} of {origin}", "summary", origin) for origin in "abcdefghij" for i in range(20)]
    out = split(pairs, SplitConfig(dev=0.2, test=0.2, by_origin=True))
    sides = {side: {p.origin for p in getattr(out, side)} for side in ("train", "dev", "test")}
    assert not (sides["train"] & sides["test"]) and not (sides["train"] & sides["dev"]) and sides["train"]


def test_titles_are_names_in_words() -> None:
    assert title_words("cg_annotate") == "cg annotate"
    assert title_words("LogRecord.getMessage") == "log record get message"
    assert title_words("HTTPServer.serve_forever") == "http server serve forever"
    assert title_words("python3-numpy") == "python3 numpy"
    assert title_words("JSONEncoder.__init__") == "json encoder init"


def test_with_titles_each_document_starts_with_its_item_s_name(tmp_path: Path) -> None:
    (tmp_path / "ls.1.gz").write_bytes(gzip.compress(MAN.encode()))
    git_page = MAN.replace("ls \\- list directory contents", "git-commit \\- record changes")
    (tmp_path / "git-commit.1").write_text(git_page)
    (tmp_path / "bugpoint-14.1").write_text(git_page.replace("git-commit", "bugpoint-14"))  # no version in titles
    pages = {p.origin: p.source for p in manpage_pairs(tmp_path, titles=True)}
    assert pages["bugpoint"].startswith("bugpoint: List")
    assert pages["ls"].startswith("ls: List information about") and pages["git"].startswith("git commit: List")
    assert [p.source for p in manpage_pairs(tmp_path)] == [s.split(": ", 1)[1] for s in pages.values()]
    status = tmp_path / "status"
    status.write_text(
        "Package: python3-foo\nDescription: the foo module\n"
        " Foo computes bar from baz quickly and correctly, with care for memory and for threads.\n"
    )
    (package,) = dpkg_pairs(status, titles=True)
    assert package.source.startswith("python3 foo: Foo computes bar") and package.target == "the foo module"
