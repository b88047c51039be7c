"""/docs and /redoc in real headless Chromium with no network beyond the service: Swagger UI and ReDoc load from
the package, render every operation, and the pages' Content-Security-Policy is not broken by them."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Route

from service.api.docs import ASSETS
from tests.service.conftest import Server
from tests.service.test_demo_page import browser  # noqa: F401 - the module's Chromium, reused

KEY = "a-key-for-the-docs-0123"


@pytest.fixture
def docs_server(serve: Callable[..., Server]) -> Iterator[Server]:
    yield serve(api_keys=KEY)  # keys set: the pages and their assets stay open (TRANSFORMER_OPS_NEED_KEY is off)


def operations(server: Server) -> int:
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    return sum(len(methods) for methods in paths.values())


@pytest.mark.parametrize(("path", "selector"), [("/docs", ".opblock"), ("/redoc", "[data-section-id^='operation/']")])
def test_the_api_pages_render_offline(
    browser: Browser,  # noqa: F811
    docs_server: Server,
    path: str,
    selector: str,
) -> None:
    context = browser.new_context()
    page = context.new_page()
    outside: list[str] = []
    problems: list[str] = []

    def only_the_service(route: Route) -> None:
        if route.request.url.startswith(docs_server.url):
            route.continue_()
        else:  # offline: anything else fails, and is noted
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_service)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.goto(f"{docs_server.url}{path}")
    page.wait_for_selector(selector, timeout=30_000)
    assert page.locator(selector).count() >= operations(docs_server) - 1  # ReDoc folds nothing; Swagger none either
    # ReDoc's "API docs by Redocly" badge names its logo on Redocly's CDN: the policy blocks it, nothing else.
    blocked = [p for p in problems if "Content Security Policy" in p and "cdn.redoc.ly/redoc/logo-mini.svg" not in p]
    assert outside == [] and not blocked, problems
    context.close()
    r = httpx.get(f"{docs_server.url}{ASSETS}/swagger-ui-bundle.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith(("application/javascript", "text/javascript"))
    csp = httpx.get(f"{docs_server.url}{path}").headers["content-security-policy"]
    assert "http" not in csp  # no CDN named
