"""model.files: each format read into its texts and written back with their outputs in place, keeping what is
not text (cue numbers and timings, Markdown syntax, runs and styles, zip members) as it was. Documents are made
and read back with the libraries people use for them (python-docx, python-pptx, odfpy, EbookLib); the
"translation" is each text upper-cased, word aligned with word, so that every word's place is known."""

from __future__ import annotations

import io
import zipfile

import docx
import pptx
import pytest
from ebooklib import epub
from odf import teletype
from odf.opendocument import OpenDocumentText, load
from odf.style import Style, TextProperties
from odf.text import H, P, Span

from model.errors import FileError
from model.files import FileLimits, read_file
from model.output import Hypothesis
from tests.model.test_markup import hypothesis, parsed, words_of


def upper(texts: list[str]) -> list[Hypothesis]:
    return [hypothesis(t, t.upper(), list(range(len(words_of(t))))) for t in texts]


def docx_bytes(paragraphs: list[str]) -> bytes:
    """A .docx made by python-docx: a paragraph per text, its first word bold."""
    d = docx.Document()
    for text in paragraphs:
        first, _, rest = text.partition(" ")
        p = d.add_paragraph()
        p.add_run(first).bold = True
        p.add_run(" " + rest)
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def translated(name: str, data: bytes, limits: FileLimits | None = None) -> tuple[list[str], bytes]:
    read = read_file(name, data, limits or FileLimits())
    return read.texts, read.render(upper(read.texts))


def test_text_lines_keep_their_whitespace_line_breaks_and_byte_order_mark() -> None:
    texts, out = translated("a.txt", "\ufeffHello world.\r\n\n  Two lines. Here\t\nlast".encode())
    assert texts == ["Hello world.", "Two lines. Here", "last"]
    assert out.decode() == "\ufeffHELLO WORLD.\r\n\n  TWO LINES. HERE\t\nLAST"


def test_subtitles_keep_numbers_timings_notes_and_line_count() -> None:
    srt = (
        "1\r\n00:00:01,000 --> 00:00:02,000\r\nHello <i>there</i> my\r\nold friend.\r\n\r\n"
        "2\r\n00:00:03,000 --> 00:00:04,000\r\nBye & go.\r\n"
    )
    texts, out = translated("a.srt", srt.encode())
    assert texts == ["Hello there my old friend.", "Bye & go."]  # a cue's lines read as one text
    lines = out.decode().split("\r\n")
    assert lines[:2] == ["1", "00:00:01,000 --> 00:00:02,000"] and lines[5:7] == ["2", "00:00:03,000 --> 00:00:04,000"]
    assert " ".join(lines[2:4]) == "HELLO <i>THERE</i> MY OLD FRIEND." and len(lines[2:4]) == 2
    assert lines[7:] == ["BYE & GO.", ""]  # SRT text is not HTML-escaped
    vtt = "WEBVTT\n\nNOTE not translated\n\nintro\n00:01.000 --> 00:02.000 align:start\nFish & <b>chips</b>\n"
    texts, out = translated("a.vtt", vtt.encode())
    assert texts == ["Fish & chips"]
    assert (
        out.decode()
        == "WEBVTT\n\nNOTE not translated\n\nintro\n00:01.000 --> 00:02.000 align:start\nFISH &amp; <b>CHIPS</b>\n"
    )


def test_markdown_keeps_its_syntax_and_places_inline_markup() -> None:
    source = (
        '# Title *here*\n\nSome **bold** text, a [link](http://x.org "t") and `code`.\nSecond line.\n\n'
        "> quoted *text*\n> more\n\n- item one\n- item two ![alt](a.png)\n\n"
        "| a b | c |\n|---|---|\n| cell *one* | two |\n\n"
        "```\nnot translated\n```\n"
    )
    texts, out = translated("a.md", source.encode())
    assert texts[:3] == ["Title here", "Some bold text, a link and . Second line.", "quoted text more"]
    assert out.decode() == (
        '# TITLE *HERE*\n\nSOME **BOLD** TEXT, A [LINK](http://x.org "t") AND `code`. SECOND LINE.\n\n'
        "> QUOTED *TEXT* MORE\n\n- ITEM ONE\n- ITEM TWO ![alt](a.png)\n\n"
        "| A B | C |\n|---|---|\n| CELL *ONE* | TWO |\n\n"
        "```\nnot translated\n```\n"
    )


