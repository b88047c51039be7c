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


@pytest.mark.parametrize(("overrides", "message"), [
    (["nonsense=1"], "unknown keys in the config"),
    (["data.colour=red"], "unknown keys in data"),
    (["max_steps=0"], "max_steps must be at least 1"),
    (["preset=huge"], "preset must be one of"),
    (["model.d_model=100", "model.h=3"], "divisible"),
    (["data.corpus=parallel"], "two files"),
    (["max_steps"], "not KEY=VALUE"),
    (["model.heads=3"], "unknown model options"),
])
def test_bad_values_are_named(overrides: list[str], message: str) -> None:
    with pytest.raises(TrainConfigError, match=message):
        cfg = load_config(None, overrides)
        cfg.model_config(100, 100)


def test_bad_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("data: [unclosed\n")
    with pytest.raises(TrainConfigError, match="broken.yaml: not valid YAML"):
        load_config(path)
