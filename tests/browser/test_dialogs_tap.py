"""Admin and phone (issue 37): the admin page asks in its own dialogs (no prompt()/confirm()): a new
password is typed into a masked field, a destructive action is confirmed, Cancel and Escape change
nothing, a bad number keeps the dialog open with the reason, Chinese by default and English with the
page's language switch; a schedule's Delete is confirmed the same way on the main page; and every tap target of the main and admin pages is at least 40 px at 390 px.
One stack for the module."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import PHONE, new_page
from tests.browser.pagekit import (
    assert_no_horizontal_overflow,
    check_view,
    close_drawers,
    create_task,
    login_with_password,
    open_drawer,
    send,
    sql,
    tid,
    upload,
)
from tests.helpers.stack import Stack
from zcbot_core.accounts.auth import hash_password

try:
    from playwright.async_api import Page, expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)

MIN_TAP = 40  # px, CSS pixels at a 390 px wide viewport

# The visible things a finger taps, with their boxes. A radio or checkbox is tapped through its
# label (the label is measured); a link inside running text (a message's markdown) is exempt, as in
# WCAG 2.5.8 (inline targets).
TAP_TARGETS = """() => {
  const out = [];
  const sel = "button, a[href], select, input, textarea, summary, [role=button], [role=menuitem], [role=tab], li[tabindex]";
  // Under a modal dialog only the dialog can be tapped.
  const root = document.querySelector("dialog:modal") || document;
  for (const node of root.querySelectorAll(sel)) {
    if (!node.checkVisibility({visibilityProperty: true, opacityProperty: false})) continue;
    if (node.closest(".md") && node.tagName === "A") continue;
    let target = node;
    if (node.tagName === "INPUT" && (node.type === "radio" || node.type === "checkbox")) target = node.closest("label") || node;
    // A visually hidden input (the file choosers) is tapped through its label.
    if (node.classList.contains("visually-hidden")) target = node.labels && node.labels[0];
    if (!target || !target.checkVisibility({visibilityProperty: true})) continue;
    const r = target.getBoundingClientRect();
    if (!r.width || !r.height) continue;
    // Off-screen (a closed drawer slid away, scrolled out of a pane): not tappable now.
    if (r.right <= 0 || r.left >= innerWidth) continue;
    out.push({what: node.tagName.toLowerCase() + (node.dataset.testid ? "[" + node.dataset.testid + "]" : "")
      + (node.className ? "." + String(node.className).split(" ")[0] : ""), w: Math.round(r.width * 10) / 10,
      h: Math.round(r.height * 10) / 10});
  }
  return out;
}"""


async def small_targets(page: Page) -> tuple[int, list[dict[str, Any]]]:
    found = await page.evaluate(TAP_TARGETS)
    return len(found), [f for f in found if f["w"] < MIN_TAP or f["h"] < MIN_TAP]


async def assert_tap_targets(page: Page, where: str, at_least: int) -> None:
    count, small = await small_targets(page)
    assert count >= at_least, (where, count)
    assert small == [], (where, len(small), small)
    # The taller targets must not push anything off the side of the phone.
    await assert_no_horizontal_overflow(page)


async def make_admin(stack: Stack, user_id: str, email: str, password: str) -> None:
    await stack.login(user_id)
    sql(stack.settings.zcbot_db_url, "update users set role='admin', email=:e, password_hash=:h where user_id=:u",
        u=user_id, e=email, h=hash_password(password))


async def add_user(page: Page, email: str) -> Any:
    await page.locator(tid("new-user-email")).fill(email)
    await page.locator(tid("new-user-password")).fill("a good long password")
    await page.locator(tid("add-user")).click()
    row = page.locator(f'{tid("user-row")}[data-email="{email}"]')
    await expect(row).to_have_attribute("data-role", "user")
    return row


async def delete_schedule_after_confirming(page: Page) -> None:
    """The schedule's Delete asks first (a red dialog starting on Cancel); Cancel keeps it."""
    item = page.locator(tid("schedule-item"))
    await expect(item).to_have_count(1)
    await item.locator(tid("schedule-delete")).click()
    dialog = page.locator(tid("ask-dialog"))
    await expect(dialog).to_have_attribute("data-kind", "danger")
    await expect(page.locator(tid("ask-message"))).to_have_text("删除定时任务“晨报”？")
    await assert_tap_targets(page, "schedule delete dialog", 2)
    await page.locator(tid("ask-cancel")).click()
    await expect(dialog).to_have_count(0)
    await expect(item).to_have_count(1)
    await item.locator(tid("schedule-delete")).click()
    await page.locator(tid("ask-ok")).click()
    await expect(page.locator(tid("schedules-empty"))).to_be_visible()


