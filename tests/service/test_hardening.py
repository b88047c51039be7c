"""Attacks of a hostile or careless client on the embedded service, through real HTTP (uvicorn): each test
reproduces one and asserts that its outcome is bounded (issue: no single request can exhaust memory, a
worker or the event loop; jobs belong to their key)."""

from __future__ import annotations

import gzip
import json
import select
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from model.translator import Translator
from service.settings import ServiceSettings
from tests.conftest import make_sentences
from tests.service.conftest import Server, health_latency, wait_until

KEY_A, KEY_B = "key-a-0123456789abcdef", "key-b-0123456789abcdef"
A, B = {"Authorization": f"Bearer {KEY_A}"}, {"Authorization": f"Bearer {KEY_B}"}
LONG_TEXT = " ".join(make_sentences(40, seed=31))  # far over 512 tokens


def rss_mib() -> float:
    return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) / 1024


def send_chunked(port: int, path: str, headers: dict[str, str], total: int, chunk: int = 1 << 20) -> tuple[str, int]:
    """POST a chunked body of `total` bytes, stopping as soon as the server answers or closes; returns the
    status line and the bytes sent by then."""
    sock = socket.create_connection(("127.0.0.1", port))
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Transfer-Encoding: chunked\r\n{lines}\r\n".encode()
    )
    data = b'{"q": "' + b"a" * (chunk - 7)
    piece = f"{len(data):x}\r\n".encode() + data + b"\r\n"
    sent = 0
    try:
        while sent < total and not select.select([sock], [], [], 0)[0]:
            sock.sendall(piece)
            sent += len(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    sock.settimeout(10)
    status = sock.recv(65536).split(b"\r\n")[0].decode()
    sock.close()
    return status, sent


def exchange(port: int, raw: bytes) -> bytes:
    """Send raw bytes and read the whole answer: the server closes the connection after it (the request says
    `connection: close`, or the server refused it). uvicorn writes the head and the body apart: one read may
    hold only the head."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def error_of(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text[:500]
    body = r.json()
    assert set(body) == {"error"}
    return dict(body["error"])


# -- 1. answered results are not kept; /attention is capped and rounded ---------------------------------


def test_answers_are_forgotten_and_memory_stays_bounded(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy()
    queue = server.app.state.service.memory
    # The largest /attention the default limit of 1,000,000 weights allows on this model: 200 tokens in,
    # 200 out, every kind, layer and head (8 x (201 x 200 + 200 x 200 + 201 x 201) = 965,608 weights).
    tokenizer = server.app.state.service.registry.get("long").tokenizer
    words = LONG_TEXT.split()
    n = max(i for i in range(len(words)) if len(tokenizer.encode_source(" ".join(words[:i]))) <= 200)
    body = {"q": " ".join(words[:n]), "model": "long", "max_length": 200}
    first = httpx.post(f"{server.url}/attention", json=body, timeout=120)
    assert first.status_code == 200, first.text[:300]
    a = first.json()
    S, T = len(a["source_tokens"]), len(a["target_tokens"])
    assert 195 < S <= 200 and T == 201
    weights = 2 * 4 * (T * S + S * S + T * T)  # layers x heads x (cross, encoder, decoder)
    assert len(first.content) < 6 * weights  # "0.004," is 6 characters; unrounded floats took about 19
    assert all(len(repr(w)) <= 5 for w in a["cross"][1][3][7])  # rounded for real: 0.158, not 0.15800000727
    before = rss_mib()
    for _ in range(20):
        assert httpx.post(f"{server.url}/attention", json=body, timeout=120).status_code == 200
    grown = rss_mib() - before
    assert queue.entries == {}  # nothing kept once answered
    assert grown < 60, f"RSS grew {grown:.0f} MiB over 20 answers of {len(first.content) >> 20} MiB each"


def test_attention_over_its_cell_limit_is_refused_and_can_be_narrowed(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy()
    big = {"q": LONG_TEXT, "model": "long", "truncate": True}  # 512 in, up to 511 out
    err = error_of(httpx.post(f"{server.url}/attention", json=big, timeout=60), 413)
    assert err["code"] == "too_costly" and "TRANSFORMER_MAX_ATTENTION_CELLS" in err["message"]
    narrow = {**big, "kinds": ["cross"], "layers": [1], "heads": [0, 2], "max_length": 100}
    r = httpx.post(f"{server.url}/attention", json=narrow, timeout=60)
    assert r.status_code == 200, r.text[:300]
    a = r.json()
    assert a["encoder"] is None and a["decoder"] is None
    assert len(a["cross"]) == 1 and len(a["cross"][0]) == 2 and len(a["cross"][0][0]) == 101
    for bad, field in (({"layers": [2]}, "layers"), ({"heads": [4]}, "heads")):
        err = error_of(httpx.post(f"{server.url}/attention", json={**narrow, **bad}), 422)
        assert field in err["message"]


def test_costly_requests_are_refused_naming_the_limit(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy()
    texts = [LONG_TEXT] * 16
    err = error_of(
        httpx.post(
            f"{server.url}/translate", json={"q": texts, "model": "long", "truncate": True, "beam_size": 8}, timeout=60
        ),
        413,
    )
    assert err["code"] == "too_costly" and "TRANSFORMER_MAX_REQUEST_COST" in err["message"]
    err = error_of(
        httpx.post(
            f"{server.url}/jobs",
            json={"texts": texts * 100, "model": "long", "truncate": True, "beam_size": 8},
            timeout=60,
        ),
        413,
    )
    assert "TRANSFORMER_MAX_JOB_COST" in err["message"]


# -- 3. bodies: every transfer encoding, keys before bodies -----------------------------------------


def test_chunked_bodies_are_limited_and_keys_checked_before_reading(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy(api_keys=KEY_A)
    before = rss_mib()
    status, sent = send_chunked(server.port, "/translate", {}, 400 << 20)  # no key
    assert status.startswith("HTTP/1.1 401"), status
    assert sent < 32 << 20, f"{sent >> 20} MiB read before the 401"
    status, sent = send_chunked(server.port, "/translate", A, 400 << 20)
    assert status.startswith("HTTP/1.1 413"), status
    assert sent < 32 << 20, f"{sent >> 20} MiB read before the 413"
    assert rss_mib() - before < 100


def test_slow_senders_are_cut_off_and_others_served(serve_heavy: Callable[..., Server]) -> None:
    """Slowloris: a connection that says nothing, headers sent a byte at a time, a body that never ends. uvicorn
    alone kept each open without end; each is closed at the deadline, the first two with a 408 in the error shape."""
    server = serve_heavy(request_read_timeout_s=1.0)
    silent = socket.create_connection(("127.0.0.1", server.port))
    trickle = socket.create_connection(("127.0.0.1", server.port))
    body = socket.create_connection(("127.0.0.1", server.port))
    body.sendall(b"POST /translate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n")
    body.sendall(b"content-length: 1000\r\n\r\n{")
    start = time.monotonic()
    trickle.sendall(b"POST /translate HTTP/1.1\r\n")
    for sock in (silent, trickle, body):
        sock.setblocking(False)
    answers: dict[str, bytes] = {}
    while len(answers) < 3 and time.monotonic() - start < 10:
        trickle.send(b"x")  # every 50 ms, as long as it is open (a byte resets uvicorn's own timer)
        for name, sock in (("silent", silent), ("trickle", trickle), ("body", body)):
            if name not in answers and select.select([sock], [], [], 0)[0]:
                answers[name] = sock.recv(4096)
        time.sleep(0.05)
    took = time.monotonic() - start
    assert answers["silent"].startswith(b"HTTP/1.1 408") and answers["trickle"].startswith(b"HTTP/1.1 408")
    assert b'"code":"request_read_timeout"' in answers["silent"], answers
    assert b"x-content-type-options: nosniff\r\n" in answers["silent"] and b"x-request-id: " in answers["silent"]
    assert answers["body"] == b"" and 0.9 < took < 5, (answers, took)  # closed: the app saw a disconnect
    with httpx.Client() as client:  # a request in good time, and a decode that outlasts the deadline, are served
        assert client.post(f"{server.url}/translate", json={"q": "kalo mine", "model": "long"}).status_code == 200
        sent = time.monotonic()
        r = client.post(f"{server.url}/translate", json={"q": "kalo " * 100, "model": "slow"}, timeout=60)
        assert r.status_code == 200 and time.monotonic() - sent > 1.0, r.text


def test_an_idle_connection_is_kept_for_its_setting(serve_heavy: Callable[..., Server]) -> None:
    """uvicorn's 5 s could not be changed: behind a load balancer that keeps idle connections longer (60 s), it
    sent requests on connections the service had closed (502s)."""
    request = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
    for keep_alive_s, idle_s, kept in ((0.5, 1.5, False), (6.0, 1.5, True)):
        server = serve_heavy(keep_alive_s=keep_alive_s)
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(request)
            assert read_answer(sock).startswith(b"HTTP/1.1 200")
            time.sleep(idle_s)
            try:
                sock.sendall(request)
                again = sock.recv(65536)
            except OSError:  # reset: closed by the server
                again = b""
            assert again.startswith(b"HTTP/1.1 200") is kept, (keep_alive_s, again)


def test_headers_past_their_limit_get_431_and_memory_stays_bounded(serve_heavy: Callable[..., Server]) -> None:
    """uvicorn with httptools bounds no request's headers: one connection sending header lines without end grew
    the server by gigabytes."""
    server = serve_heavy(max_header_bytes=16 * 1024)
    r = httpx.post(f"{server.url}/translate", json={"q": "kalo", "model": "long"}, headers={"x-big": "a" * 12_000})
    assert r.status_code == 200, r.text  # under the limit
    r = httpx.post(f"{server.url}/translate", json={"q": "kalo", "model": "long"}, headers={"x-big": "a" * 20_000})
    assert error_of(r, 431)["code"] == "headers_too_large" and "16384 bytes" in r.json()["error"]["message"]
    # what every answer of the app carries, though the app never saw this request
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
    assert len(r.headers["x-request-id"]) == 32 and "frame-ancestors" in r.headers["content-security-policy"]
    before = rss_mib()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")
    sent, answer = 0, b""
    try:
        while sent < 256 << 20:
            sock.sendall(b"x-more: y\r\n" * 4096)
            sent += 11 * 4096
    except OSError:  # closed by the server: read what it said
        answer = sock.recv(300)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 431") and sent < 8 << 20, (answer, sent)
    assert rss_mib() - before < 100


def test_bytes_that_are_not_http_get_a_400_in_the_error_shape_with_the_parsers_reason(
    serve_heavy: Callable[..., Server],
) -> None:
    """uvicorn answered these with a plain-text "Invalid HTTP request received.", without the headers every answer
    carries or a request id, and nothing said what was wrong."""
    server = serve_heavy()
    body = b'{"q": "kalo", "model": "long"}'
    head = b"POST /translate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    for raw, reason in (
        (head + b"content-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", b"Transfer-Encoding"),
        (head + b"transfer-encoding: chunked\r\n\r\nzz\r\n" + body + b"\r\n0\r\n\r\n", b"chunk size"),
        (b"GET /models/\xc3\xa9 HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n", b"url"),
    ):
        answer = exchange(server.port, raw)
        head_part, _, payload = answer.partition(b"\r\n\r\n")
        assert head_part.startswith(b"HTTP/1.1 400") and b"x-content-type-options: nosniff" in head_part, answer
        assert b"x-request-id: " in head_part and b"connection: close" in head_part
        error = json.loads(payload)["error"]
        assert error["code"] == "bad_request" and reason in error["message"].encode(), error
    assert httpx.post(f"{server.url}/translate", content=body, headers={"content-type": "application/json"}).is_success


def read_answer(sock: socket.socket) -> bytes:
    """One answer with a Content-Length from a kept-alive connection: its head and body."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))[15:])
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_request_asking_to_upgrade_to_http2_is_answered_with_its_body(serve_heavy: Callable[..., Server]) -> None:
    """Java's HttpClient (HTTP/2 by default) and `curl --http2` ask a cleartext server to upgrade to h2c, body and
    all. httptools took the body for HTTP/2's bytes: the app read none ("body: Field required"), and a kept-alive
    connection answered nothing more. The upgrade is ignored now (RFC 9110 §7.8): HTTP/1.1 answers each request,
    whatever the pieces its head comes in."""
    server = serve_heavy()
    body = b'{"q": "kalo mine", "model": "long"}'
    want = httpx.post(f"{server.url}/translate", content=body, headers={"content-type": "application/json"}).json()
    head = b"POST /translate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
    h2c = b"connection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nhttp2-settings: AAEAAEAAAAIAAAABAAMAAABkAAQ\r\n"
    java = head + h2c + b"content-length: %d\r\n\r\n" % len(body) + body
    chunked = head + h2c + b"transfer-encoding: chunked\r\n\r\n%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        answers = []
        for raw, piece in ((java, len(java)), (chunked, len(chunked)), (java, 7)):  # one connection, kept alive
            for i in range(0, len(raw), piece):
                sock.sendall(raw[i : i + piece])
                time.sleep(0.002 if piece < len(raw) else 0)
            answers.append(read_answer(sock))
    for answer in answers:
        status, _, payload = answer.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 200"), answer
        assert json.loads(payload)["translatedText"] == want["translatedText"]
    ws = b"GET /translate HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: Upgrade, close\r\nupgrade: websocket\r\n"
    ws += b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n"
    assert exchange(server.port, ws).startswith(b"HTTP/1.1 405"), "a WebSocket handshake is a GET to HTTP/1.1"


def test_a_body_in_a_transfer_coding_before_chunked_is_a_501(serve_heavy: Callable[..., Server]) -> None:
    """The HTTP parser takes off the chunks and passes on what gzip left: the JSON parser answered that a byte
    was not UTF-8. RFC 9112 §6.1: a transfer coding the server does not implement is a 501."""
    server = serve_heavy()
    body = gzip.compress(b'{"q": "kalo", "model": "long"}')
    for coding in (b"gzip, chunked", b"Deflate,chunked"):
        raw = (
            b"POST /translate HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"transfer-encoding: " + coding + b"\r\n\r\n" + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
        )
        answer = exchange(server.port, raw)
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 501"), answer
        error = json.loads(payload)["error"]
        assert error["code"] == "unsupported_transfer_coding" and "chunked alone" in error["message"], error


def test_a_million_values_in_a_body_are_refused_without_blocking(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy()
    hostile = json.dumps({"q": [1] * 1_000_000}, separators=(",", ":")).encode()  # 2 MB
    assert len(hostile) < ServiceSettings().max_body_bytes
    with health_latency(server.url) as worst, httpx.Client(base_url=server.url, timeout=60) as client:
        for _ in range(5):
            r = client.post("/translate", content=hostile, headers={"content-type": "application/json"})
            err = error_of(r, 413)
            assert "JSON values" in err["message"] and len(r.content) < 1000
        # Within the value bound, a list over the schema's cap stops validation early, with few errors.
        r = client.post("/translate", json={"q": [1] * 5000})
        assert error_of(r, 422)["code"] == "invalid_request" and len(r.content) < 2000
    assert max(worst) < 1.0, f"/healthz took {max(worst):.2f} s under the hostile bodies"


# -- 5. deadlines and cancellation ------------------------------------------------------------------------


def test_no_work_after_a_504(serve_heavy: Callable[..., Server], heavy_dir: Path) -> None:
    server = serve_heavy(request_timeout_s=1.0, max_request_cost=10**12)
    texts = make_sentences(32, seed=32, min_words=20, max_words=25)
    heavy = {"q": texts, "model": "slow", "beam_size": 8, "max_length": 400}  # many seconds of decoding
    r = httpx.post(f"{server.url}/translate", json=heavy, timeout=30)
    assert error_of(r, 504)["code"] == "timeout"
    # The worker lets go of it at its next step: a small request right after is answered in time.
    small = {"q": "kalo mine", "model": "slow", "max_length": 5}
    r = httpx.post(f"{server.url}/translate", json=small, timeout=30)
    assert r.status_code == 200, r.text
    want = Translator.load(heavy_dir / "slow", device="cpu").translate(["kalo mine"], max_len_a=0, max_len_b=5)
    assert r.json()["translatedText"] == want[0].text
    metrics = httpx.get(f"{server.url}/metrics").text
    assert "transformer_in_flight_jobs 0" in metrics and "transformer_queue_depth 0" in metrics


def post_and_hang_up(port: int, body: dict[str, Any], until: Callable[[], bool]) -> None:
    """POST body over a raw connection, wait until `until` holds (the request is being decoded), then close the
    connection without reading the answer: a closed browser tab, a proxy's own timeout."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            b"POST /translate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(data) + data
        )
        wait_until(until, 60, 0.05)


def metric(url: str, name: str) -> float:
    line = next(x for x in httpx.get(f"{url}/metrics").text.splitlines() if x.startswith(name + " "))
    return float(line.split()[-1])


def test_a_client_that_hangs_up_cancels_its_request(serve_heavy: Callable[..., Server]) -> None:
    """A request whose client went away used to be decoded to its end for nobody, holding rows others waited
    for; the worker now lets go of it at its next step, and the request counts as 499."""
    server = serve_heavy(max_request_cost=10**12)
    texts = make_sentences(8, seed=34, min_words=20, max_words=25)
    heavy = {"q": texts, "model": "slow", "beam_size": 8, "max_length": 400}  # many seconds of decoding
    post_and_hang_up(server.port, heavy, lambda: metric(server.url, "transformer_in_flight_texts") == 8)
    wait_until(lambda: metric(server.url, "transformer_in_flight_jobs") == 0, 30, 0.05)
    assert metric(server.url, "transformer_texts_decoded_total") == 0  # dropped, not finished
    assert 'transformer_requests_total{route="/translate",status="499"} 1' in httpx.get(f"{server.url}/metrics").text


def test_a_cancelled_job_stops(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy(max_job_cost=10**12, max_batch_size=4, api_keys=f"{KEY_A},{KEY_B}")
    texts = make_sentences(64, seed=33, min_words=20, max_words=25)
    job = httpx.post(f"{server.url}/jobs", json={"texts": texts, "model": "slow", "max_length": 300}, headers=A).json()
    wait_until(lambda: httpx.get(f"{server.url}/jobs/{job['id']}", headers=A).json()["status"] == "running", 60)
    metrics = httpx.get(f"{server.url}/metrics").text
    assert "transformer_in_flight_jobs 1" in metrics and "transformer_in_flight_texts 64" in metrics
    assert error_of(httpx.delete(f"{server.url}/jobs/{job['id']}", headers=B), 404)["code"] == "not_found"
    r = httpx.delete(f"{server.url}/jobs/{job['id']}", headers=A)
    assert r.status_code == 200 and r.json()["status"] == "running"
    cancelled = httpx.get(f"{server.url}/jobs/{job['id']}", headers=A).json()
    assert cancelled["status"] == "cancelled" and cancelled["results"] is None
    wait_until(lambda: "transformer_in_flight_jobs 0" in httpx.get(f"{server.url}/metrics").text, 10)
    done = cancelled["progress"]["done"]
    time.sleep(1.0)
    assert httpx.get(f"{server.url}/jobs/{job['id']}", headers=A).json()["progress"]["done"] == done


# -- 7. invalid Unicode ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/translate", '{"q": "ok \\ud800"}', "q"),
        ("/translate", '{"q": ["fine", "\\udfff x"]}', "q.1"),
        ("/translate", '{"q": "ok", "source": "\\ud800"}', "source"),
        ("/translate", '{"q": "ok", "target": "de\\udc00"}', "target"),
        ("/jobs", '{"texts": ["a", "\\ud83d"]}', "texts.1"),
        ("/attention", '{"q": "\\ud800"}', "q"),
    ],
)
def test_lone_surrogates_get_422(serve_heavy: Callable[..., Server], path: str, body: str, field: str) -> None:
    server = serve_heavy()
    r = httpx.post(f"{server.url}{path}", content=body.encode(), headers={"content-type": "application/json"})
    err = error_of(r, 422)
    assert "lone surrogate" in err["message"], err
    assert [d["field"] for d in err["details"]] == [field], err


FINITE = "Input should be a finite number"
NOT_BOOL = "Input should be a valid integer, not true or false"


@pytest.mark.parametrize(
    ("path", "body", "field", "message"),
    [
        ("/translate", '{"q": "ok", "length_penalty": NaN}', "length_penalty", FINITE),
        ("/jobs", '{"texts": ["ok"], "length_penalty": Infinity}', "length_penalty", FINITE),
        ("/attention", '{"q": "ok", "length_penalty": -Infinity}', "length_penalty", FINITE),
        ("/translate", '{"q": "ok", "beam_size": true}', "beam_size", NOT_BOOL),
        ("/translate", '{"q": "ok", "alternatives": false}', "alternatives", NOT_BOOL),
        ("/jobs", '{"texts": ["ok"], "max_length": true}', "max_length", NOT_BOOL),
        ("/attention", '{"q": "ok", "layers": [0, true]}', "layers.1", NOT_BOOL),
    ],
)
def test_numbers_that_are_not_numbers_are_refused(
    serve_heavy: Callable[..., Server], path: str, body: str, field: str, message: str
) -> None:
    """Python's JSON reader takes NaN and Infinity, and pydantic reads true as 1: a beam size of true decoded
    greedily."""
    server = serve_heavy()
    r = httpx.post(f"{server.url}{path}", content=body.encode(), headers={"content-type": "application/json"})
    err = error_of(r, 422)
    assert err["details"] == [{"field": field, "message": message}], err


def test_whole_numbers_as_floats_or_strings_are_read(serve_heavy: Callable[..., Server]) -> None:
    """As form bodies send them: only true and false are refused where a whole number is asked for."""
    server = serve_heavy()
    r = httpx.post(f"{server.url}/translate", json={"q": "ok", "model": "long", "beam_size": 2.0, "alternatives": "1"})
    assert r.status_code == 200, r.text


# -- 8. ownership, rate limits, failed keys -----------------------------------------------------------------


def test_jobs_belong_to_their_key(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy(api_keys=f"{KEY_A},{KEY_B}")
    job = httpx.post(
        f"{server.url}/jobs", json={"texts": ["kalo", "mine"], "model": "long", "max_length": 3}, headers=A
    ).json()
    wait_until(lambda: httpx.get(f"{server.url}/jobs/{job['id']}", headers=A).json()["status"] == "done", 60)
    assert error_of(httpx.get(f"{server.url}/jobs/{job['id']}", headers=B), 404)["code"] == "not_found"
    page = httpx.get(f"{server.url}/jobs/{job['id']}?offset=1&limit=1", headers=A).json()
    assert page["offset"] == 1 and len(page["results"]) == 1 and page["next_offset"] is None
    first = httpx.get(f"{server.url}/jobs/{job['id']}?limit=1", headers=A).json()
    assert first["next_offset"] == 1 and first["results"][0]["text"] != ""
    err = error_of(httpx.get(f"{server.url}/jobs/{job['id']}?limit=100000", headers=A), 422)
    assert "limit" in err["message"]
    assert httpx.delete(f"{server.url}/jobs/{job['id']}", headers=A).json()["status"] == "done"
    assert httpx.get(f"{server.url}/jobs/{job['id']}", headers=A).status_code == 404  # deleted


def test_failed_keys_are_throttled_per_address(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy(api_keys=KEY_A, auth_failures_per_minute=3)
    wrong = {"Authorization": "Bearer wrong-key-0123456789"}
    for _ in range(3):
        assert httpx.get(f"{server.url}/models", headers=wrong).status_code == 401
    r = httpx.get(f"{server.url}/models", headers=A)  # even the right key: the address is guessing
    assert error_of(r, 429)["code"] == "too_many_requests"
    assert 15 <= int(r.headers["retry-after"]) <= 20  # 3 a minute: the next in 20 s


def test_clients_behind_a_trusted_proxy_are_throttled_by_their_own_address(serve_heavy: Callable[..., Server]) -> None:
    """Behind a proxy in another container, every request comes from the proxy's address: one client sending
    wrong keys had every client refused, right keys and all, and translatedFileUrl said http behind https.
    TRANSFORMER_FORWARDED_ALLOW_IPS names the proxies whose X-Forwarded-For and -Proto are believed; another's
    are not, or a client could pick its own address."""
    wrong = {"Authorization": "Bearer wrong-key-0123456789"}
    guesser = {"x-forwarded-for": "203.0.113.7"}
    other = {"x-forwarded-for": "198.51.100.9, 127.0.0.1", "x-forwarded-proto": "https"}
    proxied = serve_heavy(api_keys=KEY_A, auth_failures_per_minute=3, forwarded_allow_ips="127.0.0.0/8")
    for _ in range(3):
        assert httpx.get(f"{proxied.url}/models", headers={**wrong, **guesser}).status_code == 401
    assert error_of(httpx.get(f"{proxied.url}/models", headers={**A, **guesser}), 429)["code"] == "too_many_requests"
    assert httpx.get(f"{proxied.url}/models", headers={**A, **other}).status_code == 200  # another client
    files, form = {"file": ("a.txt", b"kalo mine")}, {"model": "long"}
    r = httpx.post(f"{proxied.url}/translate_file", files=files, data=form, headers={**A, **other})
    assert r.status_code == 202 and r.json()["translatedFileUrl"].startswith("https://"), r.text
    direct = serve_heavy(api_keys=KEY_A, auth_failures_per_minute=3, forwarded_allow_ips="10.9.8.7, 10.1.0.0/16")
    for _ in range(3):
        assert httpx.get(f"{direct.url}/models", headers={**wrong, **guesser}).status_code == 401
    assert httpx.get(f"{direct.url}/models", headers={**A, **other}).status_code == 429  # one address: its own
    for bad in ("10.0.0.300", "10.0.0.1/33", "proxy.example", "10.0.0.1/8", "*, 10.0.0.1"):  # 10.0.0.1/8: host bits
        with pytest.raises(ValidationError, match="forwarded_allow_ips: item 1"):
            ServiceSettings(forwarded_allow_ips=bad)
    assert ServiceSettings(forwarded_allow_ips=" * ").proxies() == ["*"]


def test_short_keys_are_refused_at_start() -> None:
    with pytest.raises(ValueError, match="at least 16"):
        ServiceSettings(api_keys="short-key")
    with pytest.raises(ValueError, match="key 2 has 4 characters") as e:
        ServiceSettings(api_keys="0123456789abcdef-ok,tiny")
    assert "tiny" not in str(e.value) and "0123456789abcdef-ok" not in str(e.value)  # keys never echoed


# -- 9. headers, hosts, operations behind a key --------------------------------------------------------


def test_security_headers_hosts_and_operations_behind_a_key(serve_heavy: Callable[..., Server]) -> None:
    server = serve_heavy(api_keys=KEY_A, ops_need_key=True, allowed_hosts="example.org,*.example.com")
    for host in ("example.org", "api.example.com:8000"):
        for path in ("/", "/healthz", "/static/main.js", "/nowhere"):
            r = httpx.get(f"{server.url}{path}", headers={"host": host})
            assert r.status_code == (401 if path == "/nowhere" else 200)  # unknown paths need a key too
            assert r.headers["content-security-policy"] == "default-src 'self'; frame-ancestors 'none'"
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["referrer-policy"] == "no-referrer" and r.headers["x-frame-options"] == "DENY"
    r = httpx.get(f"{server.url}/", headers={"host": "evil.test"})
    assert error_of(r, 400)["code"] == "bad_request" and "content-security-policy" in r.headers
    assert httpx.get(f"{server.url}/healthz", headers={"host": "10.1.2.3:8000"}).status_code == 200  # probes
    for path in ("/metrics", "/docs", "/openapi.json"):
        assert httpx.get(f"{server.url}{path}", headers={"host": "example.org"}).status_code == 401
        assert httpx.get(f"{server.url}{path}", headers={"host": "example.org", **A}).status_code == 200
