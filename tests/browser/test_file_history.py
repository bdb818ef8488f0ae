"""A file's history and undoing a run's file changes in the page (issue 29), against the real
stack (gateway, runner, executor with its sandbox, NATS, PostgreSQL; only the LLM is faked):
a run overwrites a file and the user restores the earlier version from its history (by keyboard
too); a run that writes and deletes files is undone from the run view, with the 409 of an active
run and the conflict of a file changed again since (then forced), and after a reload from the stored
history (under the run's last answer, only for the run that changed files; reloaded after the undo,
a note that it is undone instead); an English user gets English
labels and the server's English refusal. Screenshots at 390 px and 1366 px."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import PHONE, WIDE, new_page
from tests.browser.pagekit import check_view, close_drawers, create_task, login_with_key, open_drawer, send, tid, upload
from tests.helpers.stack import Stack

try:
    from playwright.async_api import Page, expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)

FIRST = "# 提案\n第一版：用户写好的内容\n".encode()
AGENT = "# 提案\n被代理改写\n"


def write_turns(path: str, content: str, then: str = "改好了。") -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": "write", "arguments": {"path": path, "content": content}}]}, {"text": then}]


def entry(page: Page, name: str) -> Any:
    return page.locator(f'{tid("file-entry")}[data-name="{name}"]')


def on_disk(stack: Stack, user: str, rel: str) -> Path:
    return stack.settings.storage_root / user / rel


async def finished_run(page: Page) -> Any:
    """The last run once it ended ok, located by its id (`.last` would move to a later run)."""
    last = page.locator(tid("live-run")).last
    await expect(last).to_have_attribute("data-status", "ok", timeout=20_000)
    return page.locator(f'{tid("live-run")}[data-run-id="{await last.get_attribute("data-run-id")}"]')


async def test_restore_an_earlier_version_from_the_history(stack: Stack, page: Page) -> None:
    stack.fake.script("KEY-hist-over", write_turns("提案.md", AGENT))
    await login_with_key(page, stack, "hist-hua")
    await create_task(page, "提案", folder="prop")
    await upload(page, "提案.md", "text/markdown", FIRST)
    await close_drawers(page)
    await send(page, "KEY-hist-over 改写提案")
    run = await finished_run(page)
    await expect(run.locator(tid("undo-run"))).to_contain_text("本次运行改动了 1 个文件")
    assert on_disk(stack, "hist-hua", "prop/提案.md").read_text() == AGENT

    await open_drawer(page, "files")
    history = entry(page, "提案.md").locator(tid("file-history"))
    await expect(history).to_have_text("历史版本")
    await history.click()
    dialog = page.locator(tid("versions-dialog"))
    await expect(dialog).to_be_visible()
    await expect(page.locator(tid("versions-title"))).to_have_text("提案.md 的历史版本")
    items = dialog.locator(tid("version-item"))
    await expect(items).to_have_count(1)
    # Its size, what replaced it and which run: the overwrite by a run of this task.
    await expect(items.first).to_contain_text(f"{len(FIRST)} B")
    await expect(items.first).to_contain_text("被修改之前")
    await expect(items.first).to_contain_text("由任务“提案”的一次运行改动")
    await items.first.locator(tid("version-restore")).click()

    await expect(page.locator(tid("restore-toast"))).to_contain_text("已恢复 提案.md 的旧版本")
    assert on_disk(stack, "hist-hua", "prop/提案.md").read_bytes() == FIRST
    # What the agent wrote is now a version itself (the restore is undoable), newest first.
    await expect(items).to_have_count(2)
    await expect(items.first).to_have_attribute("data-kind", "restore")
    await expect(items.first).to_contain_text(f"{len(AGENT.encode())} B")
    await page.keyboard.press("Escape")
    await expect(dialog).to_be_hidden()
    # The files pane was refreshed (its size is the old content's) and the user downloads the old text.
    await expect(entry(page, "提案.md")).to_contain_text(f"{len(FIRST)} B")
    async with page.expect_download() as info:
        await entry(page, "提案.md").locator(tid("file-download")).click()
    assert (await (await info.value).path()).read_bytes() == FIRST


async def test_history_by_keyboard_at_390px(stack: Stack, phone: Page, artifacts_dir: Path) -> None:
    page = phone
    stack.fake.script("KEY-hist-kbd", write_turns("笔记.txt", "第二版\n"))
    await login_with_key(page, stack, "hist-kai")
    await create_task(page, "笔记", folder="notes")
    await upload(page, "笔记.txt", "text/plain", "第一版\n".encode())
    await close_drawers(page)
    await send(page, "KEY-hist-kbd 改一下")
    await finished_run(page)
    await check_view(page, artifacts_dir, "390-run-undo-offer")

    await open_drawer(page, "files")
    history = entry(page, "笔记.txt").locator(tid("file-history"))
    await history.focus()
    await page.keyboard.press("Enter")
    dialog = page.locator(tid("versions-dialog"))
    await expect(dialog.locator(tid("version-item"))).to_have_count(1)
    await check_view(page, artifacts_dir, "390-file-history")
    box = await dialog.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    # Focus starts in the dialog; Tab reaches Restore, Enter restores.
    for _ in range(4):
        if await page.evaluate("document.activeElement && document.activeElement.dataset.testid") == "version-restore":
            break
        await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.dataset.testid") == "version-restore"
    await page.keyboard.press("Enter")
    await expect(page.locator(tid("restore-toast"))).to_be_visible()
    await expect(dialog.locator(tid("version-item"))).to_have_count(2)
    assert on_disk(stack, "hist-kai", "notes/笔记.txt").read_text() == "第一版\n"
    # Escape closes it and focus goes back to the file's History button (re-rendered by the refresh).
    await page.keyboard.press("Escape")
    await expect(dialog).to_be_hidden()
    await expect(entry(page, "笔记.txt").locator(tid("file-history"))).to_be_focused()


WRITE_AND_DELETE = [
    {"tool_calls": [{"name": "write", "arguments": {"path": "新.md", "content": "运行新建的\n"}}]},
    {"tool_calls": [{"name": "write", "arguments": {"path": "报告.md", "content": "运行改写的\n"}}]},
    {"tool_calls": [{"name": "shell", "arguments": {"command": "rm 旧.txt"}}]},
    {"text": "整理完了。"},
]


async def test_undo_a_run_from_the_run_view(stack: Stack, page: Page, artifacts_dir: Path) -> None:
    stack.fake.script("KEY-undo-run", WRITE_AND_DELETE)
    stack.fake.script("KEY-undo-busy", [{"text": "还在想", "first_delay": 6}])
    await login_with_key(page, stack, "undo-uma")
    await create_task(page, "整理", folder="tidy")
    folder = on_disk(stack, "undo-uma", "tidy")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "报告.md").write_text("用户的报告\n")
    (folder / "旧.txt").write_text("旧数据\n")
    await send(page, "KEY-undo-run 整理文件")
    run = await finished_run(page)
    offer = run.locator(tid("undo-run"))
    await expect(offer).to_contain_text("本次运行改动了 3 个文件")
    assert not (folder / "旧.txt").exists() and (folder / "新.md").exists()

    # While another run is active the undo is refused (409), and the page says so plainly.
    await send(page, "KEY-undo-busy 再想想")
    await expect(page.locator(tid("live-run"))).to_have_count(2)
    await offer.locator(tid("undo-run-button")).click()
    await expect(offer.locator(tid("undo-error"))).to_have_text(
        "这个任务正在运行，现在不能撤销文件改动；请等运行结束或先取消。")
    await finished_run(page)

    # The user changed one of the run's files since: it is listed and skipped, then forced.
    (folder / "报告.md").write_text("用户后来又改了\n")
    await offer.locator(tid("undo-run-button")).click()
    await expect(offer.locator(tid("undo-conflicts"))).to_have_text("tidy/报告.md")
    await expect(offer.locator(tid("undo-summary"))).to_have_text("已撤销本次运行的文件改动（还原了 2 个文件）。")
    await expect(page.locator(tid("undo-toast"))).to_be_visible()
    assert (folder / "旧.txt").read_text() == "旧数据\n" and not (folder / "新.md").exists()
    assert (folder / "报告.md").read_text() == "用户后来又改了\n"
    await check_view(page, artifacts_dir, "1366-run-undo-conflict")
    await offer.locator(tid("undo-run-force")).click()
    await expect(offer.locator(tid("undo-summary"))).to_have_text("已撤销本次运行的文件改动（还原了 1 个文件）。")
    assert (folder / "报告.md").read_text() == "用户的报告\n"
    # The files pane shows the folder as it was before the run.
    await open_drawer(page, "files")
    await expect(entry(page, "旧.txt")).to_be_visible()
    await expect(entry(page, "新.md")).to_have_count(0)


async def test_undo_offer_survives_a_reload(stack: Stack, page: Page) -> None:
    stack.fake.script("KEY-undo-reload", write_turns("计划.md", "运行写的计划\n", then="计划写好了。"))
    stack.fake.script("KEY-undo-chat", [{"text": "只是聊聊"}])
    await login_with_key(page, stack, "undo-rui")
    await create_task(page, "计划", folder="plan")
    await send(page, "KEY-undo-reload 写计划")
    run_id = await (await finished_run(page)).get_attribute("data-run-id")
    await send(page, "KEY-undo-chat 聊聊")
    await expect(page.locator(tid("live-run"))).to_have_count(2)
    await finished_run(page)
    written = on_disk(stack, "undo-rui", "plan/计划.md")
    assert written.read_text() == "运行写的计划\n"

    # After a reload the page renders the stored history: the offer is back for the run that changed
    # files (the chat-only run has none), right under that run's last answer.
    await page.reload()
    await page.locator(tid("task-item")).filter(has_text="计划").click()
    offer = page.locator(f'{tid("messages")} {tid("undo-run")}')
    await expect(offer).to_have_count(1)
    await expect(offer).to_have_attribute("data-run-id", run_id or "")
    await expect(offer).to_contain_text("本次运行改动了 1 个文件")
    above = await offer.evaluate("n => n.previousElementSibling && n.previousElementSibling.textContent")
    assert above is not None and "计划写好了。" in above, above
    await offer.locator(tid("undo-run-button")).click()
    await expect(offer.locator(tid("undo-summary"))).to_have_text("已撤销本次运行的文件改动（还原了 1 个文件）。")
    assert not written.exists()

    # Reloaded again after the undo: no offer (the server says the run is undone), a plain note instead.
    await page.reload()
    await page.locator(tid("task-item")).filter(has_text="计划").click()
    done = page.locator(f'{tid("messages")} {tid("undo-run-done")}')
    await expect(done).to_have_text("本次运行的文件改动已撤销。")
    await expect(done).to_have_attribute("data-run-id", run_id or "")
    await expect(page.locator(f'{tid("messages")} {tid("undo-run")}')).to_have_count(0)


async def test_an_english_user_gets_english(stack: Stack, browser: Any, artifacts_dir: Path) -> None:
    context, page = await new_page(browser, WIDE, locale="en-US")
    try:
        stack.fake.script("KEY-hist-en", write_turns("plan.md", "rewritten\n", then="Done."))
        await login_with_key(page, stack, "hist-eve")
        await create_task(page, "Plan", folder="plan")
        await upload(page, "plan.md", "text/markdown", b"the user's plan\n")
        await send(page, "KEY-hist-en rewrite the plan")
        run = await finished_run(page)
        await expect(run.locator(tid("undo-run"))).to_contain_text("This run changed 1 file(s).")
        await expect(run.locator(tid("undo-run-button"))).to_have_text("Undo this run's file changes")

        await open_drawer(page, "files")
        history = entry(page, "plan.md").locator(tid("file-history"))
        await expect(history).to_have_text("History")
        await history.click()
        dialog = page.locator(tid("versions-dialog"))
        await expect(page.locator(tid("versions-title"))).to_have_text("History of plan.md")
        item = dialog.locator(tid("version-item"))
        await expect(item).to_have_count(1)
        await expect(item).to_contain_text("before it was changed")
        await expect(item).to_contain_text("changed by a run of task “Plan”")
        await expect(item.locator(tid("version-restore"))).to_have_text("Restore")
        await expect(page.locator(tid("versions-close"))).to_have_text("Close")
        await check_view(page, artifacts_dir, "1366-file-history-english")

        # Retention removed the version after the list was shown: the server's refusal, in English.
        store = stack.settings.storage_root / ".versions" / "hist-eve"
        for obj in [p for p in store.rglob("*") if p.is_file()]:
            obj.unlink()
        await item.locator(tid("version-restore")).click()
        await expect(page.locator(tid("versions-status"))).to_have_text(
            "Restore failed: This version is no longer kept (the retention policy removed it).")
        await expect(item.locator(tid("version-restore"))).to_have_text("no longer kept")
        assert on_disk(stack, "hist-eve", "plan/plan.md").read_text() == "rewritten\n"
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors
