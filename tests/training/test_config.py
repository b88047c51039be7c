"""Training configs: YAML files plus KEY=VALUE overrides, checked when built."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.config import TrainConfigError, load_config

CONFIGS = Path(__file__).parents[2] / "training" / "configs"


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_shipped_configs_load(name: str) -> None:
    cfg = load_config(CONFIGS / name)
    model = cfg.model_config(8000, 8000)
    assert model.N >= 1 and cfg.betas == (0.9, 0.98) and cfg.adam_eps == 1e-9


def test_paper_presets() -> None:
    base, big = load_config(CONFIGS / "base.yaml"), load_config(CONFIGS / "big.yaml")
    assert (base.warmup, base.eps_ls, base.batch_tokens) == (4000, 0.1, 25000)
    m = base.model_config(37000, 37000)
    assert (m.N, m.d_model, m.d_ff, m.h, m.p_drop) == (6, 512, 2048, 8, 0.1)
    m = big.model_config(37000, 37000)
    assert (m.N, m.d_model, m.d_ff, m.h, m.p_drop) == (6, 1024, 4096, 16, 0.3)


def test_overrides_reach_nested_sections(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("preset: tiny\ndata: {corpus: gettext, lang: de}\n")
    cfg = load_config(path, ["data.lang=fr", "max_steps=12", "model.p_drop=0.0", "betas=[0.8, 0.9]"])
    assert cfg.data.lang == "fr" and cfg.max_steps == 12 and cfg.betas == (0.8, 0.9)
    assert cfg.model_config(100, 100).p_drop == 0.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["nonsense=1"], "unknown keys in the config"),
        (["data.colour=red"], "unknown keys in data"),
        (["max_steps=0"], "max_steps must be at least 1"),
        (["preset=huge"], "preset must be one of"),
        (["model.d_model=100", "model.h=3"], "divisible"),
        (["data.corpus=parallel"], "two files"),
        (["max_steps"], "not KEY=VALUE"),
        (["model.heads=3"], "unknown model options"),
        (["clean.min_overlap=2"], "min_overlap"),
        (["model.read_first=1"], "read_first"),
    ],
)
def test_bad_values_are_named(overrides: list[str], message: str) -> None:
    with pytest.raises(TrainConfigError, match=message):
        cfg = load_config(None, overrides)
        cfg.model_config(100, 100)


def test_corpus_settings_added_later_keep_older_runs_keys() -> None:
    """A run resumes only on the corpus it was trained on (its key); clean.min_overlap, added later, changes the
    key when set and leaves it as it was (this digest, made before it existed) when not."""
    assert load_config(CONFIGS / "base.yaml").data_key() == "f369eafce96def8d"
    assert load_config(CONFIGS / "base.yaml", ["clean.min_overlap=0.3"]).data_key() != "f369eafce96def8d"
    assert load_config(CONFIGS / "base.yaml", ["data.titles=true"]).data_key() != "f369eafce96def8d"


def test_bad_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("data: [unclosed\n")
    with pytest.raises(TrainConfigError, match="broken.yaml: not valid YAML"):
        load_config(path)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("max_minutes=abc", "max_minutes: expected a number, got 'abc'"),
        ("max_minutes=-5", "max_minutes must not be negative"),
        ("dtype=float16", "dtype must be one of auto, float32, bfloat16, got 'float16'"),
        ("task=translate", "task must be one of translation, summarization, got 'translate'"),
        ("device=gpu", "device must be auto, cpu, cuda or cuda:N, got 'gpu'"),
        ("betas=0.9", "betas: expected a list, got 0.9"),
        ("batch_tokens=abc", "batch_tokens: expected an integer, got 'abc'"),
        ("batch_tokens=2.5", "batch_tokens: expected an integer, got 2.5"),
        ("batch_tokens=inf", "batch_tokens: expected an integer, got inf"),  # int(inf) raised OverflowError
        ("lr_scale=inf", "lr_scale: expected a finite number, got inf"),  # was accepted: NaN losses from step 1
        ("max_minutes=nan", "max_minutes: expected a finite number, got nan"),
        ("vocab.size=big", "vocab.size: expected an integer, got 'big'"),
        ("data.paths=[a.en]", "data.paths must name two files"),
    ],
)
def test_values_are_checked_when_loaded_naming_the_dotted_key(override: str, message: str) -> None:
    overrides = ["data.corpus=parallel", "data.paths=[a.en, a.de]"] if override.startswith("data.") else []
    with pytest.raises(TrainConfigError) as e:
        load_config(None, [*overrides[:1], override] if overrides else [override])
    assert message in str(e.value) and "data.data" not in str(e.value) and "not supported" not in str(e.value)


def test_numbers_are_coerced_where_yaml_leaves_strings() -> None:
    cfg = load_config(None, ["batch_tokens=1e4", "max_minutes=5", "betas=[0.9, 0.997]", "device=cuda:1"])
    assert cfg.batch_tokens == 10_000 and isinstance(cfg.batch_tokens, int)
    assert cfg.max_minutes == 5.0 and cfg.betas == (0.9, 0.997) and cfg.device == "cuda:1"
