"""The settings dialog's WeCom binding (issue 40: the state, the one-time code, the QR scan, unbind;
refusals in Chinese) and the admin users table as cards on a phone (issue 37), in Chromium against
the real stack with the channel tests' fake WeCom. One stack for the module, WeCom configured."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from tests.browser.conftest import PHONE, WIDE, new_page
from tests.browser.pagekit import check_view, login_with_key, login_with_password, tid
from tests.browser.test_dialogs_tap import add_user, assert_tap_targets, make_admin
from tests.channels.conftest import sent_code
from tests.channels.fakes import FakeWeCom
from tests.helpers.stack import Stack, open_stack
from zcbot_core.channels.settings import DEFAULT_WECOM_LOGIN_URL
from zcbot_fakellm import FakeLLM

try:
    from playwright.async_api import expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)

VIEWPORTS = pytest.mark.parametrize("viewport", [WIDE, PHONE], ids=["1366", "390"])


@pytest.fixture(scope="module")
async def wecom() -> AsyncIterator[FakeWeCom]:
    fake = FakeWeCom(members=("alice_w", "bob_w", "carol_w"))
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture(scope="module")
async def stack(module_settings_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory,
                wecom: FakeWeCom) -> AsyncIterator[Stack]:
    """The browser tests' stack, with the gateway's WeCom sender pointed at the fake WeCom."""
    fake = FakeLLM(strict=True)
    await fake.start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for key, value in {"ZCBOT_WECOM_CORP_ID": wecom.corp_id, "ZCBOT_WECOM_AGENT_ID": str(wecom.agent_id),
                               "ZCBOT_WECOM_SECRET": wecom.secret, "ZCBOT_WECOM_BASE_URL": wecom.base_url}.items():
                mp.setenv(key, value)
            async with open_stack(module_settings_env, mp.setenv, tmp_path_factory.mktemp("stack"), fake) as st:
                yield st
    finally:
        await fake.stop()


async def open_settings(page: Any) -> Any:
    await page.locator(tid("prefs-button")).click()
    box = page.locator(tid("prefs-wecom"))
    await expect(box).to_be_visible()
    return box


@VIEWPORTS
async def test_wecom_binding_by_code_and_unbind(stack: Stack, wecom: FakeWeCom, browser: Any, artifacts_dir: Path,
                                               viewport: dict[str, int]) -> None:
    size = str(viewport["width"])
    userid = "alice_w" if size == "1366" else "bob_w"
    context, page = await new_page(browser, viewport)
    try:
        await login_with_key(page, stack, f"wecom{size}")
        box = await open_settings(page)
        await expect(page.locator("#prefs-title")).to_have_text("设置")
        await expect(box).to_have_attribute("data-state", "none")
        state = page.locator(tid("wecom-state"))
        await expect(state).to_have_text("未绑定。绑定后可以在企业微信里直接给 zcbot 发消息。")
        error = page.locator(tid("wecom-error"))

        # A member WeCom does not know: said in Chinese, nothing sent.
        await page.locator(tid("wecom-userid")).fill("nobody_w")
        await page.locator(tid("wecom-send")).click()
        await expect(error).to_have_text("企业微信里没有这个账号（或它不在应用的可见范围内），请核对账号。")
        # The real member: the code goes to WeCom; the dialog asks for it.
        await page.locator(tid("wecom-userid")).fill(userid)
        await page.locator(tid("wecom-send")).click()
        await expect(box).to_have_attribute("data-state", "code_sent")
        await expect(state).to_have_text(f"验证码已发到企业微信账号 {userid}，10 分钟内有效。")
        await expect(error).to_have_text("")
        code = sent_code(wecom, userid)
        if size == "390":
            await assert_tap_targets(page, "wecom code form", 4)
        wrong = f"{(int(code) + 1) % 1_000_000:06d}"
        await page.locator(tid("wecom-code")).fill(wrong)
        await page.locator(tid("wecom-verify")).click()
        await expect(error).to_have_text("验证码不对，还可以再试 4 次。")
        await check_view(page, artifacts_dir, f"{size}-wecom-code")
        await page.locator(tid("wecom-code")).fill(code)
        await page.locator(tid("wecom-verify")).click()
        await expect(box).to_have_attribute("data-state", "active")
        await expect(state).to_have_text(f"已绑定企业微信账号 {userid}（验证码验证）。")
        await expect(page.locator(tid("wecom-toast"))).to_have_text("企业微信已绑定。×")

        # Reopened, the dialog reads the binding from the server.
        await page.locator(tid("prefs-close")).click()
        await page.reload()
        box = await open_settings(page)
        await expect(box).to_have_attribute("data-state", "active")
        await check_view(page, artifacts_dir, f"{size}-wecom-bound")

        # Unbind: confirmed in a red dialog that starts on Cancel.
        await page.locator(tid("wecom-unbind")).click()
        await expect(page.locator(tid("ask-dialog"))).to_have_attribute("data-kind", "danger")
        await expect(page.locator(tid("ask-cancel"))).to_be_focused()
        await page.locator(tid("ask-cancel")).click()
        await expect(box).to_have_attribute("data-state", "active")
        await page.locator(tid("wecom-unbind")).click()
        await page.locator(tid("ask-ok")).click()
        await expect(box).to_have_attribute("data-state", "none")
        token = await stack.login(f"wecom{size}")
        async with stack.client(token) as c:
            assert (await c.get("/v1/channels")).json()["items"] == []
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors


async def test_wecom_binding_by_scan_comes_back_to_the_page(stack: Stack, wecom: FakeWeCom, browser: Any) -> None:
    context, page = await new_page(browser)
    scanned: list[str] = []

    async def wecom_login_page(route: Any) -> None:
        """WeCom's QR page: the member scans and confirms; WeCom sends the browser back."""
        query = parse_qs(urlparse(route.request.url).query)
        assert query["login_type"] == ["CorpApp"] and query["appid"] == [wecom.corp_id]
        back = query["redirect_uri"][0] + "?" + urlencode({"code": wecom.scan(scanned[0]), "state": query["state"][0],
                                                          "appid": wecom.corp_id})
        await route.fulfill(status=302, headers={"Location": back})

    try:
        await page.route(DEFAULT_WECOM_LOGIN_URL + "*", wecom_login_page)
        await login_with_key(page, stack, "scanner")
        # A scanner outside the enterprise: back on the page with the reason, in Chinese.
        scanned.append(None)  # type: ignore[arg-type]
        await open_settings(page)
        await page.locator(tid("wecom-scan")).click()
        await expect(page.locator(tid("wecom-toast"))).to_contain_text("扫码绑定没有成功：扫码的账号不是本企业的成员")
        assert "wecom_binding" not in page.url
        # A member: bound, said so, and the dialog shows it.
        scanned[0] = "carol_w"
        await open_settings(page)
        await page.locator(tid("wecom-scan")).click()
        await expect(page.locator(tid("wecom-toast"))).to_have_text("企业微信已绑定。×")
        assert "wecom_binding" not in page.url
        await open_settings(page)
        await expect(page.locator(tid("wecom-state"))).to_have_text("已绑定企业微信账号 carol_w（扫码验证）。")
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors


