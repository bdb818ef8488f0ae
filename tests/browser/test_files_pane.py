"""The page, issue 37's remaining parts, at 1366 and 390 px: the task search finds a task by its
messages (Chinese), the files pane renames and deletes files and folders (refusals said in
Chinese), shows the tree of all folders, and keeps the open preview in the address (reload, back,
forward). One stack for the module."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.browser.conftest import PHONE, WIDE, new_page
from tests.browser.pagekit import (
    check_view,
    close_drawers,
    create_task,
    login_with_key,
    open_drawer,
    send,
    tid,
    upload,
)
from tests.helpers.stack import Stack

try:
    from playwright.async_api import expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)

VIEWPORTS = pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366", "390"])


def entry(page: Any, name: str) -> Any:
    return page.locator(f'{tid("file-entry")}[data-name="{name}"]')


NO_FILE = "() => !new URLSearchParams(location.search).has('file')"


def file_param(page: Any) -> str | None:
    values = parse_qs(urlparse(page.url).query).get("file")
    return values[0] if values else None


@VIEWPORTS
async def test_task_search_finds_message_text(stack: Stack, browser: Any, artifacts_dir: Path,
                                             viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    stack.fake.script(f"KEY-find-{size}", [{"text": "好的，季度报告的初稿已经写进 draft.md。"}])
    context, page = await new_page(browser, viewport)
    try:
        await login_with_key(page, stack, f"finder{size}")
        await create_task(page, "杂项")
        await send(page, f"KEY-find-{size} 帮我起草一份季度报告")
        await expect(page.locator(tid("live-run")).last).to_have_attribute("data-status", "ok")
        await create_task(page, "周报")

        await open_drawer(page, "tasks")
        search = page.locator(tid("task-search"))
        await expect(search).to_have_attribute("placeholder", "搜索任务名称和消息")
        await search.fill("初稿")  # only in the answer
        items = page.locator(tid("task-item"))
        await expect(items).to_have_count(1)
        await expect(items.first.locator(tid("task-match"))).to_have_text("助手：好的，季度报告的初稿已经写进 draft.md。")
        await search.fill("起草")  # only in the question
        await expect(items.first.locator(tid("task-match"))).to_contain_text("你：")
        await check_view(page, artifacts_dir, f"{size}-task-search-messages")
        await search.fill("周报")  # a name: no excerpt
        await expect(items).to_have_count(1)
        await expect(items.first.locator(tid("task-match"))).to_have_count(0)
        await search.fill("没有这句话")
        await expect(page.locator(tid("tasks-empty"))).to_have_text("没有名称、说明或消息包含“没有这句话”的任务。")
        await search.fill("")
        await expect(items).to_have_count(2)
        await expect(page.locator(tid("task-match"))).to_have_count(0)
        # Opening a task found by a message shows that message, marked.
        await search.fill("初稿")
        await expect(items).to_have_count(1)
        await items.first.click()
        await expect(page.locator(tid("chat-title"))).to_have_text("杂项")
        found = page.locator('[data-found="true"]')
        await expect(found).to_have_count(1)
        await expect(found).to_have_attribute("data-testid", "assistant-message")
        await expect(found).to_contain_text("初稿")
        await expect(found).to_be_in_viewport()
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors


@VIEWPORTS
async def test_rename_delete_and_the_folder_tree(stack: Stack, browser: Any, artifacts_dir: Path,
                                                 viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    context, page = await new_page(browser, viewport)
    try:
        await login_with_key(page, stack, f"filer{size}")
        await create_task(page, "报告", folder="报告")
        token = await stack.login(f"filer{size}")
        async with stack.client(token) as c:
            assert (await c.post("/v1/files/mkdir", json={"path": "报告/图表/原始"})).status_code == 201
        await upload(page, "草稿.md", "text/markdown", "# 草稿\n".encode())
        await upload(page, "旧.txt", "text/plain", b"old")
        status = page.locator(tid("files-status"))

        # Rename a file: the dialog has the old name filled in; the list shows the new one.
        await entry(page, "草稿.md").locator(tid("file-rename")).click()
        await expect(page.locator(tid("ask-dialog"))).to_contain_text("重命名文件“草稿.md”")
        await expect(page.locator(tid("ask-name"))).to_have_value("草稿.md")
        await page.locator(tid("ask-name")).fill("旧.txt")  # taken: the server's refusal, in Chinese
        await page.locator(tid("ask-ok")).click()
        await expect(status).to_have_text("无法重命名：这个文件夹里已经有同名的文件或文件夹")
        await entry(page, "草稿.md").locator(tid("file-rename")).click()
        await page.locator(tid("ask-name")).fill("a/b")  # refused in the dialog, which stays open
        await page.locator(tid("ask-ok")).click()
        await expect(page.locator(tid("ask-error"))).to_contain_text("名称不能含“/”")
        await page.locator(tid("ask-name")).fill("定稿.md")
        await page.locator(tid("ask-ok")).click()
        await expect(status).to_have_text("已将“草稿.md”重命名为“定稿.md”。")
        await expect(entry(page, "定稿.md")).to_be_visible()
        await expect(entry(page, "草稿.md")).to_have_count(0)

        # Delete a file: confirmed in a red dialog that starts on Cancel; Cancel keeps it.
        await entry(page, "旧.txt").locator(tid("file-delete")).click()
        await expect(page.locator(tid("ask-dialog"))).to_have_attribute("data-kind", "danger")
        await expect(page.locator(tid("ask-cancel"))).to_be_focused()
        await page.locator(tid("ask-cancel")).click()
        await expect(entry(page, "旧.txt")).to_be_visible()
        await entry(page, "旧.txt").locator(tid("file-delete")).click()
        await page.locator(tid("ask-ok")).click()
        await expect(status).to_have_text("已删除“旧.txt”。")
        await expect(entry(page, "旧.txt")).to_have_count(0)

        # A folder that is not empty cannot be deleted; renaming it works.
        await entry(page, "图表").locator(tid("file-delete")).click()
        await page.locator(tid("ask-ok")).click()
        await expect(status).to_have_text("无法删除：文件夹不是空的，请先删除里面的文件")
        await entry(page, "图表").locator(tid("file-rename")).click()
        await page.locator(tid("ask-name")).fill("图")
        await page.locator(tid("ask-ok")).click()
        await expect(entry(page, "图")).to_be_visible()

        # The tree: every folder, the task's folder marked with its task count; a click opens it.
        await page.locator(tid("folder-tree-open")).click()
        tree = page.locator(tid("folder-tree-body"))
        task_node = tree.locator(f'{tid("tree-node")}[data-path="报告"]')
        await expect(task_node.locator(":scope > .tree-row").locator(tid("tree-tasks"))).to_have_text("1 个任务")
        await expect(task_node.locator(":scope > .tree-row").locator(tid("tree-open"))).to_have_attribute(
            "aria-current", "true")
        await task_node.locator(":scope > .tree-row").locator(tid("tree-toggle")).click()
        inner = tree.locator(f'{tid("tree-node")}[data-path="报告/图"]')
        await expect(inner).to_be_visible()
        await inner.locator(":scope > .tree-row").locator(tid("tree-toggle")).click()
        await expect(tree.locator(f'{tid("tree-node")}[data-path="报告/图/原始"]')).to_be_visible()
        await check_view(page, artifacts_dir, f"{size}-files-tree")
        await tree.locator(f'{tid("tree-node")}[data-path="报告/图/原始"]').locator(tid("tree-open")).click()
        await expect(page.locator(tid("file-crumbs"))).to_contain_text("原始")
        await expect(status).to_have_text("文件夹是空的。")

        # The task's own folder cannot be deleted (from its parent, the root).
        await page.locator(tid("file-crumbs")).get_by_role("button", name="~").click()
        await entry(page, "报告").locator(tid("file-delete")).click()
        await page.locator(tid("ask-ok")).click()
        await expect(status).to_have_text("无法删除：有任务正在使用这个文件夹（或其中的文件夹），请先删除或移走那个任务")
        await close_drawers(page)
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors


@VIEWPORTS
async def test_the_open_preview_is_in_the_address(stack: Stack, browser: Any, artifacts_dir: Path,
                                                  viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    context, page = await new_page(browser, viewport)
    try:
        await login_with_key(page, stack, f"linker{size}")
        await create_task(page, "链接", folder="链接")
        await upload(page, "说明.md", "text/markdown", "# 标题\n\n正文".encode())
        task_path = urlparse(page.url).path
        await entry(page, "说明.md").locator(tid("file-preview")).click()
        dialog = page.locator(tid("preview-dialog"))
        await expect(page.locator(tid("preview-markdown"))).to_contain_text("正文")
        assert file_param(page) == "链接/说明.md" and urlparse(page.url).path == task_path

        # A reload opens the same task and the same preview.
        await page.reload()
        await expect(page.locator(tid("chat-title"))).to_have_text("链接")
        await expect(page.locator(tid("preview-title"))).to_have_text("说明.md")
        await expect(page.locator(tid("preview-markdown"))).to_contain_text("正文")
        await check_view(page, artifacts_dir, f"{size}-preview-from-address")

        # Closing drops the file from the address; back opens the preview again, forward closes it.
        await page.locator(tid("preview-close")).click()
        await expect(dialog).to_be_hidden()
        await page.wait_for_function(NO_FILE)  # the close steps back (history.back() is asynchronous)
        assert urlparse(page.url).path == task_path
        await open_drawer(page, "files")
        await entry(page, "说明.md").locator(tid("file-preview")).click()
        await expect(page.locator(tid("preview-markdown"))).to_be_visible()
        await page.locator(tid("preview-close")).click()  # an opened preview: Close steps back over it
        await expect(dialog).to_be_hidden()
        await page.wait_for_function(NO_FILE)
        await page.go_forward()
        await expect(page.locator(tid("preview-markdown"))).to_contain_text("正文")
        assert file_param(page) == "链接/说明.md"
        await page.go_back()
        await expect(dialog).to_be_hidden()
        assert file_param(page) is None
        await expect(page.locator(tid("chat-title"))).to_have_text("链接")
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors
