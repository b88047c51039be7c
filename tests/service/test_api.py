"""The HTTP API in embedded mode: answers equal the Translator's, and every bad request gets its status
code and a clear message in the one error shape, never a 500."""

from __future__ import annotations

import gc
import gzip
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from model.int8_checkpoint import quantize_checkpoint
from model.quantize import int8_unsupported
from model.translator import Translator
from service.api.app import create_app
from service.api.metrics import RequestMetrics
from service.settings import ServiceSettings
from tests.conftest import SPM_VOCAB, make_sentences, save_random_checkpoint

SHORT = {"max_length": 6}  # random weights decode to the length limit: keep outputs short


def ready_client(models_dir: Path, **settings: Any) -> TestClient:
    client = TestClient(create_app(ServiceSettings(models_dir=models_dir, **settings)))
    client.__enter__()
    deadline = time.monotonic() + 60
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, client.get("/readyz").json()
        time.sleep(0.05)
    return client


@pytest.fixture(scope="module")
def client(models_dir: Path) -> Iterator[TestClient]:
    c = ready_client(models_dir)
    yield c
    c.__exit__(None, None, None)


@pytest.fixture(scope="module")
def translator(models_dir: Path) -> Translator:
    return Translator.load(models_dir / "tiny-en-de", device="cpu")


