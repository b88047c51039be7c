"""int8 CPU inference (model.quantize): weights quantized per output channel at load, products on fbgemm's
int8 kernel; everything else (search, attention maps, n-best, the CLI) works as in float32. Agreement with
float32 on a trained model is tested in tests/training/test_train.py."""

from __future__ import annotations

import io
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from model.checkpoint import CONFIG_FILE, WEIGHTS_FILE, load_checkpoint, read_meta
from model.cpu import parse_cpuinfo, processor
from model.errors import CheckpointError, ConfigError
from model.int8_checkpoint import SCALE_SUFFIX, load_int8_checkpoint
from model.quantize import Int8Embedding, Int8Linear, int8_unsupported, quantize_rows, reduce_range
from model.translator import Translator
from service.cli import main

needs_int8 = pytest.mark.skipif(int8_unsupported("cpu") is not None, reason=str(int8_unsupported("cpu")))


def test_rows_are_quantized_symmetrically_within_half_a_step() -> None:
    w = torch.randn(6, 40)
    w[2] = 0.0  # an all-zero row stays zero
    q, scale = quantize_rows(w)
    assert q.dtype == torch.int8 and scale.shape == (6,) and int(q.abs().max()) == 127
    assert bool((q[2] == 0).all()) and scale[2] == 1.0
    assert bool(((q.float() * scale[:, None] - w).abs() <= scale[:, None] / 2 + 1e-7).all())


@needs_int8
@pytest.mark.parametrize("shape", [(7, 32), (3, 5, 32)])
def test_int8_linear_is_close_to_the_float_one(shape: tuple[int, ...]) -> None:
    linear = nn.Linear(32, 48)
    x = torch.randn(*shape)
    got, want = Int8Linear.of(linear)(x), linear(x).detach()
    assert got.shape == want.shape and got.dtype == torch.float32
    # 8-bit weights and 7- or 8-bit inputs: about 1% of the output's scale.
    assert float((got - want).abs().max()) < 0.03 * float(want.abs().max())


def test_inputs_keep_8_bits_only_where_the_processor_sums_in_int32() -> None:
    """fbgemm's kernels without AVX512-VNNI sum u8 x s8 pairs in int16: inputs must be 7-bit there."""
    cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx512f avx512_vnni amx_int8\n"
    xeon = parse_cpuinfo(cpuinfo + cpuinfo.replace(": 0", ": 1"))
    assert xeon.vendor == "GenuineIntel" and not reduce_range(xeon.flags)
    assert reduce_range(frozenset({"avx2", "avx512f"})) and reduce_range(frozenset({"avx2", "avx_vnni"}))
    assert reduce_range() == ("avx512_vnni" not in processor().flags)


@needs_int8
def test_int8_products_do_not_saturate_at_the_inputs_full_range() -> None:
    """Inputs at the top of their quantized range times weights of +-127: where a u8 x s8 pair sums past int16
    (255 * 127 * 2), a kernel summing in int16 would clip; the exact sum comes back on every processor."""
    linear = nn.Linear(256, 4, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None].expand(4, 256))
    x = torch.ones(3, 256)
    x[:, 0] = 0.0  # inputs in [0, 1]: every other one quantized to the top of the range
    torch.testing.assert_close(Int8Linear.of(linear)(x), linear(x).detach(), rtol=1e-5, atol=1e-4)


@needs_int8
def test_an_int8_translator_holds_no_float_matrices_and_decodes_with_every_option(
    checkpoint_dir: Path, sentences: list[str]
) -> None:
    tr = Translator.load(checkpoint_dir, device="cpu", dtype="int8")
    model = tr.model
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    assert isinstance(model.src_embed.tokens, Int8Embedding) and model.src_embed.tokens is model.tgt_embed.tokens
    assert all(p.dim() == 1 for p in model.parameters()), "only LayerNorm gains and biases stay float32"
    out = tr.translate(sentences[:6], beam_size=3, n_best=2, max_len_a=0.0, max_len_b=6, return_attention=True)
    assert [len(t.hypotheses) for t in out] == [2] * 6
    for t in out:
        att = t.attention
        assert att is not None and att.cross.dtype == torch.float32
        torch.testing.assert_close(att.cross.sum(-1), torch.ones(att.cross.shape[:-1]))  # rows of weights
    # A batch decodes as its sentences alone (continuous batching included).
    alone = [tr.translate([s], beam_size=3, max_len_a=0.0, max_len_b=6)[0].text for s in sentences[:6]]
    assert [t.text for t in tr.translate(sentences[:6], beam_size=3, max_len_a=0.0, max_len_b=6)] == alone


def test_int8_is_refused_on_cuda_and_on_processors_without_the_kernel(
    checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="CPU only"):
        Translator.load(checkpoint_dir, device="cuda", dtype="int8")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    with pytest.raises(ConfigError, match="AVX2"):
        Translator.load(checkpoint_dir, device="cpu", dtype="int8")


@needs_int8
def test_translate_command_takes_dtype_int8(
    checkpoint_dir: Path, sentences: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fast = ["--beam-size", "3", "--max-len-a", "0", "--max-len-b", "6"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(sentences[:4]) + "\n"))
    assert main(["translate", "--model", str(checkpoint_dir), "--dtype", "int8", *fast]) == 0
    expected = Translator.load(checkpoint_dir, dtype="int8").translate(
        sentences[:4], beam_size=3, max_len_a=0.0, max_len_b=6
    )
    assert capsys.readouterr().out.splitlines() == [t.text for t in expected]
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert main(["translate", "--model", str(checkpoint_dir), "--dtype", "int8", "--device", "cuda", *fast]) == 2
    assert "CPU only" in capsys.readouterr().err


