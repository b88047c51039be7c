"""Import of a Hugging Face Marian (OPUS-MT) checkpoint, checked against transformers itself.

The Marian model is random (see conftest.build_marian_dir) but shaped so that comparisons mean something:
its outputs depend on the source, and its hypotheses end with EOS well before the length limit. At the limit the
two legitimately differ: transformers forces an EOS with log-prob 0, our search keeps real log-probs.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from model.checkpoint import load_checkpoint, read_meta
from model.errors import CheckpointError
from model.marian import import_marian
from model.tokenizer import Tokenizer
from model.translator import Translator
from service.cli import main
from tests.conftest import MarianFixture, make_sentences

MAX_NEW_TOKENS = 40
SETTINGS = list(itertools.product([1, 4], [1.0, 0.6, 0.0], [True, "never"]))  # num_return_sequences, alpha, early


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return make_sentences(10, seed=31, min_words=1, max_words=14)


@pytest.fixture(scope="module")
def translator(marian_imported: Path) -> Translator:
    return Translator.load(marian_imported, device="cpu")


def hf_generate(
    marian: MarianFixture, texts: list[str], num_return_sequences: int, alpha: float, early_stopping: bool | str
) -> list[list[list[int]]]:
    """transformers' beam search: per text, its hypotheses as ids without the start symbol and EOS."""
    enc = marian.tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = marian.model.generate(
            **enc,
            num_beams=5,
            num_return_sequences=num_return_sequences,
            length_penalty=alpha,
            early_stopping=early_stopping,
            max_new_tokens=MAX_NEW_TOKENS,
            bad_words_ids=[[marian.pad]],
            do_sample=False,
            no_repeat_ngram_size=0,
            min_length=0,
        )
    rows = []
    for row in out.tolist():
        assert row[0] == marian.pad  # the decoder start
        row = row[1:]
        assert marian.eos in row, "a hypothesis reached the length limit: the comparison would be unfair"
        rows.append(row[: row.index(marian.eos)])
    return [rows[i : i + num_return_sequences] for i in range(0, len(rows), num_return_sequences)]


def our_generate(
    translator: Translator, texts: list[str], n_best: int, alpha: float, early_stopping: bool | str
) -> list[list[list[int]]]:
    results = translator.translate(
        texts,
        beam_size=5,
        n_best=n_best,
        length_penalty=alpha,
        length_penalty_form="average",
        max_len_a=0,
        max_len_b=MAX_NEW_TOKENS - 1,
        early_stopping=early_stopping is True,
    )
    to_ids = translator.tokenizer.target.to_ids
    return [[to_ids(h.tokens) for h in t.hypotheses] for t in results]


# -- the imported checkpoint ---------------------------------------------------------------------


def test_imported_config(marian_imported: Path, marian: MarianFixture) -> None:
    data = json.loads((marian_imported / "config.json").read_text(encoding="utf-8"))
    model = data["model"]
    assert model["position_layout"] == "halves"
    assert model["activation"] == "swish"
    assert model["logits_bias"] is True
    assert model["scale_embedding"] is True
    assert model["N"] == 2 and model["N_dec"] in (2, None)
    assert (model["d_model"], model["d_ff"], model["h"]) == (64, 128, 4)
    assert model["src_vocab_size"] == model["tgt_vocab_size"] == marian.vocab_size
    meta = read_meta(marian_imported)
    special = meta.tokenizer.special
    assert (special.pad, special.eos, special.decoder_start) == (marian.pad, marian.eos, marian.pad)
    for name in meta.tokenizer.files():
        assert (marian_imported / name).is_file()


def test_imported_weights_equal_the_marian_weights(marian_imported: Path, marian: MarianFixture) -> None:
    ours, _ = load_checkpoint(marian_imported)
    hf = marian.model.model
    torch.testing.assert_close(ours.src_embed.tokens.weight, hf.shared.weight, atol=0, rtol=0)
    assert ours.logits_bias is not None
    torch.testing.assert_close(ours.logits_bias, marian.model.final_logits_bias[0], atol=0, rtol=0)
    layer, hf_layer = ours.decoder[1], hf.decoder.layers[1]
    torch.testing.assert_close(layer.cross_attn.q.weight, hf_layer.encoder_attn.q_proj.weight, atol=0, rtol=0)
    torch.testing.assert_close(layer.ffn.w2.bias, hf_layer.fc2.bias, atol=0, rtol=0)
    torch.testing.assert_close(ours.tgt_embed.position(0, 128), hf.decoder.embed_positions.weight, atol=1e-6, rtol=0)


# -- tokenizer, logits, search -------------------------------------------------------------------


def test_source_ids_equal_marian_tokenizer(marian_imported: Path, marian: MarianFixture, texts: list[str]) -> None:
    tok = Tokenizer(marian_imported, read_meta(marian_imported).tokenizer)
    extra = ["", "ka lo  mi", ">>fra<< kalo mine", "ñandú kalo", "KALO 123 !?"]
    for text in texts + extra:
        assert tok.encode_source(text) == marian.tokenizer(text)["input_ids"], text


