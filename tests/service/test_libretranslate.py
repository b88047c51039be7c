"""LibreTranslate's API beside ours: its own Python client (libretranslatepy) works unchanged against `transformer
serve`, and the documented request shapes (form bodies, api_key, format html, alternatives, source auto, GET
/languages, POST /detect) get LibreTranslate's answers, or a clear error where this service cannot honestly
answer."""

from __future__ import annotations

import shutil
import urllib.error
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from libretranslatepy import LibreTranslateAPI

from model.translator import Translator
from service.settings import ServiceSettings
from tests.conftest import SPM_VOCAB, save_random_checkpoint
from tests.service.conftest import Server, health_latency
from tests.service.test_api import ready_client

KEY = "a-key-for-the-tests-0123"
TEXT = "kalo mine ruza vo"
SHORT = {"max_length": 6}


@pytest.fixture
def server(serve: Callable[..., Server]) -> Server:
    return serve(api_keys=KEY)


def translator(models_dir: Path) -> Translator:
    return Translator.load(models_dir / "tiny-en-de", device="cpu")


def test_libretranslates_own_client_works_unchanged(server: Server, models_dir: Path) -> None:
    lt = LibreTranslateAPI(server.url, api_key=KEY)  # form bodies, the key as the api_key field
    assert lt.translate(TEXT, "en", "de") == translator(models_dir).translate([TEXT])[0].text
    assert lt.languages() == [{"code": "en", "name": "English", "targets": ["de"]}]
    [best, other] = lt.detect("Die Datei wurde nicht gefunden, weil die Festplatte voll ist.")
    assert best["language"] == "de" and other["language"] == "en" and best["confidence"] > 90
    assert best["confidence"] + other["confidence"] == pytest.approx(100, abs=0.2)
    with pytest.raises(urllib.error.HTTPError) as e:
        lt.detect("Datei")  # too short to tell
    assert e.value.code == 422 and "too short to tell" in e.value.read().decode()
    with pytest.raises(urllib.error.HTTPError) as e:
        lt.detect("Привет, как у тебя дела сегодня?")  # neither English nor German
    assert e.value.code == 422 and "not in a language of the models here (de, en)" in e.value.read().decode()
    with pytest.raises(urllib.error.HTTPError) as e:
        LibreTranslateAPI(server.url, api_key="wrong-key-0123456789").translate(TEXT, "en", "de")
    assert e.value.code == 401