def assert_error(r: Any, status: int, code: str, *words: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code, body
    for w in words:
        assert w in body["error"]["message"], body
    return dict(body["error"])


def test_health_ready_models(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["queue"] == "embedded"
    models = {m["id"]: m for m in client.get("/models").json()["models"]}
    assert models["tiny-en-de"]["task"] == "translation" and models["tiny-en-de"]["target"] == "de"
    assert models["tiny-sum"]["task"] == "summarization"


def test_translate_equals_translator(client: TestClient, translator: Translator) -> None:
    texts = make_sentences(5, seed=3)
    r = client.post("/translate", json={"q": texts, "model": "tiny-en-de", "beam_size": 3, "n_best": 2, **SHORT})
    assert r.status_code == 200, r.text
    body = r.json()
    want = translator.translate(texts, beam_size=3, n_best=2, max_len_a=0.0, max_len_b=6)
    assert body["translatedText"] == [t.text for t in want]
    for got, w in zip(body["translations"], want, strict=True):
        assert got["text"] == w.text and got["tokens"] == w.tokens
        assert got["score"] == pytest.approx(w.score, abs=1e-5)
        assert [a["text"] for a in got["alternatives"]] == [h.text for h in w.hypotheses[1:]]
        assert got["score"] >= got["alternatives"][0]["score"]


def test_translate_one_string_by_languages(client: TestClient, translator: Translator) -> None:
    r = client.post("/translate", json={"q": "kalo mine ruza", "source": "en", "target": "de", **SHORT})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "tiny-en-de"
    assert r.json()["translatedText"] == translator.translate(["kalo mine ruza"], max_len_a=0.0, max_len_b=6)[0].text


def test_summarize(client: TestClient, models_dir: Path) -> None:
    doc = " ".join(make_sentences(3, seed=4))
    r = client.post("/summarize", json={"q": [doc], "min_length": 3, "no_repeat_ngram_size": 2, **SHORT})
    assert r.status_code == 200, r.text
    want = Translator.load(models_dir / "tiny-sum").translate(
        [doc], min_length=3, no_repeat_ngram_size=2, max_len_a=0.0, max_len_b=6
    )
    assert r.json()["model"] == "tiny-sum" and r.json()["summaries"][0]["text"] == want[0].text


def test_summary_length_hints(client: TestClient, models_dir: Path) -> None:
    doc = " ".join(make_sentences(3, seed=5))
    tr = Translator.load(models_dir / "tiny-sum")
    for length, (low, high) in (("short", (3, 16)), ([2, 5], (2, 5))):
        r = client.post("/summarize", json={"q": doc, "length": length})
        assert r.status_code == 200, r.text
        want = tr.translate([doc], min_length=low, max_len_a=0.0, max_len_b=high)[0]
        assert r.json()["summaries"][0]["text"] == want.text
        assert low <= len(r.json()["summaries"][0]["tokens"]) <= high
    for bad in ({"length": "tiny"}, {"length": [5, 2]}, {"length": "short", "max_length": 9}, {"length": [1]}):
        assert client.post("/summarize", json={"q": doc, **bad}).status_code == 422, bad


def test_attention_shapes_and_rows(client: TestClient) -> None:
    r = client.post("/attention", json={"q": "kalo mine ruza", **SHORT})
    assert r.status_code == 200, r.text
    a = r.json()
    S, T = len(a["source_tokens"]), len(a["target_tokens"])
    assert a["source_tokens"][-1] == "</s>" and a["target_tokens"][-1] == "</s>"
    assert len(a["cross"]) == 2 and len(a["cross"][0]) == 4  # N_dec layers x h heads
    assert len(a["cross"][0][0]) == T and len(a["cross"][0][0][0]) == S
    assert len(a["encoder"][1][3]) == S and len(a["decoder"][0][0]) == T
    for row in a["cross"][1][2]:
        assert sum(row) == pytest.approx(1.0, abs=0.01)
    assert all(w == 0 for w in a["decoder"][0][0][0][1:])  # causal: the first target token sees only itself


def test_attention_is_that_of_the_hypothesis_asked_for_under_every_option(
    client: TestClient, translator: Translator
) -> None:
    """/attention decodes as /translate does, with all its options, and its maps are those of the chosen
    hypothesis of the n-best list: the demo page draws them beside that very translation."""
    opts = {
        "beam_size": 4,
        "n_best": 3,
        "length_penalty": 2.0,
        "length_penalty_form": "average",
        "min_length": 2,
        "no_repeat_ngram_size": 2,
        "max_length": 7,
    }
    text = "kalo mine ruza vo sa"
    nbest = client.post("/translate", json={"q": text, **opts}).json()["translations"][0]
    want = [(nbest["text"], nbest["score"])] + [(h["text"], h["score"]) for h in nbest["alternatives"]]
    cfg = translator.decoding_config(
        **{k: v for k, v in opts.items() if k != "max_length"}, max_len_a=0.0, max_len_b=opts["max_length"]
    )
    alone = translator.translate([text], cfg, return_attention=True)[0]  # every hypothesis with its maps
    for index in (0, 2):
        r = client.post("/attention", json={"q": text, "hypothesis": index, "kinds": ["cross"], **opts})
        assert r.status_code == 200, r.text
        a = r.json()
        assert [(h["text"], h["score"]) for h in a["hypotheses"]] == want
        assert a["hypothesis"] == index and (a["text"], a["score"]) == want[index]
        maps = alone.hypotheses[index].attention
        assert maps is not None and a["target_tokens"] == maps.target_tokens
        assert a["cross"] == torch.round(maps.cross.double(), decimals=3).tolist() and a["encoder"] is None
    assert alone.hypotheses[0].attention is not None and alone.hypotheses[2].attention is not None
    assert alone.hypotheses[0].attention.target_tokens != alone.hypotheses[2].attention.target_tokens
    r = client.post("/attention", json={"q": text, "hypothesis": 3, **opts})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["field"] == "hypothesis"


def test_jobs_progress_and_results(client: TestClient, translator: Translator) -> None:
    texts = make_sentences(40, seed=5)
    r = client.post("/jobs", json={"texts": texts, "beam_size": 2, **SHORT})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["status"] in ("queued", "running") and job["progress"]["total"] == 40
    assert r.headers["location"] == f"/jobs/{job['id']}"
    deadline = time.monotonic() + 60
    while (job := client.get(f"/jobs/{job['id']}").json())["status"] != "done":
        assert job["status"] in ("queued", "running") and 0 <= job["progress"]["done"] <= 40
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert job["progress"] == {"done": 40, "total": 40}
    want = translator.translate(texts, beam_size=2, max_len_a=0.0, max_len_b=6)
    assert [o["text"] for o in job["results"]] == [w.text for w in want]
    assert_error(client.get("/jobs/0123"), 404, "not_found", "0123")


LONG = "kalo mine ruza " * 40  # far more than the 64 tokens tiny-en-de takes


def test_a_paragraph_is_translated_sentence_by_sentence_on_every_path(
    client: TestClient, translator: Translator
) -> None:
    """/translate, /jobs and /attention cut a text into sentences, translate them as rows of one search and join
    the outputs with the text's own whitespace; the answer says where each sentence and its output are."""
    parts = [s.capitalize() + "." for s in make_sentences(5, seed=31, min_words=3, max_words=7)]
    paragraph = " ".join(parts[:3]) + "\n\n" + "  ".join(parts[3:])
    alone = [o.text for o in translator.translate(parts, segment=False, beam_size=2, max_len_a=0.0, max_len_b=6)]
    want = " ".join(alone[:3]) + "\n\n" + "  ".join(alone[3:])
    r = client.post("/translate", json={"q": [paragraph, "Save changes"], "beam_size": 2, **SHORT})
    assert r.status_code == 200, r.text
    got = r.json()["translations"][0]
    assert r.json()["translatedText"][0] == want == got["text"]
    assert [paragraph[a:b] for a, b in (s["source"] for s in got["sentences"])] == parts
    assert [want[a:b] for a, b in (s["output"] for s in got["sentences"])] == alone
    job = client.post("/jobs", json={"texts": [paragraph, parts[0]], "beam_size": 2, **SHORT}).json()
    deadline = time.monotonic() + 60
    while (job := client.get(f"/jobs/{job['id']}").json())["status"] != "done":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert job["progress"] == {"done": 2, "total": 2}
    assert [o["text"] for o in job["results"]] == [want, alone[0]]
    a = client.post("/attention", json={"q": paragraph, "sentence": 1, "kinds": ["cross"], "beam_size": 2, **SHORT})
    assert a.status_code == 200, a.text
    maps = translator.translate(
        [parts[1]], segment=False, beam_size=2, max_len_a=0.0, max_len_b=6, return_attention=True
    )
    assert maps[0].attention is not None
    assert a.json()["sentence"] == 1 and a.json()["text"] == want
    assert a.json()["cross"] == torch.round(maps[0].attention.cross.double(), decimals=3).tolist()
    bad = client.post("/attention", json={"q": paragraph, "sentence": 5, **SHORT})
    assert_error(bad, 422, "invalid_request", "5", "5 sentences")


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code", "words"),
    [
        ("post", "/translate", {"q": ""}, 422, "invalid_request", ("q[0]", "empty")),
        ("post", "/translate", {"q": ["ok", "   "]}, 422, "invalid_request", ("q[1]", "empty")),
        ("post", "/translate", {"q": []}, 422, "invalid_request", ("q", "no texts")),
        ("post", "/translate", {"q": ["a"] * 65}, 422, "invalid_request", ("65 texts", "64")),
        ("post", "/translate", {"q": "a" * 5001}, 422, "invalid_request", ("q[0]", "5001 characters")),
        ("post", "/translate", {"q": LONG}, 422, "invalid_request", ("q[0]", "limit of 64", "truncate")),
        ("post", "/translate", {"q": f"Fine. {LONG}."}, 422, "invalid_request", ("q[0]", "sentence 1 has")),
        ("post", "/translate", {"q": "Go. " * 600}, 422, "invalid_request", ("q[0]", "600 sentences", "500")),
        ("post", "/translate", {"q": "a", "beam_size": 9}, 422, "invalid_request", ("beam_size", "limit of 8")),
        ("post", "/translate", {"q": "a", "beam_size": 0}, 422, "invalid_request", ("beam_size",)),
        ("post", "/translate", {"q": "a", "beam_size": 2, "n_best": 3}, 422, "invalid_request", ("n_best",)),
        (
            "post",
            "/translate",
            {"q": "a", "length_penalty_form": "x"},
            422,
            "invalid_request",
            ("length_penalty_form",),
        ),
        ("post", "/translate", {"q": 5}, 422, "invalid_request", ("q",)),
        ("post", "/translate", {"text": "a"}, 422, "invalid_request", ("q", "text")),
        ("post", "/translate", {"q": "a", "model": "nope"}, 404, "model_not_found", ("nope", "tiny-en-de")),
        (
            "post",
            "/translate",
            {"q": "a", "source": "en", "target": "xx"},
            404,
            "model_not_found",
            ("xx", "tiny-en-de"),
        ),
        ("post", "/translate", {"q": "a", "model": "tiny-sum"}, 422, "invalid_request", ("summarization",)),
        ("post", "/summarize", {"q": "a", "model": "tiny-en-de"}, 422, "invalid_request", ("translation",)),
        ("post", "/jobs", {"texts": []}, 422, "invalid_request", ("texts",)),
        ("post", "/jobs", {"texts": ["a", ""]}, 422, "invalid_request", ("texts[1]", "empty")),
        ("post", "/jobs", {"texts": ["a", LONG]}, 422, "invalid_request", ("texts[1]", "limit of 64")),
        ("post", "/attention", {"q": ["a", "b"]}, 422, "invalid_request", ("q",)),
        ("post", "/attention", {"q": "a", "model": "nope"}, 404, "model_not_found", ("nope",)),
        (
            "post",
            "/translate",
            {"q": "a", "min_length": 9, "max_length": 3},
            422,
            "invalid_request",
            ("9", "max_length (3)"),
        ),
        ("get", "/nowhere", None, 404, "not_found", ()),
        ("get", "/translate", None, 405, "method_not_allowed", ()),
    ],
)
def test_bad_requests(
    client: TestClient, method: str, path: str, body: Any, status: int, code: str, words: tuple[str, ...]
) -> None:
    r = client.request(method.upper(), path, json=body)
    assert_error(r, status, code, *words)


def test_malformed_and_oversized_bodies(client: TestClient, models_dir: Path) -> None:
    r = client.post("/translate", content=b'{"q": "a",', headers={"content-type": "application/json"})
    assert_error(r, 422, "malformed_json", "not valid JSON")
    r = client.post("/translate", content=b"\xff\xfe", headers={"content-type": "application/json"})
    assert r.status_code == 422
    # What json.loads fails on with a ValueError other than a JSONDecodeError: FastAPI answered a bare 400.
    for body, words in (
        (b'{"q": "caf\xe9 au lait"}', ("not UTF-8", "byte 10", "\\xe9")),
        (b'{"q": "a", "beam_size": ' + b"9" * 5000 + b"}", ("4300 digits",)),
    ):
        for media_type in ("application/json", "application/json; charset=utf-8"):
            r = client.post("/translate", content=body, headers={"content-type": media_type})
            assert_error(r, 422, "malformed_json", *words)
    # A form's %-escapes are UTF-8 too: %E9 alone was translated as U+FFFD.
    form = {"content-type": "application/x-www-form-urlencoded"}
    assert_error(client.post("/translate", content=b"q=caf%E9", headers=form), 400, "bad_request", "not UTF-8")
    # A multipart body is not JSON: a route that reads one still answers its own error.
    r = client.post("/translate_file", content=b"--x\r\n", headers={"content-type": "multipart/form-data; boundary=x"})
    assert r.status_code in (400, 422) and r.json()["error"]["code"] != "malformed_json", r.text
    # Bodies in a form the path does not read: each said something about JSON or a dictionary, not what to send.
    json_body = b'{"q": "kalo", "beam_size": 2}'
    for path, headers, body, words in (
        ("/translate", {"content-type": "text/plain"}, json_body, ("/translate reads application/json", "text/plain")),
        ("/translate", {"content-encoding": "gzip"}, gzip.compress(json_body), ("'gzip'", "uncompressed")),
        ("/translate", {"content-type": "application/x-www-form-urlencoded"}, json_body, ("curl -d", "a form")),
        ("/jobs", {"content-type": "application/x-www-form-urlencoded"}, b"texts=kalo", ("/jobs reads",)),
        ("/jobs", {"content-type": "multipart/form-data; boundary=x"}, b"--x--\r\n", ("multipart/form-data",)),
        ("/summarize", {}, json_body, ("without a Content-Type",)),
    ):
        assert_error(client.post(path, content=body, headers=headers), 415, "unsupported_media_type", *words)
    for media_type in ("application/json", "application/vnd.api+json", "application/JSON; charset=utf-8"):
        r = client.post("/translate", content=json_body, headers={"content-type": media_type})
        assert r.status_code == 200, (media_type, r.text)
    small = ready_client(models_dir, max_body_bytes=2048)
    try:
        assert_error(small.post("/translate", json={"q": "a" * 4000}), 413, "payload_too_large", "2048")
    finally:
        small.__exit__(None, None, None)


def test_truncate_on_request(client: TestClient) -> None:
    r = client.post("/translate", json={"q": LONG, "truncate": True, **SHORT})
    assert r.status_code == 200, r.text


def test_a_summarizer_that_reads_the_first_tokens_takes_any_length(tmp_path: Path, spm_dir: Path) -> None:
    """read_first: a document longer than the model's limit is summarized from its first tokens, without
    truncate, and /models says how many it reads."""
    save_random_checkpoint(
        tmp_path / "reader", spm_dir, SPM_VOCAB, seed=2, task="summarization", max_len=16, read_first=12
    )
    c = ready_client(tmp_path)
    try:
        [entry] = c.get("/models").json()["models"]
        assert entry["max_length"] == 16 and entry["reads_first"] == 12
        r = c.post("/summarize", json={"q": LONG, **SHORT})
        assert r.status_code == 200, r.text
        want = Translator.load(tmp_path / "reader").translate([LONG], max_len_a=0.0, max_len_b=6)[0]
        assert r.json()["summaries"][0]["text"] == want.text
    finally:
        c.__exit__(None, None, None)


ALPHA, BETA = "alpha-0123456789abcdef", "beta-0123456789abcdef"


def test_api_keys_and_rate_limit(models_dir: Path) -> None:
    c = ready_client(models_dir, api_keys=f"{ALPHA}:2,{BETA}")
    try:
        body = {"q": "kalo", **SHORT}
        assert_error(c.post("/translate", json=body), 401, "unauthorized", "Bearer")
        assert_error(c.post("/translate", json=body, headers={"Authorization": "Bearer wrong"}), 401, "unauthorized")
        ok = {"Authorization": f"Bearer {ALPHA}"}
        assert c.post("/translate", json=body, headers=ok).status_code == 200
        assert c.post("/translate", json=body, headers=ok).status_code == 200
        r = c.post("/translate", json=body, headers=ok)
        assert_error(r, 429, "too_many_requests", "2 requests per minute")
        assert 25 <= int(r.headers["retry-after"]) <= 30  # a token bucket: one request every 30 s, not a minute
        assert c.post("/translate", json=body, headers={"Authorization": f"Bearer {BETA}"}).status_code == 200
        assert c.get("/healthz").status_code == 200  # operations stay open
    finally:
        c.__exit__(None, None, None)


def test_timeout_answers_504(models_dir: Path) -> None:
    c = ready_client(models_dir, request_timeout_s=0.01)
    try:
        r = c.post("/translate", json={"q": make_sentences(64, seed=6), "max_length": 60})
        assert_error(r, 504, "timeout", "0.01 s")
    finally:
        c.__exit__(None, None, None)


def test_full_queue_answers_429(models_dir: Path) -> None:
    c = ready_client(models_dir, max_queue=1)
    try:
        job = c.post("/jobs", json={"texts": make_sentences(300, seed=7), "max_length": 60})
        assert job.status_code == 202
        r = c.post("/translate", json={"q": "kalo", **SHORT})
        assert_error(r, 429, "queue_full", "full")
        assert int(r.headers["retry-after"]) >= 1
    finally:
        c.__exit__(None, None, None)


def test_broken_and_missing_models(tmp_path: Path, models_dir: Path) -> None:
    import shutil

    shutil.copytree(models_dir / "tiny-en-de", tmp_path / "good")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    c = ready_client(tmp_path)
    try:
        models = c.get("/models").json()
        assert [m["id"] for m in models["models"]] == ["good"]
        assert "broken" in models["errors"] and "not valid JSON" in models["errors"]["broken"]
    finally:
        c.__exit__(None, None, None)


def test_without_models_the_service_says_so_and_waits_for_them(
    tmp_path: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("service.registry.MODELS_POLL_S", 0.1)
    where = tmp_path / "models"
    with TestClient(create_app(ServiceSettings(models_dir=where))) as c:
        deadline = time.monotonic() + 30
        while "does not exist" not in c.get("/readyz").text:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = c.get("/readyz")
        assert r.status_code == 503 and str(where) in r.json()["reason"]
        assert_error(c.post("/translate", json={"q": "a"}), 503, "unavailable", "does not exist")
        where.mkdir()
        while "no models in" not in c.get("/readyz").text:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        shutil.copytree(models_dir / "tiny-en-de", where / "late")  # a model arrives: served without a restart
        while c.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert c.post("/translate", json={"q": "a", **SHORT}).json()["model"] == "late"
    assert "waiting for one" in caplog.text


def test_what_loading_made_is_out_of_the_collectors_reach_while_serving(models_dir: Path) -> None:
    """A full collection would walk torch's and the models' objects again (a 220 ms pause on a small model)."""
    gc.unfreeze()
    client = ready_client(models_dir)
    try:
        assert gc.get_freeze_count() > 10_000
    finally:
        client.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0  # collectable again once the app is closed


def test_head_is_get_without_its_body_on_every_get_route(client: TestClient) -> None:
    """HEAD /healthz answered 405 with "Allow: GET, HEAD" (uptime checkers send HEAD)."""
    for path in ("/healthz", "/", "/models", "/languages"):
        got, head = client.get(path), client.head(path)
        assert got.status_code == head.status_code == 200, (path, head.text)
        assert head.content == b"" and head.headers["content-length"] == str(len(got.content)), path
        assert head.headers["content-type"] == got.headers["content-type"] and "x-request-id" in head.headers
    assert client.head("/metrics").status_code == 200
    r = client.head("/translate")  # a POST route: HEAD is GET's, and GET is not allowed there
    assert r.status_code == 405 and r.headers["allow"] == "POST" and r.content == b""
    assert 'transformer_requests_total{route="/healthz",status="200"}' in client.get("/metrics").text


def test_metrics_and_openapi(client: TestClient) -> None:
    client.post("/translate", json={"q": ["kalo", "mine"], **SHORT})
    text = client.get("/metrics").text
    for name in (
        "transformer_queue_depth",
        "transformer_batch_size_bucket",
        "transformer_generated_tokens_total",
        "transformer_decode_tokens_per_second",
        'transformer_request_seconds_bucket{route="/translate"',
        'transformer_requests_total{route="/translate",status="200"}',
    ):
        assert name in text
    spec = client.get("/openapi.json").json()
    assert {"/translate", "/summarize", "/jobs", "/jobs/{job_id}", "/attention", "/models"} <= set(spec["paths"])
    assert "422" in spec["paths"]["/translate"]["post"]["responses"]


def test_latency_histogram_is_cumulative_with_each_bound_inclusive() -> None:
    metrics = RequestMetrics()
    for seconds in (0.02, 0.05, 0.3, 100.0):  # 0.05 is a bound itself: counted in le="0.05"
        metrics.observe("/translate", 200, seconds)
    lines = metrics.render()
    counts = {
        line.split('le="')[1].split('"')[0]: int(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("transformer_request_seconds_bucket")
    }
    assert counts["0.01"] == 0 and counts["0.025"] == 1 and counts["0.05"] == 2 and counts["0.25"] == 2
    assert counts["0.5"] == counts["60.0"] == 3 and counts["+Inf"] == 4
    assert 'transformer_request_seconds_count{route="/translate"} 4' in lines


@pytest.mark.skipif(int8_unsupported("cpu") is not None, reason=str(int8_unsupported("cpu")))
def test_dtype_int8_serves_what_the_int8_translator_gives(models_dir: Path) -> None:
    client = ready_client(models_dir, dtype="int8")
    try:
        models = {m["id"]: m for m in client.get("/models").json()["models"]}
        assert models["tiny-en-de"]["dtype"] == "int8"
        texts = make_sentences(3, seed=11)
        r = client.post("/translate", json={"q": texts, "model": "tiny-en-de", **SHORT})
        assert r.status_code == 200, r.text
        int8 = Translator.load(models_dir / "tiny-en-de", dtype="int8")
        assert r.json()["translatedText"] == [t.text for t in int8.translate(texts, max_len_a=0.0, max_len_b=6)]
    finally:
        client.__exit__(None, None, None)


@pytest.mark.skipif(int8_unsupported("cpu") is not None, reason=str(int8_unsupported("cpu")))
def test_an_int8_checkpoint_is_served_as_int8_beside_float_models(models_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(models_dir / "tiny-en-de", tmp_path / "tiny-en-de")
    quantize_checkpoint(tmp_path / "tiny-en-de", tmp_path / "tiny-en-de-int8")
    client = ready_client(tmp_path, dtype="float32")
    try:
        models = {m["id"]: m["dtype"] for m in client.get("/models").json()["models"]}
        assert models == {"tiny-en-de": "float32", "tiny-en-de-int8": "int8"}
        texts = make_sentences(3, seed=12)
        r = client.post("/translate", json={"q": texts, "model": "tiny-en-de-int8", **SHORT})
        assert r.status_code == 200, r.text
        int8 = Translator.load(tmp_path / "tiny-en-de", dtype="int8")  # quantized at load: the same rows
        assert r.json()["translatedText"] == [t.text for t in int8.translate(texts, max_len_a=0.0, max_len_b=6)]
    finally:
        client.__exit__(None, None, None)


def test_dtype_int8_on_cuda_is_refused_at_start(models_dir: Path) -> None:
    with pytest.raises(ValueError, match="CPU only"):
        ServiceSettings(models_dir=models_dir, dtype="int8", device="cuda")


def test_every_endpoint_has_an_example_in_the_openapi_document(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]

    def has_example(content: dict[str, Any]) -> bool:
        for media in content.values():
            if "example" in media or "examples" in media:
                return True
            schema = media.get("schema", {})
            schema = schema.get("items", schema)
            ref = schema.get("$ref", "").rsplit("/", 1)[-1]
            if "examples" in schemas.get(ref, schema):
                return True
        return False

    missing = []
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            if "requestBody" in op and not has_example(op["requestBody"]["content"]):
                missing.append(f"{method} {path} request")
            code = next(c for c in ("200", "202", "501") if c in op["responses"])
            if not has_example(op["responses"][code].get("content", {})):
                missing.append(f"{method} {path} {code}")
    assert missing == []


def test_a_models_own_decoding_options_apply_where_a_request_sets_none(
    models_dir: Path, tmp_path: Path, translator: Translator
) -> None:
    """CheckpointMeta.decoding (a recipe's `decoding`): a request's options override it one by one, and GET
    /models shows every option a request may set, the model's own where it has one, else the paper's."""
    from model.config import DecodingConfig
    from tests.model.test_decoding_defaults import OWN, with_decoding

    own_dir = tmp_path / "own"
    own_dir.mkdir()
    with_decoding(models_dir / "tiny-en-de", own_dir / "tiny-own", OWN)
    client = ready_client(own_dir)
    try:
        [entry] = client.get("/models").json()["models"]
        paper = DecodingConfig()
        assert set(entry["decoding"]) == {*DecodingConfig.OPTIONS, "max_len_a", "max_len_b"}
        assert entry["decoding"] == {name: OWN.get(name, getattr(paper, name)) for name in entry["decoding"]}
        text = make_sentences(1, seed=21)[0]
        r = client.post("/translate", json={"q": [text]}).json()
        want = translator.translate([text], DecodingConfig(**OWN))[0]  # type: ignore[arg-type]
        assert r["translatedText"] == [want.text] and len(r["translations"][0]["alternatives"]) == 1
        r = client.post("/translate", json={"q": [text], "n_best": 1, "max_length": 5}).json()
        want = translator.translate([text], DecodingConfig(**{**OWN, "n_best": 1}).with_max_length(5))[0]  # type: ignore[arg-type]
        assert r["translatedText"] == [want.text] and r["translations"][0]["alternatives"] == []
        r = client.post("/translate", json={"q": [text], "beam_size": 1})  # the model's n_best 2 fits to 1
        assert r.status_code == 200 and r.json()["translations"][0]["alternatives"] == []
        assert client.post("/translate", json={"q": text, "beam_size": 2, "n_best": 3}).status_code == 422
    finally:
        client.__exit__(None, None, None)
    client = ready_client(own_dir, max_beam_size=2)
    try:
        r = client.post("/translate", json={"q": text})
        assert r.status_code == 422 and "tiny-own's own beam size" in r.text
        assert client.post("/translate", json={"q": text, "beam_size": 2}).status_code == 200
    finally:
        client.__exit__(None, None, None)


def test_what_cannot_be_translated_is_kept_through_the_queue(client: TestClient, translator: Translator) -> None:
    texts = ["😀 مرحبا kalo mine ruza", "See https://example.com/a.html", "https://example.com/b"]
    r = client.post("/translate", json={"q": texts, "beam_size": 2, **SHORT})
    assert r.status_code == 200, r.text
    got = r.json()["translatedText"]
    assert got == [o.text for o in translator.translate(texts, beam_size=2, max_len_a=0.0, max_len_b=6)]
    assert got[0].startswith("😀 مرحبا") and got[1].count("https://example.com/a.html") == 1
    assert got[2] == "https://example.com/b"  # nothing left to translate: answered as it is


def test_format_html_translates_a_sentence_whole_and_puts_its_tags_back(
    client: TestClient, translator: Translator
) -> None:
    from tests.model.test_markup import parsed

    page = '<p>Kalo <b>mine</b> ruza <a href="/x" title="vo sa">vo <i>sa</i></a> ke.</p><pre>kalo <b>x</b></pre>'
    r = client.post("/translate", json={"q": page, "format": "html", "beam_size": 2, **SHORT})
    assert r.status_code == 200, r.text
    out = r.json()["translatedText"]
    want = translator.translate(["Kalo mine ruza vo sa ke.", "vo sa"], beam_size=2, max_len_a=0.0, max_len_b=6)
    checked = parsed(out)
    assert sorted(checked.tags) == ["a", "b", "b", "i", "p", "pre"] and out.endswith("<pre>kalo <b>x</b></pre>")
    assert checked.text.replace("kalo x", "").split() == want[0].text.split()  # the sentence whole, tags aside
    assert f'title="{want[1].text}"' in out


def test_a_document_longer_than_the_summarizer_takes_is_summarized_in_sections(
    client: TestClient, models_dir: Path
) -> None:
    """Map-reduce: sections of whole sentences within the model's limit are summarized, and their summaries
    joined and summarized once more; truncate still cuts the document instead."""
    from model.segment import sections

    tr = Translator.load(models_dir / "tiny-sum", device="cpu")
    limit = tr.meta.model.max_len
    parts = [s.capitalize() + "." for s in make_sentences(60, seed=41, min_words=6, max_words=12)]
    doc = " ".join(parts)
    assert len(tr.tokenizer.encode_source(doc)) > limit
    r = client.post("/summarize", json={"q": doc, **SHORT})
    assert r.status_code == 200, r.text
    opts = {"max_len_a": 0.0, "max_len_b": 6}
    length = lambda s: len(tr.encode([s], truncate=True)[0])  # noqa: E731
    text = doc
    while len(tr.tokenizer.encode_source(text)) > limit:
        text = " ".join(o.text for o in tr.translate(sections(text, "en", length, limit), **opts))
    assert r.json()["summaries"][0]["text"] == tr.translate([text], **opts)[0].text
    cut = client.post("/summarize", json={"q": doc, "truncate": True, **SHORT}).json()["summaries"][0]["text"]
    assert cut == tr.translate([doc], truncate=True, **opts)[0].text
