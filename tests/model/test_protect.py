"""What a model cannot translate comes through unchanged: URLs, e-mail addresses, numbers, code spans and
words the source vocabulary cannot spell are kept out of the search and put back into the output."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.protect import Kept, Protected, kept_spans, protect, restore
from model.translator import Translator


def ascii_only(c: str) -> bool:
    return c.isascii()


@pytest.mark.parametrize(
    ("sentence", "kept", "read"),
    [
        ("😀 مرحبا File not found", ["😀 مرحبا"], "File not found"),
        ("Copy 3 files, 1,024 bytes in 2.5 s.", ["3", "1,024", "2.5"], "Copy files, bytes in s."),
        ("Open https://example.com/a/b.html?x=1 now.", ["https://example.com/a/b.html?x=1"], "Open now."),
        ("Visit www.example.org.", ["www.example.org"], "Visit."),
        ("Mail help@example.org today", ["help@example.org"], "Mail today"),
        ("Run `git status` first", ["`git status`"], "Run first"),
        ("Größe «naïve» here", ["Größe", "naïve"], "«» here"),
        ("mp3, COVID-19 and H2O stay", [], "mp3, COVID-19 and H2O stay"),
        ("https://example.com", ["https://example.com"], ""),
    ],
)
def test_what_is_kept_and_what_the_model_reads(sentence: str, kept: list[str], read: str) -> None:
    protected = protect(sentence, ascii_only)
    assert [k.text for k in protected.kept] == kept and protected.text == read
    assert [sentence[a:b] for a, b in kept_spans(sentence, ascii_only)] == kept
    assert protected.blank == (read == "")


def test_restore_puts_each_span_at_its_place_spaced_from_the_words() -> None:
    protected = Protected("Copy files.", (Kept(4, "3"), Kept(11, "😀")))
    out, spans, moved = restore(protected, "Dateien kopieren.", [0, 16])
    assert out == "3 Dateien kopieren 😀." and [out[a:b] for a, b in spans] == ["3", "😀"]
    assert out[moved[0] : moved[7]] == "Dateien" and out[moved[16]] == "."
    assert restore(Protected("x", (Kept(0, "a"),)), "", [0])[0] == "a"


def test_the_translator_keeps_every_span_and_translates_the_rest(checkpoint_dir: Path) -> None:
    tr = Translator.load(checkpoint_dir, device="cpu")
    sentence = "kalo 😀 mine https://example.com/x ruza 1,024 vo"
    [out] = tr.translate([sentence], beam_size=2, max_len_a=0.0, max_len_b=8)
    for kept in ("😀", "https://example.com/x", "1,024"):
        assert out.text.count(kept) == 1, out.text
    alone = tr.translate(["kalo mine ruza vo"], beam_size=2, max_len_a=0.0, max_len_b=8, segment=False)[0]
    assert out.tokens == alone.tokens  # the model read the sentence without them
    assert tr.translate(["😀 https://example.com"], max_len_b=4)[0].text == "😀 https://example.com"


def test_hostile_sentences_keep_at_most_max_kept_spans() -> None:
    from model.protect import MAX_KEPT

    assert len(protect("1 a " * 5000, ascii_only).kept) == MAX_KEPT
    assert protect("a" * 50_000, ascii_only).kept == ()  # one long word: no address, nothing kept
    assert len(protect("`a " * 3000, ascii_only).kept) <= MAX_KEPT