async def test_admin_dialogs_mask_confirm_cancel_at_390(stack: Stack, browser: Any, artifacts_dir: Path) -> None:
    context, page = await new_page(browser, PHONE)
    try:
        await make_admin(stack, "dlgboss", "dlgboss@example.test", "correct horse battery")
        await login_with_password(page, stack, "dlgboss@example.test", "correct horse battery")
        await page.goto(stack.base_url + "/static/admin.html")
        await expect(page.locator(tid("admin-view"))).to_be_visible()
        row = await add_user(page, "dlguser@example.test")
        dialog = page.locator(tid("ask-dialog"))

        # Reset password: a masked field, in Chinese; the screenshot shows the dialog at 390 px.
        await row.locator(tid("user-reset")).click()
        await expect(dialog).to_be_visible()
        await expect(dialog.locator("h2")).to_have_text("重置 dlguser@example.test 的密码")
        await expect(page.locator(tid("ask-password"))).to_have_attribute("type", "password")
        await expect(page.locator(tid("ask-password"))).to_be_focused()
        await expect(page.locator(tid("ask-cancel"))).to_have_text("取消")
        await page.locator(tid("ask-password")).fill("secret typed here")
        await check_view(page, artifacts_dir, "admin-reset-dialog-390")
        box = await dialog.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
        await assert_tap_targets(page, "reset dialog", 2)
        # An empty password keeps the dialog open with the reason; Escape cancels: nothing changed.
        await page.locator(tid("ask-password")).fill("")
        await page.locator(tid("ask-ok")).click()
        await expect(page.locator(tid("ask-error"))).to_have_text("请输入新密码。")
        await page.keyboard.press("Escape")
        await expect(dialog).to_have_count(0)
        await expect(page.locator(tid("users-status"))).to_have_text("已添加 dlguser@example.test。")

        # Budget: a bad number is refused in the dialog; Cancel leaves the budget alone.
        await row.locator(tid("user-budget")).click()
        await page.locator(tid("ask-daily")).fill("-3")
        await page.locator(tid("ask-ok")).click()
        await expect(page.locator(tid("ask-error"))).to_have_text("上限必须是不小于 0 的数字。")
        await page.locator(tid("ask-cancel")).click()
        await expect(dialog).to_have_count(0)
        token = await stack.login("dlgboss")
        async with stack.client(token) as c:
            budget = (await c.get("/v1/admin/users/dlguser@example.test/budget")).json()
        assert (budget["daily_usd"], budget["monthly_usd"]) == (None, None), budget

        # Disable: a confirmation that starts on Cancel (Enter does not disable by accident).
        await row.locator(tid("user-disable")).click()
        await expect(dialog).to_have_attribute("data-kind", "danger")
        await expect(page.locator(tid("ask-message"))).to_have_text("停用用户 dlguser@example.test？其登录会立即失效。")
        await expect(page.locator(tid("ask-cancel"))).to_be_focused()
        await page.screenshot(path=str(artifacts_dir / "admin-disable-confirm-390.png"))
        await page.keyboard.press("Enter")
        await expect(dialog).to_have_count(0)
        await expect(row).to_have_attribute("data-role", "user")
        await row.locator(tid("user-disable")).click()
        await page.locator(tid("ask-ok")).click()
        await expect(row).to_have_attribute("data-role", "disabled")

        # Enable with a typed password (masked) that then signs in.
        await row.locator(tid("user-enable")).click()
        await expect(page.locator(tid("ask-password"))).to_have_attribute("type", "password")
        await page.locator(tid("ask-password")).fill("enabled with this one")
        await page.locator(tid("ask-ok")).click()
        await expect(row).to_have_attribute("data-role", "user")
        async with stack.client() as c:
            r = await c.post("/v1/auth/login_password", json={"email": "dlguser@example.test",
                                                              "password": "enabled with this one"})
        assert r.status_code == 200, r.text

        # English when the page's language is English (the switch's remembered choice).
        await page.evaluate("localStorage.setItem('zcbot.lang', 'en')")
        await page.reload()
        await row.locator(tid("user-disable")).click()
        await expect(dialog.locator("h2")).to_have_text("Disable user")
        await expect(page.locator(tid("ask-cancel"))).to_have_text("Cancel")
        await expect(page.locator(tid("ask-ok"))).to_have_text("Disable")
        await page.locator(tid("ask-cancel")).click()
        await expect(row).to_have_attribute("data-role", "user")
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors


