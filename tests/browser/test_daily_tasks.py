"""The page a daily user prefers (issue 37), second part, at 1366 and 390 px: tasks managed in the
page (search, the task menu: rename, model, export to Word, delete with Undo, the deleted view and
Restore), regenerate and edit-and-resend, the language and theme switches, and files into the chat
(attach, drop, paste; text, markdown and CSV previews). One stack for the module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import PHONE, WIDE, new_page
from tests.browser.pagekit import check_view, close_drawers, create_task, login_with_key, open_drawer, tid
from tests.helpers.stack import Stack

try:
    from playwright.async_api import expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)

VIEWPORTS = pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366", "390"])


def task_items(page: Any) -> Any:
    return page.locator(tid("task-item"))


@VIEWPORTS
async def test_tasks_search_menu_model_export_delete_undo_restore(stack: Stack, browser: Any, artifacts_dir: Path,
                                                                   viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    context, page = await new_page(browser, viewport)
    try:
        await login_with_key(page, stack, f"menu{size}")
        for name in ("报告甲", "报告乙", "杂项"):
            await create_task(page, name)

        # Search by name (the server's q).
        await open_drawer(page, "tasks")
        await page.locator(tid("task-search")).fill("报告")
        await expect(task_items(page)).to_have_count(2)
        await page.locator(tid("task-search")).fill("没有这个")
        await expect(page.locator(tid("tasks-empty"))).to_have_text("没有名称或说明包含“没有这个”的任务。")
        await page.locator(tid("task-search")).fill("")
        await expect(task_items(page)).to_have_count(3)
        await close_drawers(page)

        # The open task's menu from the chat head: rename.
        await page.locator(tid("task-menu-open")).click()
        dialog = page.locator(tid("task-dialog"))
        await expect(dialog).to_be_visible()
        await expect(page.locator(tid("task-dialog-title"))).to_have_text("杂项")
        await page.locator(tid("rename-input")).fill("杂项改名")
        await page.locator(tid("rename-submit")).click()
        await expect(page.locator(tid("task-dialog-status"))).to_have_text("已重命名。")
        await expect(page.locator(tid("chat-title"))).to_have_text("杂项改名")

        # The model: the default first, then the configured profiles; the choice is saved.
        select = page.locator(tid("model-select"))
        await expect(select.locator("option").first).to_have_text(f"默认（{stack.settings.zcbot_default_model}）")
        assert await select.input_value() == ""
        other = await select.locator("option").nth(1).get_attribute("value")
        await select.select_option(other)
        await expect(page.locator(tid("task-dialog-status"))).to_have_text(f"已切换为 {other}，下一条消息起生效。")
        await expect(page.locator(tid("chat-folder"))).to_contain_text(f"模型：{other}")
        await check_view(page, artifacts_dir, f"{size}-task-menu")

        # Export to Word: a .docx named after the task.
        async with page.expect_download() as info:
            await page.locator(tid("export-task")).click()
        download = await info.value
        assert download.suggested_filename == "杂项改名.docx"
        saved = await download.path()
        assert saved is not None and Path(saved).read_bytes()[:2] == b"PK"

        # Delete: the page leaves the task, a toast offers Undo, which brings it back and reopens it.
        url = page.url
        await page.locator(tid("delete-task")).click()
        await expect(dialog).to_be_hidden()
        await expect(page.locator(tid("delete-toast"))).to_contain_text("已删除任务“杂项改名”")
        await expect(page.locator(tid("chat-title"))).to_have_text("未选择任务")
        assert page.url.rstrip("/") == stack.base_url.rstrip("/")
        await page.locator(tid("undo-delete")).click()
        await expect(page.locator(tid("chat-title"))).to_have_text("杂项改名")
        assert page.url == url
        await expect(page.locator(tid("restore-toast"))).to_contain_text("已恢复任务“杂项改名”")

        # Delete from the list's own menu, then restore it from the "已删除" view.
        await open_drawer(page, "tasks")
        await page.locator(f'{tid("task-menu")}[aria-label="任务“报告甲”的菜单"]').click()
        await expect(page.locator(tid("task-dialog-title"))).to_have_text("报告甲")
        await page.locator(tid("delete-task")).click()
        await expect(task_items(page)).to_have_count(2)
        await page.locator(tid("deleted-toggle")).click()
        await expect(page.locator(tid("deleted-toggle"))).to_have_attribute("aria-pressed", "true")
        await expect(page.locator(tid("deleted-task"))).to_have_count(1)
        await expect(page.locator(tid("deleted-task"))).to_contain_text("报告甲")
        await expect(page.locator(tid("create-task-form"))).to_be_hidden()
        await check_view(page, artifacts_dir, f"{size}-deleted-view")
        await page.locator(tid("task-restore")).click()
        await expect(page.locator(tid("tasks-empty"))).to_have_text("没有已删除的任务。")
        await page.locator(tid("deleted-toggle")).click()
        await expect(task_items(page)).to_have_count(3)
        await expect(page.locator(tid("task-list"))).to_contain_text("报告甲")
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors
