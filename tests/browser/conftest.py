"""Browser tests: the dev SPA and the admin page in headless Chromium against the real stack.

Debian's chromium (`apt-get install -y chromium`) driven by Playwright for Python (the PyPI wheel
ships the driver; no `playwright install`). Playwright's async API runs in the test's event loop,
the same loop that serves the in-process stack (gateway on real uvicorn, runner, fake LLM).

The tests skip when Playwright or the browser is missing, so a machine without them still runs
the rest of the suite; set ZCBOT_REQUIRE_BROWSER=1 to make that a failure instead.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.stack import bare_stack, fake_llm, stack  # noqa: F401

CHROMIUM = os.environ.get("ZCBOT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
DEFAULT_TIMEOUT_MS = 15_000


def _missing(reason: str) -> None:
    if os.environ.get("ZCBOT_REQUIRE_BROWSER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Any]:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _missing("playwright is not installed (pip install 'playwright>=1.40')")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        _missing(f"no chromium at {CHROMIUM} (apt-get install -y chromium)")
    from playwright.async_api import expect

    expect.set_options(timeout=DEFAULT_TIMEOUT_MS)
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Any]:
    """A fresh context (own localStorage) and page; uncaught page errors fail the test."""
    context = await browser.new_context(accept_downloads=True, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    pg = await context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.page_errors = errors  # type: ignore[attr-defined]
    try:
        yield pg
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
