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
        await expect(other.locator(tid("task-open-error"))).to_have_text("无法打开任务：找不到这个任务（不存在、已删除，或不属于你）")
        await expect(other.locator(tid("chat-title"))).to_have_text("未选择任务")
        await check_view(other, artifacts_dir, f"{size}-task-address-not-found")
    finally:
        await context.close()
    assert not other.page_errors, other.page_errors


async def zh_page(browser: Any, viewport: dict[str, int], base_url: str) -> tuple[Any, Any]:
    """A Chinese page in Beijing time that may use the clipboard."""
    context = await browser.new_context(viewport=viewport, locale="zh-CN", timezone_id="Asia/Shanghai",
                                        accept_downloads=True)
    await context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url)
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.page_errors = errors
    return context, page


CODE_ANSWER = "看代码：\n\n```python\nprint('你好')\n```\n"


@VIEWPORTS
async def test_copy_timestamps_and_retry_of_a_failed_run(stack: Stack, browser: Any, artifacts_dir: Path,
                                                          viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    stack.fake.script(f"KEY-copy-{size}", [{"text": CODE_ANSWER}])
    # The first request gets the provider's 401; the retry's (the same conversation) the answer.
    stack.fake.script(f"KEY-fail-{size}", [
        {"error": {"status": 401, "message": "Incorrect API key provided: sk-***. {\"error\": {\"code\": 401}}"},
         "fail_first": 1, "text": "重试成功"}])
    context, page = await zh_page(browser, viewport, stack.base_url)
    try:
        await login_with_key(page, stack, f"copier{size}")
        await create_task(page, "复制")
        await send(page, f"KEY-copy-{size} 给段代码")
        run = page.locator(tid("live-run")).last
        await expect(run).to_have_attribute("data-status", "ok")
        answer = run.locator(tid("assistant-message"))
        copy_code = answer.locator(tid("copy-code"))
        await copy_code.click()
        await expect(copy_code).to_have_text("已复制")
        assert (await page.evaluate("navigator.clipboard.readText()")).strip() == "print('你好')"
        await answer.locator(tid("copy-message")).click()
        assert await page.evaluate("navigator.clipboard.readText()") == CODE_ANSWER
        user = page.locator(tid("user-message")).last
        await user.locator(tid("copy-message")).click()
        assert await page.evaluate("navigator.clipboard.readText()") == f"KEY-copy-{size} 给段代码"

        # Times: relative, the exact time in the person's zone (Beijing here) on hover.
        for when in (user.locator(tid("msg-time")), answer.locator(tid("msg-time"))):
            await expect(when).to_have_text("刚刚")
            title, iso = await when.get_attribute("title"), await when.get_attribute("datetime")
            hour = (int(iso[11:13]) + 8) % 24
            assert "GMT+8" in title and f"{hour:02d}:" in title and iso[:4] in title, (title, iso)
        # After a reload the stored messages carry the server's times.
        await page.reload()
        await expect(page.locator(tid("user-message"))).to_have_count(1)
        stored = page.locator(f'{tid("user-message")} {tid("msg-time")}')
        await expect(stored).to_have_text(re.compile(r"^(刚刚|\d+ ?分钟前)$"))
        assert "GMT+8" in (await stored.get_attribute("title"))

        # A failed run: the cause in words, the raw error folded away, and Retry.
        await send(page, f"KEY-fail-{size} 这次会失败")
        failed = page.locator(tid("live-run")).last
        await expect(failed).to_have_attribute("data-status", "error", timeout=20_000)
        cause = failed.locator(tid("run-error-cause"))
        await expect(cause).to_have_text("运行失败：模型服务的密钥无效或缺失，请让管理员检查模型配置。")
        await expect(failed.locator(tid("run-error-detail"))).not_to_have_attribute("open", "")
        await expect(failed.locator(tid("retry-run"))).to_have_text("重试")
        await check_view(page, artifacts_dir, f"{size}-failed-run")
        # The same after a reload, from the task's stored error.
        await page.reload()
        await expect(page.locator(tid("run-error-cause"))).to_have_text(
            "运行失败：模型服务的密钥无效或缺失，请让管理员检查模型配置。")
        await page.locator(tid("retry-run")).click()
        again = page.locator(tid("live-run")).last
        await expect(again).to_have_attribute("data-status", "ok", timeout=20_000)
        await expect(again.locator(tid("assistant-text"))).to_have_text("重试成功")
        await expect(page.locator(tid("user-text")).last).to_have_text(f"KEY-fail-{size} 这次会失败")
        await check_view(page, artifacts_dir, f"{size}-messages")
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors


TOOL_SCRIPT = [{"tool_calls": [{"name": "write", "arguments": {"path": "报告.md", "content": "# 报告"}}]},
               {"text": "写好了。"}]


@VIEWPORTS
async def test_refusals_and_tool_cards_are_in_chinese(stack: Stack, browser: Any, artifacts_dir: Path,
                                                       viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    stack.fake.script(f"KEY-tool-{size}", TOOL_SCRIPT)
    context, page = await zh_page(browser, viewport, stack.base_url)
    try:
        await page.goto(stack.base_url + "/")
        await page.locator(tid("login-email")).fill("nobody@example.invalid")
        await page.locator(tid("login-password")).fill("wrong-password")
        await page.locator(tid("login-password-submit")).click()
        await expect(page.locator(tid("login-error"))).to_have_text("登录失败：邮箱或密码不正确")
        await page.locator(tid("tab-key")).click()
        await page.locator(tid("login-user-id")).fill(f"refused{size}")
        await page.locator(tid("login-platform-key")).fill("not-the-key")
        await page.locator(tid("login-key-submit")).click()
        await expect(page.locator(tid("login-error"))).to_have_text("登录失败：平台密钥不正确")
        await check_view(page, artifacts_dir, f"{size}-login-refused")

        await login_with_key(page, stack, f"refused{size}")
        await open_drawer(page, "tasks")
        await page.locator(tid("task-name-input")).fill("坏文件夹")
        await page.locator(tid("task-folder-input")).fill("../出去")
        await page.locator(tid("create-task")).click()
        await expect(page.locator(tid("tasks-error"))).to_contain_text("无法新建任务：名称或路径不被接受")
        assert "working_dir" not in await page.locator(tid("tasks-error")).inner_text()
        await page.locator(tid("task-folder-input")).fill("")
        await close_drawers(page)
        # A refused path through the page's API client: the code's sentence, not the English detail.
        out = await page.evaluate("""async () => { const { api } = await import("/static/js/api.js");
            try { await api("/v1/files/download?path=" + encodeURIComponent("../../etc/passwd")); return null; }
            catch (e) { return [e.status, e.code, e.message, e.serverDetail]; } }""")
        assert out is not None and out[0] in (400, 403, 404) and re.search(r"[\u4e00-\u9fff]", out[2]), out
        assert out[2] != out[3], out

        await create_task(page, "工具卡片")
        await send(page, f"KEY-tool-{size} 写报告")
        run = page.locator(tid("live-run")).last
        await expect(run).to_have_attribute("data-status", "ok")
        card = run.locator(f'{tid("tool-card")}[data-tool="write"]')
        await expect(card.locator(tid("tool-name"))).to_have_text("写入文件")
        await expect(card.locator(tid("tool-subject"))).to_have_text("报告.md")
        await page.reload()
        stored = page.locator(f'{tid("tool-card")}[data-tool="write"]')
        await expect(stored.locator(tid("tool-name"))).to_have_text("写入文件")
        await expect(stored.locator(tid("tool-subject"))).to_have_text("报告.md")
        await check_view(page, artifacts_dir, f"{size}-tool-card-words")
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors
