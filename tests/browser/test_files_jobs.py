"""Files and background jobs in the page (issue 27): upload and download (previews are in
test_previews.py), and a background job's card (spinner, elapsed, Stop), restored after a reload,
the composer locked while it runs, and a toast when it ends even in another task."""

from __future__ import annotations

import pytest

from tests.browser.pagekit import close_drawers, create_task, login_with_key, open_drawer, send, tid, upload
from tests.helpers.stack import Stack

try:
    from playwright.async_api import Page, expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)


async def test_upload_and_download(stack: Stack, page: Page) -> None:
    await login_with_key(page, stack, "filer-erin")
    await create_task(page, "资料", folder="docs")
    await open_drawer(page, "files")
    await expect(page.locator(tid("file-crumbs"))).to_contain_text("docs")
    await expect(page.locator(tid("files-status"))).to_have_text("文件夹是空的。")

    payload = "列一,列二\n1,2\n".encode()
    await upload(page, "数据.csv", "text/csv", payload)
    entry = page.locator(f'{tid("file-entry")}[data-name="数据.csv"]')
    await expect(entry).to_contain_text(f"{len(payload)} B")
    await expect(entry.locator(tid("file-preview"))).to_have_count(1)  # a table in the page (issue 37)
    async with page.expect_download() as info:
        await entry.locator(tid("file-download")).click()
    download = await info.value
    assert download.suggested_filename == "数据.csv"
    assert (await download.path()).read_bytes() == payload

    await close_drawers(page)


BACKGROUND = [
    {"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 60", "background": True}}]},
    {"text": "已在后台运行。"},
]


async def test_background_job_card_lock_reload_stop_and_toast(stack: Stack, page: Page) -> None:
    stack.fake.script("KEY-bg", BACKGROUND)
    await login_with_key(page, stack, "jobs-jan")
    await create_task(page, "后台")
    await send(page, "KEY-bg 在后台睡一会")
    await expect(page.locator(tid("live-run")).last).to_have_attribute("data-status", "ok")
    card = page.locator(tid("job-card"))
    await expect(card).to_have_count(1, timeout=10_000)
    await expect(card).to_contain_text("sleep 60")
    await expect(card.locator(".spinner")).to_be_visible()
    # The composer is locked while the job runs in this task, and says why.
    await expect(page.locator(tid("message-input"))).to_be_disabled()
    await expect(page.locator(tid("composer-lock"))).to_contain_text("后台作业")
    first = await card.locator(tid("job-elapsed")).text_content()
    await expect(card.locator(tid("job-elapsed"))).not_to_have_text(first or "", timeout=5_000)  # it ticks

    # After a reload the card is back (from GET /v1/procs).
    await page.reload()
    await page.locator(tid("task-item")).filter(has_text="后台").click()
    await expect(card).to_have_count(1)
    proc_id = await card.get_attribute("data-proc-id")
    # Another task is open when the job ends: the toast still says so.
    await create_task(page, "别的")
    await expect(page.locator(tid("job-card"))).to_have_count(0)
    await expect(page.locator(tid("message-input"))).to_be_enabled()
    token = await stack.login("jobs-jan")
    async with stack.client(token) as c:
        r = await c.post(f"/v1/procs/{proc_id}/kill")
    assert r.status_code == 200, r.text
    await expect(page.locator(tid("proc-toast"))).to_contain_text("sleep 60", timeout=10_000)
    await expect(page.locator(tid("proc-toast"))).to_contain_text("后台")

    # A second job, stopped from its card.
    await page.locator(tid("task-item")).filter(has_text="后台").click()
    await expect(page.locator(tid("message-input"))).to_be_enabled()
    stack.fake.script("KEY-bg2", BACKGROUND)
    await send(page, "KEY-bg2 再来一个")
    await expect(card).to_have_count(1, timeout=10_000)
    await card.locator(tid("job-stop")).click()
    await expect(card).to_have_count(0, timeout=10_000)
    await expect(page.locator(tid("message-input"))).to_be_enabled()
