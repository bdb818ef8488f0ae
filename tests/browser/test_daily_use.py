"""The page a daily user prefers (issue 37), at 1366 and 390 px: a task's own address (reload,
back/forward, a shared link, a running answer re-attached), copy buttons and timestamps, a failed
run's plain cause and retry, refusals in Chinese by their code, tool cards in words, and the task
menu (rename, delete with undo, export to Word)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import PHONE, WIDE, new_page
from tests.browser.pagekit import check_view, close_drawers, create_task, login_with_key, open_drawer, send, tid
from tests.helpers.stack import Stack

try:
    from playwright.async_api import expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)

VIEWPORTS = pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366", "390"])
TASK_URL = re.compile(r"/t/([0-9a-zA-Z_-]+)$")


async def task_id_of(page: Any) -> str:
    m = TASK_URL.search(page.url)
    assert m, page.url
    return m.group(1)


@VIEWPORTS
async def test_task_address_reload_back_forward_and_shared_link(stack: Stack, browser: Any, artifacts_dir: Path,
                                                                 viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    slow = "字" * 120
    stack.fake.script(f"KEY-route-{size}", [{"text": slow, "chunks": list(slow), "chunk_delay": 0.04}])
    context, page = await new_page(browser, viewport)
    try:
        await login_with_key(page, stack, f"router{size}")
        assert page.url.endswith("/")
        await create_task(page, "甲任务")
        first = await task_id_of(page)
        await create_task(page, "乙任务")
        second = await task_id_of(page)
        assert first != second

        # Back and forward step through the tasks opened; back to the start is "no task".
        await page.go_back()
        await expect(page.locator(tid("chat-title"))).to_have_text("甲任务")
        assert page.url.endswith("/t/" + first)
        await page.go_forward()
        await expect(page.locator(tid("chat-title"))).to_have_text("乙任务")
        await page.go_back()
        await page.go_back()
        await expect(page.locator(tid("chat-title"))).to_have_text("未选择任务")
        await expect(page.locator(tid("message-input"))).to_be_disabled()
        await page.go_forward()
        await expect(page.locator(tid("chat-title"))).to_have_text("甲任务")

        # A reload mid-answer opens the same task and follows the running answer to its end.
        await send(page, f"KEY-route-{size} 慢慢说")
        await expect(page.locator(tid("live-run")).last.locator(tid("assistant-text"))).to_contain_text("字字")
        await page.reload()
        await expect(page.locator(tid("chat-title"))).to_have_text("甲任务")
        run = page.locator(tid("live-run")).last
        await expect(run).to_have_attribute("data-status", "ok", timeout=20_000)
        await expect(run.locator(tid("assistant-text"))).to_have_text(slow)
        await check_view(page, artifacts_dir, f"{size}-task-address")
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors

    # A shared link in a fresh browser: sign in, and the linked task opens.
    context, other = await new_page(browser, viewport)
    try:
        await other.goto(stack.base_url + "/t/" + second)
        await expect(other.locator(tid("login-view"))).to_be_visible()
        await other.locator(tid("tab-key")).click()
        await other.locator(tid("login-user-id")).fill(f"router{size}")
        await other.locator(tid("login-platform-key")).fill(stack.settings.platform_key)
        await other.locator(tid("login-key-submit")).click()
        await expect(other.locator(tid("chat-title"))).to_have_text("乙任务")
        assert other.url.endswith("/t/" + second)
        # Signing out forgets the address, so the next person does not land in this task.
        await other.locator(tid("logout")).click()
        assert other.url.rstrip("/") == stack.base_url.rstrip("/")
        # Someone else's task (or a deleted one) is "not found", in Chinese, in the chat.
        await login_with_key(other, stack, f"stranger{size}")
        await other.goto(stack.base_url + "/t/" + second)
        await expect(other.locator(tid("task-open-error"))).to_be_visible()
        await expect(other.locator(tid("chat-title"))).to_have_text("未选择任务")
        await check_view(other, artifacts_dir, f"{size}-task-address-not-found")
    finally:
        await context.close()
    assert not other.page_errors, other.page_errors