# -- the int8 checkpoint (`transformer quantize`) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def int8_dir(tmp_path_factory: pytest.TempPathFactory, checkpoint_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("int8") / "ckpt"
    assert main(["quantize", str(checkpoint_dir), str(out)]) == 0
    return out


@needs_int8
def test_an_int8_checkpoint_decodes_exactly_as_quantizing_at_load(
    int8_dir: Path, checkpoint_dir: Path, sentences: list[str]
) -> None:
    opts = {"beam_size": 3, "n_best": 2, "max_len_a": 0.0, "max_len_b": 8}
    at_load = Translator.load(checkpoint_dir, dtype="int8").translate(sentences, **opts)
    from_file = Translator.load(int8_dir).translate(sentences, **opts)  # auto: int8, on the CPU
    assert [[(h.text, h.score) for h in t.hypotheses] for t in from_file] == [
        [(h.text, h.score) for h in t.hypotheses] for t in at_load
    ]
    assert read_meta(int8_dir).weights == "int8" and read_meta(int8_dir).model == read_meta(checkpoint_dir).model
    ratio = (int8_dir / WEIGHTS_FILE).stat().st_size / (checkpoint_dir / WEIGHTS_FILE).stat().st_size
    assert ratio < 0.35, f"int8 file is {ratio:.2f}x the float one"
    assert all((int8_dir / f).stat().st_mode & 0o777 == 0o644 for f in (CONFIG_FILE, WEIGHTS_FILE))


def mapped(path: Path) -> bool:
    """Whether this process maps the file (its pages count in its resident memory while they are touched)."""
    return any(line.rstrip().endswith(str(path.resolve())) for line in Path("/proc/self/maps").read_text().splitlines())


@needs_int8
def test_a_loaded_model_leaves_its_weights_file_unmapped(int8_dir: Path, checkpoint_dir: Path) -> None:
    """The int8 tables kept from a checkpoint are copies: a tensor read from safetensors lives in the file's
    mapping, and one kept would keep the whole file mapped and resident beside the model."""
    loaded = [Translator.load(int8_dir), Translator.load(checkpoint_dir), Translator.load(checkpoint_dir, dtype="int8")]
    assert all(t.translate(["kalo"], max_len_b=4) for t in loaded)
    assert not mapped(int8_dir / WEIGHTS_FILE) and not mapped(checkpoint_dir / WEIGHTS_FILE)


def test_an_int8_checkpoint_is_refused_where_float_weights_are_needed(
    int8_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError, match="holds int8 weights"):
        Translator.load(int8_dir, dtype="float32")
    with pytest.raises(CheckpointError, match="for int8 inference only"):
        load_checkpoint(int8_dir)  # training, averaging and export read float weights
    assert main(["quantize", str(int8_dir), str(tmp_path / "again")]) == 2  # already int8
    assert "int8" in capsys.readouterr().err


def test_quantize_does_not_overwrite_a_checkpoint_unless_forced(
    int8_dir: Path, checkpoint_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["quantize", str(checkpoint_dir), str(checkpoint_dir)]) == 2
    assert "elsewhere" in capsys.readouterr().err
    assert read_meta(checkpoint_dir).weights == "float32"
    assert main(["quantize", str(checkpoint_dir), str(int8_dir)]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["quantize", str(checkpoint_dir), str(int8_dir), "--force"]) == 0
    assert "MiB" in capsys.readouterr().err
    (int8_dir.parent / "a-file").write_text("")
    assert main(["quantize", str(checkpoint_dir), str(int8_dir.parent / "a-file")]) == 2
    assert "not a directory" in capsys.readouterr().err


def tampered(int8_dir: Path, tmp_path: Path, change: Callable[[dict[str, torch.Tensor]], None]) -> Path:
    out = tmp_path / "tampered"
    shutil.copytree(int8_dir, out)
    tensors = load_file(str(out / WEIGHTS_FILE))
    change(tensors)
    save_file(tensors, str(out / WEIGHTS_FILE))
    return out


def as_float(t: dict[str, torch.Tensor]) -> None:
    t["src_embed.tokens.weight"] = t["src_embed.tokens.weight"].float()


def drop_scale(t: dict[str, torch.Tensor]) -> None:
    del t["src_embed.tokens.weight" + SCALE_SUFFIX]


def short_scale(t: dict[str, torch.Tensor]) -> None:
    name = "src_embed.tokens.weight" + SCALE_SUFFIX
    t[name] = t[name][:-1].clone()


def zero_scale(t: dict[str, torch.Tensor]) -> None:
    t["src_embed.tokens.weight" + SCALE_SUFFIX][0] = 0.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (as_float, "is torch.float32, not torch.int8"),
        (drop_scale, "missing"),
        (short_scale, "has shape"),
        (zero_scale, "positive, finite scales"),
    ],
)
def test_an_int8_checkpoint_that_does_not_match_is_refused(
    int8_dir: Path, tmp_path: Path, change: Callable[[dict[str, torch.Tensor]], None], message: str
) -> None:
    with pytest.raises(CheckpointError, match=message):
        load_int8_checkpoint(tampered(int8_dir, tmp_path, change))


def test_a_truncated_int8_checkpoint_is_refused(int8_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "cut"
    shutil.copytree(int8_dir, out)
    data = (out / WEIGHTS_FILE).read_bytes()
    (out / WEIGHTS_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        load_int8_checkpoint(out)
