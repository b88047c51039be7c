"""/docs (Swagger UI) and /redoc (ReDoc), served with their scripts and styles from the fastapi-offline
package's copy of them, under /docs/assets: they work with no network, and the pages' Content-Security-Policy
names no CDN."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"
DOCS_PAGES = ("/docs", "/redoc")  # their inline start-up script is allowed (service.api.envelope)


def assets_dir() -> Path:
    return Path(str(files("fastapi_offline") / "static"))


def install_docs(app: FastAPI) -> None:
    """The two pages, the OAuth2 redirect Swagger UI expects, and the assets (the app is built with docs_url and
    redoc_url None)."""
    title = f"{app.title}: API"
    icon = f"{ASSETS}/favicon.png"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=title,
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=icon,
            oauth2_redirect_url="/docs/oauth2-redirect",
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title=title,
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=icon,
            with_google_fonts=False,
        )

    app.mount(ASSETS, StaticFiles(directory=assets_dir()), name="docs-assets")
