"""The dev SPA (seed 003 §7.9: "dev SPA 留一份"): `GET /` and `GET /t/{task_id}` serve `static/dev.html`, and
`/static/*` serves the page assets and `static/admin.html`.

Plain files, no build step: ES modules under `static/js/` (one concept each), the vendored
markdown renderer, sanitizer and highlighter under `static/vendor/` (see its README). Both pages talk to the `/v1` API with a Bearer token kept in
localStorage (SSE is read with `fetch()` so the Authorization header can be sent). Every page
response carries a strict same-origin Content-Security-Policy: the pages load no third-party code
(frames: only this origin and blob: URLs, for the previews).

`install_pages(app)` includes the router and mounts the static files; `create_app` calls it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "connect-src 'self'; frame-src 'self' blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Assets change with the code; always revalidate (ETag/Last-Modified keep it cheap).
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def dev_page() -> FileResponse:
    """The dev SPA: tasks, streaming chat, files."""
    return FileResponse(STATIC_DIR / "dev.html", media_type="text/html", headers=SECURITY_HEADERS)


@router.get("/t/{task_id}")
async def task_page(task_id: str) -> FileResponse:
    """The same page at a task's own address (reload, back/forward, a shared link): the page reads
    the id from its URL and opens the task after sign-in; an unknown id is the page's "not found"."""
    return FileResponse(STATIC_DIR / "dev.html", media_type="text/html", headers=SECURITY_HEADERS)


@router.get("/admin")
async def admin_page() -> RedirectResponse:
    return RedirectResponse("/static/admin.html", status_code=307)


class PageStaticFiles(StaticFiles):
    """StaticFiles that adds the same security headers to every response it sends."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                for key, value in SECURITY_HEADERS.items():
                    if key.lower().encode("latin-1") not in present:
                        headers.append((key.lower().encode("latin-1"), value.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        await super().__call__(scope, receive, send_with_headers)


def install_pages(app: FastAPI) -> None:
    """Serve the dev SPA at `/` and the static assets under `/static` (idempotent)."""
    if getattr(app.state, "pages_installed", False):
        return
    app.include_router(router)
    app.mount("/static", PageStaticFiles(directory=STATIC_DIR), name="static")
    app.state.pages_installed = True