def test_markdown_escapes_what_the_output_would_turn_into_markup() -> None:
    read = read_file("a.md", b"Stars here.\n", FileLimits())
    out = read.render([Hypothesis([], 0.0, 0.0, text="2 * 3 = [six]", alignment=())])
    assert out == b"2 \\* 3 = \\[six\\]\n"


def test_html_pages_keep_their_markup() -> None:
    page = "<html><head><title>{}</title></head><body><p>{} <b>{}</b> {}</p><script>x < 1</script></body></html>"
    texts, out = translated("a.html", page.format("Hi there", "Click", "Save", "now.").encode())
    assert texts == ["Hi there", "Click Save now."]
    assert out.decode() == page.format("HI THERE", "CLICK", "SAVE", "NOW.")


def test_docx_keeps_paragraphs_tables_and_run_formatting() -> None:
    d = docx.Document()
    p = d.add_paragraph("Click ")
    p.add_run("Save").bold = True
    p.add_run(" to keep your changes.")
    d.add_paragraph("")
    d.add_paragraph("Second paragraph here.", style="Heading 1")
    cells = d.add_table(rows=1, cols=2).rows[0].cells
    cells[0].text, cells[1].text = "Cell one", "Cell two"
    buf = io.BytesIO()
    d.save(buf)
    texts, out = translated("a.docx", buf.getvalue())
    assert texts == ["Click Save to keep your changes.", "Second paragraph here.", "Cell one", "Cell two"]
    back = docx.Document(io.BytesIO(out))
    assert [(r.text, bool(r.bold)) for r in back.paragraphs[0].runs] == [
        ("CLICK ", False),
        ("SAVE", True),
        (" TO KEEP YOUR CHANGES.", False),
    ]
    assert [p.text for p in back.paragraphs] == ["CLICK SAVE TO KEEP YOUR CHANGES.", "", "SECOND PARAGRAPH HERE."]
    assert back.paragraphs[2].style.name == "Heading 1"
    assert [c.text for c in back.tables[0].rows[0].cells] == ["CELL ONE", "CELL TWO"]


def test_docx_keeps_tabs_and_breaks_in_place_as_word_separators() -> None:
    d = docx.Document()
    p = d.add_paragraph("Name:")
    p.add_run().add_tab()
    p.add_run("value here")
    p.add_run().add_break()
    p.add_run("next line")
    buf = io.BytesIO()
    d.save(buf)
    texts, out = translated("a.docx", buf.getvalue())
    assert texts == ["Name: value here next line"]  # the model reads a space for each
    back = docx.Document(io.BytesIO(out)).paragraphs[0]
    assert back.text == "NAME:\tVALUE HERE\nNEXT LINE"


def test_pptx_keeps_slides_shapes_and_run_formatting() -> None:
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Slide title"
    frame = slide.placeholders[1].text_frame
    frame.text = "First point"
    para = frame.add_paragraph()
    italic = para.add_run()
    italic.text, italic.font.italic = "italic words", True
    para.add_run().text = " and plain ones."
    buf = io.BytesIO()
    deck.save(buf)
    texts, out = translated("a.pptx", buf.getvalue())
    assert texts == ["Slide title", "First point", "italic words and plain ones."]
    back = pptx.Presentation(io.BytesIO(out)).slides[0]
    assert back.shapes.title.text == "SLIDE TITLE"
    runs = back.placeholders[1].text_frame.paragraphs[1].runs
    assert "".join(r.text for r in runs) == "ITALIC WORDS AND PLAIN ONES."
    assert [r.text for r in runs if r.font.italic] == ["ITALIC WORDS"] or runs[0].font.italic


