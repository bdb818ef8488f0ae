"""Offline API docs: `/docs` (Swagger UI) and `/redoc` from local assets, never a CDN.

The JavaScript and CSS come from the `fastapi-offline` package's static folder (Swagger UI and
Redoc bundles, installed from PyPI with the gateway), mounted at `/apidocs-assets`; the HTML is
FastAPI's own page builders pointed at those files, with Google Fonts and the remote favicon off.
Redoc's bundle names one remote image (the Redocly logo in its sidebar): it is served from
`/apidocs/redoc.js` with that URL pointed at the local favicon.
A test loads both pages and checks that nothing they reference leaves this origin.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse, Response

ASSETS_URL = "/apidocs-assets"
ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"
REDOC_JS = "/apidocs/redoc.js"
REMOTE_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@lru_cache(maxsize=1)
def _redoc_bundle() -> bytes:
    text = (ASSETS_DIR / "redoc.standalone.js").read_text(encoding="utf-8")
    return text.replace(REMOTE_LOGO, f"{ASSETS_URL}/favicon.png").encode("utf-8")


def install_docs(app: FastAPI) -> None:
    """Mount the assets and add the two pages (create the app with docs_url=None, redoc_url=None)."""
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="apidocs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{app.title} - Swagger UI", oauth2_redirect_url=OAUTH2_REDIRECT,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},  # no online validator badge
        )

    @app.get(OAUTH2_REDIRECT, include_in_schema=False)
    async def swagger_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC_JS, include_in_schema=False)
    async def redoc_js() -> Response:
        return Response(_redoc_bundle(), media_type="text/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url=openapi_url, title=f"{app.title} - ReDoc",
                              redoc_js_url=REDOC_JS,
                              redoc_favicon_url=f"{ASSETS_URL}/favicon.png", with_google_fonts=False)
