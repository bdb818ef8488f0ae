"""The "another task runs in this folder" notice (seed 003 §7.8-7.9, issue 40) in the page, against
the real stack: two tasks share a folder; while one of them is `running` — and still while it is
`cancelling`, when its tools may be writing for a moment more — opening the other shows the notice
naming it; once it is idle the notice is gone. A task in another folder never shows it."""

from __future__ import annotations

import pytest

from tests.browser.pagekit import close_drawers, create_task, login_with_key, open_drawer, sql, tid
from tests.helpers.stack import Stack

try:
    from playwright.async_api import Page, expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)


async def _open(page: Page, name: str) -> None:
    await open_drawer(page, "tasks")
    await page.locator(tid("task-item")).filter(has_text=name).click()
    await expect(page.locator(tid("chat-title"))).to_have_text(name)
    await close_drawers(page)


async def test_the_same_folder_notice_for_running_and_cancelling(stack: Stack, page: Page) -> None:
    user = stack.user_id("fiona")
    await login_with_key(page, stack, user)
    await create_task(page, "写报告", folder="季度报告")
    await create_task(page, "改图表", folder="季度报告")
    await create_task(page, "别的事", folder="其他")
    notice = page.locator(tid("folder-notice"))
    for status in ("running", "cancelling"):
        sql(stack.settings.zcbot_db_url, "update tasks set run_status = :s where user_id = :u and name = '写报告'",
            s=status, u=user)
        await _open(page, "改图表")
        await expect(notice).to_be_visible()
        await expect(notice).to_contain_text("写报告")
        await expect(notice).to_contain_text("季度报告")
        await _open(page, "别的事")  # another folder: nothing to warn about
        await expect(notice).to_be_hidden()
    sql(stack.settings.zcbot_db_url, "update tasks set run_status = 'idle' where user_id = :u", u=user)
    await _open(page, "改图表")
    await expect(notice).to_be_hidden()