async def test_admin_users_are_cards_on_a_phone(stack: Stack, browser: Any, artifacts_dir: Path) -> None:
    context, page = await new_page(browser, PHONE)
    try:
        await make_admin(stack, "cardboss", "cardboss@example.test", "correct horse battery")
        await login_with_password(page, stack, "cardboss@example.test", "correct horse battery")
        await page.goto(stack.base_url + "/static/admin.html")
        await expect(page.locator(tid("admin-view"))).to_be_visible()
        row = await add_user(page, "a-rather-long-address.for-the-card-test@example.test")
        # A card: the row is a block as wide as the table, each cell labelled with its column.
        layout = await row.evaluate("""(tr) => ({display: getComputedStyle(tr).display,
            labels: [...tr.cells].map((td) => getComputedStyle(td, "::before").content),
            width: tr.getBoundingClientRect().width, table: tr.closest("table").getBoundingClientRect().width})""")
        assert layout["display"] == "block" and abs(layout["width"] - layout["table"]) < 2, layout
        assert layout["labels"] == ["none", '"角色"', '"有密码"', '"创建时间"', "none"], layout
        # No button is set one character per line: each is one line of text, inside the screen.
        buttons = await row.locator("button").evaluate_all("""(bs) => bs.map((b) => {
            const range = document.createRange();
            range.selectNodeContents(b);  // the text's line boxes: one top per line
            const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size;
            return {text: b.textContent, lines, right: b.getBoundingClientRect().right}; })""")
        assert len(buttons) == 4 and all(b["lines"] <= 1 and b["right"] <= PHONE["width"] for b in buttons), buttons
        await assert_tap_targets(page, "admin users cards", 6)
        await check_view(page, artifacts_dir, "390-admin-user-cards")
        # Every table of the admin page (usage, storage) is cards too.
        assert await page.locator("table.data").count() >= 2
        assert await page.locator("table.data:not(.cards)").count() == 0
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors
