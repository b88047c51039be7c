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
    assert "line 2: invalid Unicode" in err and "Traceback" not in err
