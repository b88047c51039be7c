"""One imported NLLB model serves every pair of its languages: by ISO 639-1 codes or its own, found by source and
target without naming it, listed by /languages and /models, with the target forced per request."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from model.families import import_model
from model.translator import Translator
from tests.conftest import make_sentences
from tests.model.hf_families import build_family_dir
from tests.service.test_api import ready_client


@pytest.fixture(scope="module")
def nllb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models directory holding one NLLB model, imported without default languages."""
    family = build_family_dir("nllb", tmp_path_factory.mktemp("nllb"))
    models = tmp_path_factory.mktemp("models")
    import_model(family.hf_dir, models / "nllb")
    return models


@pytest.fixture(scope="module")
def client(nllb: Path) -> Iterator[TestClient]:
    c = ready_client(nllb)
    yield c
    c.__exit__(None, None, None)


@pytest.fixture(scope="module")
def translator(nllb: Path) -> Translator:
    return Translator.load(nllb / "nllb", device="cpu")


def test_languages_and_models_list_every_pair_by_iso_codes_where_they_exist(client: TestClient) -> None:
    languages = {entry["code"]: entry["targets"] for entry in client.get("/languages").json()}
    assert len(languages) == 202  # NLLB-200's languages, one code each
    assert {"en", "de", "fr", "zh", "ar", "ace_Arab", "ace_Latn", "zho_Hant"} <= set(languages)
    assert "eng_Latn" not in languages and "en" in languages["de"] and "de" not in languages["de"]
    [model] = client.get("/models").json()["models"]
    assert sorted(model["languages"]) == sorted(languages) and model["source"] is None


def test_translate_finds_the_model_by_its_languages_and_forces_the_target(
    client: TestClient, translator: Translator
) -> None:
    texts = make_sentences(4, seed=12)
    for source, target, own in (("en", "de", ("eng_Latn", "deu_Latn")), ("eng_Latn", "fr", ("eng_Latn", "fra_Latn"))):
        r = client.post("/translate", json={"q": texts, "source": source, "target": target, "beam_size": 3})
        assert r.status_code == 200, r.text
        want = translator.translate(texts, beam_size=3, source_lang=own[0], target_lang=own[1])
        assert r.json()["translatedText"] == [o.text for o in want]
    german = client.post("/translate", json={"q": texts, "source": "en", "target": "de"}).json()["translatedText"]
    french = client.post("/translate", json={"q": texts, "source": "en", "target": "fr"}).json()["translatedText"]
    assert german != french


def test_codes_in_another_case_or_as_bcp47_tags_name_the_same_language(client: TestClient) -> None:
    """A code is the model's in any case, and a BCP 47 tag with a region or a script is its language in its script:
    "EN" and "en-US" answered 404; "zh-TW" is Traditional Chinese, the model's zho_Hant, not "zh" (zho_Hans)."""
    texts = make_sentences(2, seed=13)

    def translated(source: str, target: str, model: str | None = None) -> list[str]:
        body = {"q": texts, "source": source, "target": target, "max_length": 6, **({"model": model} if model else {})}
        r = client.post("/translate", json=body)
        assert r.status_code == 200, (source, target, r.text)
        return list(r.json()["translatedText"])

    for source, target, same in (
        ("EN", "De", ("en", "de")),
        ("en-US", "de_DE", ("en", "de")),
        ("ENG_LATN", "zh-TW", ("en", "zho_Hant")),
        ("en-GB", "zh-Hant", ("en", "zho_Hant")),
        ("en", "zh-CN", ("en", "zh")),
    ):
        assert translated(source, target) == translated(*same) == translated(source, target, model="nllb"), target
    assert translated("en", "zh-TW") != translated("en", "zh")
    r = client.post("/translate", json={"q": "kalo", "source": "sr-Latn", "target": "de"})  # the model has srp_Cyrl
    assert r.status_code == 404 and "from sr-Latn" in r.text, r.text


def test_an_unknown_or_missing_language_is_the_requests_error(client: TestClient) -> None:
    r = client.post("/translate", json={"q": "kalo", "source": "en", "target": "xx"})
    assert r.status_code == 404 and "to xx" in r.text, r.text
    r = client.post("/translate", json={"q": "kalo", "model": "nllb", "source": "en", "target": "xx"})
    assert r.status_code == 422 and "unknown target language 'xx'" in r.text, r.text
    r = client.post("/translate", json={"q": "kalo", "model": "nllb", "target": "de"})
    assert r.status_code == 422 and "needs a source language" in r.text, r.text


def test_attention_maps_show_the_source_language_token_not_the_forced_target(
    client: TestClient, translator: Translator
) -> None:
    r = client.post("/attention", json={"q": "kalo mine", "source": "en", "target": "de", "kinds": ["cross"]})
    assert r.status_code == 200, r.text
    body = r.json()
    want = translator.translate(["kalo mine"], source_lang="en", target_lang="de", return_attention=True)[0]
    maps = want.hypotheses[0].attention
    assert maps is not None and body["source_tokens"] == maps.source_tokens
    assert body["source_tokens"][0] == "eng_Latn" and body["source_tokens"][-1] == "</s>"  # what the model read
    assert "deu_Latn" not in body["target_tokens"]  # forced, not searched


def test_a_batch_job_carries_its_languages(client: TestClient, translator: Translator) -> None:
    texts = make_sentences(3, seed=13)
    r = client.post("/jobs", json={"texts": texts, "source": "en", "target": "fr", "beam_size": 2})
    assert r.status_code == 202, r.text
    for _ in range(600):
        job = client.get(r.headers["Location"]).json()
        if job["status"] in ("done", "failed"):
            break
        __import__("time").sleep(0.05)
    assert job["status"] == "done", job
    want = translator.translate(texts, beam_size=2, source_lang="en", target_lang="fr")
    assert [o["text"] for o in job["results"]] == [o.text for o in want]


def test_a_copy_under_another_name_makes_the_pair_ambiguous(nllb: Path, tmp_path: Path) -> None:
    models = tmp_path / "models"
    shutil.copytree(nllb, models)
    shutil.copytree(nllb / "nllb", models / "nllb-copy")
    c = ready_client(models)
    try:
        r = c.post("/translate", json={"q": "kalo", "source": "en", "target": "de"})
        assert r.status_code == 422 and "nllb, nllb-copy" in r.text, r.text
    finally:
        c.__exit__(None, None, None)
