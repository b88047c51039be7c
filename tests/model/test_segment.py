"""Sentence segmentation: a text is cut where a sentence ends and nowhere else, and its sentences' outputs join
back into the text's shape; Translator.translate of a paragraph is its sentences translated one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

from model.errors import InputError, InputTooLongError
from model.output import Hypothesis, Output
from model.segment import Segmented, joined, segment, sentences, whole
from model.translator import Translator
from tests.conftest import make_sentences


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "File not found. Could not save the file because the disk is full. Do you want to delete it?",
            ["File not found.", "Could not save the file because the disk is full.", "Do you want to delete it?"],
        ),
        ("Dr. Smith paid $3.50 for e.g. apples at 5 p.m. today. He left.", None),
        ('Wait... what happened? "It broke." She left!', ["Wait... what happened?", '"It broke."', "She left!"]),
        ("1. Open the file.\n2. Save it.", ["1. Open the file.", "2. Save it."]),
        ("Save changes", ["Save changes"]),
        ("Open file\nSave as", ["Open file", "Save as"]),  # a line break always ends a segment
        ("Visit https://example.com/a.b?x=1. Then mail a.b@c.de now.", None),
    ],
)
def test_sentences_end_where_a_sentence_ends(text: str, want: list[str] | None) -> None:
    got = sentences(text, "en").sentences
    if want is None:  # abbreviations, decimals, URLs and addresses do not end a sentence
        want = [s.strip() + ("." if not s.endswith(".") else "") for s in text.split(". ") if s]
        want = [text[: text.index(want[-1])].strip(), want[-1]] if len(want) > 1 else want
    assert got == want


def test_join_keeps_the_whitespace_and_line_breaks_between_sentences() -> None:
    text = "  One here.  Two there?\n\n\tThree!  \n"
    seg = sentences(text, "en")
    assert seg.sentences == ["One here.", "Two there?", "Three!"]
    out, spans = seg.join(["Eins.", "Zwei?", "Drei!"])
    assert out == "  Eins.  Zwei?\n\n\tDrei!  \n"
    assert [out[a:b] for a, b in spans] == ["Eins.", "Zwei?", "Drei!"]
    assert seg.join(seg.sentences)[0] == text  # each sentence for itself: the text again


def test_a_summarizer_reads_a_text_whole_and_a_blank_text_has_no_sentences() -> None:
    text = " One here. Two there. "
    assert segment(text, "en", "summarization") == Segmented(text, ((1, 21),))
    assert segment(text, "en", "translation").sentences == ["One here.", "Two there."]
    assert whole("   ").spans == () and sentences(" \n ", "en").spans == ()


def test_invalid_unicode_is_named() -> None:
    with pytest.raises(InputError, match="lone surrogate"):
        segment("Fine. Bad \ud800 here.", "en", "translation")


def test_joined_n_best_takes_each_sentences_kth_and_sums_the_scores() -> None:
    seg = sentences("Abc def. Ghi jkl.", "en")
    first = Output([Hypothesis([1], -1.0, -2.0, "x"), Hypothesis([2], -3.0, -4.0, "y")])
    second = Output([Hypothesis([3], -0.5, -0.5, "z")])  # one hypothesis only: its best stands in
    out = joined(seg, [first, second])
    assert [h.text for h in out.hypotheses] == ["x z", "y z"]
    assert [h.score for h in out.hypotheses] == [-1.5, -3.5] and out.hypotheses[1].ids == [2, 3]
    assert [(s.source, s.output) for s in out.best.sentences] == [((0, 8), (0, 1)), ((9, 17), (2, 3))]
    assert joined(whole(" "), []).text == " "


def test_a_paragraph_translates_as_its_sentences_one_by_one(checkpoint_dir: Path) -> None:
    tr = Translator.load(checkpoint_dir, device="cpu")
    parts = [s.capitalize() + "." for s in make_sentences(6, seed=21, min_words=3, max_words=8)]
    paragraph = " ".join(parts[:3]) + "\n\n" + " ".join(parts[3:])
    opts = {"beam_size": 3, "n_best": 2, "max_len_a": 0.0, "max_len_b": 6}
    [out] = tr.translate([paragraph], **opts)
    alone = tr.translate(parts, segment=False, **opts)
    want = " ".join(o.text for o in alone[:3]) + "\n\n" + " ".join(o.text for o in alone[3:])
    assert out.text == want and out.score == pytest.approx(sum(o.score for o in alone))
    assert [out.text[a:b] for _, (a, b) in ((s.source, s.output) for s in out.best.sentences)] == [
        o.text for o in alone
    ]
    assert [paragraph[a:b] for (a, b), _ in ((s.source, s.output) for s in out.best.sentences)] == parts
    whole_paragraph = tr.translate([paragraph], segment=False, truncate=True, **opts)[0]
    assert [s.source for s in whole_paragraph.best.sentences] == [(0, len(paragraph))]  # one segment: all of it


def test_a_too_long_sentence_is_named_by_text_and_sentence(checkpoint_dir: Path) -> None:
    tr = Translator.load(checkpoint_dir, device="cpu")
    long = "kalo mine ruza " * 40
    with pytest.raises(InputTooLongError, match="input 1, sentence 1 has"):
        tr.translate(["Fine.", f"Short one. {long}."], max_len_b=4)
    assert len(tr.translate(["Fine.", f"Short one. {long}."], max_len_b=4, truncate=True)) == 2