@torch.no_grad()
def test_logits_equal_marian_on_a_padded_batch(translator: Translator, marian: MarianFixture, texts: list[str]) -> None:
    enc = marian.tokenizer(texts[:5], return_tensors="pt", padding=True)
    assert not bool(enc["attention_mask"].bool().all())  # the batch is padded
    gen = torch.Generator().manual_seed(0)
    tgt = torch.randint(1, marian.vocab_size - 1, (5, 9), generator=gen)
    tgt[:, 0] = marian.pad  # the decoder start
    theirs = marian.model(
        input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], decoder_input_ids=tgt
    ).logits
    ours = translator.model(enc["input_ids"], enc["attention_mask"].bool(), tgt)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)


@pytest.mark.parametrize(("n", "alpha", "early_stopping"), SETTINGS)
def test_beam_search_equals_transformers_generate(
    translator: Translator, marian: MarianFixture, texts: list[str], n: int, alpha: float, early_stopping: Any
) -> None:
    theirs = hf_generate(marian, texts, n, alpha, early_stopping)
    ours = our_generate(translator, texts, n, alpha, early_stopping)
    assert ours == theirs


def test_the_comparison_is_not_trivial(marian: MarianFixture, texts: list[str]) -> None:
    """Sources matter, and outputs have various lengths, none near the limit."""
    best = [hyps[0] for hyps in hf_generate(marian, texts, 1, 1.0, True)]
    assert len({tuple(b) for b in best}) >= len(texts) // 2
    lengths = {len(h) for hyps in hf_generate(marian, texts, 4, 0.6, "never") for h in hyps}
    assert len(lengths) >= 3 and max(lengths) < MAX_NEW_TOKENS - 5


def test_text_equals_marian_decode(translator: Translator, marian: MarianFixture, texts: list[str]) -> None:
    enc = marian.tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = marian.model.generate(
            **enc,
            num_beams=5,
            length_penalty=1.0,
            early_stopping=True,
            max_new_tokens=MAX_NEW_TOKENS,
            bad_words_ids=[[marian.pad]],
        )
    theirs = marian.tokenizer.batch_decode(out, skip_special_tokens=True)
    ours = translator.translate(
        texts,
        beam_size=5,
        length_penalty=1.0,
        length_penalty_form="average",
        max_len_a=0,
        max_len_b=MAX_NEW_TOKENS - 1,
        early_stopping=True,
    )
    assert [t.text for t in ours] == theirs


# -- what the importer refuses -------------------------------------------------------------------


def copy_hf_dir(marian: MarianFixture, tmp_path: Path) -> Path:
    hf = tmp_path / "hf"
    shutil.copytree(marian.hf_dir, hf)
    return hf


def test_pytorch_model_bin_without_safetensors_is_refused(marian: MarianFixture, tmp_path: Path) -> None:
    hf = copy_hf_dir(marian, tmp_path)
    (hf / "model.safetensors").unlink()
    torch.save(marian.model.state_dict(), hf / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as e:
        import_marian(hf, tmp_path / "out")
    assert "pickle" in str(e.value) and "pytorch_model.bin" in str(e.value)
    assert str(hf / "model.safetensors") in str(e.value)
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_sharded_marian_weights_import_as_the_one_file_does(
    marian: MarianFixture, marian_imported: Path, tmp_path: Path
) -> None:
    hf = copy_hf_dir(marian, tmp_path)
    (hf / "model.safetensors").unlink()
    marian.model.save_pretrained(str(hf), max_shard_size="100KB")
    assert len(list(hf.glob("model-*-of-*.safetensors"))) > 2
    out = import_marian(hf, tmp_path / "out")
    got, want = load_file(str(out / "model.safetensors")), load_file(str(marian_imported / "model.safetensors"))
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


def test_missing_tokenizer_file_is_named(marian: MarianFixture, tmp_path: Path) -> None:
    hf = copy_hf_dir(marian, tmp_path)
    (hf / "target.spm").unlink()
    with pytest.raises(CheckpointError) as e:
        import_marian(hf, tmp_path / "out")
    assert str(hf / "target.spm") in str(e.value)


def test_other_model_types_are_refused(marian: MarianFixture, tmp_path: Path) -> None:
    hf = copy_hf_dir(marian, tmp_path)
    config = json.loads((hf / "config.json").read_text(encoding="utf-8"))
    config["model_type"] = "bart"
    (hf / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(CheckpointError) as e:
        import_marian(hf, tmp_path / "out")
    assert str(hf / "config.json") in str(e.value)


def test_an_unreadable_file_to_import_is_named_a_permission_problem(
    marian: MarianFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hf = copy_hf_dir(marian, tmp_path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: str(p) != str(hf / "source.spm") and real_access(p, mode))
    assert main(["import", "marian", str(hf), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "source.spm: permission denied" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
