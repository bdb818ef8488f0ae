"""Schedules in words and background jobs in the page (issue 37), in Chromium: a schedule reads
"每个工作日 08:30（北京时间）" (English too) with its next run in the browser's zone; the job toast
says the task can go on and opens it; `/v1/procs` is polled every 5 s only while a job runs (the
page's timers driven by Playwright's clock, the page's own fetches counted)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import new_page
from tests.browser.pagekit import check_view, create_task, login_with_key, send, tid
from tests.helpers.stack import Stack
from zcbot_core import schedules
from zcbot_core.db.engine import make_engine, make_sessionmaker

try:
    from playwright.async_api import expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)

# Every GET of /v1/procs the page makes, counted when it is made (not when it answers).
COUNT_PROCS = """(() => {
  window.__procs = 0;
  const real = window.fetch;
  window.fetch = (url, opts) => {
    if (String(url).includes("/v1/procs?") && !(opts && opts.method && opts.method !== "GET")) window.__procs += 1;
    return real(url, opts);
  };
})();"""

BACKGROUND = [
    {"tool_calls": [{"name": "shell", "arguments": {"command": "sleep 120", "background": True}}]},
    {"text": "已在后台运行。"},
]


async def seed(stack: Stack, user_id: str, name: str, cron: str, tz: str) -> None:
    engine = make_engine(stack.settings.zcbot_db_url, pool_size=1, max_overflow=0)
    try:
        async with make_sessionmaker(engine)() as session:
            await schedules.create_schedule(session, user_id=user_id, name=name, cron=cron, prompt="写日报", timezone=tz)
            await session.commit()
    finally:
        await engine.dispose()


async def test_schedules_read_in_words(stack: Stack, browser: Any, artifacts_dir: Path) -> None:
    context, page = await new_page(browser)
    try:
        await login_with_key(page, stack, "cronwords")
        for name, cron, tz in [("工作日晨报", "30 8 * * 1-5", "Asia/Shanghai"), ("日报", "0 9 * * *", "UTC"),
                               ("巡检", "*/15 * * * *", "UTC"), ("周会", "0 10 * * 1,3", "Asia/Shanghai"),
                               ("月报", "0 18 1 * *", "Europe/Berlin"), ("怪", "5 4 1-7 * 1", "UTC")]:
            await seed(stack, "cronwords", name, cron, tz)
        await page.locator(tid("side-tab-schedules")).click()
        items = page.locator(tid("schedule-item"))
        await expect(items).to_have_count(6)

        def when(name: str) -> Any:
            named = page.locator(".schedule-name", has_text=re.compile(f"^{name}$"))
            return items.filter(has=named).locator(tid("schedule-when"))

        await expect(when("工作日晨报")).to_have_text(re.compile(r"^每个工作日 08:30（北京时间） · 下次 .+(UTC|GMT)"))
        await expect(when("工作日晨报")).to_have_attribute("title", "30 8 * * 1-5")
        await expect(when("日报")).to_contain_text("每天 09:00（UTC）")
        await expect(when("巡检")).to_contain_text("每 15 分钟（UTC）")
        await expect(when("周会")).to_contain_text("每周一、三 10:00（北京时间）")
        await expect(when("月报")).to_contain_text("每月 1 日 18:00（Europe/Berlin）")
        await expect(when("怪")).to_contain_text("5 4 1-7 * 1（UTC）")  # not a common shape: the cron itself
        await check_view(page, artifacts_dir, "1366-schedules-words")

        # In English.
        await page.locator(tid("prefs-button")).click()
        await page.locator(tid("lang-en")).check()
        await expect(page.locator(tid("side-tab-schedules"))).to_have_text("Schedules")
        await page.locator(tid("side-tab-schedules")).click()
        await expect(when("工作日晨报")).to_contain_text("Every weekday at 08:30 (Beijing time) · next ")
        await expect(when("周会")).to_contain_text("Every Monday, Wednesday at 10:00 (Beijing time)")
        await expect(when("巡检")).to_contain_text("Every 15 minutes (UTC)")
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors


async def procs_calls(page: Any) -> int:
    return int(await page.evaluate("window.__procs"))


async def test_procs_polled_only_while_a_job_runs_and_the_toast_opens_its_task(stack: Stack, browser: Any,
                                                                               artifacts_dir: Path) -> None:
    stack.fake.script("KEY-poll", BACKGROUND)
    context, page = await new_page(browser)
    try:
        await page.add_init_script(COUNT_PROCS)
        await page.clock.install()
        await login_with_key(page, stack, "poller")
        await create_task(page, "后台")
        await page.clock.run_for(1_000)
        idle = await procs_calls(page)
        assert idle >= 1  # read at sign-in / on opening the task
        await page.clock.run_for(60_000)  # a minute with nothing running: no poll
        assert await procs_calls(page) == idle

        await send(page, "KEY-poll 在后台睡一会")
        await expect(page.locator(tid("live-run")).last).to_have_attribute("data-status", "ok")
        card = page.locator(tid("job-card"))
        await expect(card).to_have_count(1)
        proc_id = await card.get_attribute("data-proc-id")
        for _ in range(2):  # a job runs: polled every 5 s
            before = await procs_calls(page)
            await page.clock.run_for(5_000)
            await page.wait_for_function("(n) => window.__procs > n", arg=before)

        # Another task is open when the job ends: the toast says the task can go on, and opens it.
        await create_task(page, "别的")
        token = await stack.login("poller")
        async with stack.client(token) as c:
            assert (await c.post(f"/v1/procs/{proc_id}/kill")).status_code == 200
        toast = page.locator(tid("proc-toast"))
        await page.clock.run_for(5_000)
        await expect(toast).to_contain_text("sleep 120")
        await expect(toast).to_contain_text("任务“后台”，可继续对话")
        await check_view(page, artifacts_dir, "1366-job-toast")
        await toast.locator(tid("proc-toast-open")).click()
        await expect(page.locator(tid("chat-title"))).to_have_text("后台")
        await expect(page.locator(tid("message-input"))).to_be_enabled()

        # Nothing runs any more: the polling stopped.
        await page.clock.run_for(1_000)
        after = await procs_calls(page)
        await page.clock.run_for(60_000)
        assert await procs_calls(page) == after
    finally:
        await context.close()
    assert not page.page_errors, page.page_errors
