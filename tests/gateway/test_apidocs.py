"""Offline API docs (issue 27): /docs and /redoc come from local assets — no CDN, no fonts, no
remote favicon — and render in a real browser with every request off this origin refused."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import pytest

from tests.helpers.stack import Stack, bare_stack, fake_llm, stack  # noqa: F401  (fixtures)

URL_ATTR = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\s*:\s*["']([^"']+)["']""")
CHROMIUM = "/usr/bin/chromium"


async def test_docs_pages_reference_only_local_assets(app_client: httpx.AsyncClient) -> None:
    for page, assets in (("/docs", ("swagger-ui-bundle.js", "swagger-ui.css")), ("/redoc", ("redoc.js",))):
        resp = await app_client.get(page)
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html"), page
        assert "http://" not in resp.text and "https://" not in resp.text, (page, re.findall(r"https?://\S+", resp.text))
        refs = [a or b for a, b in URL_ATTR.findall(resp.text)]
        assert refs and all(r.startswith("/") for r in refs), (page, refs)
        for name in assets:
            assert any(r.endswith(name) for r in refs), (page, name, refs)
        for ref in refs:
            got = await app_client.get(ref)
            assert got.status_code == 200 and got.content, (page, ref)
    assert (await app_client.get("/openapi.json")).json()["paths"]  # what both pages load


@pytest.mark.skipif(not Path(CHROMIUM).exists() and not shutil.which("chromium"), reason="needs Debian's chromium")
async def test_docs_render_with_the_network_cut_off(stack: Stack) -> None:
    from playwright.async_api import async_playwright

    outside: list[str] = []

    async def only_local(route) -> None:  # type: ignore[no-untyped-def]
        if route.request.url.startswith(stack.base_url):
            await route.continue_()
        else:
            outside.append(route.request.url)
            await route.abort()

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                           args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            page = await browser.new_page()
            await page.route("**/*", only_local)
            await page.goto(f"{stack.base_url}/docs")
            await page.wait_for_selector(".opblock-summary-path", timeout=20_000)  # operations rendered
            assert await page.locator(".opblock").count() >= 35
            await page.goto(f"{stack.base_url}/redoc")
            await page.wait_for_selector("h1", timeout=20_000)
            assert "zcbot gateway" in (await page.locator("h1").first.inner_text())
        finally:
            await browser.close()
    assert outside == []
