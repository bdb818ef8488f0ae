"""Every view of the pages at 1366 px and at 390 px (issue 27): no horizontal overflow, text
contrast (WCAG AA), visible keyboard focus, a screenshot each (test-artifacts/browser/); the phone
layout's drawers; English when the browser's language is English; upload needs a task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import PHONE, WIDE, new_page
from tests.browser.pagekit import (
    assert_focus_visible,
    check_view,
    close_drawers,
    create_task,
    login_with_key,
    login_with_password,
    open_drawer,
    send,
    sql,
    tid,
)
from tests.helpers.stack import Stack
from zcbot_core.accounts.auth import hash_password

try:
    from playwright.async_api import expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)

ANSWER = ("## 本周总结\n\n| 项目 | 状态 | 负责人 |\n| --- | --- | --- |\n| 很长很长的项目名称用于测试表格宽度 | 进行中 | 张三 |\n\n"
          "```bash\necho 'a very long command line that would overflow a phone screen if it did not scroll' && ls -la\n```\n"
          "另外一段很长的没有空格的文字" + "字" * 80 + "\n")


@pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366", "390"])
async def test_every_view_fits_reads_and_shows_focus(stack: Stack, browser: Any, artifacts_dir: Path,
                                                      viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    user = f"viewer{size}"
    stack.fake.script(f"KEY-view-{size}", [{"text": ANSWER}])
    context, page = await new_page(browser, viewport)
    try:
        await page.goto(stack.base_url + "/")
        await expect(page.locator(tid("login-view"))).to_be_visible()
        await expect(page.locator(tid("login-password-submit"))).to_have_text("登录")
        await check_view(page, artifacts_dir, f"{size}-login")
        await assert_focus_visible(page)

        await login_with_key(page, stack, user)
        phone = viewport is PHONE
        if phone:
            # Tasks and files are drawers; the chat has the full width.
            chat = await page.locator(tid("chat-pane")).bounding_box()
            assert chat["width"] >= viewport["width"] - 1, chat
            await expect(page.locator(tid("tasks-pane"))).not_to_be_in_viewport()
            await expect(page.locator(tid("files-pane"))).not_to_be_in_viewport()
        else:
            for pane in ("tasks-pane", "chat-pane", "files-pane"):
                await expect(page.locator(tid(pane))).to_be_in_viewport()
        # No task yet: the composer and the upload are off, and the page says why.
        await expect(page.locator(tid("message-input"))).to_be_disabled()
        await open_drawer(page, "files")
        await expect(page.locator(tid("upload-button"))).to_be_disabled()
        await expect(page.locator(tid("upload-hint"))).to_be_visible()
        await check_view(page, artifacts_dir, f"{size}-files-no-task")
        await close_drawers(page)
        await open_drawer(page, "tasks")
        await expect(page.locator(tid("tasks-empty"))).to_be_visible()
        await check_view(page, artifacts_dir, f"{size}-tasks-empty")
        await close_drawers(page)

        await create_task(page, "周报")
        await expect(page.locator(tid("upload-button"))).to_be_enabled()
        await send(page, f"KEY-view-{size} 写个周报")
        await expect(page.locator(tid("live-run")).last).to_have_attribute("data-status", "ok")
        await expect(page.locator(f'{tid("assistant-text")} table')).to_be_visible()
        await check_view(page, artifacts_dir, f"{size}-chat")
        await page.locator(tid("message-input")).focus()
        await assert_focus_visible(page, presses=1)

        for tab in ("schedules", "skills", "memory"):
            await open_drawer(page, "tasks")
            await page.locator(tid(f"side-tab-{tab}")).click()
            await expect(page.locator(tid(f"{tab}-section"))).to_be_visible()
            await expect(page.locator(tid(f"{tab}-section"))).not_to_contain_text("无法加载")
            await check_view(page, artifacts_dir, f"{size}-{tab}")
        await page.locator(tid("side-tab-tasks")).click()
        await close_drawers(page)
        await open_drawer(page, "files")
        await expect(page.locator(tid("file-crumbs"))).to_contain_text("周报")
        await check_view(page, artifacts_dir, f"{size}-files")
        await close_drawers(page)

        # The password dialog (a user with an email and a password).
        email = f"{user}@example.test"
        sql(stack.settings.zcbot_db_url, "update users set role='admin', email=:e, password_hash=:h where user_id=:u",
            u=user, e=email, h=hash_password("correct horse battery"))
        await login_with_password(page, stack, email, "correct horse battery")
        await page.locator(tid("account-button")).click()
        await expect(page.locator(tid("account-dialog"))).to_be_visible()
        await check_view(page, artifacts_dir, f"{size}-password-dialog")
        await page.keyboard.press("Escape")

        await page.goto(stack.base_url + "/static/admin.html")
        await expect(page.locator(tid("admin-view"))).to_be_visible()
        await expect(page.locator(tid("users-list"))).to_contain_text(email)
        await expect(page.locator(tid("overview-status"))).to_have_text("")
        await check_view(page, artifacts_dir, f"{size}-admin")
        await page.screenshot(path=str(artifacts_dir / f"{size}-admin-full.png"), full_page=True)
        assert not page.page_errors, page.page_errors
    finally:
        await context.close()


async def test_english_browser_gets_english(stack: Stack, browser: Any, artifacts_dir: Path) -> None:
    context, page = await new_page(browser, WIDE, locale="en-US")
    try:
        await page.goto(stack.base_url + "/")
        await expect(page.locator("html")).to_have_attribute("lang", "en")
        await expect(page.locator(tid("login-password-submit"))).to_have_text("Sign in")
        await page.locator(tid("tab-key")).click()
        await page.locator(tid("login-user-id")).fill("english-ed")
        await page.locator(tid("login-platform-key")).fill("not-the-key")
        await page.locator(tid("login-key-submit")).click()
        await expect(page.locator(tid("login-error"))).to_contain_text("Sign-in failed")
        await login_with_key(page, stack, "english-ed")
        await expect(page.locator(tid("create-task"))).to_have_text("Create task")
        await expect(page.locator(tid("tasks-empty"))).to_have_text("No tasks yet; create one.")
        await expect(page.locator(tid("chat-title"))).to_have_text("No task selected")
        await expect(page.locator(tid("send-message"))).to_have_text("Send")
        await check_view(page, artifacts_dir, "1366-english")
        body = await page.locator("body").inner_text()
        assert not any("\u4e00" <= ch <= "\u9fff" for ch in body), body
        assert not page.page_errors, page.page_errors
    finally:
        await context.close()


async def test_chinese_page_has_no_english_labels_left(stack: Stack, page: Any) -> None:
    """Every static label is filled from the dictionary: none is empty or an unknown key."""
    await login_with_key(page, stack, "zh-zoe")
    missing = await page.evaluate("""() => [...document.querySelectorAll('[data-i18n]')]
        .filter((n) => !n.textContent.trim() || /^[a-z_]+\\.[a-z_.]+$/.test(n.textContent.trim()))
        .map((n) => n.dataset.i18n)""")
    assert missing == []
    for label in ("新建任务", "任务", "文件", "定时", "技能", "记忆", "上传"):
        await expect(page.get_by_text(label, exact=True).first).to_be_attached()


async def test_memory_panel_reads_and_skills_mark_user_overrides(stack: Stack, page: Any) -> None:
    user = "memo-mia"
    await stack.login(user)
    root = stack.settings.storage_root / user
    (root / ".memory" / "extended").mkdir(parents=True, exist_ok=True)
    (root / ".memory" / "core.md").write_text("# 关于我\n\n- 喜欢**简洁**的回答\n", encoding="utf-8")
    (root / ".memory" / "extended" / "projects.md").write_text(
        "---\ndescription: 项目清单\n---\n\n1. 周报系统\n", encoding="utf-8")
    (root / ".skills" / "brief").mkdir(parents=True, exist_ok=True)
    (root / ".skills" / "brief" / "SKILL.md").write_text(
        "---\nname: brief\ndescription: 我自己的简报写法\n---\n\n按我的格式写。\n", encoding="utf-8")
    await login_with_key(page, stack, user)
    await page.locator(tid("side-tab-memory")).click()
    core = page.locator(tid("memory-core"))
    await expect(core.locator("h1")).to_have_text("关于我")
    await expect(core.locator("strong")).to_have_text("简洁")
    item = page.locator(tid("memory-file"))
    await expect(item).to_contain_text("projects.md")
    await expect(item).to_contain_text("项目清单")
    await item.locator("summary").click()
    await expect(item.locator("ol li")).to_have_text("周报系统")
    # Read-only: the panel has no control that writes.
    await expect(page.locator(f'{tid("memory-section")} :is(input, textarea, button)')).to_have_count(0)

    await page.locator(tid("side-tab-skills")).click()
    mine = page.locator(f'{tid("skill-item")}[data-name="brief"]')
    await expect(mine).to_have_attribute("data-source", "user")
    await expect(mine.locator(tid("skill-override"))).to_have_text("覆盖内置")
    await expect(mine).to_contain_text("我自己的简报写法")
    await expect(page.locator(f'{tid("skill-item")}[data-name="ppt"] {tid("skill-override")}')).to_have_count(0)
