"""Pivoting: with no model from source to target, but one from source to x and one from x to target, /translate
goes through x and says so (LibreTranslate's and Argos's behaviour)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from model.families import import_model
from service.errors import InvalidRequest, ModelNotFound
from service.registry import Registry
from tests.conftest import make_sentences
from tests.model.hf_families import build_family_dir
from tests.service.test_api import ready_client

SHORT = {"max_length": 6, "beam_size": 2}


def relabel(src: Path, out: Path, source: str, target: str) -> None:
    """A copy of a checkpoint that says it translates source to target."""
    shutil.copytree(src, out)
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    (out / "config.json").write_text(
        json.dumps({**config, "source_lang": source, "target_lang": target}), encoding="utf-8"
    )


@pytest.fixture(scope="module")
def client(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """tiny-en-de, and copies that say they translate de -> fr and fr -> es."""
    models = tmp_path_factory.mktemp("pivot")
    shutil.copytree(models_dir / "tiny-en-de", models / "tiny-en-de")
    relabel(models_dir / "tiny-en-de", models / "tiny-de-fr", "de", "fr")
    relabel(models_dir / "tiny-en-de", models / "tiny-fr-es", "fr", "es")
    c = ready_client(models)
    yield c
    c.__exit__(None, None, None)


def test_a_missing_pair_is_translated_through_another_language(client: TestClient) -> None:
    texts = make_sentences(3, seed=21)
    r = client.post("/translate", json={"q": texts, "source": "en", "target": "fr", **SHORT})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pivot"] == "de" and body["models"] == ["tiny-en-de", "tiny-de-fr"] and body["model"] == "tiny-de-fr"
    german = client.post("/translate", json={"q": texts, "source": "en", "target": "de", **SHORT}).json()
    french = client.post(
        "/translate", json={"q": german["translatedText"], "source": "de", "target": "fr", **SHORT}
    ).json()
    assert body["translatedText"] == french["translatedText"]
    assert "pivot" not in german  # a direct pair does not pivot


def test_one_text_keeps_its_shape_and_alternatives_come_from_the_second_leg(client: TestClient) -> None:
    r = client.post("/translate", json={"q": "kalo mine", "source": "de", "target": "es", "alternatives": 1, **SHORT})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pivot"] == "fr" and isinstance(body["translatedText"], str) and len(body["alternatives"]) == 1


def test_no_route_is_still_a_404_naming_the_pair(client: TestClient) -> None:
    r = client.post("/translate", json={"q": "kalo", "source": "es", "target": "en"})
    assert r.status_code == 404 and "from es to en" in r.text, r.text


def test_a_language_into_itself_is_refused_not_translated_there_and_back(models_dir: Path, tmp_path: Path) -> None:
    """With en -> de and de -> en, en -> en went to German and back and answered a paraphrase "through de"."""
    shutil.copytree(models_dir / "tiny-en-de", tmp_path / "tiny-en-de")
    relabel(models_dir / "tiny-en-de", tmp_path / "tiny-de-en", "de", "en")
    c = ready_client(tmp_path)
    try:
        for source, target in (("en", "en"), ("en", "EN-us"), ("de", "de")):
            r = c.post("/translate", json={"q": "kalo", "source": source, "target": target, **SHORT})
            assert r.status_code == 422, r.text
            error = r.json()["error"]
            assert (
                error["details"][0]["field"] == "target" and f"same language as source ({source})" in error["message"]
            )
        assert c.post("/translate", json={"q": "kalo", "source": "de", "target": "en", **SHORT}).status_code == 200
    finally:
        c.__exit__(None, None, None)


def test_languages_lists_the_pairs_reached_through_a_pivot(client: TestClient) -> None:
    """LibreTranslate lists Argos's pivoted pairs among a language's targets: so does /languages, and each one
    listed translates; one hop only, as pivoting goes."""
    listed = {entry["code"]: entry["targets"] for entry in client.get("/languages").json()}
    assert listed == {"en": ["de", "fr"], "de": ["es", "fr"], "fr": ["es"]}
    for source, targets in listed.items():
        for target in targets:
            r = client.post("/translate", json={"q": "kalo", "source": source, "target": target, **SHORT})
            assert r.status_code == 200, (source, target, r.text)
    assert client.post("/translate", json={"q": "kalo", "source": "en", "target": "es"}).status_code == 404


def brute_force(registry: Registry) -> dict[str, list[str]]:
    """Each source's targets by asking resolve and pivot about every pair, as /translate does."""
    codes = {c for m in registry.models.values() for c in (m.meta.source_lang, m.meta.target_lang) if c}
    codes |= {c for m in registry.models.values() if m.multilingual for c in m.languages()}
    reached: dict[str, list[str]] = {}
    for source in sorted(codes):
        targets = []
        for target in sorted(codes - {source}):
            try:
                registry.resolve("translation", None, source, target)
                targets.append(target)
            except ModelNotFound:
                if registry.pivot("translation", source, target) is not None:
                    targets.append(target)
            except InvalidRequest:  # several models of the pair: listed all the same (name one with 'model')
                targets.append(target)
        if targets:
            reached[source] = targets
    return reached


def test_the_listed_targets_are_those_resolve_and_pivot_find(models_dir: Path, tmp_path: Path) -> None:
    """Ambiguous legs are passed over as pivot passes them: two en -> it models list it, but no pair through it."""
    shutil.copytree(models_dir / "tiny-en-de", tmp_path / "en-de")
    for name, source, target in (
        ("de-fr", "de", "fr"),
        ("it-a", "en", "it"),
        ("it-b", "en", "it"),
        ("it-pt", "it", "pt"),
        ("de-pt", "de", "pt"),
        ("pt-en", "pt", "en"),
        ("de-en-summary", "de", "ja"),
    ):
        relabel(models_dir / "tiny-en-de", tmp_path / name, source, target)
    config = json.loads((tmp_path / "de-en-summary" / "config.json").read_text(encoding="utf-8"))
    (tmp_path / "de-en-summary" / "config.json").write_text(json.dumps({**config, "task": "summarization"}))
    registry = Registry.scan(tmp_path)
    assert registry.targets == brute_force(registry)
    assert registry.targets["en"] == ["de", "fr", "it", "pt"]
    assert registry.targets["pt"] == ["de", "en"]  # not it: the en -> it leg is ambiguous
    assert "ja" not in registry.targets["de"]  # a summarizer is no leg


def test_a_multilingual_model_and_a_bilingual_one_pivot(models_dir: Path, tmp_path: Path) -> None:
    """NLLB's 202 languages reach Klingon through German, where a bilingual model translates German to it."""
    family = build_family_dir("nllb", tmp_path / "hf")
    import_model(family.hf_dir, tmp_path / "models" / "nllb")
    relabel(models_dir / "tiny-en-de", tmp_path / "models" / "de-tlh", "de", "tlh")
    registry = Registry.scan(tmp_path / "models")
    assert "tlh" in registry.targets["en"] and "tlh" in registry.targets["zh"] and "tlh" not in registry.targets
    assert registry.pivot("translation", "en", "tlh") is not None
    assert len(registry.targets) == 202 and all(len(t) == 202 and "tlh" in t for t in registry.targets.values())
