"""Cross-origin requests from browser pages (TRANSFORMER_CORS_ORIGINS): off unless origins are named, as
LibreTranslate's browser clients need them on; a preflight is answered without a key, a refusal of the guard
carries the headers a page needs to read it, and a refused preflight is answered in the error shape. In real
headless Chromium, a page on another origin reads a translation only from a server that names its origin."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser
from pydantic import ValidationError

from service.settings import ServiceSettings
from tests.service.conftest import Server
from tests.service.test_api import assert_error, ready_client
from tests.service.test_demo_page import browser  # noqa: F401 - the module's Chromium, reused

KEY = "a-key-for-the-cors-tests-0123"
PAGE = "https://app.example"
PREFLIGHT = {
    "origin": PAGE,
    "access-control-request-method": "POST",
    "access-control-request-headers": "authorization, content-type",
}
BODY = {"q": "kalo", "max_length": 4}


def test_cross_origin_requests_are_answered_for_the_origins_named(models_dir: Path) -> None:
    client = ready_client(models_dir, cors_origins=f"{PAGE}/, http://localhost:3000", api_keys=KEY)
    try:
        r = client.options("/translate", headers=PREFLIGHT)  # no key: a browser sends none with a preflight
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == PAGE, r.text
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        assert "POST" in r.headers["access-control-allow-methods"] and "Origin" in r.headers["vary"]
        # A named origin's page may reach a service on a private network (Chromium's Private Network Access).
        r = client.options("/translate", headers={**PREFLIGHT, "access-control-request-private-network": "true"})
        assert r.status_code == 200 and r.headers["access-control-allow-private-network"] == "true", r.text
        r = client.post("/translate", json=BODY, headers={"origin": PAGE, "authorization": f"Bearer {KEY}"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == PAGE
        assert "X-Request-Id" in r.headers["access-control-expose-headers"] and r.headers["x-request-id"]
        # The guard's refusal carries them too, or a page could not read why.
        r = client.post("/translate", json=BODY, headers={"origin": PAGE})
        assert_error(r, 401, "unauthorized")
        assert r.headers["access-control-allow-origin"] == PAGE
        # Another origin: its preflight is refused in the error shape, its requests carry no CORS header.
        r = client.options("/translate", headers={**PREFLIGHT, "origin": "https://elsewhere.example"})
        assert_error(r, 400, "bad_request", "Disallowed CORS origin", "TRANSFORMER_CORS_ORIGINS")
        r = client.post(
            "/translate", json=BODY, headers={"origin": "https://elsewhere.example", "authorization": f"Bearer {KEY}"}
        )
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        r = client.options("/translate", headers={**PREFLIGHT, "access-control-request-method": "PUT"})
        assert_error(r, 400, "bad_request", "Disallowed CORS method")
    finally:
        client.__exit__(None, None, None)


def test_without_origins_named_no_cross_origin_request_is_answered(models_dir: Path) -> None:
    client = ready_client(models_dir)
    try:
        r = client.options("/translate", headers=PREFLIGHT)
        assert r.status_code == 405 and "access-control-allow-origin" not in r.headers, r.text
        r = client.post("/translate", json=BODY, headers={"origin": PAGE})
        assert r.status_code == 200 and not any(k.startswith("access-control-") for k in r.headers)
    finally:
        client.__exit__(None, None, None)
    client = ready_client(models_dir, cors_origins="*")
    try:
        r = client.options("/translate", headers={**PREFLIGHT, "origin": "https://any.example"})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*", r.text
    finally:
        client.__exit__(None, None, None)


@pytest.mark.parametrize("bad", ["app.example.com", "https://app.example.com/path", "ftp://app.example", "https://"])
def test_an_origin_that_is_not_one_is_refused_when_the_settings_are_read(bad: str) -> None:
    with pytest.raises(ValidationError) as e:
        ServiceSettings(cors_origins=f"https://ok.example, {bad}")
    assert "item 2" in str(e.value) and "scheme, host and port" in str(e.value)


FETCH = """async ([url, key]) => {
  try {
    const r = await fetch(url + "/translate", {method: "POST", body: JSON.stringify({q: "kalo", max_length: 4}),
      headers: {"Content-Type": "application/json", "Authorization": "Bearer " + key}});
    return [r.status, (await r.json()).translatedText, r.headers.get("x-request-id")];
  } catch (e) { return [0, String(e), null]; }
}"""


@pytest.fixture
def app_page(tmp_path: Path) -> Iterator[str]:
    """A user's own web app on this machine (another port: another origin), without the demo's CSP, which keeps
    the demo's fetches on its own origin: its URL."""
    (tmp_path / "index.html").write_text("<!doctype html><title>app</title>", encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
        httpd.shutdown()


def test_a_page_on_another_origin_reads_a_translation_in_chromium(
    browser: Browser,  # noqa: F811
    serve: Callable[..., Server],
    app_page: str,
) -> None:
    open_api, closed_api = serve(cors_origins=app_page, api_keys=KEY), serve(api_keys=KEY)
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(app_page)
        status, text, request_id = page.evaluate(FETCH, [open_api.url.rstrip("/"), KEY])
        assert status == 200 and isinstance(text, str) and text and request_id, (status, text)
        status, text, _ = page.evaluate(FETCH, [closed_api.url.rstrip("/"), KEY])
        assert status == 0 and "Failed to fetch" in text, (status, text)
    finally:
        context.close()
