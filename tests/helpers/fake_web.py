"""A fake web on loopback for the web tools' tests (aiohttp, real HTTP): search provider APIs
(SearXNG, Tavily, Bocha shapes) and pages (`/article`, `/long`, `/report.pdf`, `/redirect`,
`/slow`, `/big`, `/image.png`). Every request is recorded (`hits`: path, query, headers, body)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

SEARCH_RESULTS = [
    {"title": "Solar output hits record", "url": "https://news.example.com/solar-record",
     "snippet": "Grid operators report record solar generation in May.", "date": "2026-05-30"},
    {"title": "Battery prices fall again", "url": "https://energy.example.org/batteries",
     "snippet": "Pack prices fell 12% year on year.", "date": "2026-05-28"},
]

ARTICLE_HTML = """<!doctype html><html><head><title>Solar output hits record</title>
<meta name="date" content="2026-05-30"></head><body><nav>Home | News</nav>
<article><h1>Solar output hits record</h1>
<p>Grid operators reported record solar generation in May, up 23% on last year, according to the
national grid's monthly bulletin. Analysts attribute the rise to new capacity in the north.</p>
<p>The full figures are in the <a href="https://grid.example.com/bulletin-may">May bulletin</a>.</p>
<p>Storage deployments doubled over the same period, which smoothed evening peaks considerably.</p>
</article><footer>Copyright</footer></body></html>"""


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF whose text layer is `text` (ASCII), built by hand with a valid xref table."""
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


@dataclass
class FakeWeb:
    host: str = "127.0.0.1"
    hits: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=lambda: list(SEARCH_RESULTS))
    port: int = 0
    _runner: Any = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def hits_on(self, path: str) -> list[dict[str, Any]]:
        return [h for h in self.hits if h["path"] == path]

    async def start(self) -> "FakeWeb":
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/search", self._searxng)
        app.router.add_post("/search", self._tavily)
        app.router.add_post("/v1/web-search", self._bocha)
        app.router.add_get("/article", lambda r: web.Response(text=ARTICLE_HTML, content_type="text/html"))
        app.router.add_get("/long", self._long)
        app.router.add_get("/report.pdf", lambda r: web.Response(body=minimal_pdf("Quarterly revenue grew 18 percent"),
                                                                 content_type="application/pdf"))
        app.router.add_get("/redirect", lambda r: web.Response(status=302, headers={"Location": r.query["to"]}))
        app.router.add_get("/slow", self._slow)
        app.router.add_get("/big", lambda r: web.Response(body=b"x" * 300_000, content_type="text/plain"))
        app.router.add_get("/image.png", lambda r: web.Response(body=b"\x89PNG\r\n\x1a\n", content_type="image/png"))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.read()
        self.hits.append({"path": request.path, "query": dict(request.query), "headers": dict(request.headers),
                          "body": body.decode("utf-8", "replace")})
        return await handler(request)

    async def _searxng(self, request: web.Request) -> web.Response:
        rows = [{"title": r["title"], "url": r["url"], "content": r["snippet"], "publishedDate": r["date"]}
                for r in self.results]
        return web.json_response({"query": request.query.get("q"), "results": rows})

    async def _tavily(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization", "") != "Bearer tvly-test-secret-key":
            return web.json_response({"detail": {"error": "Unauthorized: missing or invalid API key."}}, status=401)
        body = json.loads(await request.text())
        rows = [{"title": r["title"], "url": r["url"], "content": r["snippet"], "score": 0.9,
                 "published_date": r["date"]} for r in self.results[: body.get("max_results", 5)]]
        return web.json_response({"query": body["query"], "results": rows})

    async def _bocha(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization", "") != "Bearer sk-bocha-test-secret":
            return web.json_response({"code": 401, "msg": "invalid api key"}, status=401)
        rows = [{"name": r["title"], "url": r["url"], "snippet": r["snippet"], "summary": r["snippet"],
                 "datePublished": r["date"] + "T08:00:00+08:00"} for r in self.results]
        return web.json_response({"code": 200, "data": {"webPages": {"value": rows}}})

    async def _long(self, request: web.Request) -> web.Response:
        paragraphs = "".join(f"<p>Paragraph {i}: the committee reviewed item {i} of the energy plan and "
                             f"recorded its cost, schedule and risks in detail for the annual report.</p>"
                             for i in range(200))
        html = f"<html><head><title>Energy plan minutes</title></head><body><article>{paragraphs}</article></body></html>"
        return web.Response(text=html, content_type="text/html")

    async def _slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late", content_type="text/plain")


@pytest.fixture
async def fake_web() -> AsyncIterator[FakeWeb]:
    """A started `FakeWeb` (import the fixture into the suite's module or conftest)."""
    fake = await FakeWeb().start()
    yield fake
    await fake.stop()
