"""What the browser tests do to the page and check on it: sign in, create a task, send; and the
checks every view gets (no horizontal overflow, visible keyboard focus, text contrast, screenshot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from tests.helpers.stack import Stack

try:
    from playwright.async_api import Page, expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    Page = Any  # type: ignore[misc,assignment]


def tid(name: str) -> str:
    return f'[data-testid="{name}"]'


def sql(url: str, statement: str, **params: object) -> None:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.begin() as conn:
            conn.execute(text(statement), params)
    finally:
        engine.dispose()


async def login_with_key(page: Page, stack: Stack, user_id: str) -> None:
    await page.goto(stack.base_url + "/")
    await expect(page.locator(tid("login-view"))).to_be_visible()
    await page.locator(tid("tab-key")).click()
    await page.locator(tid("login-user-id")).fill(user_id)
    await page.locator(tid("login-platform-key")).fill(stack.settings.platform_key)
    await page.locator(tid("login-key-submit")).click()
    await expect(page.locator(tid("app-view"))).to_be_visible()
    await expect(page.locator(tid("whoami"))).to_have_text(user_id)


async def login_with_password(page: Page, stack: Stack, email: str, password: str) -> None:
    await page.goto(stack.base_url + "/")
    await expect(page.locator(tid("login-view"))).to_be_visible()
    await page.locator(tid("tab-password")).click()
    await page.locator(tid("login-email")).fill(email)
    await page.locator(tid("login-password")).fill(password)
    await page.locator(tid("login-password-submit")).click()
    await expect(page.locator(tid("app-view"))).to_be_visible()


async def open_drawer(page: Page, name: str) -> None:
    """At 390 px the tasks/files panes are drawers; at 1366 px this does nothing."""
    toggle = page.locator(tid(f"open-{name}"))
    if await toggle.is_visible() and await toggle.get_attribute("aria-expanded") != "true":
        await toggle.click()
        await expect(page.locator(tid(f"{name}-pane"))).to_be_in_viewport()
        # Slid in all the way (the drawer's transition is over).
        await page.wait_for_function("""(id) => { const r = document.querySelector(`[data-testid="${id}"]`)
            .getBoundingClientRect(); return r.left >= 0 && r.right <= document.documentElement.clientWidth + 1; }""",
                                     arg=f"{name}-pane")


async def close_drawers(page: Page) -> None:
    if await page.locator(tid("drawer-scrim")).is_visible():
        await page.keyboard.press("Escape")
        await expect(page.locator(tid("drawer-scrim"))).to_be_hidden()


async def create_task(page: Page, name: str, folder: str = "") -> None:
    await open_drawer(page, "tasks")
    await page.locator(tid("task-name-input")).fill(name)
    if folder:
        await page.locator(tid("task-folder-input")).fill(folder)
    await page.locator(tid("create-task")).click()
    await expect(page.locator(tid("chat-title"))).to_have_text(name)
    await expect(page.locator(f'{tid("task-item")}[aria-current="true"]')).to_contain_text(name)
    await close_drawers(page)


async def upload(page: Page, name: str, mime: str, data: bytes) -> None:
    await open_drawer(page, "files")
    await page.locator(tid("file-input")).set_input_files(files=[{"name": name, "mimeType": mime, "buffer": data}])
    await page.locator(tid("upload-button")).click()
    await expect(page.locator(f'{tid("file-entry")}[data-name="{name}"]')).to_be_visible()


async def send(page: Page, content: str) -> None:
    await page.locator(tid("message-input")).fill(content)
    await page.locator(tid("send-message")).click()


OVERFLOW = """() => {
  const doc = document.documentElement;
  const wide = [];
  // A wide table or code block may scroll inside its own box when that box fits (not a whole
  // pane or the message list: a bubble cut off on the right is what this check is for).
  const clipped = (node) => {
    const box = node.closest(".table-wrap, .md-table, pre");
    return box !== null && box !== node && getComputedStyle(box).overflowX !== "visible"
      && box.getBoundingClientRect().right <= doc.clientWidth + 1;
  };
  for (const node of document.querySelectorAll("body *")) {
    const r = node.getBoundingClientRect();
    if (!r.width || getComputedStyle(node).visibility === "hidden") continue;
    // Closed drawers are off-screen on purpose (visibility: hidden, skipped above); an open one is checked.
    if (r.right > doc.clientWidth + 1 && !clipped(node)) wide.push(node.tagName + "." + node.className);
  }
  return {scroll: doc.scrollWidth, client: doc.clientWidth, body: document.body.scrollWidth, wide: wide.slice(0, 5)};
}"""


async def assert_no_horizontal_overflow(page: Page) -> None:
    out = await page.evaluate(OVERFLOW)
    assert out["scroll"] <= out["client"] and out["body"] <= out["client"], out
    assert out["wide"] == [], out


CONTRAST = """() => {
  // WCAG relative luminance of the first opaque background up the tree; text over it.
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const bgOf = (node) => {
    for (let n = node; n; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor);
      if (c.length >= 3 && (c.length < 4 || c[3] > 0.9)) return c;
    }
    return [255, 255, 255];
  };
  const bad = [];
  let checked = 0;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let t = walker.nextNode(); t; t = walker.nextNode()) {
    const node = t.parentElement;
    if (!t.textContent.trim() || !node || !node.checkVisibility({visibilityProperty: true})) continue;
    const style = getComputedStyle(node);
    if (Number(style.opacity) < 1 || node.closest("button:disabled, [disabled]")) continue;
    const a = lum(rgb(style.color)), b = lum(bgOf(node));
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    checked += 1;
    if (ratio < 4.5) bad.push([t.textContent.trim().slice(0, 30), ratio.toFixed(2), style.color]);
  }
  return {checked, bad: bad.slice(0, 8)};
}"""


async def assert_contrast(page: Page) -> None:
    """Every visible text meets WCAG AA for normal text (4.5:1) against its background."""
    out = await page.evaluate(CONTRAST)
    assert out["checked"] > 0 and out["bad"] == [], out


FOCUS_RING = """() => {
  const n = document.activeElement;
  if (!n || n === document.body) return null;
  const s = getComputedStyle(n);
  return {tag: n.tagName, outline: s.outlineStyle, width: parseFloat(s.outlineWidth), shadow: s.boxShadow};
}"""


async def assert_focus_visible(page: Page, presses: int = 3) -> None:
    """Tab moves keyboard focus to something, and each focused element draws a visible ring."""
    for _ in range(presses):
        await page.keyboard.press("Tab")
        ring = await page.evaluate(FOCUS_RING)
        assert ring is not None, "Tab focused nothing"
        assert (ring["outline"] != "none" and ring["width"] >= 2) or ring["shadow"] != "none", ring


async def check_view(page: Page, artifacts: Path, name: str) -> None:
    """The checks every view gets, and its screenshot as a CI artefact."""
    await assert_no_horizontal_overflow(page)
    await assert_contrast(page)
    await page.screenshot(path=str(artifacts / f"{name}.png"))
