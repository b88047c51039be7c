"""`transformer translate`: a line the model cannot take is named by its number, with the option that helps;
the lines before it are never lost, and --skip-errors leaves its line empty and goes on."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from model.translator import Translator
from service.cli import main
from tests.conftest import make_sentences

FAST = ["--beam-size", "2", "--max-len-a", "0", "--max-len-b", "4", "--batch-size", "4"]  # chunks of 64 lines
LONG = "kalo mine ruza " * 40  # more than the tiny model's 64 tokens


def feed(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def test_an_over_long_line_is_named_and_the_lines_before_it_are_kept(
    checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = make_sentences(301, seed=3, min_words=1, max_words=6)
    lines[99] = LONG  # line 100, in the second chunk
    want = [
        t.text
        for t in Translator.load(checkpoint_dir).translate(
            [line for i, line in enumerate(lines) if i != 99], beam_size=2, max_len_a=0.0, max_len_b=4
        )
    ]
    feed(monkeypatch, ("\n".join(lines) + "\n").encode())
    assert main(["translate", "--model", str(checkpoint_dir), *FAST]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == want[:99]
    assert "line 100 has" in err and "--truncate" in err and "--skip-errors" in err and "Traceback" not in err

    feed(monkeypatch, ("\n".join(lines) + "\n").encode())
    assert main(["translate", "--model", str(checkpoint_dir), "--skip-errors", *FAST]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [*want[:99], "", *want[99:]]
    assert "warning: line 100 has" in err


def test_bytes_that_are_not_utf8_are_named_not_a_traceback(
    checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    feed(monkeypatch, b"kalo mine\nruza \xff\xfe vo\nsa ti\n")
    assert main(["translate", "--model", str(checkpoint_dir), "--skip-errors", *FAST]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3 and out.splitlines()[1] == ""
    assert (
        "line 2: invalid Unicode" in err
        and "byte 0xFF becomes in input that is not UTF-8" in err
        and "Traceback" not in err
    )


def test_a_file_is_translated_into_the_same_format_with_progress(
    checkpoint_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import docx

    from tests.model.test_files import docx_bytes

    paragraphs = [p.capitalize() + "." for p in make_sentences(300, seed=7, min_words=2, max_words=6)]
    (tmp_path / "in.docx").write_bytes(docx_bytes(paragraphs))
    args = ["translate", "--model", str(checkpoint_dir), "--file", str(tmp_path / "in.docx")]
    assert main([*args, "--out", str(tmp_path / "out.docx"), *FAST]) == 0
    want = Translator.load(checkpoint_dir).translate(paragraphs, beam_size=2, max_len_a=0.0, max_len_b=4)
    assert [p.text for p in docx.Document(str(tmp_path / "out.docx")).paragraphs] == [w.text for w in want]
    err = capsys.readouterr().err
    assert "300/300" in err and "300 texts translated" in err  # tqdm's progress, to the last text
    assert main(args) == 2
    assert "--file and --out go together" in capsys.readouterr().err
    (tmp_path / "bad.docx").write_bytes(b"not a zip")
    assert main([*args[:-1], str(tmp_path / "bad.docx"), "--out", str(tmp_path / "o.docx")]) == 2
    assert "bad.docx: not a readable zip" in capsys.readouterr().err