def test_documented_request_shapes(server: Server, models_dir: Path) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    tr = translator(models_dir)
    # JSON with api_key in the body, a list of texts, and alternatives.
    r = httpx.post(
        f"{server.url}/translate",
        json={
            "q": [TEXT, "vo sa"],
            "source": "en",
            "target": "de",
            "format": "text",
            "alternatives": 2,
            "api_key": KEY,
            **SHORT,
        },
    )
    assert r.status_code == 200, r.text
    want = tr.translate([TEXT, "vo sa"], beam_size=4, n_best=3, max_len_a=0.0, max_len_b=6)
    assert r.json()["translatedText"] == [t.text for t in want]
    assert r.json()["alternatives"] == [[h.text for h in t.hypotheses[1:]] for t in want]
    assert "alternatives" not in httpx.post(f"{server.url}/translate", json={"q": TEXT, **SHORT}, headers=auth).json()
    # A form body repeating q for a list.
    r = httpx.post(
        f"{server.url}/translate",
        content=f"q={TEXT}&q=vo+sa&source=en&target=de&max_length=6".encode(),
        headers={**auth, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"] == [t.text for t in tr.translate([TEXT, "vo sa"], max_len_a=0.0, max_len_b=6)]
    # LibreTranslate's own page posts a FormData (multipart), its key among the fields: it was a 401 here, and with
    # the key in a header "body: Input should be a valid dictionary".
    fields = {"q": TEXT, "source": "en", "target": "de", "format": "text", "api_key": KEY, "max_length": "6"}
    r = httpx.post(f"{server.url}/translate", files={name: (None, value) for name, value in fields.items()})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text
    assert r.json()["translatedText"] == tr.translate([TEXT], max_len_a=0.0, max_len_b=6)[0].text
    two = [("q", (None, TEXT)), ("q", (None, "vo sa")), ("max_length", (None, "6"))]
    assert len(httpx.post(f"{server.url}/translate", files=two, headers=auth).json()["translatedText"]) == 2
    r = httpx.post(f"{server.url}/translate", files={"q": ("a.txt", TEXT.encode(), "text/plain")}, headers=auth)
    assert r.status_code == 422 and "q: a file" in r.json()["error"]["message"] and "/translate_file" in r.text
    r = httpx.post(f"{server.url}/translate", files={"q": (None, TEXT)})  # no key at all
    assert r.status_code == 401, r.text
    # Fields that are not UTF-8 were read as Latin-1 by the form parser (mojibake translated): a 400 now, as a
    # form-encoded body's; unless the Content-Type names their charset.
    latin = b'--x\r\nContent-Disposition: form-data; name="q"\r\n\r\ncaf\xe9 vo\r\n--x--\r\n'
    multipart = "multipart/form-data; boundary=x"
    r = httpx.post(f"{server.url}/translate", content=latin, headers={**auth, "content-type": multipart})
    assert r.status_code == 400 and "not UTF-8" in r.json()["error"]["message"], r.text
    named = {**auth, "content-type": f"{multipart}; charset=ISO-8859-1"}
    r = httpx.post(f"{server.url}/translate", content=latin, headers=named)
    assert r.status_code == 200, r.text
    assert r.json()["translatedText"] == tr.translate(["café vo"])[0].text
    # format html: the text between block tags is translated, inline tags put back around it, the rest kept.
    page = '<p class="x">kalo mine &amp; ruza</p>\n<!-- vo sa --><script>vo("sa")</script><b> vo </b>'
    r = httpx.post(
        f"{server.url}/translate",
        json={"q": page, "source": "en", "target": "de", "format": "html", **SHORT},
        headers=auth,
    )
    assert r.status_code == 200, r.text
    one, two = (t.text for t in tr.translate(["kalo mine & ruza", "vo"], max_len_a=0.0, max_len_b=6))
    escaped = one.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = r.json()["translatedText"]
    assert out.startswith(f'<p class="x">{escaped}</p>\n<!-- vo sa --><script>vo("sa")</script>'), out
    tail = out.split("</script>", 1)[1]
    assert (
        tail.count("<b>") == 1
        and tail.count("</b>") == 1
        and tail.replace("<b>", "").replace("</b>", "").split() == two.split()
    )
    # The key is still needed, in the header or the body.
    assert httpx.post(f"{server.url}/translate", json={"q": TEXT}).status_code == 401
    assert httpx.post(f"{server.url}/translate", json={"q": TEXT, "api_key": "nope-nope-nope-nope"}).status_code == 401
    # Past 64 KB, a body is not read for its api_key (a keyless request costs the server nothing): use the header.
    big = {"q": ["vo"] * 40, "api_key": KEY, "padding": "x" * (64 << 10)}
    assert httpx.post(f"{server.url}/translate", json=big).status_code == 401


@pytest.fixture
def two_sources(tmp_path: Path, models_dir: Path, spm_dir: Path) -> Path:
    shutil.copytree(models_dir / "tiny-en-de", tmp_path / "tiny-en-de")
    save_random_checkpoint(
        tmp_path / "tiny-fr-de", spm_dir, SPM_VOCAB, seed=4, source_lang="fr", target_lang="de", max_len=64
    )
    return tmp_path


ENGLISH = "The file could not be saved because the disk is full."
GERMAN = "Die Datei wurde nicht gefunden, weil die Festplatte voll ist."
FRENCH = "Le fichier n'a pas pu être enregistré car le disque est plein."


def test_source_auto_detects_each_texts_language_and_picks_its_model(
    serve: Callable[..., Server], two_sources: Path
) -> None:
    """LibreTranslate detects the first text's language and applies it to all; here each text has its own."""
    server = serve()
    r = httpx.post(f"{server.url}/translate", json={"q": TEXT, "source": "auto", "target": "de", **SHORT})
    assert r.status_code == 200 and r.json()["model"] == "tiny-en-de"  # one model into de: too short is no matter
    r = httpx.post(f"{server.url}/translate", json={"q": [ENGLISH], "source": "auto", "target": "de", **SHORT})
    assert r.json()["detectedLanguage"][0]["language"] == "en" and "models" not in r.json()
    # A text in the target language already was translated into German by the en-de model, "detected" as English
    # with a confidence under 10%. It is answered as it is now, as LibreTranslate and Google do.
    r = httpx.post(f"{server.url}/translate", json={"q": GERMAN, "source": "auto", "target": "de"})
    assert r.status_code == 200 and r.json()["translatedText"] == GERMAN and "model" not in r.json(), r.text
    assert r.json()["detectedLanguage"]["language"] == "de" and r.json()["detectedLanguage"]["confidence"] > 90
    assert r.json()["translations"] == [
        {"text": GERMAN, "score": 0.0, "tokens": [], "sentences": [], "alternatives": []}
    ]
    body = {"q": [ENGLISH, GERMAN, TEXT], "source": "auto", "target": "de", "alternatives": 1, **SHORT}
    r = httpx.post(f"{server.url}/translate", json=body)
    assert r.json()["models"] == ["tiny-en-de", None, "tiny-en-de"] and r.json()["model"] == "tiny-en-de", r.text
    assert [d["language"] for d in r.json()["detectedLanguage"]] == ["en", "de", "en"]
    alone = httpx.post(f"{server.url}/translate", json={**body, "q": [ENGLISH, TEXT], "source": "en"}).json()
    [english, text] = alone["translatedText"]
    assert r.json()["translatedText"] == [english, GERMAN, text] and r.json()["alternatives"][1] == []
    # Unsure is not enough: gibberish the detector gives German 56% goes to the model as before (above), and so
    # does a text with source "en", or a named model, whatever its language.
    for named in ({"source": "en"}, {"model": "tiny-en-de"}):
        r = httpx.post(f"{server.url}/translate", json={"q": GERMAN, "target": "de", **named, **SHORT})
        assert r.json()["model"] == "tiny-en-de" and r.json()["translations"][0]["tokens"], r.text
    server = Server(ServiceSettings(models_dir=two_sources)).__enter__()
    try:
        server.wait_ready()
        body = {"q": [FRENCH, ENGLISH, FRENCH], "source": "auto", "target": "de", "beam_size": 2, **SHORT}
        r = httpx.post(f"{server.url}/translate", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["models"] == ["tiny-fr-de", "tiny-en-de", "tiny-fr-de"]
        assert [d["language"] for d in r.json()["detectedLanguage"]] == ["fr", "en", "fr"]
        for model, text, got in zip(r.json()["models"], body["q"], r.json()["translatedText"], strict=True):
            alone = {"q": text, "model": model, "beam_size": 2, **SHORT}
            assert got == httpx.post(f"{server.url}/translate", json=alone).json()["translatedText"]
        r = httpx.post(f"{server.url}/translate", json={"q": "Save it", "source": "auto", "target": "de", **SHORT})
        assert r.status_code == 422 and "too short to tell" in r.json()["error"]["message"]
        r = httpx.post(f"{server.url}/translate", json={"q": TEXT, "source": "auto", "target": "xx"})
        assert r.status_code == 404
        languages = httpx.get(f"{server.url}/languages").json()
        assert languages == [
            {"code": "en", "name": "English", "targets": ["de"]},
            {"code": "fr", "name": "French", "targets": ["de"]},
        ]
    finally:
        server.__exit__()


def test_detecting_long_texts_leaves_the_event_loop_free(serve: Callable[..., Server]) -> None:
    """lingua takes about 1 ms a 1,000 characters: 64 texts of 47,000 characters held the event loop for 1.6 s
    while source "auto" detected them. Long texts are detected in a thread now; each is in German, so the
    answer is each text as it is."""
    server = serve(max_chars=50_000)
    texts = [f"{i}. " + GERMAN * 750 for i in range(64)]  # 47,000 characters each, 3 MB in all
    with health_latency(server.url) as worst:
        r = httpx.post(f"{server.url}/translate", json={"q": texts, "source": "auto", "target": "de"}, timeout=60)
    assert r.status_code == 200 and r.json()["translatedText"] == texts, r.text[:300]
    assert max(worst) < 0.5, f"/healthz took {max(worst):.2f} s while the texts were detected"


def test_frontend_settings_tell_a_client_what_it_needs_before_it_translates(
    models_dir: Path, tmp_path: Path, spm_dir: Path
) -> None:
    """LibreTranslate's clients read GET /frontend/settings before they translate (Dialect asks it whether a key
    is needed; the clients made from LibreTranslate's OpenAPI document have it): it was a 404 here."""
    c = ready_client(models_dir, api_keys=KEY, max_chars=1200)
    try:
        r = c.get("/frontend/settings")  # without a key: it says that one is needed
        assert r.status_code == 200, r.text
        got = r.json()
        assert got["apiKeys"] is True and got["keyRequired"] is True and got["suggestions"] is False
        assert got["filesTranslation"] is True and {".txt", ".docx", ".srt"} <= set(got["supportedFilesFormat"])
        assert got["language"] == {
            "source": {"code": "auto", "name": "Auto Detect"},
            "target": {"code": "de", "name": "German"},  # the only target (the summarizer translates nothing)
        }
        assert got["charLimit"] == 1200 and got["frontendTimeout"] > 0
        assert c.post("/translate", json={"q": TEXT, "target": "de", **SHORT}).status_code == 401
        auth = {"Authorization": f"Bearer {KEY}"}
        body = {"q": "x" * got["charLimit"], "target": "de", **SHORT}
        assert c.post("/translate", json=body, headers=auth).status_code == 200  # the limit is the service's own
        body["q"] += "x"
        assert c.post("/translate", json=body, headers=auth).status_code == 422
    finally:
        c.__exit__(None, None, None)
    shutil.copytree(models_dir / "tiny-en-de", tmp_path / "tiny-en-de")
    save_random_checkpoint(tmp_path / "tiny-de-en", spm_dir, SPM_VOCAB, seed=5, source_lang="de", target_lang="en")
    c = ready_client(tmp_path)
    try:
        got = c.get("/frontend/settings").json()
        assert got["apiKeys"] is False and got["keyRequired"] is False
        assert got["language"]["target"] == {"code": "en", "name": "English"}  # LibreTranslate's own default
    finally:
        c.__exit__(None, None, None)
