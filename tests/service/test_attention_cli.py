"""`transformer attention`: a real PNG heatmap, JSON equal to POST /attention's, one-line errors."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from matplotlib import image

from model.translator import Translator
from service.cli import main
from tests.model.test_decoding_defaults import OWN, with_decoding
from tests.service.test_api import ready_client

TEXT = "kalo mine ruza"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


@pytest.fixture(scope="module")
def client(models_dir: Path) -> Iterator[TestClient]:
    c = ready_client(models_dir)
    yield c
    c.__exit__(None, None, None)


def test_png_and_json_equal_the_api(
    models_dir: Path, tmp_path: Path, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    png, out = tmp_path / "figs" / "cross.png", tmp_path / "cross.json"
    code = main(
        [
            "attention",
            "--model",
            str(models_dir / "tiny-en-de"),
            TEXT,
            "--png",
            str(png),
            "--json",
            str(out),
            "--max-length",
            "6",
            "--beam-size",
            "3",
            "--device",
            "cpu",
        ]
    )
    assert code == 0
    got = json.loads(out.read_text())
    printed = capsys.readouterr()
    assert printed.out.strip() == got["text"] and "mean over heads" in printed.err

    width, height = png_size(png)
    assert 400 <= width <= 4000 and 300 <= height <= 4000
    pixels = image.imread(png)
    assert pixels.shape[:2] == (height, width)
    assert pixels[..., :3].std() > 0.05  # drawn, not blank

    S, T = len(got["source_tokens"]), len(got["target_tokens"])
    assert got["source_tokens"][-1] == "</s>" and got["target_tokens"][-1] == "</s>" and 1 < T <= 7
    assert [len(got["cross"]), len(got["cross"][0]), len(got["cross"][0][0]), len(got["cross"][0][0][0])] == [
        2,
        4,
        T,
        S,
    ]
    assert [len(got["encoder"][0][0]), len(got["encoder"][0][0][0])] == [S, S]
    assert [len(got["decoder"][0][0]), len(got["decoder"][0][0][0])] == [T, T]

    r = client.post("/attention", json={"q": TEXT, "model": "tiny-en-de", "beam_size": 3, "max_length": 6})
    assert r.status_code == 200, r.text
    want = r.json()
    assert set(got) == set(want)
    assert got["hypothesis"] == want["hypothesis"] == 0
    assert [h["text"] for h in got["hypotheses"]] == [h["text"] for h in want["hypotheses"]]
    for key in ("model", "text", "source_tokens", "target_tokens"):
        assert got[key] == want[key], key
    assert got["score"] == pytest.approx(want["score"], abs=1e-5)
    for key in ("cross", "encoder", "decoder"):
        np.testing.assert_allclose(np.array(got[key]), np.array(want[key]), atol=1.01e-3, err_msg=key)  # rounded


def test_other_kinds_layers_and_heads(models_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "dec.png"
    assert (
        main(
            [
                "attention",
                "--model",
                str(models_dir / "tiny-en-de"),
                TEXT,
                "--png",
                str(png),
                "--kind",
                "decoder",
                "--layer",
                "0",
                "--head",
                "3",
                "--max-length",
                "6",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert "Decoder self-attention, layer 0, head 3" in capsys.readouterr().err
    assert png_size(png)[0] >= 400


def test_the_models_own_decoding_options_apply_unless_given(
    models_dir: Path, tmp_path: Path, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """As POST /attention: an option the command line does not give is the model's own (its recipe's
    `decoding`), and one it gives overrides it."""
    own = with_decoding(models_dir / "tiny-en-de", tmp_path / "own", OWN)
    translator = Translator.load(own, device="cpu")
    base = [
        "attention",
        "--model",
        str(own),
        TEXT,
        "--png",
        str(tmp_path / "x.png"),
        "--json",
        str(tmp_path / "x.json"),
    ]
    assert main([*base, "--device", "cpu"]) == 0
    got = json.loads((tmp_path / "x.json").read_text())
    want = translator.translate([TEXT])[0]  # the model's own: beam 3, n-best 2, at most 3 tokens
    assert capsys.readouterr().out.strip() == want.text == got["text"]
    assert [h["text"] for h in got["hypotheses"]] == [h.text for h in want.hypotheses] and len(got["hypotheses"]) == 2
    assert len(got["target_tokens"]) <= 4  # 3 tokens and EOS
    assert main([*base, "--device", "cpu", "--n-best", "1", "--max-length", "6"]) == 0
    got = json.loads((tmp_path / "x.json").read_text())
    want = translator.translate([TEXT], n_best=1, max_len_a=0.0, max_len_b=6)[0]
    assert [h["text"] for h in got["hypotheses"]] == [want.text]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--layer", "2"], ("layer 2 does not exist", "2 layers")),
        (["--head", "4"], ("head 4 does not exist", "4 heads")),
        (["--kind", "encoder", "--layer", "-3"], ("layer -3", "encoder attention has 2 layers")),
    ],
)
def test_bad_layer_or_head(
    models_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: tuple[str, ...]
) -> None:
    png = tmp_path / "x.png"
    code = main(
        [
            "attention",
            "--model",
            str(models_dir / "tiny-en-de"),
            TEXT,
            "--png",
            str(png),
            "--max-length",
            "6",
            "--device",
            "cpu",
            *args,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert all(w in err for w in words), err
    assert not png.exists()


def test_missing_model_and_too_long_input(models_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "x.png"
    missing = tmp_path / "no-such-model"
    assert main(["attention", "--model", str(missing), TEXT, "--png", str(png), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {missing}: no such checkpoint directory\n"

    long = "kalo mine ruza " * 40  # more than tiny-en-de's 64 tokens
    assert (
        main(["attention", "--model", str(models_dir / "tiny-en-de"), long, "--png", str(png), "--device", "cpu"]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: input 0 has") and "limit of 64" in err and err.count("\n") == 1, err
    assert not png.exists()


def test_head_must_be_an_index_or_mean(models_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(
            [
                "attention",
                "--model",
                str(models_dir / "tiny-en-de"),
                TEXT,
                "--png",
                str(tmp_path / "x.png"),
                "--head",
                "all",
            ]
        )
    assert exit_.value.code == 2
    assert "expected a head index or 'mean'" in capsys.readouterr().err
