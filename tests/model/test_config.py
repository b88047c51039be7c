"""ModelConfig and DecodingConfig: Table 3 presets and validation."""

from __future__ import annotations

import pytest

from model.config import PRESETS, DecodingConfig, ModelConfig
from model.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "N", "d_model", "d_ff", "h", "p_drop"),
    [
        ("base", 6, 512, 2048, 8, 0.1),
        ("big", 6, 1024, 4096, 16, 0.3),
    ],
)
def test_presets_match_table_3(name: str, N: int, d_model: int, d_ff: int, h: int, p_drop: float) -> None:
    cfg = ModelConfig.from_preset(name, 37000)
    assert (cfg.N, cfg.n_dec, cfg.d_model, cfg.d_ff, cfg.h, cfg.p_drop) == (N, N, d_model, d_ff, h, p_drop)
    assert cfg.d_k == 64  # d_k = d_v = d_model / h = 64 in both (§3.2.2)
    assert cfg.src_vocab_size == cfg.tgt_vocab_size == 37000


def test_defaults_are_the_papers() -> None:
    cfg = ModelConfig(src_vocab_size=100, tgt_vocab_size=100)
    assert (cfg.N, cfg.d_model, cfg.d_ff, cfg.h, cfg.p_drop) == (6, 512, 2048, 8, 0.1)
    assert (cfg.norm, cfg.activation, cfg.positions, cfg.position_layout) == (
        "post",
        "relu",
        "sinusoidal",
        "interleaved",
    )
    assert cfg.scale_embedding and cfg.share_embeddings and cfg.tie_output and not cfg.logits_bias
    d = DecodingConfig()
    assert (d.beam_size, d.length_penalty, d.length_penalty_form) == (4, 0.6, "gnmt")  # §6.1
    assert (d.max_len_a, d.max_len_b) == (1.0, 50)  # "input length + 50"


def test_preset_overrides_and_separate_target_vocab() -> None:
    cfg = ModelConfig.from_preset("base", 100, 200, share_embeddings=False, N_dec=3)
    assert (cfg.src_vocab_size, cfg.tgt_vocab_size, cfg.N, cfg.n_dec) == (100, 200, 6, 3)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"d_model": 512, "h": 7},  # d_model % h != 0
        {"d_model": 10, "h": 4},
        {"norm": "middle"},
        {"activation": "tanh"},
        {"positions": "rotary"},
        {"position_layout": "shuffled"},
        {"p_drop": 1.0},
        {"p_drop": -0.1},
        {"N": 0},
        {"N_dec": 0},
        {"d_ff": 0},
        {"max_len": 0},
        {"tgt_vocab_size": 200},  # share_embeddings with two vocabulary sizes
        {"read_first": 1},  # only the EOS
        {"read_first": -5},
        {"read_first": 1025},  # more than max_len
    ],
)
def test_model_config_rejects(kwargs: dict[str, object]) -> None:
    base: dict[str, object] = {"src_vocab_size": 100, "tgt_vocab_size": 100, "d_model": 64, "h": 4, "d_ff": 128}
    with pytest.raises(ConfigError):
        ModelConfig(**{**base, **kwargs})  # type: ignore[arg-type]


def test_model_config_accepts_valid_shapes() -> None:
    ModelConfig(src_vocab_size=100, tgt_vocab_size=100, d_model=30, h=2, d_ff=8)
    ModelConfig(src_vocab_size=100, tgt_vocab_size=100, d_model=64, h=64, d_ff=1, p_drop=0.0)


def test_read_first_cuts_a_source_and_keeps_its_eos() -> None:
    cfg = ModelConfig(src_vocab_size=100, tgt_vocab_size=100, read_first=4)
    assert cfg.read([5, 6, 7, 8, 9, 3], eos=3) == [5, 6, 7, 3]
    assert cfg.read([5, 6, 7, 3], eos=3) == [5, 6, 7, 3]
    assert ModelConfig(src_vocab_size=100, tgt_vocab_size=100).read([5, 6, 7, 8, 9, 3], eos=3) == [5, 6, 7, 8, 9, 3]


def test_model_config_error_messages_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="divisible"):
        ModelConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=512, h=6)
    with pytest.raises(ConfigError, match="share_embeddings"):
        ModelConfig(src_vocab_size=10, tgt_vocab_size=11)
    ModelConfig(src_vocab_size=10, tgt_vocab_size=11, share_embeddings=False)  # separate vocabularies are fine


def test_unknown_preset_and_unknown_keys() -> None:
    with pytest.raises(ConfigError, match="preset"):
        ModelConfig.from_preset("huge", 100)
    with pytest.raises(ConfigError, match="unknown"):
        ModelConfig.from_dict({"src_vocab_size": 10, "tgt_vocab_size": 10, "heads": 8})
    with pytest.raises(ConfigError):
        ModelConfig.from_dict({"src_vocab_size": 10})  # tgt_vocab_size missing


def test_model_config_dict_round_trip() -> None:
    cfg = ModelConfig.from_preset(
        "tiny",
        50,
        70,
        share_embeddings=False,
        norm="pre",
        activation="swish",
        positions="learned",
        logits_bias=True,
        N_dec=3,
    )
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        ModelConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=512, h=7)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"beam_size": 0},
        {"beam_size": 2, "n_best": 3},  # n_best > beam_size
        {"n_best": 0},
        {"max_len_a": -1.0},
        {"max_len_b": -1},
        {"max_len_a": 0.0, "max_len_b": 0},
        {"min_length": -1},
        {"no_repeat_ngram_size": -2},
        {"length_penalty_form": "wu"},
        {"length_penalty": float("nan")},  # NaN passes every bound: each comparison is False
        {"length_penalty": float("inf")},
        {"max_len_a": float("nan")},  # int(NaN) raised ValueError in output_limit, mid-request
    ],
)
def test_decoding_config_rejects(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        DecodingConfig(**kwargs)  # type: ignore[arg-type]


def test_decoding_config_accepts_edges() -> None:
    DecodingConfig(beam_size=4, n_best=4)
    DecodingConfig(max_len_a=0.0, max_len_b=1)
    DecodingConfig(max_len_a=0.5, max_len_b=0)


@pytest.mark.parametrize(
    ("form", "alpha", "length", "expected"),
    [
        ("gnmt", 0.6, 7, ((5 + 7) / 6) ** 0.6),
        ("gnmt", 1.0, 1, 1.0),
        ("gnmt", 0.0, 9, 1.0),
        ("average", 1.0, 7, 7.0),
        ("average", 0.6, 10, 10**0.6),
        ("average", 0.0, 3, 1.0),
    ],
)
def test_length_penalty_of(form: str, alpha: float, length: int, expected: float) -> None:
    cfg = DecodingConfig(length_penalty=alpha, length_penalty_form=form)  # type: ignore[arg-type]
    assert cfg.length_penalty_of(length) == pytest.approx(expected, rel=1e-12)


def test_presets_table_has_the_papers_two_models() -> None:
    assert {"base", "big"} <= set(PRESETS)
