"""POST /translate_file and GET /download_file: a file runs as a batch job with progress, comes back with its
structure, is handed over once; bad files, oversized ones and zip bombs are refused clearly; what a key keeps
is bounded."""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docx
import httpx
import pytest
from fastapi.testclient import TestClient

from model.translator import Translator
from tests.conftest import make_sentences
from tests.model.test_files import docx_bytes
from tests.service.test_api import assert_error, ready_client

OPTIONS = {"beam_size": "2", "max_length": "6"}  # random weights decode to the length limit: keep outputs short


@pytest.fixture(scope="module")
def client(models_dir: Path) -> Iterator[TestClient]:
    c = ready_client(models_dir, max_kept_jobs=3)
    yield c
    c.__exit__(None, None, None)


@pytest.fixture(scope="module")
def translator(models_dir: Path) -> Translator:
    return Translator.load(models_dir / "tiny-en-de", device="cpu")


def upload(client: TestClient | httpx.Client, name: str, data: bytes, **fields: str) -> Any:
    return client.post("/translate_file", files={"file": (name, data)}, data={**OPTIONS, **fields})


def finished(client: TestClient | httpx.Client, job: dict[str, Any]) -> dict[str, Any]:
    """Poll the job until it is done, checking that its progress only grows."""
    deadline, done = time.monotonic() + 120, 0
    while (job := client.get(f"/jobs/{job['id']}").json())["status"] != "done":
        assert job["status"] in ("queued", "running"), job
        assert done <= job["progress"]["done"] <= job["progress"]["total"]
        done = job["progress"]["done"]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return job


def test_a_text_file_runs_as_a_job_and_comes_back_once_with_its_lines(
    client: TestClient, translator: Translator
) -> None:
    lines = make_sentences(12, seed=41, min_words=2, max_words=6)
    source = "\n".join(lines[:6]) + "\n\n  " + "\r\n".join(lines[6:]) + "\n"
    r = upload(client, "notes.txt", source.encode())
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["file"] == "notes.txt" and job["progress"] == {"done": 0, "total": 12}
    assert job["translatedFileUrl"].endswith(f"/download_file/{job['id']}")
    assert r.headers["location"] == f"/jobs/{job['id']}"
    job = finished(client, job)
    assert job["progress"]["done"] == 12 and job["translatedFileUrl"] == r.json()["translatedFileUrl"]
    got = client.get(f"/download_file/{job['id']}")
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("text/plain")
    assert 'filename="notes.txt"' in got.headers["content-disposition"]
    out = [o.text for o in translator.translate(lines, beam_size=2, max_len_a=0.0, max_len_b=6)]
    assert got.content.decode() == "\n".join(out[:6]) + "\n\n  " + "\r\n".join(out[6:]) + "\n"
    assert_error(client.get(f"/download_file/{job['id']}"), 404, "not_found")  # handed over once
    assert_error(client.get(f"/jobs/{job['id']}"), 404, "not_found")  # its results went with it


def test_a_file_name_loses_its_directories_and_its_control_and_direction_characters(client: TestClient) -> None:
    """A right-to-left override shows "report\u202etxt.md" as "reportdm.txt"; a path's directories are not ours."""
    r = upload(client, "../../etc/re\u202eport\u200b\x7f.txt", b"kalo mine")
    assert r.status_code == 202, r.text
    job = finished(client, r.json())
    assert job["file"] == "report.txt", job
    got = client.get(f"/download_file/{job['id']}")
    assert 'filename="report.txt"' in got.headers["content-disposition"], got.headers
    assert_error(upload(client, "\u202e\u200e", b"kalo mine"), 422, "invalid_request")  # nothing left: no name


def test_a_download_asked_for_at_once_waits_for_its_job(client: TestClient) -> None:
    """LibreTranslate's clients fetch translatedFileUrl as soon as they have it."""
    r = upload(client, "a.srt", b"1\n00:00:01,000 --> 00:00:02,500\nHello there,\nmy friend.\n")
    assert r.status_code == 202, r.text
    got = client.get(r.json()["translatedFileUrl"])
    assert got.status_code == 200, got.text
    head = got.content.decode().split("\n")[:2]
    assert head == ["1", "00:00:01,000 --> 00:00:02,500"]


