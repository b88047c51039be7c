"""Pivoting: with no model from source to target, but one from source to x and one from x to target, /translate
goes through x and says so (LibreTranslate's and Argos's behaviour)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.conftest import make_sentences
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
