"""The `transformer translate` and `transformer import marian` commands, run in-process."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from model.translator import Translator
from service.cli import main
from tests.conftest import MarianFixture, save_random_checkpoint

FAST = ["--device", "cpu", "--beam-size", "3", "--max-len-a", "0", "--max-len-b", "6"]
FAST_OPTIONS = {"beam_size": 3, "max_len_a": 0.0, "max_len_b": 6}


def run_cli(
    argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[str], str]:
    """Exit code, stdout lines and stderr of `transformer ARGV` with the given stdin."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_translate_prints_one_line_per_input(
    checkpoint_dir: Path, sentences: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = sentences[:5]
    code, out, _ = run_cli(
        ["translate", "--model", str(checkpoint_dir), *FAST], "\n".join(lines) + "\n", monkeypatch, capsys
    )
    assert code == 0
    expected = Translator.load(checkpoint_dir, device="cpu").translate(lines, **FAST_OPTIONS)
    assert out == [t.text for t in expected]


def test_translate_in_small_batches_gives_the_same_lines(
    checkpoint_dir: Path, sentences: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "\n".join(sentences[:7]) + "\n"
    _, whole, _ = run_cli(["translate", "--model", str(checkpoint_dir), *FAST], text, monkeypatch, capsys)
    code, small, _ = run_cli(
        ["translate", "--model", str(checkpoint_dir), "--batch-size", "2", *FAST], text, monkeypatch, capsys
    )
    assert code == 0 and small == whole and len(small) == 7


def test_n_best_with_scores(
    checkpoint_dir: Path, sentences: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = sentences[:3]
    code, out, _ = run_cli(
        ["translate", "--model", str(checkpoint_dir), "--n-best", "2", "--scores", *FAST],
        "\n".join(lines) + "\n",
        monkeypatch,
        capsys,
    )
    assert code == 0 and len(out) == 3
    expected = Translator.load(checkpoint_dir, device="cpu").translate(lines, n_best=2, **FAST_OPTIONS)
    for line, translation in zip(out, expected, strict=True):
        fields = line.split("\t")
        assert len(fields) == 4  # score, text, score, text
        scores = [float(fields[0]), float(fields[2])]
        assert scores[0] >= scores[1]
        assert [fields[1], fields[3]] == [h.text for h in translation.hypotheses]
        assert scores == pytest.approx([h.score for h in translation.hypotheses], abs=1e-4)


def test_empty_stdin_prints_nothing(
    checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(["translate", "--model", str(checkpoint_dir), *FAST], "", monkeypatch, capsys)
    assert code == 0 and out == []


def test_missing_model_directory_exits_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no_such_model"
    code, out, err = run_cli(["translate", "--model", str(missing), "--device", "cpu"], "hello\n", monkeypatch, capsys)
    assert code == 2
    assert str(missing) in err and out == []


def test_too_long_input_exits_2_unless_truncated(
    tmp_path_factory: pytest.TempPathFactory,
    spm_dir: Path,
    vocab_size: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    directory = save_random_checkpoint(tmp_path_factory.mktemp("short_cli"), spm_dir, vocab_size, max_len=16)
    long_line = " ".join(["kalomine ruvo"] * 20) + "\n"
    code, _, err = run_cli(["translate", "--model", str(directory), *FAST], long_line, monkeypatch, capsys)
    assert code == 2 and "truncate" in err
    code, out, _ = run_cli(
        ["translate", "--model", str(directory), "--truncate", *FAST], long_line, monkeypatch, capsys
    )
    assert code == 0 and len(out) == 1


def test_import_marian_writes_a_loadable_checkpoint(
    marian: MarianFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "imported"
    code, _, err = run_cli(
        ["import", "marian", str(marian.hf_dir), str(out_dir), "--source-lang", "xx", "--target-lang", "yy"],
        "",
        monkeypatch,
        capsys,
    )
    assert code == 0 and str(out_dir) in err
    tr = Translator.load(out_dir, device="cpu")
    assert (tr.meta.source_lang, tr.meta.target_lang) == ("xx", "yy")
    assert tr.model.cfg.src_vocab_size == marian.vocab_size
    [t] = tr.translate(["kalo mine"], beam_size=2, max_len_a=0, max_len_b=5)
    assert isinstance(t.text, str)


def test_import_of_a_missing_directory_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(
        ["import", "marian", str(tmp_path / "nothing"), str(tmp_path / "out")], "", monkeypatch, capsys
    )
    assert code == 2 and str(tmp_path / "nothing") in err


def test_module_entry_point_in_a_subprocess(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", "translate", "--model", str(missing), "--device", "cpu"],
        input="hi\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert str(missing) in proc.stderr and proc.stdout == ""
