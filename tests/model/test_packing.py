"""Pre-packed CPU weights change the layout only: same parameters, same logits, same beam search output."""

from __future__ import annotations

import copy

import pytest
import torch

from model.beam import beam_search
from model.config import DecodingConfig
from model.packing import PackedLinear, packing_available
from tests.conftest import SPECIAL, build_model, pad_ids, random_source, tiny_config

pytestmark = pytest.mark.skipif(not packing_available(), reason="this torch build has no oneDNN")


def test_packed_model_computes_the_same() -> None:
    plain = build_model(tiny_config(300), seed=3)
    packed = copy.deepcopy(plain)
    assert packed.pack_for_cpu()
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


def test_training_through_a_packed_model_uses_the_live_weights() -> None:
    model = build_model(tiny_config(300), seed=4)
    model.pack_for_cpu()
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