def test_odt_keeps_spans_headings_and_runs_of_spaces() -> None:
    doc = OpenDocumentText()
    bold = Style(name="B", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    doc.automaticstyles.addElement(bold)
    p = P(text="Hello ")
    p.addElement(Span(stylename=bold, text="bold"))
    p.addText(" world  spaced.")
    doc.text.addElement(p)
    doc.text.addElement(H(outlinelevel=1, text="A heading"))
    buf = io.BytesIO()
    doc.save(buf)
    texts, out = translated("a.odt", buf.getvalue())
    assert texts == ["Hello bold world  spaced.", "A heading"]
    back = load(io.BytesIO(out))
    assert [teletype.extractText(p) for p in back.getElementsByType(P)] == ["HELLO BOLD WORLD  SPACED."]
    assert [teletype.extractText(s) for s in back.getElementsByType(Span)] == ["BOLD"]
    assert zipfile.ZipFile(io.BytesIO(out)).infolist()[0].filename == "mimetype"


def test_epub_translates_its_documents_and_keeps_the_package() -> None:
    book = epub.EpubBook()
    book.set_identifier("id1")
    book.set_title("A book")
    book.set_language("en")
    chapter = epub.EpubHtml(title="One", file_name="one.xhtml", lang="en")
    chapter.content = "<h1>Chapter one</h1><p>It was a <em>dark</em> night.</p>"
    book.add_item(chapter)
    book.toc = [chapter]
    book.spine = ["nav", chapter]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    buf = io.BytesIO()
    epub.write_epub(buf, book)
    texts, out = translated("a.epub", buf.getvalue())
    assert "It was a dark night." in texts and "Chapter one" in texts
    z = zipfile.ZipFile(io.BytesIO(out))
    assert z.infolist()[0].filename == "mimetype" and z.infolist()[0].compress_type == zipfile.ZIP_STORED
    page = z.read("EPUB/one.xhtml").decode()
    assert "IT WAS A <em>DARK</em> NIGHT." in page
    parsed(page.split("?>", 1)[1])
    assert epub.read_epub(io.BytesIO(out)).get_item_with_href("one.xhtml") is not None


def zipped(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "limits", "words"),
    [
        ("a.pdf", b"%PDF", FileLimits(), [".pdf is not a format", ".docx"]),
        ("README", b"x", FileLimits(), ["no extension"]),
        ("a.txt", b"x" * 2000, FileLimits(max_bytes=1000), ["2,000 bytes", "1,000"]),
        ("a.txt", b"\xff\xfeh\x00i\x00", FileLimits(), ["not UTF-8", "byte 0"]),
        ("a.txt", b"a\nb\nc\n", FileLimits(max_texts=2), ["3 texts", "limit of 2"]),
        ("a.docx", b"PK\x03\x04garbage", FileLimits(), ["not a readable zip"]),
        ("a.docx", zipped({"x.xml": b"<a/>"}), FileLimits(), ["not a .docx", "word/document.xml"]),
        ("a.docx", zipped({"word/document.xml": b"<w:document"}), FileLimits(), ["not well-formed XML"]),
        ("a.odt", zipped({f"{i}": b"" for i in range(20)}), FileLimits(max_entries=10), ["20 entries"]),
        (
            "a.pptx",
            zipped({"ppt/presentation.xml": b"\0" * 3_000_000}),
            FileLimits(max_unzipped_bytes=10**6),
            ["unpacked"],
        ),
    ],
)
def test_bad_files_are_named_with_their_fault(name: str, data: bytes, limits: FileLimits, words: list[str]) -> None:
    with pytest.raises(FileError) as e:
        read_file(name, data, limits)
    assert str(e.value).startswith(name)
    for w in words:
        assert w in str(e.value)


def test_xml_entities_are_not_expanded() -> None:
    """A billion-laughs document is refused or read without expanding its entities."""
    laughs = (
        b'<?xml version="1.0"?><!DOCTYPE w:document [<!ENTITY a "hahahahahahahahahaha">'
        + b"".join(b'<!ENTITY %s "%s">' % (bytes([98 + i]), (b"&" + bytes([97 + i]) + b";") * 10) for i in range(8))
        + b']><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>&i;</w:t></w:r></w:p></w:body></w:document>'
    )
    try:
        texts = read_file("a.docx", zipped({"word/document.xml": laughs}), FileLimits()).texts
    except FileError:
        return
    assert sum(len(t) for t in texts) < 1000
