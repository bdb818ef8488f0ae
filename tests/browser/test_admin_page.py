"""Users in the pages (issue 27): an admin lists, adds, resets, promotes and disables users on the
admin page (the routes `zcbot user` uses); anyone with a password changes their own; a plain user
is refused the admin page politely; the overview's uptime reads as a duration under its own label."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.pagekit import login_with_key, login_with_password, sql, tid
from tests.helpers.stack import Stack
from zcbot_core.accounts.auth import hash_password

try:
    from playwright.async_api import Page, expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)


async def make_admin(stack: Stack, user_id: str, email: str, password: str) -> None:
    await stack.login(user_id)
    sql(stack.settings.zcbot_db_url, "update users set role='admin', email=:e, password_hash=:h where user_id=:u",
        u=user_id, e=email, h=hash_password(password))


async def password_login_status(stack: Stack, email: str, password: str) -> int:
    async with stack.client() as c:
        r = await c.post("/v1/auth/login_password", json={"email": email, "password": password})
    return r.status_code


async def test_plain_user_is_refused_the_admin_page(stack: Stack, page: Page) -> None:
    await login_with_key(page, stack, "plainfrank")
    await expect(page.locator(tid("admin-link"))).to_be_hidden()
    await page.goto(stack.base_url + "/static/admin.html")
    await expect(page.locator(tid("admin-message"))).to_contain_text("管理员角色")
    await expect(page.locator(tid("admin-view"))).to_be_hidden()


async def test_admin_manages_users_and_reads_the_overview(stack: Stack, page: Page) -> None:
    await make_admin(stack, "boss", "boss@example.test", "correct horse battery")
    await page.goto(stack.base_url + "/")
    await page.locator(tid("tab-password")).click()
    await page.locator(tid("login-email")).fill("boss@example.test")
    await page.locator(tid("login-password")).fill("wrong password!")
    await page.locator(tid("login-password-submit")).click()
    await expect(page.locator(tid("login-error"))).to_contain_text("登录失败")
    await login_with_password(page, stack, "boss@example.test", "correct horse battery")
    await page.locator(tid("admin-link")).click()
    await expect(page).to_have_url(re.compile(r"/static/admin\.html$"))
    await expect(page.locator(tid("admin-view"))).to_be_visible()

    # The overview: uptime under its own label, as a duration (not "Uptime seconds: 1m 54s").
    uptime = page.locator(f'{tid("overview-stat")}[data-key="runtime.uptime_seconds"]')
    await expect(uptime.locator("dt")).to_have_text("运行时长")
    await expect(uptime.locator("dd")).to_have_text(re.compile(r"^(\d+ 天 )?(\d+ 小时 )?(\d+ 分 )?(\d+ 秒)?$"))
    await expect(page.locator(tid("usage-models"))).not_to_contain_text("无法加载")

    # Add a user; the new account can sign in.
    users = page.locator(tid("users-list"))
    await expect(users).to_contain_text("boss@example.test")
    await page.locator(tid("new-user-email")).fill("newbie@example.test")
    await page.locator(tid("new-user-password")).fill("a good long password")
    await page.locator(tid("add-user")).click()
    await expect(page.locator(tid("users-status"))).to_have_text("已添加 newbie@example.test。")
    row = users.locator(f'{tid("user-row")}[data-email="newbie@example.test"]')
    await expect(row).to_have_attribute("data-role", "user")
    assert await password_login_status(stack, "newbie@example.test", "a good long password") == 200
    # The same email again is refused, with the server's reason, nothing changed.
    await page.locator(tid("new-user-email")).fill("newbie@example.test")
    await page.locator(tid("new-user-password")).fill("another long password")
    await page.locator(tid("add-user")).click()
    await expect(page.locator(tid("users-status"))).to_contain_text("操作失败")
    assert await password_login_status(stack, "newbie@example.test", "a good long password") == 200

    # A budget: daily 1.5 USD, monthly the server default, in one dialog.
    dialog = page.locator(tid("ask-dialog"))
    await row.locator(tid("user-budget")).click()
    await page.locator(tid("ask-daily")).fill("1.5")
    await page.locator(tid("ask-monthly")).fill("")
    await page.locator(tid("ask-ok")).click()
    await expect(dialog).to_have_count(0)
    await expect(page.locator(tid("users-status"))).to_have_text("已保存。")
    token = await stack.login("boss")
    async with stack.client(token) as c:
        budget = (await c.get("/v1/admin/users/newbie@example.test/budget")).json()
    assert (budget["daily_usd"], budget["monthly_usd"]) == (1.5, None), budget

    # Reset the password (a masked field), promote, then disable (confirmed in a dialog).
    await row.locator(tid("user-reset")).click()
    await expect(page.locator(tid("ask-password"))).to_have_attribute("type", "password")
    await page.locator(tid("ask-password")).fill("reset to this password")
    await page.locator(tid("ask-ok")).click()
    # The dialog's close event is a task of its own: until it has run, the status is the budget's.
    await expect(dialog).to_have_count(0)
    await expect(page.locator(tid("users-status"))).to_have_text("已保存。")
    assert await password_login_status(stack, "newbie@example.test", "reset to this password") == 200
    await row.locator(tid("user-role")).click()
    await expect(row).to_have_attribute("data-role", "admin")
    await row.locator(tid("user-disable")).click()
    await expect(dialog).to_have_attribute("data-kind", "danger")
    await page.locator(tid("ask-ok")).click()
    await expect(row).to_have_attribute("data-role", "disabled")
    await expect(row.locator(tid("user-disable"))).to_have_count(0)
    assert await password_login_status(stack, "newbie@example.test", "reset to this password") == 403
    # Enable (empty password: one is generated and shown this once); no reset on a disabled row.
    await expect(row.locator(tid("user-reset"))).to_have_count(0)
    await row.locator(tid("user-enable")).click()
    await page.locator(tid("ask-ok")).click()
    await expect(row).to_have_attribute("data-role", "user")
    await expect(page.locator(tid("users-status"))).to_contain_text("只显示这一次")
    shown = await page.locator(tid("users-status")).text_content() or ""
    assert await password_login_status(stack, "newbie@example.test", shown.rsplit("：", 1)[1]) == 200


async def test_user_changes_own_password(stack: Stack, browser: Any, page: Page) -> None:
    await make_admin(stack, "gina", "gina@example.test", "the first password")
    await login_with_password(page, stack, "gina@example.test", "the first password")
    await page.locator(tid("account-button")).click()
    dialog = page.locator(tid("account-dialog"))
    await expect(dialog).to_be_visible()
    await expect(page.locator(tid("my-usage"))).to_contain_text("每日：已用 $0.0000")
    await page.locator(tid("old-password")).fill("not my password")
    await page.locator(tid("new-password")).fill("the second password")
    await page.locator(tid("confirm-password")).fill("the second password")
    await page.locator(tid("password-submit")).click()
    await expect(page.locator(tid("password-status"))).to_contain_text("修改失败")
    await page.locator(tid("old-password")).fill("the first password")
    await page.locator(tid("confirm-password")).fill("a different one")
    await page.locator(tid("password-submit")).click()
    await expect(page.locator(tid("password-status"))).to_have_text("两次输入的新密码不一致。")
    await page.locator(tid("confirm-password")).fill("the second password")
    await page.locator(tid("password-submit")).click()
    # The change ends every session, this one too: back to the sign-in with a note.
    await expect(page.locator(tid("login-view"))).to_be_visible()
    await expect(page.locator(tid("login-error"))).to_contain_text("密码已修改")
    assert await password_login_status(stack, "gina@example.test", "the first password") == 403
    await login_with_password(page, stack, "gina@example.test", "the second password")
