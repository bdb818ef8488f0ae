"""Browser tests: the dev SPA and the admin page in headless Chromium against the real stack.

Debian's chromium (`apt-get install -y chromium`) driven by Playwright for Python (the PyPI wheel
ships the driver; no `playwright install`), through `executable_path`. Playwright's async API runs
in the test's event loop, the same loop that serves the in-process stack (gateway on real uvicorn,
runner, executor, fake LLM).

One stack per module (`stack`, module scope: a stack costs seconds); each test gets a fresh
browser context (`page`, own localStorage) and its own users. Screenshots go to
`test-artifacts/browser/` at the repository root (ignored by git; CI keeps it as an artefact).

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

from tests.helpers.stack import Stack, open_stack
from zcbot_fakellm import FakeLLM

CHROMIUM = os.environ.get("ZCBOT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"
DEFAULT_TIMEOUT_MS = 15_000
WIDE = {"width": 1366, "height": 860}
PHONE = {"width": 390, "height": 844}


def _missing(reason: str) -> None:
    if os.environ.get("ZCBOT_REQUIRE_BROWSER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
async def stack(module_settings_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """The full in-process stack (gateway, executor, one runner, strict fake LLM), one per module."""
    fake = FakeLLM(strict=True)
    await fake.start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            async with open_stack(module_settings_env, mp.setenv, tmp_path_factory.mktemp("stack"), fake) as st:
                await st.add_runner()
                yield st
    finally:
        await fake.stop()


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


async def new_page(browser: Any, viewport: dict[str, int] = WIDE, locale: str = "zh-CN") -> tuple[Any, Any]:
    """A fresh context (own localStorage) and page; page errors are collected on `page.page_errors`."""
    context = await browser.new_context(accept_downloads=True, viewport=viewport, locale=locale)
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    pg = await context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.page_errors = errors  # type: ignore[attr-defined]
    return context, pg


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Any]:
    """A Chinese-locale page at 1366 px; uncaught page errors fail the test."""
    context, pg = await new_page(browser)
    try:
        yield pg
    finally:
        await context.close()
    assert not pg.page_errors, f"uncaught errors in the page: {pg.page_errors}"


@pytest.fixture
async def phone(browser: Any) -> AsyncIterator[Any]:
    """A Chinese-locale page at 390 px."""
    context, pg = await new_page(browser, PHONE)
    try:
        yield pg
    finally:
        await context.close()
    assert not pg.page_errors, f"uncaught errors in the page: {pg.page_errors}"


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