async def test_tap_targets_at_390(stack: Stack, browser: Any, artifacts_dir: Path) -> None:
    context, page = await new_page(browser, PHONE)
    try:
        await make_admin(stack, "tapboss", "tapboss@example.test", "correct horse battery")
        await login_with_password(page, stack, "tapboss@example.test", "correct horse battery")
        await assert_tap_targets(page, "main, no task", 4)
        await create_task(page, "手指")
        stack.fake.script("KEY-tap", [
            {"tool_calls": [{"name": "schedule_create", "arguments": {
                "name": "晨报", "cron": "0 9 * * 1-5", "timezone": "Asia/Shanghai", "prompt": "写晨报"}}]},
            {"text": "好的，代码如下：\n\n```python\nprint(1)\n```"}])
        await send(page, "KEY-tap 你好")
        await expect(page.locator(tid("live-run")).last).to_have_attribute("data-status", "ok")
        await assert_tap_targets(page, "main, a conversation", 6)
        await open_drawer(page, "tasks")
        await assert_tap_targets(page, "tasks drawer", 6)
        for tab in ("schedules", "skills", "memory"):
            await page.locator(tid(f"side-tab-{tab}")).click()
            await expect(page.locator(tid(f"{tab}-section"))).to_be_visible()
            await assert_tap_targets(page, f"tasks drawer, {tab}", 4)
            if tab == "schedules":
                await delete_schedule_after_confirming(page)
        await page.locator(tid("side-tab-tasks")).click()
        await close_drawers(page)
        await upload(page, "笔记.txt", "text/plain", "一行字".encode())
        await assert_tap_targets(page, "files drawer", 4)
        await close_drawers(page)
        await page.locator(tid("task-menu-open")).click()
        await expect(page.locator(tid("task-dialog"))).to_be_visible()
        await assert_tap_targets(page, "task menu", 3)
        await page.keyboard.press("Escape")
        await page.locator(tid("prefs-button")).click()
        await assert_tap_targets(page, "prefs dialog", 3)
        await page.keyboard.press("Escape")
        await page.locator(tid("account-button")).click()
        await assert_tap_targets(page, "account dialog", 3)
        await page.keyboard.press("Escape")

        await page.goto(stack.base_url + "/static/admin.html")
        await expect(page.locator(tid("users-list"))).to_contain_text("tapboss@example.test")
        await add_user(page, "tapuser@example.test")
        await assert_tap_targets(page, "admin page", 8)
        await page.screenshot(path=str(artifacts_dir / "admin-page-390.png"), full_page=True)
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors
