"""Pointer-generator copying (model.copy, See et al., 2017): the mixture is a distribution, a closed gate
leaves only the source's words, and a copying model saves, loads and quantizes like any other."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model.beam import search_all
from model.config import DecodingConfig, ModelConfig
from model.errors import ConfigError
from model.int8_checkpoint import quantize_checkpoint
from model.quantize import Int8Linear
from model.transformer import Transformer
from model.translator import Translator
from tests.conftest import SPECIAL, build_model, pad_ids, save_random_checkpoint, tiny_config
from tests.model.test_beam import sources
from tests.model.test_transformer import cached_logits

V = 64


def copy_model(gate_bias: float, seed: int = 0) -> Transformer:
    model = build_model(tiny_config(V, copy=True), seed=seed)
    assert model.copy is not None
    with torch.no_grad():
        model.copy.gate.weight.zero_()
        model.copy.gate.bias.fill_(gate_bias)  # p_gen = sigmoid(gate_bias)
    return model


def test_copy_needs_one_vocabulary_and_is_off_by_default() -> None:
    assert ModelConfig.from_preset("base", 100).copy is False
    assert ModelConfig.from_preset("base", 100).copy_follow is False
    with pytest.raises(ConfigError, match="one vocabulary"):
        tiny_config(60, 80, share_embeddings=False, copy=True)
    with pytest.raises(ConfigError, match="copy_follow needs copy"):
        tiny_config(60, copy_follow=True)


def follow_model(follow: float, gate_bias: float | None = None, seed: int = 0) -> Transformer:
    """A copying model that favours the source token after the last one output (ModelConfig.copy_follow)."""
    model = build_model(tiny_config(V, copy=True, copy_follow=True), seed=seed)
    assert model.copy is not None and model.copy.follow is not None
    with torch.no_grad():
        model.copy.follow.fill_(follow)
        if gate_bias is not None:
            model.copy.gate.weight.zero_()
            model.copy.gate.bias.fill_(gate_bias)
    return model


@torch.no_grad()
def test_following_the_copy_step_by_step_equals_recomputation() -> None:
    """Targets that copy runs of their sources, so that the bonus applies at many positions: the cached search's
    steps (each row's last token against its slot's source) give the teacher-forced logits."""
    model = follow_model(follow=3.0)
    src, mask = pad_ids(sources([9, 4, 7], seed=5))
    tgt = torch.full((3, 6), SPECIAL.decoder_start)
    tgt[:, 1:] = src[:, :5]  # the first source tokens, then padding where a source is shorter
    full = model(src, mask, tgt)
    torch.testing.assert_close(cached_logits(model, src, mask, tgt), full, atol=1e-5, rtol=0)
    assert not torch.allclose(follow_model(follow=0.0)(src, mask, tgt), full, atol=1e-3)  # the bonus counts


@torch.no_grad()
def test_a_strong_follow_copies_runs_of_the_source() -> None:
    """p_gen = 0 and a large bonus: once a source token is out, the next one is the token after it, and so on to
    the source's EOS, so every output is a run of its own source."""
    model = follow_model(follow=40.0, gate_bias=-40.0)
    srcs = [[10, 11, 12, 13, 14, 15, SPECIAL.eos], [20, 21, 22, 23, SPECIAL.eos], [30, 31, 32, 33, 34, SPECIAL.eos]]
    cfg = DecodingConfig(beam_size=3, max_len_a=0.0, max_len_b=10, min_length=1)
    for src, [best] in zip(srcs, search_all(model, srcs, [cfg] * 3, SPECIAL), strict=True):
        start = src.index(best.ids[0])
        assert best.ids == src[start:-1], (src, best.ids)  # on to the source's end, then its EOS
    plain = follow_model(follow=0.0, gate_bias=-40.0)  # without the bonus, copies come in any order
    runs = [
        h.ids == src[src.index(h.ids[0]) : -1]
        for src, [h] in zip(srcs, search_all(plain, srcs, [cfg] * 3, SPECIAL), strict=True)
    ]
    assert not all(runs)


@torch.no_grad()
def test_the_mixture_is_log_p_and_moves_mass_onto_source_ids() -> None:
    """p_gen = 1/2: the vocabulary's softmax and the copy weights each give half of P; ids absent from the
    source keep exactly half of their vocabulary probability."""
    model = copy_model(gate_bias=0.0)
    src, mask = pad_ids(sources([7, 3], seed=1))
    tgt = torch.full((2, 4), SPECIAL.decoder_start)
    out = model(src, mask, tgt)  # (B, T, V) log P
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(2, 4), atol=1e-5, rtol=0)
    memory, _ = model.encode(src, mask)
    hidden, _ = model.decode(tgt, memory, mask)
    vocab = torch.softmax(model.logits(hidden), -1)
    for b in range(2):
        present = set(src[b][mask[b]].tolist())
        absent = [w for w in range(V) if w not in present]
        torch.testing.assert_close(out[b][:, absent].exp(), vocab[b][:, absent] / 2, atol=1e-6, rtol=0)
        assert (out[b][:, sorted(present)].exp() > vocab[b][:, sorted(present)] / 2).all()


def test_the_copy_layer_learns_with_the_rest() -> None:
    """Training reads the mixture: the loss reaches the copy layer and the stacks, and one Adam step on a batch
    that copies its source lowers its loss."""
    from training.optim import label_smoothed_loss

    model = copy_model(gate_bias=0.0).train()
    src, mask = pad_ids(sources([7, 5, 9], seed=4))
    tgt_in = torch.cat([torch.full((3, 1), SPECIAL.decoder_start), src[:, :-1]], dim=1)
    keep = mask

    def loss() -> torch.Tensor:
        torch.manual_seed(0)
        return label_smoothed_loss(model(src, mask, tgt_in, keep), src[keep], 0.1, SPECIAL.pad)[0]

    before = loss()
    before.backward()
    assert model.copy is not None
    for p in (model.copy.q.weight, model.copy.k.weight, model.copy.gate.weight, model.src_embed.tokens.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0
    torch.optim.Adam(model.parameters(), lr=1e-2).step()
    assert loss() < before


@torch.no_grad()
def test_a_closed_gate_generates_only_words_of_the_source() -> None:
    """p_gen = 0: every output token is one of its own source's ids, in a batch of sentences that share no id
    (padding positions are masked: a shorter sentence never copies a neighbour's word)."""
    model = copy_model(gate_bias=-40.0)
    srcs = [[10, 11, 12, 13, 14, 15, SPECIAL.eos], [20, 21, SPECIAL.eos], [30, 31, 32, 33, SPECIAL.eos]]
    cfg = DecodingConfig(beam_size=3, n_best=3, max_len_a=0.0, max_len_b=8)
    for src, hyps in zip(srcs, search_all(model, srcs, [cfg] * 3, SPECIAL), strict=True):
        assert hyps and all(set(h.ids) <= set(src) for h in hyps)


@pytest.mark.parametrize("follow", [False, True])
def test_a_copying_checkpoint_loads_packed_and_in_int8(
    tmp_path: Path, spm_dir: Path, vocab_size: int, sentences: list[str], follow: bool
) -> None:
    """The copy layer's weights are saved and read like the others; packed float32 (the CPU default) gives the
    unpacked outputs, and int8 (quantized at load or by `transformer quantize`) decodes."""
    path = save_random_checkpoint(tmp_path / "m", spm_dir, vocab_size, seed=2, copy=True, copy_follow=follow)
    plain = Translator.load(path, device="cpu", pack=False)
    assert plain.model.copy is not None and plain.model.cfg.copy and plain.model.cfg.copy_follow == follow
    assert (plain.model.copy.follow is not None) == follow
    texts = sentences[:6]
    want = [t.text for t in plain.translate(texts, beam_size=2, max_len_b=8)]
    assert [t.text for t in Translator.load(path, device="cpu").translate(texts, beam_size=2, max_len_b=8)] == want
    quantize_checkpoint(path, tmp_path / "q")
    for int8 in (Translator.load(path, device="cpu", dtype="int8"), Translator.load(tmp_path / "q", device="cpu")):
        assert isinstance(int8.model.copy.q, Int8Linear)  # type: ignore[union-attr]
        out = int8.translate(texts, beam_size=2, max_len_b=8)
        assert len(out) == len(texts)
