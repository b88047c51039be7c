"""The checkpoint format: exact round trips, and clear CheckpointErrors (never an unpickle) for bad files."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from model.checkpoint import CheckpointMeta, load_checkpoint, read_meta, save_checkpoint
from model.errors import CheckpointError
from model.tokenizer import SpecialIds, TokenizerConfig
from model.transformer import Transformer
from tests.conftest import build_model, tiny_config

V = 50


class Payload:
    """Unpickling this creates `marker`: proof that a file was (or was not) unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def save_tiny(directory: Path, seed: int = 0, **overrides: Any) -> Transformer:
    model = build_model(tiny_config(V, **overrides), seed=seed)
    meta = CheckpointMeta(
        model=model.cfg,
        tokenizer=TokenizerConfig(source_model="spm.model", target_model="spm.model"),
        source_lang="en",
        target_lang="de",
        extra={"note": "test"},
    )
    save_checkpoint(directory, model, meta)
    return model


def assert_same_weights(a: Transformer, b: Transformer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


# -- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm": "pre", "positions": "learned", "activation": "gelu"},
        {"share_embeddings": False, "tie_output": False, "tgt_vocab_size": 70},
        {"logits_bias": True, "position_layout": "halves", "activation": "swish", "N_dec": 3},
    ],
)
def test_save_then_load_is_bit_exact(tmp_path: Path, overrides: dict[str, Any]) -> None:
    tgt = overrides.pop("tgt_vocab_size", None)
    model = build_model(tiny_config(V, tgt, **overrides), seed=4)
    meta = CheckpointMeta(model=model.cfg, source_lang="en", target_lang="fr", extra={"run": 7})
    save_checkpoint(tmp_path, model, meta)
    loaded, loaded_meta = load_checkpoint(tmp_path)
    assert loaded_meta == meta
    assert loaded.cfg == model.cfg
    assert not loaded.training
    assert_same_weights(model, loaded)
    # Built on the meta device (Transformer.for_loading), the shared table stays one tensor.
    assert (loaded.src_embed.tokens.weight is loaded.tgt_embed.tokens.weight) == model.cfg.share_embeddings
    src, mask, tgt_ids = torch.tensor([[5, 6, 3]]), torch.ones(1, 3, dtype=torch.bool), torch.tensor([[2, 7]])
    with torch.no_grad():
        assert torch.equal(model(src, mask, tgt_ids), loaded(src, mask, tgt_ids))


def test_config_json_round_trips_the_tokenizer_config(tmp_path: Path) -> None:
    model = build_model(tiny_config(V), seed=0)
    tok = TokenizerConfig(
        source_model="a.spm",
        target_model="b.spm",
        source_vocab="v.json",
        target_vocab="v.json",
        special=SpecialIds(pad=9, unk=1, bos=9, eos=0, decoder_start=9),
    )
    save_checkpoint(tmp_path, model, CheckpointMeta(model=model.cfg, tokenizer=tok, task="summarization"))
    meta = read_meta(tmp_path)
    assert meta.tokenizer == tok and meta.task == "summarization"


def test_tied_weights_stay_tied_after_load(tmp_path: Path) -> None:
    save_tiny(tmp_path)
    loaded, _ = load_checkpoint(tmp_path)
    assert loaded.src_embed.tokens.weight is loaded.tgt_embed.tokens.weight
    assert loaded.out_proj is None
    with torch.no_grad():
        loaded.src_embed.tokens.weight[5, 0] = 123.0
        assert float(loaded.tgt_embed.tokens.weight[5, 0]) == 123.0
        assert loaded.src_embed.tokens.weight.data_ptr() == loaded.tgt_embed.tokens.weight.data_ptr()


def test_tied_matrix_is_stored_once(tmp_path: Path) -> None:
    from safetensors import safe_open

    save_tiny(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        embeddings = [k for k in f.keys() if "tokens" in k]  # noqa: SIM118
    assert len(embeddings) == 1


def test_save_refuses_a_meta_of_another_model(tmp_path: Path) -> None:
    model = build_model(tiny_config(V), seed=0)
    with pytest.raises(ValueError):
        save_checkpoint(tmp_path, model, CheckpointMeta(model=tiny_config(V, d_ff=256)))


def test_save_copies_tokenizer_files(tmp_path: Path) -> None:
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "spm.model").write_bytes(b"not really a model")
    model = build_model(tiny_config(V), seed=0)
    save_checkpoint(tmp_path / "out", model, CheckpointMeta(model=model.cfg), tokenizer_dir=tmp_path / "tok")
    assert (tmp_path / "out" / "spm.model").read_bytes() == b"not really a model"


def test_saving_twice_overwrites(tmp_path: Path) -> None:
    save_tiny(tmp_path, seed=1)
    second = save_tiny(tmp_path, seed=2)
    loaded, _ = load_checkpoint(tmp_path)
    assert_same_weights(second, loaded)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]  # no temp files


# -- broken checkpoints --------------------------------------------------------------------------


def assert_names(error: pytest.ExceptionInfo[CheckpointError], path: Path) -> None:
    assert str(path) in str(error.value)
    assert Path(error.value.path) == path


@pytest.mark.parametrize("cut", ["half", "last_byte", "in_header", "in_length"])
def test_truncated_weights_raise_checkpoint_error(tmp_path: Path, cut: str) -> None:
    save_tiny(tmp_path)
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    keep = {"half": len(data) // 2, "last_byte": len(data) - 1, "in_header": 16, "in_length": 4}[cut]
    weights.write_bytes(data[:keep])
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path)
    assert_names(e, weights)


def test_empty_weights_file_raises_checkpoint_error(tmp_path: Path) -> None:
    save_tiny(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path)
    assert_names(e, tmp_path / "model.safetensors")


