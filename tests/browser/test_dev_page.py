"""The dev SPA (`/`) and the admin page (`/static/admin.html`) in headless Chromium (issue 5 item 8).

Each test drives the real stack (gateway on uvicorn, runner, executor) with the fake LLM through
the page, asserting on what a person sees. The tests are few and long on purpose: every `stack`
costs seconds to start and stop, and the whole module must stay well under 90 s.
Routes that other modules provide (files, schedules, admin) are exercised when the gateway has
them; without them the page must say so (files, admin) or hide the section (schedules).
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.helpers.stack import Stack
from zcbot_core.auth import hash_password

try:
    from playwright.async_api import Page, expect
except ImportError:  # pragma: no cover - the browser tests need the `test` extra
    if os.environ.get("ZCBOT_REQUIRE_BROWSER") == "1":
        raise
    pytest.skip("playwright is not installed (pip install 'playwright>=1.40')", allow_module_level=True)

STATIC = Path(__file__).resolve().parents[2] / "services" / "gateway" / "zcbot_gateway" / "static"
TOOL_SCRIPT = [
    {"reasoning": "The user wants a greeting file.", "text": "Writing the file now.",
     "tool_calls": [{"name": "write", "arguments": {"path": "hello.txt", "content": "hi"}}]},
    {"text": "done writing"},
]
READ_AGAIN = {"tool_calls": [{"name": "read", "arguments": {"path": "hello.txt"}}]}
GUARD_SCRIPT = [READ_AGAIN, READ_AGAIN, READ_AGAIN, READ_AGAIN, {"text": "unreachable"}]
SLOW_SCRIPT = [{"text": "tok " * 200, "chunks": ["tok "] * 200, "chunk_delay": 0.05}]


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


async def create_task(page: Page, name: str, folder: str = "") -> None:
    await page.locator(tid("task-name-input")).fill(name)
    if folder:
        await page.locator(tid("task-folder-input")).fill(folder)
    await page.locator(tid("create-task")).click()
    await expect(page.locator(tid("chat-title"))).to_have_text(name)
    await expect(page.locator(f'{tid("task-item")}[aria-current="true"]')).to_contain_text(name)


async def send(page: Page, content: str) -> None:
    await page.locator(tid("message-input")).fill(content)
    await page.locator(tid("send-message")).click()


async def files_api_available(stack: Stack, token: str) -> bool:
    async with stack.client(token) as c:
        r = await c.get("/v1/files", params={"path": ""})
    return not (r.status_code == 404 and r.json().get("detail") == "Not Found")


async def test_pages_are_served_with_security_headers(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url) as c:
        root = await c.get("/")
        assert root.status_code == 200 and "text/html" in root.headers["content-type"]
        assert 'data-page="dev"' in root.text
        assert "default-src 'self'" in root.headers["content-security-policy"]
        for asset, kind in (("app.js", "javascript"), ("admin.js", "javascript"), ("style.css", "text/css"),
                            ("admin.html", "text/html")):
            r = await c.get(f"/static/{asset}")
            assert r.status_code == 200 and kind in r.headers["content-type"], asset
            assert r.headers["x-content-type-options"] == "nosniff"
            assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        assert (await c.get("/static/nope.js")).status_code == 404
        assert (await c.get("/static/%2e%2e/app.py")).status_code == 404
        admin = await c.get("/admin", follow_redirects=False)
        assert admin.status_code == 307 and admin.headers["location"] == "/static/admin.html"


async def test_chat_streams_tool_cards_history_cancel_and_folder_notice(
    stack: Stack, page: Page, artifacts_dir
) -> None:
    stack.fake.script("KEY-browser-tool", TOOL_SCRIPT)
    stack.fake.script("KEY-browser-slow", SLOW_SCRIPT)
    stack.fake.script("KEY-browser-busy", [{"text": "busy", "first_delay": 20}])

    # A wrong key is refused in the page.
    await page.goto(stack.base_url + "/")
    await page.locator(tid("tab-key")).click()
    await page.locator(tid("login-user-id")).fill("carol")
    await page.locator(tid("login-platform-key")).fill("not-the-key")
    await page.locator(tid("login-key-submit")).click()
    await expect(page.locator(tid("login-error"))).to_contain_text("invalid platform key")

    await login_with_key(page, stack, "carol")
    token = await stack.login("carol")
    await create_task(page, "Greeting", folder="greet")
    await expect(page.locator(tid("chat-folder"))).to_contain_text("greet")

    # A streamed run with reasoning, text and a tool call, sent as one request: the POST answers with
    # the run's event stream (no GET of the events URL unless the stream drops).
    requests: list[tuple[str, str, str | None]] = []
    page.on("request", lambda r: requests.append((r.method, r.url, r.headers.get("accept"))))
    await send(page, "KEY-browser-tool please write hello.txt")
    await expect(page.locator(tid("user-text")).last).to_have_text("KEY-browser-tool please write hello.txt")
    run = page.locator(tid("live-run")).last
    await expect(run.locator(tid("assistant-text")).first).to_have_text("Writing the file now.")
    await expect(run.locator(tid("reasoning"))).to_contain_text("The user wants a greeting file.")
    card = run.locator(f'{tid("tool-card")}[data-tool="write"]')
    await expect(card).to_have_count(1)
    await expect(card.locator(tid("tool-args"))).to_contain_text("hello.txt")
    # Ok with the sandbox executor; an error result card without it: either way a result arrives.
    await expect(card).to_have_attribute("data-ok", re.compile(r"^(true|false)$"))
    await expect(card.locator(tid("tool-result"))).not_to_be_empty()
    await expect(run.locator(tid("assistant-text")).last).to_have_text("done writing")
    await expect(run).to_have_attribute("data-status", "ok")
    await expect(page.locator(tid("run-status"))).to_contain_text("ok")
    posts = [(m, a) for m, url, a in requests if url.endswith("/messages") and m == "POST"]
    assert posts == [("POST", "text/event-stream")], requests
    assert not [url for _, url, _ in requests if "/events" in url], requests
    await expect(page.locator(tid("cancel-run"))).to_be_hidden()
    await page.locator(tid("chat-pane")).screenshot(path=str(artifacts_dir / "browser-chat-pane.png"))
    if await card.get_attribute("data-ok") == "true" and await files_api_available(stack, token):
        # The files pane shows the task's folder and is refreshed when the run ends.
        await expect(page.locator(f'{tid("file-entry")}[data-name="hello.txt"]')).to_be_visible()

    # Reloading renders the stored history: both texts and the tool card with its result.
    await page.reload()
    await expect(page.locator(tid("app-view"))).to_be_visible()
    await page.locator(tid("task-item")).filter(has_text="Greeting").click()
    messages = page.locator(tid("messages"))
    await expect(messages.locator(tid("user-message"))).to_have_count(1)
    await expect(messages.locator(tid("assistant-text"))).to_have_text(["Writing the file now.", "done writing"])
    await expect(messages.locator(f'{tid("tool-card")}[data-tool="write"]')).to_have_attribute(
        "data-ok", re.compile(r"^(true|false)$"))

    # A slow run is cancelled from the page.
    await send(page, "KEY-browser-slow talk for a while")
    slow = page.locator(tid("live-run")).last
    await expect(slow.locator(tid("assistant-text"))).to_contain_text("tok tok")
    await expect(page.locator(tid("cancel-run"))).to_be_visible()
    await page.locator(tid("cancel-run")).click()
    await expect(slow.locator(tid("run-cancelled"))).to_be_visible()
    await expect(slow).to_have_attribute("data-status", "cancelled")
    await expect(page.locator(tid("run-status"))).to_contain_text("cancelled")
    await expect(page.locator(tid("cancel-run"))).to_be_hidden()
    partial = await slow.locator(tid("assistant-text")).inner_text()
    assert len(partial) < len("tok " * 200), "the run was not cut short"

    # A guard stop shows the warning and a "continue" hint that sends "continue".
    stack.fake.script("KEY-browser-guard", GUARD_SCRIPT)
    await send(page, "KEY-browser-guard read it again and again")
    guarded = page.locator(tid("live-run")).last
    await expect(guarded).to_have_attribute("data-status", re.compile(r"^(stopped|ok)$"), timeout=30_000)
    await expect(guarded.locator(tid("run-warn")).last).to_contain_text("continue")
    # The 4th identical call never ran: its card is settled, not left "running".
    await expect(guarded.locator(f'{tid("tool-card")}.pending')).to_have_count(0)
    hint = guarded.locator(tid("continue-hint"))
    await expect(hint).to_have_count(1)
    runs_before = await page.locator(tid("live-run")).count()
    await hint.get_by_role("button", name="Continue").click()
    await expect(page.locator(tid("user-text")).last).to_have_text("continue")
    await expect(page.locator(tid("live-run"))).to_have_count(runs_before + 1)
    await expect(page.locator(tid("live-run")).last).to_have_attribute("data-status", re.compile(r".+"),
                                                                       timeout=30_000)
    await page.screenshot(path=str(artifacts_dir / "browser-dev-page.png"))

    # Soft warning: another task in the same folder is running (started through the API).
    busy = await stack.create_task(token, "Busy one", working_dir="shared")
    r = await stack.post(token, busy["task_id"], "KEY-browser-busy wait")
    assert r.status_code == 202, r.text
    async with stack.client(token) as c:
        for _ in range(100):
            if (await c.get(f"/v1/tasks/{busy['task_id']}")).json()["run_status"] == "running":
                break
            await asyncio.sleep(0.05)
    await create_task(page, "Second one", folder="shared")
    notice = page.locator(tid("folder-notice"))
    await expect(notice).to_be_visible()
    await expect(notice).to_contain_text("Busy one")
    # Opening the busy task follows its live run (no warning about itself) and cancels it.
    await page.locator(tid("task-item")).filter(has_text="Busy one").click()
    await expect(page.locator(tid("cancel-run"))).to_be_visible()
    await expect(notice).to_be_hidden()
    await page.locator(tid("cancel-run")).click()
    await expect(page.locator(tid("live-run")).last).to_have_attribute("data-status", "cancelled")


async def test_files_pane_and_schedules(stack: Stack, page: Page) -> None:
    token = await stack.login("erin")
    async with stack.client(token) as c:
        has_schedules = (await c.get("/v1/schedules")).status_code != 404
    if has_schedules:
        for job_id, name in (("jobmorning", "Morning digest"), ("jobweekly", "Weekly report")):
            sql(stack.settings.zcbot_db_url,
                "insert into scheduled_jobs (job_id, user_id, name, cron, prompt, working_dir) "
                "values (:j, 'erin', :n, '0 8 * * *', 'summarize the news', 'digest')", j=job_id, n=name)
    await login_with_key(page, stack, "erin")
    await create_task(page, "Docs", folder="docs")

    # Files: the task's folder is listed; upload, then download through the auth header.
    if not await files_api_available(stack, token):
        await expect(page.locator(tid("files-status"))).to_have_text("The files API is not available on this server.")
    else:
        await expect(page.locator(tid("file-crumbs"))).to_contain_text("docs")
        await expect(page.locator(tid("files-status"))).to_have_text("Empty folder.")
        payload = b"col1,col2\n1,2\n\xe2\x9c\x93 utf-8\n"
        await page.locator(tid("file-input")).set_input_files(
            files=[{"name": "data.csv", "mimeType": "text/csv", "buffer": payload}])
        await page.locator(tid("upload-button")).click()
        entry = page.locator(f'{tid("file-entry")}[data-name="data.csv"]')
        await expect(entry).to_be_visible()
        await expect(entry).to_contain_text(f"{len(payload)} B")
        async with page.expect_download() as info:
            await entry.locator(tid("file-download")).click()
        download = await info.value
        assert download.suggested_filename == "data.csv"
        assert (await download.path()).read_bytes() == payload
        # The crumbs lead up to the root, where the task folder is listed and can be opened again.
        await page.locator(tid("file-crumbs")).get_by_role("button", name="~").click()
        folder = page.locator(f'{tid("file-entry")}[data-name="docs"]')
        await expect(folder).to_have_attribute("data-type", "dir")
        await folder.locator(tid("open-folder")).click()
        await expect(page.locator(f'{tid("file-entry")}[data-name="data.csv"]')).to_be_visible()

    # Schedules: read-only list with disable and delete; hidden when the API is absent.
    section = page.locator(tid("schedules-section"))
    if not has_schedules:
        await expect(section).to_be_hidden()
        return
    await expect(section).to_be_visible()
    items = section.locator(tid("schedule-item"))
    await expect(items).to_have_count(2)
    morning = section.locator(f'{tid("schedule-item")}[data-job-id="jobmorning"]')
    await expect(morning).to_contain_text("0 8 * * *")
    await morning.locator(tid("schedule-disable")).click()
    await expect(morning).to_contain_text("disabled")
    await expect(morning.locator(tid("schedule-disable"))).to_have_count(0)
    page.once("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
    await section.locator(f'{tid("schedule-item")}[data-job-id="jobweekly"]').locator(tid("schedule-delete")).click()
    await expect(items).to_have_count(1)
    async with stack.client(token) as c:
        jobs = (await c.get("/v1/schedules")).json()
    assert [(j["job_id"], j["enabled"]) for j in jobs] == [("jobmorning", False)]


async def test_admin_page_for_admin_and_refusal_for_others(stack: Stack, page: Page, artifacts_dir) -> None:
    # A plain user sees no admin link, and the admin page refuses politely.
    await login_with_key(page, stack, "frank")
    await expect(page.locator(tid("admin-link"))).to_be_hidden()
    await page.goto(stack.base_url + "/static/admin.html")
    await expect(page.locator(tid("admin-message"))).to_contain_text("admin role")
    await expect(page.locator(tid("admin-view"))).to_be_hidden()

    # The admin signs in on the email + password tab (the default one).
    token = await stack.login("boss")
    sql(stack.settings.zcbot_db_url, "update users set role='admin', email='boss@example.test', password_hash=:h "
        "where user_id=:u", u="boss", h=hash_password("correct horse battery"))
    await page.goto(stack.base_url + "/")
    await page.locator(tid("logout")).click()
    await page.locator(tid("tab-password")).click()
    await page.locator(tid("login-email")).fill("boss@example.test")
    await page.locator(tid("login-password")).fill("wrong password!")
    await page.locator(tid("login-password-submit")).click()
    await expect(page.locator(tid("login-error"))).to_contain_text("invalid email or password")
    await page.locator(tid("login-password")).fill("correct horse battery")
    await page.locator(tid("login-password-submit")).click()
    await expect(page.locator(tid("app-view"))).to_be_visible()
    await expect(page.locator(tid("whoami"))).to_have_text("boss@example.test")
    await expect(page.locator(tid("admin-link"))).to_be_visible()
    await page.locator(tid("admin-link")).click()
    await expect(page).to_have_url(re.compile(r"/static/admin\.html$"))
    await expect(page.locator(tid("admin-view"))).to_be_visible()
    await expect(page.locator(tid("whoami"))).to_have_text("boss@example.test")

    token = await stack.login("boss")  # the role and password change revoked the first token
    async with stack.client(token) as c:
        overview = await c.get("/v1/admin/overview")
    if overview.status_code == 404:  # the admin API is not in this gateway: the page says so
        await expect(page.locator(tid("overview-status"))).to_have_text("Not available on this server.")
        return
    assert overview.status_code == 200, overview.text
    await expect(page.locator(tid("overview-status"))).to_have_text("")
    numbers = overview.json()
    stats = page.locator(tid("overview-stat"))
    await expect(stats.first).to_be_visible()
    if isinstance(numbers.get("users"), dict) and "total" in numbers["users"]:
        await expect(page.locator(f'{tid("overview-stat")}[data-key="users.total"] dd')).to_have_text(
            str(numbers["users"]["total"]))
    for section in ("usage-models", "usage-users", "storage-users"):
        await expect(page.locator(tid(section))).not_to_contain_text("Loading")
        await expect(page.locator(tid(section))).not_to_contain_text("Could not load")
    await expect(page.locator(tid("storage-users"))).to_contain_text("boss")
    for value in ("30d", "all"):
        async with page.expect_response(lambda r, v=value: f"range={v}" in r.url and "/usage/models" in r.url) as resp:
            await page.locator(tid("usage-range")).select_option(value)
        assert (await resp.value).status == 200
        await expect(page.locator(tid("usage-models"))).not_to_contain_text("Loading")
        await expect(page.locator(tid("usage-models"))).not_to_contain_text("Could not load")
    await page.screenshot(path=str(artifacts_dir / "browser-admin-page.png"), full_page=True)


SSE_CHECK = """async () => {
  localStorage.setItem("zcbot.token", "TKN");
  const calls = [];
  const bodies = [
    // First connection: CRLF line ends, frames split across chunks, a comment; closes before done.
    ["retry: 10\\r\\n\\r\\n", "id: 5\\r\\nevent: text\\r\\nda", "ta: {\\"delta\\":\\"he\\"}\\r", "\\n\\r\\n: reconnect\\n\\n"],
    // The resumed connection; nothing after `done` is read.
    ["id: 6\\nevent: text\\ndata: {\\"delta\\":\\"llo\\"}\\n\\nid: 7\\nevent: done\\ndata: {\\"status\\":\\"ok\\"}\\n\\n",
     "id: 8\\nevent: text\\ndata: {}\\n\\n"],
  ];
  window.fetch = async (url, opts) => {
    calls.push({url, headers: opts.headers});
    const parts = bodies.shift();
    const enc = new TextEncoder();
    return {ok: true, status: 200, body: new ReadableStream({start(c) {
      for (const p of parts) c.enqueue(enc.encode(p));
      c.close();
    }})};
  };
  const events = [];
  for await (const e of window.zc.sse("/v1/tasks/t/events?run_id=r")) events.push(e);
  return {events, calls};
}"""


SSE_OPENED_CHECK = """async () => {
  localStorage.setItem("zcbot.token", "TKN");
  const calls = [];
  const enc = new TextEncoder();
  const stream = (text) => new ReadableStream({start(c) { c.enqueue(enc.encode(text)); c.close(); }});
  window.fetch = async (url, opts) => {
    calls.push({url, headers: opts.headers});
    return {ok: true, status: 200, body: stream("id: 4\\nevent: done\\ndata: {\\"status\\":\\"ok\\"}\\n\\n")};
  };
  // An already-open response (the POST's stream) is read first; it drops after id 3, so the
  // reader resumes with a GET of the URL it was given.
  const opened = {ok: true, status: 200, body: stream("id: 3\\nevent: run_start\\ndata: {}\\n\\n")};
  const events = [];
  for await (const e of window.zc.sse("/v1/tasks/t/events?run_id=r", {opened})) events.push(e);
  return {events, calls};
}"""


async def app_js_alone(page: Page) -> None:
    """app.js on an intercepted origin (nothing leaves the browser, and the page has localStorage)."""
    html = '<!doctype html><body data-page="none"><script src="/static/app.js"></script></body>'
    await page.route("http://zcbot.invalid/", lambda route: route.fulfill(body=html, content_type="text/html"))
    await page.route("http://zcbot.invalid/static/app.js", lambda route: route.fulfill(
        path=str(STATIC / "app.js"), content_type="text/javascript"))
    await page.goto("http://zcbot.invalid/")
    await page.wait_for_function("window.zc !== undefined")


async def test_sse_reader_reads_an_open_response_first_then_resumes_by_url(page: Page) -> None:
    await app_js_alone(page)
    out = await page.evaluate(SSE_OPENED_CHECK)
    assert [(e["id"], e["event"]) for e in out["events"]] == [("3", "run_start"), ("4", "done")]
    assert [(c["url"], c["headers"].get("Last-Event-ID")) for c in out["calls"]] == [
        ("/v1/tasks/t/events?run_id=r", "3")]


async def test_sse_reader_parses_frames_and_resumes_with_last_event_id(page: Page) -> None:
    """The fetch()-based SSE reader, against a scripted fetch in the browser (no server needed)."""
    await app_js_alone(page)
    out = await page.evaluate(SSE_CHECK)
    assert [(e["id"], e["event"], e["data"]) for e in out["events"]] == [
        ("5", "text", {"delta": "he"}), ("6", "text", {"delta": "llo"}), ("7", "done", {"status": "ok"})]
    first, second = (c["headers"] for c in out["calls"])
    assert first == {"Accept": "text/event-stream", "Authorization": "Bearer TKN"}
    assert second == {**first, "Last-Event-ID": "5"}
    assert len(out["calls"]) == 2