def test_a_docx_keeps_its_paragraphs_and_runs(client: TestClient, translator: Translator) -> None:
    paragraphs = [p.capitalize() + "." for p in make_sentences(30, seed=43, min_words=3, max_words=7)]
    r = upload(client, "report.docx", docx_bytes(paragraphs))
    assert r.status_code == 202, r.text
    job = finished(client, r.json())
    got = client.get(f"/download_file/{job['id']}")
    assert got.status_code == 200, got.text
    assert got.headers["content-type"] == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    out = docx.Document(io.BytesIO(got.content))
    want = [o.text for o in translator.translate(paragraphs, beam_size=2, max_len_a=0.0, max_len_b=6)]
    assert [p.text for p in out.paragraphs] == want
    assert any(run.bold for p in out.paragraphs for run in p.runs)  # the formatting is placed, not dropped


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("slides.key", b"x", ["not a format", ".docx", ".srt"]),
        ("report.docx", b"PK\x03\x04 not really a zip", ["report.docx", "not a readable zip"]),
        ("notes.txt", b"caf\xe9 au lait", ["not UTF-8", "byte 3"]),
        ("empty.txt", b"  \n\n", ["no text to translate"]),
        ("page.docx", b"", ["not a readable zip"]),
    ],
)
def test_bad_files_are_refused_clearly(client: TestClient, name: str, data: bytes, words: list[str]) -> None:
    assert_error(upload(client, name, data), 422, "invalid_request", "file", *words)


def test_a_file_part_without_a_filename_or_beside_another_is_named_so(client: TestClient) -> None:
    """Two files: the last was translated and the first dropped. A part without a filename is a plain field to
    Starlette, and FastAPI's words were "Value error, Expected UploadFile, received: <class 'str'>"; with
    filename="" the answer began "file: : no extension"."""
    r = client.post("/translate_file", files={"file": ("", b"kalo mine", "text/plain")})
    assert_error(r, 422, "invalid_request", "file: not a file", "without a filename")
    two = [("file", ("a.txt", b"kalo", "text/plain")), ("file", ("b.txt", b"mine", "text/plain"))]
    assert_error(client.post("/translate_file", files=two), 422, "invalid_request", "2 files in one request")
    body = b'--x\r\nContent-Disposition: form-data; name="file"; filename=""\r\n\r\nkalo mine\r\n--x--\r\n'
    r = client.post("/translate_file", content=body, headers={"content-type": "multipart/form-data; boundary=x"})
    assert_error(r, 422, "invalid_request", "file: the file part has no filename")


def test_a_multipart_body_the_parser_refuses_is_answered_with_its_reason(client: TestClient) -> None:
    """The form parser's own words: Starlette's were "Invalid multipart data." for all of these."""
    r = client.post("/translate_file", files={"file": ("a" * 5000 + ".txt", b"kalo mine", "text/plain")})
    assert_error(r, 400, "bad_request", "multipart/form-data", "header size", "file name")
    body = b"--y\r\nContent-Disposition: form-data; name=file; filename=a.txt\r\n\r\nkalo\r\n--x--\r\n"
    r = client.post("/translate_file", content=body, headers={"content-type": "multipart/form-data; boundary=x"})
    assert_error(r, 400, "bad_request", "multipart/form-data body: Expected boundary character")


def test_zip_bombs_and_oversized_files_are_refused_before_they_are_unpacked(models_dir: Path) -> None:
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", b"\0" * 50_000_000)  # 50 MB that pack into about 50 kB
    c = ready_client(models_dir, max_file_unzipped_bytes=10_000_000, max_file_bytes=100_000)
    try:
        assert len(bomb.getvalue()) < 100_000
        assert_error(upload(c, "bomb.docx", bomb.getvalue()), 422, "invalid_request", "unpacked", "10,000,000")
        r = upload(c, "big.txt", b"word " * 30_000)
        assert_error(r, 413, "payload_too_large", "TRANSFORMER_MAX_FILE_BYTES")
        many = "\n".join(["one two"] * 60).encode()
        c2 = ready_client(models_dir, max_file_texts=50)
        try:
            assert_error(upload(c2, "many.txt", many), 422, "invalid_request", "60 texts", "limit of 50")
        finally:
            c2.__exit__(None, None, None)
    finally:
        c.__exit__(None, None, None)