@pytest.mark.parametrize("zipfile", [True, False])
def test_pickle_named_safetensors_is_refused_and_never_unpickled(tmp_path: Path, zipfile: bool) -> None:
    model = save_tiny(tmp_path / "ckpt")
    marker = tmp_path / "unpickled"
    weights = tmp_path / "ckpt" / "model.safetensors"
    state = {**model.state_dict(), "payload": Payload(marker)}
    torch.save(state, weights, _use_new_zipfile_serialization=zipfile)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path / "ckpt")
    assert_names(e, weights)
    assert not marker.exists()
    # The payload is live: a pickle loader would have run it. (Under a .safetensors name torch.load
    # itself would hand the file to safetensors, so load a copy.)
    shutil.copyfile(weights, tmp_path / "copy.pt")
    torch.load(tmp_path / "copy.pt", weights_only=False)
    assert marker.exists()


def test_plain_pickle_named_safetensors_is_never_unpickled(tmp_path: Path) -> None:
    save_tiny(tmp_path / "ckpt")
    marker = tmp_path / "unpickled"
    weights = tmp_path / "ckpt" / "model.safetensors"
    weights.write_bytes(pickle.dumps({"x": Payload(marker)}))
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path / "ckpt")
    assert_names(e, weights)
    assert not marker.exists()
    pickle.loads(weights.read_bytes())
    assert marker.exists()


def test_missing_config_names_the_file(tmp_path: Path) -> None:
    save_tiny(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path)
    assert_names(e, tmp_path / "config.json")


def test_missing_directory_names_it(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path / "nowhere")
    assert_names(e, tmp_path / "nowhere")


@pytest.mark.parametrize("text", ["{not json", "", "[1, 2]", '{"format_version": 1}', '{"format_version": 99}'])
def test_bad_config_names_the_file(tmp_path: Path, text: str) -> None:
    save_tiny(tmp_path)
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path)
    assert_names(e, tmp_path / "config.json")


def edit_config(directory: Path, **model_changes: Any) -> None:
    path = directory / "config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["model"].update(model_changes)
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.mark.parametrize("changes", [{"d_ff": 256}, {"src_vocab_size": 51, "tgt_vocab_size": 51}])
def test_wrong_tensor_shapes_name_the_weights_file(tmp_path: Path, changes: dict[str, Any]) -> None:
    save_tiny(tmp_path)
    edit_config(tmp_path, **changes)
    with pytest.raises(CheckpointError, match="shape") as e:
        load_checkpoint(tmp_path)
    assert_names(e, tmp_path / "model.safetensors")


@pytest.mark.parametrize("changes", [{"N": 3}, {"N_dec": 1}, {"logits_bias": True}, {"tie_output": False}])
def test_missing_or_unexpected_tensors_name_the_weights_file(tmp_path: Path, changes: dict[str, Any]) -> None:
    save_tiny(tmp_path)
    edit_config(tmp_path, **changes)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path)
    assert_names(e, tmp_path / "model.safetensors")


def test_invalid_model_config_names_the_config_file(tmp_path: Path) -> None:
    save_tiny(tmp_path)
    edit_config(tmp_path, h=5)  # 64 % 5 != 0
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(tmp_path)
    assert_names(e, tmp_path / "config.json")


def test_only_a_pickle_beside_the_config_says_pickles_are_never_loaded(tmp_path: Path) -> None:
    model = save_tiny(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    marker = tmp_path / "unpickled"
    torch.save({**model.state_dict(), "payload": Payload(marker)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickle") as e:
        load_checkpoint(tmp_path)
    assert "never" in str(e.value) and "pytorch_model.bin" in str(e.value)
    assert not marker.exists()


def test_directory_with_only_pytorch_model_bin_says_pickles_are_never_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    directory = tmp_path / "hf_style"
    directory.mkdir()
    torch.save({"w": torch.zeros(2), "payload": Payload(marker)}, directory / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(directory)
    assert "pytorch_model.bin" in str(e.value) and "pickle" in str(e.value)
    assert "never" in str(e.value)
    assert not marker.exists()


def test_missing_weights_without_pickle_says_missing(tmp_path: Path) -> None:
    save_tiny(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing") as e:
        load_checkpoint(tmp_path)
    assert_names(e, tmp_path / "model.safetensors")


def test_a_copied_checkpoint_loads(tmp_path: Path) -> None:
    model = save_tiny(tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    loaded, _ = load_checkpoint(tmp_path / "b")
    assert_same_weights(model, loaded)


# -- permissions: the service's image runs as its own user -----------------------------------------------------


def test_checkpoints_are_readable_by_every_user_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        save_tiny(tmp_path / "ckpt")
    finally:
        os.umask(old)
    assert (tmp_path / "ckpt").stat().st_mode & 0o777 == 0o755
    assert {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "ckpt").iterdir()} == {
        "config.json": 0o644,
        "model.safetensors": 0o644,
    }


@pytest.mark.parametrize("unreadable", ["", "config.json", "model.safetensors"])
def test_an_unreadable_checkpoint_is_named_a_permission_problem(
    tmp_path: Path, unreadable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tests run as root, who reads everything: os.access answers as for a user the files' modes keep out."""
    save_tiny(tmp_path / "ckpt")
    target = os.path.join(tmp_path / "ckpt", unreadable) if unreadable else str(tmp_path / "ckpt")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: str(p).rstrip("/") != target and real_access(p, mode))
    with pytest.raises(CheckpointError, match="permission denied") as e:
        load_checkpoint(tmp_path / "ckpt")
    assert e.value.path == target and "chmod" in e.value.reason
