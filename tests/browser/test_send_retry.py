"""The page's retry after the 503 "saved, send again" (issue 42): pressing Send again with the text the
composer kept sends the same `Idempotency-Key`, so the saved message runs once and is not stored twice;
the next message gets a new key. The bus refusal is injected at the submit path's one publish call."""

from __future__ import annotations

import pytest

from tests.browser.pagekit import create_task, login_with_key, send, tid
from tests.helpers.bus_faults import bus_refuses_once
from tests.helpers.db import db_rows
from tests.helpers.stack import Stack

try:
    from playwright.async_api import Page, Request, expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)


async def test_send_again_after_the_503_retries_the_same_message(
        stack: Stack, page: Page, monkeypatch: pytest.MonkeyPatch) -> None:
    stack.fake.script("KEY-retry", [{"text": "重试成功"}])
    stack.fake.script("KEY-next", [{"text": "下一条"}])
    refused = bus_refuses_once(monkeypatch)
    keys: list[str | None] = []

    def seen(request: Request) -> None:
        if request.method == "POST" and request.url.endswith("/messages"):
            keys.append(request.headers.get("idempotency-key"))

    page.on("request", seen)
    await login_with_key(page, stack, "retry-rita")
    await create_task(page, "重试")
    await send(page, "KEY-retry 问一下")
    await expect(page.locator(tid("send-error"))).to_be_visible()
    await expect(page.locator(tid("message-input"))).to_have_value("KEY-retry 问一下")
    await page.locator(tid("send-message")).click()  # the composer kept the text: Send again
    await expect(page.locator(tid("messages"))).to_contain_text("重试成功", timeout=20_000)
    await send(page, "KEY-next 再问")
    await expect(page.locator(tid("messages"))).to_contain_text("下一条", timeout=20_000)

    assert len(keys) == 3 and keys[0] and keys[0] == keys[1] and keys[2] not in (None, keys[0]), keys
    task_id = db_rows(stack.settings.zcbot_db_url,
                      "select task_id from messages where run_id=:r", r=refused[0])[0][0]
    rows = db_rows(stack.settings.zcbot_db_url, "select payload->>'role', payload->>'content' from messages"
                   " where task_id=:t order by idx", t=task_id)
    assert [tuple(r) for r in rows] == [("user", "KEY-retry 问一下"), ("assistant", "重试成功"),
                                        ("user", "KEY-next 再问"), ("assistant", "下一条")]
