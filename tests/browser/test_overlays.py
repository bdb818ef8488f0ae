"""What opens over the page, in the real browser: toasts cover no control (Send above all) at 1366 px
and 390 px; the upload picker speaks the page's language, not the browser's; drawers and dialogs
keep Tab inside them and give focus back to their opener when they close."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import PHONE, WIDE, new_page
from tests.browser.pagekit import (
    check_view,
    create_task,
    login_with_key,
    login_with_password,
    open_drawer,
    sql,
    tid,
)
from tests.helpers.stack import Stack
from zcbot_core.accounts.auth import hash_password

try:
    from playwright.async_api import Page, expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)

LONG_TOAST = "后台作业已结束（exited 0）：python scripts/build_weekly_report.py --all-projects --since 2026-01-01 — 任务“周报”"

# The page's own toast(), as a background job's end or a restore calls it (same module instance).
SHOW_TOAST = "(text) => import('/static/js/toast.js').then((m) => { m.toast(text, 'info', 'probe-toast'); })"

# Every control a sighted user can hit that the toast overlaps (the conversation's own content
# scrolls out from under it, so the message list is not counted; with a drawer open, what is behind
# its backdrop cannot be hit anyway).
COVERED = """() => {
  const t = document.querySelector('[data-testid="probe-toast"]').getBoundingClientRect();
  const drawer = document.body.dataset.drawer;
  const hit = [];
  for (const n of document.querySelectorAll('button, input, textarea, select, a[href], summary, label[for]')) {
    if (n.closest('#toasts, #messages') || !n.checkVisibility({visibilityProperty: true})) continue;
    if (drawer && n.closest('.panes') && !n.closest(`.pane[data-drawer="${drawer}"]`)) continue;
    let r = n.getBoundingClientRect();
    if (r.width <= 1 && r.height <= 1) continue; // visually hidden (the file input: its label is checked)
    if (r.left < t.right && t.left < r.right && r.top < t.bottom && t.top < r.bottom) hit.push(n.dataset.testid || n.id);
  }
  return hit;
}"""

WHO = """() => { const n = document.activeElement;
  return n ? (n.dataset.testid || n.id || n.tagName) + (n.dataset.name ? ':' + n.dataset.name : '') : null; }"""


def overlaps(a: dict[str, float], b: dict[str, float]) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] \
        and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"]


async def show_toast(page: Page) -> Any:
    await page.evaluate(SHOW_TOAST, LONG_TOAST)
    toast = page.locator(tid("probe-toast"))
    await expect(toast).to_be_visible()
    return toast


@pytest.mark.parametrize("viewport", [WIDE, {**WIDE, "height": 768}, PHONE], ids=["1366x860", "1366x768", "390"])
async def test_toast_covers_no_control(stack: Stack, browser: Any, artifacts_dir: Path, viewport: dict[str, int]) -> None:
    name = f'{viewport["width"]}x{viewport["height"]}'
    context, page = await new_page(browser, viewport)
    try:
        await login_with_key(page, stack, f"toast-{name}")
        await create_task(page, "周报")
        toast = await show_toast(page)
        assert not overlaps(await toast.bounding_box(), await page.locator(tid("send-message")).bounding_box())
        assert await page.evaluate(COVERED) == []
        await page.screenshot(path=str(artifacts_dir / f"{name}-toast.png"))
        await toast.get_by_role("button").click()  # its own dismiss button takes the click
        await expect(toast).to_have_count(0)
        if viewport is PHONE:
            # Over an open drawer it moves off the drawer's tabs and upload.
            await open_drawer(page, "files")
            await show_toast(page)
            assert await page.evaluate(COVERED) == []
            await page.screenshot(path=str(artifacts_dir / f"{name}-toast-drawer.png"))
        assert not page.page_errors, page.page_errors
    finally:
        await context.close()


@pytest.mark.parametrize(("locale", "pick", "none", "two"),
                         [("zh-CN", "选择文件", "未选择文件", "已选 2 个文件：a.txt, b.txt"),
                          ("en-US", "Choose files", "No file chosen", "2 chosen: a.txt, b.txt")], ids=["zh", "en"])
async def test_upload_picker_speaks_the_page_language(stack: Stack, browser: Any, artifacts_dir: Path, locale: str,
                                                       pick: str, none: str, two: str) -> None:
    context, page = await new_page(browser, WIDE, locale=locale)
    try:
        await login_with_key(page, stack, f"picker-{locale}")
        await create_task(page, "files")
        form = page.locator(tid("upload-form"))
        await expect(page.locator(tid("file-pick"))).to_have_text(pick)
        await expect(page.locator(tid("file-chosen"))).to_have_text(none)
        # The browser's own "Choose Files / No file chosen" is not on screen (the input is 1 px, clipped).
        box = await page.locator(tid("file-input")).bounding_box()
        assert box is not None and box["width"] <= 1 and box["height"] <= 1, box
        await page.screenshot(path=str(artifacts_dir / f"1366-upload-picker-{locale}.png"))
        # The keyboard reaches the real input (named by the visible label), and the label shows the ring.
        await page.locator(tid("upload-button")).focus()
        await page.keyboard.press("Shift+Tab")
        assert await page.evaluate(WHO) == "file-input"
        await expect(page.get_by_label(pick)).to_have_attribute("type", "file")
        ring = await page.locator(tid("file-pick")).evaluate("(n) => getComputedStyle(n).outlineStyle")
        assert ring != "none"
        await page.locator(tid("file-input")).set_input_files(files=[
            {"name": "a.txt", "mimeType": "text/plain", "buffer": b"a"},
            {"name": "b.txt", "mimeType": "text/plain", "buffer": b"b"}])
        await expect(page.locator(tid("file-chosen"))).to_have_text(two)
        await page.locator(tid("upload-button")).click()
        await expect(page.locator(f'{tid("file-entry")}[data-name="b.txt"]')).to_be_visible()
        await expect(page.locator(tid("file-chosen"))).to_have_text(none)  # the form is ready for the next
        # Nothing in the other language is left on the form.
        text = await form.inner_text()
        assert not re.search("[A-Za-z]" if locale == "zh-CN" else "[\u4e00-\u9fff]", text), text
        assert not page.page_errors, page.page_errors
    finally:
        await context.close()


async def tab_cycle(page: Page, root: str, limit: int = 60) -> list[str]:
    """Tab from the focused element until focus comes back to it; every stop must be inside `root`."""
    start = await page.evaluate(WHO)
    seen = [start]
    for _ in range(limit):
        await page.keyboard.press("Tab")
        inside = await page.locator(root).evaluate("(r) => r.contains(document.activeElement)")
        now = await page.evaluate(WHO)
        assert inside, f"Tab left {root} for {now} after {seen}"
        if now == start:
            return seen
        seen.append(now)
    raise AssertionError(f"Tab never came back to {start}: {seen}")


async def assert_trapped(page: Page, root: str) -> None:
    """Tab from the last stop lands on the first, Shift+Tab from the first on the last."""
    stops = await tab_cycle(page, root)
    assert len(stops) >= 2, stops
    first, last = stops[0], stops[-1]
    await page.keyboard.press("Shift+Tab")
    assert await page.evaluate(WHO) == last
    await page.keyboard.press("Tab")
    assert await page.evaluate(WHO) == first
    await page.keyboard.press("Shift+Tab")
    await page.keyboard.press("Shift+Tab")
    assert await page.evaluate(WHO) == stops[-2]


async def test_drawers_and_dialogs_hold_focus_and_give_it_back(stack: Stack, phone: Page, artifacts_dir: Path) -> None:
    page = phone
    user = "trap-tia"
    await login_with_key(page, stack, user)
    await create_task(page, "周报")
    for name in ("tasks", "files"):
        await page.locator(tid(f"open-{name}")).focus()
        await page.keyboard.press("Enter")
        await expect(page.locator(tid(f"open-{name}"))).to_have_attribute("aria-expanded", "true")
        await assert_trapped(page, tid(f"{name}-pane"))
        await page.keyboard.press("Escape")
        await expect(page.locator(tid("drawer-scrim"))).to_be_hidden()
        await expect(page.locator(tid(f"open-{name}"))).to_be_focused()
    # The backdrop closes it too, and focus still goes back to the header button.
    await page.locator(tid("open-files")).click()
    await open_drawer(page, "files")
    await page.locator(tid("drawer-scrim")).click(position={"x": 10, "y": 300})
    await expect(page.locator(tid("open-files"))).to_be_focused()

    # A modal dialog (the password one) the same way.
    email = f"{user}@example.test"
    sql(stack.settings.zcbot_db_url, "update users set email=:e, password_hash=:h where user_id=:u",
        u=user, e=email, h=hash_password("correct horse battery"))
    await login_with_password(page, stack, email, "correct horse battery")
    await page.locator(tid("account-button")).focus()
    await page.keyboard.press("Enter")
    await expect(page.locator(tid("old-password"))).to_be_focused()
    await assert_trapped(page, tid("account-dialog"))
    await check_view(page, artifacts_dir, "390-password-dialog-trapped")
    await page.keyboard.press("Escape")
    await expect(page.locator(tid("account-dialog"))).to_be_hidden()
    await expect(page.locator(tid("account-button"))).to_be_focused()
