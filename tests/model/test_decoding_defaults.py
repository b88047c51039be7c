"""A checkpoint's own decoding options (CheckpointMeta.decoding, a recipe's `decoding`): saved in config.json,
used by Translator, `transformer translate` and the service wherever a caller does not set an option."""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from model.checkpoint import CONFIG_FILE, read_meta
from model.commands import add_decoding_options
from model.config import DecodingConfig
from model.errors import CheckpointError
from model.translator import Translator
from service.api.schemas import DecodeOptions
from service.cli import main
from tests.conftest import make_sentences

OWN = {"beam_size": 3, "n_best": 2, "max_len_a": 0.0, "max_len_b": 3, "no_repeat_ngram_size": 2}


def with_decoding(src: Path, out: Path, decoding: object) -> Path:
    """A copy of checkpoint src whose config.json holds these decoding options."""
    shutil.copytree(src, out)
    config = json.loads((out / CONFIG_FILE).read_text())
    (out / CONFIG_FILE).write_text(json.dumps({**config, "decoding": decoding}))
    return out


def test_the_options_are_read_and_checked_and_only_changes_are_written(checkpoint_dir: Path, tmp_path: Path) -> None:
    assert "decoding" not in json.loads((checkpoint_dir / CONFIG_FILE).read_text())
    assert read_meta(checkpoint_dir).decoding == DecodingConfig()
    meta = read_meta(with_decoding(checkpoint_dir, tmp_path / "own", OWN))
    assert meta.decoding == DecodingConfig(**OWN)  # type: ignore[arg-type]
    assert meta.to_dict()["decoding"] == OWN
    for bad, message in (
        ({"beam_size": 0}, "beam_size"),
        ({"beams": 4}, "unknown decoding options"),
        ([4], "bad config"),
    ):
        with pytest.raises(CheckpointError, match=message):
            read_meta(with_decoding(checkpoint_dir, tmp_path / f"bad{len(list(tmp_path.iterdir()))}", bad))


def test_translator_and_the_translate_command_use_them_unless_told_otherwise(
    checkpoint_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    own = Translator.load(with_decoding(checkpoint_dir, tmp_path / "own", OWN), device="cpu")
    plain = Translator.load(checkpoint_dir, device="cpu")
    texts = make_sentences(5, seed=8)
    got = own.translate(texts)
    assert got == plain.translate(texts, DecodingConfig(**OWN))  # type: ignore[arg-type]
    assert all(len(t.hypotheses) == 2 and len(t.tokens) <= 3 for t in got)
    assert [t.text for t in own.translate(texts, beam_size=2, n_best=1, max_len_b=5)] == [
        t.text
        for t in plain.translate(
            texts,
            DecodingConfig(
                **{
                    **OWN,
                    "beam_size": 2,
                    "n_best": 1,  # type: ignore[arg-type]
                    "max_len_b": 5,
                }
            ),
        )
    ]
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(("\n".join(texts) + "\n").encode()), encoding="utf-8")
    )
    assert main(["translate", "--model", str(tmp_path / "own"), "--max-length", "5", "--n-best", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    want = plain.translate(texts, DecodingConfig(**{**OWN, "n_best": 1}).with_max_length(5))  # type: ignore[arg-type]
    assert out == [t.text for t in want]
    # Both lengths given, the shorter last: refused in one line (it was decoded to max-length, min-length unheard).
    assert main(["translate", "--model", str(tmp_path / "own"), "--min-length", "9", "--max-length", "3"]) == 2
    assert capsys.readouterr().err.strip() == "error: --min-length 9 is more than --max-length 3"


def test_every_option_set_one_by_one_is_a_request_field_and_a_flag_with_the_papers_default() -> None:
    """DecodingConfig.OPTIONS is the one list: the API's fields and the command line's flags follow it."""
    parser = argparse.ArgumentParser()
    add_decoding_options(parser)
    flags = {a.dest: a for a in parser._actions}
    paper = DecodingConfig()
    for name in DecodingConfig.OPTIONS:
        assert DecodeOptions.model_fields[name].default == getattr(paper, name), name
        assert name in flags and flags[name].default is None, name  # None: the model's own
    set_by_the_model = {"max_len_a", "max_len_b", "banned_ids", "target_prefix"}
    assert set(DecodingConfig.OPTIONS) | set_by_the_model == set(paper.to_dict())


def test_the_pages_option_inputs_are_request_fields_that_the_models_own_options_fill() -> None:
    """The page keeps the one copy: which options it has an input for (service/demo/static/options.js). Each is a
    request field, and GET /models gives each one's own value (the placeholder), max_length by max_len_a and b."""
    options_js = (Path(__file__).parents[2] / "service" / "demo" / "static" / "options.js").read_text()
    names = re.findall(r'\{name: "(\w+)", input:', options_js)
    assert len(names) >= 6 and len(set(names)) == len(names)
    for name in names:
        assert name in DecodeOptions.model_fields, name
        assert name in DecodingConfig.OPTIONS or name == "max_length", name