def test_what_a_key_keeps_is_bounded_by_count_and_bytes(models_dir: Path) -> None:
    key = "k" * 20
    c = ready_client(models_dir, api_keys=key, max_kept_jobs=2, max_kept_bytes=4096, rate_limit=0)
    try:
        auth = {"Authorization": f"Bearer {key}"}
        c.headers.update(auth)
        first = upload(c, "a.txt", b"one two three")
        assert first.status_code == 202, first.text
        assert c.post("/jobs", json={"texts": ["four five"], "max_length": 6}).status_code == 202
        assert_error(upload(c, "b.txt", b"six seven"), 429, "too_many_kept", "2 jobs", "TRANSFORMER_MAX_KEPT_JOBS")
        finished(c, first.json())
        assert c.get(f"/download_file/{first.json()['id']}").status_code == 200  # handing it over frees its place
        assert_error(upload(c, "c.txt", b"x y.\n" * 1100), 429, "too_many_kept", "TRANSFORMER_MAX_KEPT_BYTES")
        again = upload(c, "b.txt", b"six seven")
        assert again.status_code == 202, again.text
        # LibreTranslate's clients send the key as the form's api_key field
        c.headers.pop("Authorization")
        assert_error(upload(c, "d.txt", b"eight"), 401, "unauthorized")
        libre = c.post("/jobs", json={"texts": ["x"]})
        assert libre.status_code == 401
        ok = upload(c, "d.txt", b"eight nine", api_key=key)
        assert_error(ok, 429, "too_many_kept")  # the key was read from the form: its own bound applies
    finally:
        c.__exit__(None, None, None)


def test_a_sentence_longer_than_the_model_takes_is_named_or_cut_when_asked(client: TestClient) -> None:
    data = ("Kalo mine.\n" + "kalo mine ruza " * 40 + "\n").encode()  # line 2: more than the tiny model's 64
    assert_error(upload(client, "long.txt", data), 422, "invalid_request", "file[1]", "truncate")
    r = upload(client, "long.txt", data, truncate="true")
    assert r.status_code == 202, r.text
    finished(client, r.json())
    got = client.get(f"/download_file/{r.json()['id']}")
    assert got.status_code == 200 and got.content.count(b"\n") == 2


GERMAN_LINES = ["Die Datei wurde nicht gefunden, weil die Festplatte voll ist.", "Bitte versuchen Sie es später."]


def test_a_file_already_in_the_target_language_comes_back_as_it_was_sent(
    client: TestClient, translator: Translator
) -> None:
    """With source "auto", a German file to German went to the English-German model, as /translate's texts did
    before they were answered as they are; LibreTranslate hands such a file back. The very bytes come back now,
    its job done without a model; an English file, or a German one with source "en", is translated as before."""
    german = docx_bytes(GERMAN_LINES)
    r = upload(client, "brief.docx", german, source="auto", target="de")
    assert r.status_code == 202 and "model" not in r.json(), r.text
    job = finished(client, r.json())
    assert job["model"] is None and job["progress"] == {"done": 2, "total": 2}, job
    got = client.get(f"/download_file/{job['id']}")
    assert got.status_code == 200 and got.content == german, got.text[:200]
    assert_error(client.get(f"/download_file/{job['id']}"), 404, "not_found")  # handed over once, as any file
    english = [p.capitalize() + "." for p in make_sentences(2, seed=53, min_words=4, max_words=8)]
    for name, data, source in (("letter.docx", docx_bytes(english), "auto"), ("brief.docx", german, "en")):
        r = upload(client, name, data, source=source, target="de")
        assert r.status_code == 202 and r.json()["model"] == "tiny-en-de", r.text
        got = client.get(r.json()["translatedFileUrl"])
        sent = [p.text for p in docx.Document(io.BytesIO(data)).paragraphs]
        want = [o.text for o in translator.translate(sent, beam_size=2, max_len_a=0.0, max_len_b=6)]
        assert [p.text for p in docx.Document(io.BytesIO(got.content)).paragraphs] == want
