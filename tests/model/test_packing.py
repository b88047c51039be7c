"""Pre-packed CPU weights change the layout only (MKL's and oneDNN's): same parameters, same logits, same beam
search output."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from model.beam import beam_search
from model.checkpoint import unique_tensors
from model.config import DecodingConfig
from model.packing import Layout, PackedLinear, default_layout, layout_for, packing_available, released
from model.translator import Translator
from tests.conftest import SPECIAL, build_model, pad_ids, random_source, tiny_config

LAYOUTS = [
    pytest.param("mkl", marks=pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="no MKL in torch")),
    pytest.param("onednn", marks=pytest.mark.skipif(not packing_available(), reason="no oneDNN in torch")),
]


def test_the_layout_follows_the_cpu_vendor() -> None:
    """As CTranslate2 picks its GEMM backend: MKL on Intel's CPUs, where it takes its fast paths; oneDNN elsewhere."""
    assert layout_for("GenuineIntel", mkl=True, onednn=True) == "mkl"
    assert layout_for("AuthenticAMD", mkl=True, onednn=True) == "onednn"
    assert layout_for("GenuineIntel", mkl=False, onednn=True) == "onednn"
    assert layout_for("", mkl=True, onednn=False) is None
    vendor = "GenuineIntel" if "GenuineIntel" in Path("/proc/cpuinfo").read_text() else "other"
    assert default_layout() == layout_for(vendor, torch.backends.mkl.is_available(), packing_available())


@pytest.mark.parametrize("layout", LAYOUTS)
def test_packed_model_computes_the_same(layout: Layout) -> None:
    plain = build_model(tiny_config(300), seed=3)
    packed = copy.deepcopy(plain)
    assert packed.pack_for_cpu(layout=layout)
    assert {m.layout for m in packed.modules() if isinstance(m, PackedLinear)} == {layout}
    # N=2: 4 linears per encoder layer, 7 per decoder layer
    assert sum(isinstance(m, PackedLinear) for m in packed.modules()) == 2 * 4 + 2 * 7
    assert plain.state_dict().keys() == packed.state_dict().keys()
    gen = torch.Generator().manual_seed(0)
    src, mask = pad_ids([random_source(gen, n, 300) for n in (5, 9, 3)])
    tgt = torch.randint(4, 300, (3, 7), generator=gen)
    with torch.inference_mode():
        torch.testing.assert_close(packed(src, mask, tgt), plain(src, mask, tgt), atol=1e-5, rtol=1e-5)
        cfg = DecodingConfig(beam_size=3, n_best=2, max_len_b=12)
        want = beam_search(plain, src, mask, cfg, SPECIAL)
        got = beam_search(packed, src, mask, cfg, SPECIAL)
    assert [[h.ids for h in n] for n in got] == [[h.ids for h in n] for n in want]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_training_through_a_packed_model_uses_the_live_weights(layout: Layout) -> None:
    model = build_model(tiny_config(300), seed=4)
    model.pack_for_cpu(layout=layout)
    gen = torch.Generator().manual_seed(1)
    src, mask = pad_ids([random_source(gen, 6, 300)])
    before = model(src, mask, src)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)  # the packed copies are now stale; with gradients on, they must not be used
    after = model(src, mask, src)
    assert after.requires_grad and not torch.allclose(before, after)
    after.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tie_output", [True, False])
def test_a_released_model_keeps_one_copy_of_each_linear_weight_and_computes_the_same(
    tie_output: bool, layout: Layout
) -> None:
    """Translator.load keeps only the packed weights: the same logits and search, with gradients on too, and the
    plain linear weights gone (an untied pre-softmax weight packed once, not twice)."""
    plain = build_model(tiny_config(300, tie_output=tie_output), seed=5)
    packed = copy.deepcopy(plain)
    assert packed.pack_for_cpu(release=True, layout=layout) and released(packed)
    linears = [m for m in packed.modules() if isinstance(m, PackedLinear)]
    assert len(linears) == 2 * 4 + 2 * 7 + (not tie_output) and all(m.weight.numel() == 0 for m in linears)
    if not tie_output:
        assert packed.out_proj is not None and packed.packed_logits is packed.out_proj.get_buffer("packed")
    gen = torch.Generator().manual_seed(2)
    src, mask = pad_ids([random_source(gen, n, 300) for n in (4, 8)])
    tgt = torch.randint(4, 300, (2, 6), generator=gen)
    torch.testing.assert_close(packed(src, mask, tgt), plain(src, mask, tgt).detach(), atol=1e-5, rtol=1e-5)
    with torch.inference_mode():
        cfg = DecodingConfig(beam_size=3, max_len_b=10)
        want = beam_search(plain, src, mask, cfg, SPECIAL)
        got = beam_search(packed, src, mask, cfg, SPECIAL)
    assert [[h.ids for h in n] for n in got] == [[h.ids for h in n] for n in want]
    with pytest.raises(AssertionError, match="cannot be saved"):
        unique_tensors(packed)


@pytest.mark.skipif(default_layout() is None, reason="neither MKL nor oneDNN in torch")
def test_a_loaded_translator_keeps_only_the_packed_weights(checkpoint_dir: Path) -> None:
    translator = Translator.load(checkpoint_dir, device="cpu")
    assert released(translator.model)
    assert not released(Translator.load(checkpoint_dir, device="cpu", pack=False).model)
