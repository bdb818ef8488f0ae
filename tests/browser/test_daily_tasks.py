"""The page a daily user prefers (issue 37), second part, at 1366 and 390 px: tasks managed in the
page (search, the task menu: rename, model, export to Word, delete with Undo, the deleted view and
Restore), regenerate and edit-and-resend, the language and theme switches, and files into the chat
(attach, drop, paste; text, markdown and CSV previews). One stack for the module."""

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
        await expect(page.locator(tid("tasks-empty"))).to_have_text("没有名称、说明或消息包含“没有这个”的任务。")
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


@VIEWPORTS
async def test_regenerate_and_edit_and_resend(stack: Stack, browser: Any, artifacts_dir: Path,
                                              viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    stack.fake.script(f"KEY-rg-{size}", [{"text": "第一版回答"}])
    context, page = await new_page(browser, viewport)
    try:
        await login_with_key(page, stack, f"regen{size}")
        await create_task(page, "重新生成")
        await send(page, f"KEY-rg-{size} 问题")
        await expect(page.locator(tid("live-run")).last).to_have_attribute("data-status", "ok")
        regenerate = page.locator(tid("regenerate"))
        await expect(regenerate).to_have_count(1)

        # Regenerate: the first answer folds away (kept, marked replaced), the new one streams in.
        stack.fake.script(f"KEY-rg-{size}", [{"text": "第二版回答"}])
        await regenerate.click()
        run = page.locator(tid("live-run")).last
        await expect(run).to_have_attribute("data-status", "ok")
        await expect(run.locator(tid("assistant-text"))).to_have_text("第二版回答")
        group = page.locator(tid("superseded"))
        await expect(group).to_have_count(1)
        await expect(group.locator(tid("superseded-summary"))).to_have_text(
            "已被替换的 2 条消息（编辑或重新生成之前；模型不再看到）")
        await expect(group).not_to_have_attribute("open", "")
        await expect(group.locator(tid("assistant-text"))).to_have_text("第一版回答")
        await expect(regenerate).to_have_count(1)
        await page.reload()
        await expect(page.locator(tid("superseded"))).to_have_count(1)
        await expect(page.locator(f'{tid("superseded")} {tid("assistant-text")}')).to_have_text("第一版回答")
        await expect(page.locator(tid("assistant-text")).last).to_have_text("第二版回答")
        await expect(regenerate).to_have_count(1)

        # Edit the question and send it again: one group of everything replaced, as after a reload.
        stack.fake.script(f"KEY-ed-{size}", [{"text": "改后的回答"}])
        question = page.locator(f'#messages > {tid("user-message")}').last
        await question.locator(tid("edit-message")).click()
        edit = page.locator(tid("edit-input"))
        await expect(edit).to_have_value(f"KEY-rg-{size} 问题")
        await edit.fill(f"KEY-ed-{size} 改过的问题")
        await check_view(page, artifacts_dir, f"{size}-edit-message")
        await page.locator(tid("edit-send")).click()
        run = page.locator(tid("live-run")).last
        await expect(run).to_have_attribute("data-status", "ok")
        await expect(run.locator(tid("assistant-text"))).to_have_text("改后的回答")
        await expect(page.locator(tid("superseded"))).to_have_count(1)
        await expect(page.locator(tid("superseded-summary"))).to_have_text(
            "已被替换的 4 条消息（编辑或重新生成之前；模型不再看到）")
        await expect(page.locator(tid("user-text")).last).to_have_text(f"KEY-ed-{size} 改过的问题")
        last = stack.fake.requests[-1]["messages"]
        assert [m["content"] for m in last if m["role"] == "user"] == [f"KEY-ed-{size} 改过的问题"]
        await page.locator(tid("superseded-summary")).click()
        await check_view(page, artifacts_dir, f"{size}-regenerated-and-edited")
        await page.reload()
        await expect(page.locator(tid("superseded-summary"))).to_have_text(
            "已被替换的 4 条消息（编辑或重新生成之前；模型不再看到）")
        await expect(page.locator(tid("assistant-text")).last).to_have_text("改后的回答")
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors


@VIEWPORTS
async def test_language_and_theme_switches_are_remembered(stack: Stack, browser: Any, artifacts_dir: Path,
                                                          viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    context = await browser.new_context(viewport=viewport, locale="zh-CN", color_scheme="light")
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    html = page.locator("html")
    try:
        await login_with_key(page, stack, f"prefs{size}")
        await expect(html).to_have_attribute("data-theme", "light")
        await page.locator(tid("prefs-button")).click()
        await expect(page.locator(tid("prefs-dialog"))).to_be_visible()
        await expect(page.locator(tid("theme-system"))).to_be_checked()
        await page.locator(tid("theme-dark")).check()
        await expect(html).to_have_attribute("data-theme", "dark")
        assert await page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(20, 23, 28)"
        await check_view(page, artifacts_dir, f"{size}-prefs-dark")

        # English: the page reloads in it, the theme stays; both survive a reload.
        await page.locator(tid("lang-en")).check()
        await expect(page.locator(tid("chat-title"))).to_have_text("No task selected")
        await expect(page.locator(tid("logout"))).to_have_text("Log out")
        await expect(html).to_have_attribute("lang", "en")
        await expect(html).to_have_attribute("data-theme", "dark")
        await create_task(page, "dark task")
        await page.reload()
        await expect(page.locator(tid("message-input"))).to_have_attribute("placeholder", "Message (Ctrl+Enter to send)")
        await expect(html).to_have_attribute("data-theme", "dark")
        await check_view(page, artifacts_dir, f"{size}-english-dark")

        # Back to Chinese and the system's theme (light here), and the OS turning dark is followed.
        await page.locator(tid("prefs-button")).click()
        await page.locator(tid("theme-system")).check()
        await expect(html).to_have_attribute("data-theme", "light")
        await page.emulate_media(color_scheme="dark")
        await expect(html).to_have_attribute("data-theme", "dark")
        await page.emulate_media(color_scheme="light")
        await page.locator(tid("lang-zh")).check()
        await expect(page.locator(tid("chat-title"))).to_have_text("dark task")
        await expect(page.locator(tid("logout"))).to_have_text("退出登录")
        await expect(html).to_have_attribute("data-theme", "light")
    finally:
        await context.close()
    assert not errors, errors


DROP = """async ([selector, name, text, kind]) => {
  const dt = new DataTransfer();
  dt.items.add(new File([text], name, { type: "text/plain" }));
  const target = document.querySelector(selector);
  if (kind === "paste") {
    target.dispatchEvent(new ClipboardEvent("paste", { clipboardData: dt, bubbles: true, cancelable: true }));
  } else {
    for (const type of ["dragover", "drop"]) {
      target.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
    }
  }
}"""


@VIEWPORTS
async def test_files_into_the_chat_and_text_previews(stack: Stack, browser: Any, artifacts_dir: Path,
                                                     viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    context, page = await new_page(browser, viewport)
    try:
        await login_with_key(page, stack, f"attach{size}")
        await create_task(page, "附件")
        box = page.locator(tid("message-input"))
        await box.fill("请看看")
        # The composer's attach button: uploaded into the task's folder and named in the message.
        await page.locator(tid("attach-input")).set_input_files(files=[
            {"name": "说明.md", "mimeType": "text/markdown", "buffer": "# 标题\n\n- 一\n- **二**\n".encode()},
            {"name": "数据.csv", "mimeType": "text/csv", "buffer": '名称,数量\n"苹果, 红",3\n梨,5\n'.encode()}])
        await expect(box).to_have_value("请看看\n（已上传文件：说明.md、数据.csv）")
        await expect(page.locator(tid("attach-status"))).to_have_text("已上传 说明.md、数据.csv 到文件夹 附件。")
        # Dropped on the conversation, pasted into the message box.
        await page.evaluate(DROP, ["#messages", "main.py", "def f():\n    return 1\n", "drop"])
        await expect(box).to_have_value(re.compile(r"（已上传文件：main\.py）$"))
        await page.evaluate(DROP, ["#message-input", "记录.txt", "第一行\n第二行\n", "paste"])
        await expect(box).to_have_value(re.compile(r"（已上传文件：记录\.txt）$"))
        await check_view(page, artifacts_dir, f"{size}-attached")

        # Previews, titled with the file's name: Markdown rendered, CSV as a table, code highlighted.
        await open_drawer(page, "files")
        for name in ("说明.md", "数据.csv", "main.py", "记录.txt"):
            await expect(page.locator(f'{tid("file-entry")}[data-name="{name}"]')).to_be_visible()
        await page.locator(f'{tid("file-entry")}[data-name="说明.md"] {tid("file-preview")}').click()
        await expect(page.locator(tid("preview-title"))).to_have_text("说明.md")
        await expect(page.locator(f'{tid("preview-markdown")} h1')).to_have_text("标题")
        await expect(page.locator(f'{tid("preview-markdown")} strong')).to_have_text("二")
        await check_view(page, artifacts_dir, f"{size}-preview-markdown")
        await page.locator(tid("preview-close")).click()
        await page.locator(f'{tid("file-entry")}[data-name="数据.csv"] {tid("file-preview")}').click()
        await expect(page.locator(tid("preview-title"))).to_have_text("数据.csv")
        table = page.locator(tid("preview-table"))
        await expect(table.locator("th")).to_have_text(["名称", "数量"])
        await expect(table.locator("tbody tr").first.locator("td")).to_have_text(["苹果, 红", "3"])
        await check_view(page, artifacts_dir, f"{size}-preview-csv")
        await page.locator(tid("preview-close")).click()
        await page.locator(f'{tid("file-entry")}[data-name="main.py"] {tid("file-preview")}').click()
        await expect(page.locator(f'{tid("preview-code")} .hljs-keyword')).to_have_text(["def", "return"])
        await page.locator(tid("preview-close")).click()
        await page.locator(f'{tid("file-entry")}[data-name="记录.txt"] {tid("file-preview")}').click()
        await expect(page.locator(tid("preview-code"))).to_have_text("第一行\n第二行\n")
        await page.locator(tid("preview-close")).click()
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors
