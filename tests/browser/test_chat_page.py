"""The chat in a real browser (issue 27): sign-in, a task, streaming markdown rendered safely,
tool cards, history that tells the truth after a reload (cancelled notice, the same open/closed
rule), "queue after this one" while busy, and the disconnected indicator with reconnect."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from tests.browser.pagekit import create_task, login_with_key, send, tid
from tests.helpers.stack import Stack

try:
    from playwright.async_api import Page, expect
except ImportError:  # pragma: no cover - conftest skips (or fails) the suite without Playwright
    pytest.skip("playwright is not installed", allow_module_level=True)

STATIC = Path(__file__).resolve().parents[2] / "services" / "gateway" / "zcbot_gateway" / "static"

MARKDOWN = ("## 标题\n\n这是**粗体**和`代码`。\n\n| 列一 | 列二 |\n| --- | --- |\n| 甲 | 乙 |\n\n"
            "```python\ndef hello():\n    return 42\n```\n\n[链接](https://example.invalid/x)\n")
XSS = ('<script>window.__pwned = "script"</script><img src=x onerror="window.__pwned=\'img\'">'
       '<a href="javascript:window.__pwned=\'link\'">点我</a> <svg onload="window.__pwned=\'svg\'"></svg>'
       '<iframe src="javascript:window.__pwned=\'frame\'"></iframe>[md](javascript:window.__pwned=\'md\')')
TOOL_SCRIPT = [
    {"reasoning": "用户想要一个问候文件。", "text": "正在写文件。",
     "tool_calls": [{"name": "write", "arguments": {"path": "你好.txt", "content": "你好，世界"}}]},
    {"text": "写好了。"},
]
SLOW = [{"text": "字 " * 200, "chunks": ["字 "] * 200, "chunk_delay": 0.05}]


def chunks(text: str, size: int = 7) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


async def test_pages_assets_are_local_and_served_with_security_headers(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.base_url) as c:
        root = await c.get("/")
        assert root.status_code == 200 and "text/html" in root.headers["content-type"]
        assert 'data-page="dev"' in root.text
        csp = root.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp
        for page in ("/", "/static/admin.html"):
            html = (await c.get(page)).text
            # Every script and stylesheet the pages name is on this server (no CDN at run time).
            for ref in re.findall(r'(?:src|href)="([^"]+)"', html):
                assert ref.startswith(("/", "#")) and not ref.startswith("//"), (page, ref)
                if ref.startswith("/static/"):
                    r = await c.get(ref)
                    assert r.status_code == 200, ref
                    assert r.headers["x-content-type-options"] == "nosniff"
                    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        for module in sorted((STATIC / "js").rglob("*.js")):
            r = await c.get("/static/" + module.relative_to(STATIC).as_posix())
            assert r.status_code == 200 and "javascript" in r.headers["content-type"], module
        for vendor in ("marked.esm.js", "purify.es.js", "highlight.min.js", "LICENSE.marked.txt",
                       "LICENSE.dompurify.txt", "LICENSE.highlightjs.txt"):
            assert (await c.get(f"/static/vendor/{vendor}")).status_code == 200, vendor
        assert (await c.get("/static/nope.js")).status_code == 404
        assert (await c.get("/static/%2e%2e/app.py")).status_code == 404
        admin = await c.get("/admin", follow_redirects=False)
        assert admin.status_code == 307 and admin.headers["location"] == "/static/admin.html"


async def test_streaming_markdown_is_rendered_and_sanitized(stack: Stack, page: Page) -> None:
    stack.fake.script("KEY-md", [{"text": MARKDOWN, "chunks": chunks(MARKDOWN), "chunk_delay": 0.02}])
    stack.fake.script("KEY-xss", [{"text": XSS, "chunks": chunks(XSS, 5), "chunk_delay": 0.01}])
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    await login_with_key(page, stack, "mdcarol")
    # Chinese by default: the page's labels come from the zh dictionary.
    await expect(page.locator(tid("create-task"))).to_have_text("新建任务")
    await expect(page.locator(tid("send-message"))).to_have_text("发送")
    await create_task(page, "Markdown")

    await send(page, "KEY-md 给我看看格式")
    run = page.locator(tid("live-run")).last
    await expect(run).to_have_attribute("data-status", "ok")
    body = run.locator(tid("assistant-text"))
    await expect(body.locator("h2")).to_have_text("标题")
    await expect(body.locator("strong")).to_have_text("粗体")
    await expect(body.locator("table td")).to_have_text(["甲", "乙"])
    await expect(body.locator("pre code.hljs .hljs-keyword").first).to_have_text("def")
    link = body.locator("a")
    await expect(link).to_have_attribute("target", "_blank")
    await expect(link).to_have_attribute("rel", re.compile(r"noopener"))
    assert "##" not in await body.inner_text() and "**" not in await body.inner_text()

    await send(page, "KEY-xss 试试注入")
    evil = page.locator(tid("live-run")).last
    await expect(evil).to_have_attribute("data-status", "ok")
    await page.wait_for_timeout(300)  # an onerror would have fired by now
    assert await page.evaluate("window.__pwned") is None
    # What could run is gone from the DOM: no script, frame or svg element, no event-handler
    # attribute, no javascript: URL in any attribute. (The same words may survive as inert text:
    # marked keeps a line that opens with <script> as an HTML block, so "[md](javascript:…)" on
    # it is text, not a link.)
    danger = await evil.locator(tid("assistant-text")).evaluate(
        """(root) => [...root.querySelectorAll('*')].flatMap((n) => {
             const bad = [];
             if (['SCRIPT', 'IFRAME', 'SVG', 'OBJECT', 'EMBED'].includes(n.tagName.toUpperCase())) bad.push(n.tagName);
             for (const a of n.attributes) {
               if (a.name.toLowerCase().startsWith('on') || /^\\s*javascript:/i.test(a.value)) bad.push(n.tagName + '@' + a.name);
             }
             return bad;
           })""")
    assert danger == [], danger
    assert "<script" not in await evil.locator(tid("assistant-text")).inner_html()
    await expect(evil.locator(tid("assistant-text"))).to_contain_text("点我")
    # The same after a reload, rendered from the stored history.
    await page.reload()
    await page.locator(tid("task-item")).filter(has_text="Markdown").click()
    await expect(page.locator(f'{tid("messages")} {tid("assistant-text")} h2')).to_have_text("标题")
    await page.wait_for_timeout(300)
    assert await page.evaluate("window.__pwned") is None
    assert all(u.startswith(stack.base_url) or u.startswith("blob:") or u.startswith("data:") for u in requests), \
        [u for u in requests if not u.startswith(stack.base_url)]


async def test_tool_cards_history_cancel_and_queue(stack: Stack, page: Page) -> None:
    stack.fake.script("KEY-tool", TOOL_SCRIPT)
    stack.fake.script("KEY-slow", SLOW)
    stack.fake.script("KEY-after", [{"text": "排队的回答"}])
    await login_with_key(page, stack, "toolerin")
    await create_task(page, "工具", folder="tools")
    await expect(page.locator(tid("chat-folder"))).to_contain_text("tools")

    await send(page, "KEY-tool 写个文件")
    run = page.locator(tid("live-run")).last
    await expect(run).to_have_attribute("data-status", "ok")
    card = run.locator(f'{tid("tool-card")}[data-tool="write"]')
    # Pretty-printed arguments with the Chinese as is (never \\u escapes), closed by default.
    args = await card.locator(tid("tool-args")).text_content()
    assert '"path": "你好.txt"' in args and "\\u" not in args and "\n" in args, args
    assert await card.get_attribute("open") is None
    await expect(card).to_have_attribute("data-ok", re.compile("^(true|false)$"))
    await expect(run.locator(tid("reasoning"))).to_contain_text("用户想要一个问候文件。")
    await expect(run.locator(tid("assistant-text")).last).to_have_text("写好了。")
    await expect(page.locator(tid("run-status"))).to_contain_text("完成")

    # The header keeps its height whether Cancel shows or not; Send says "queue after this one".
    head = page.locator(tid("chat-head"))
    idle_height = (await head.bounding_box())["height"]
    await send(page, "KEY-slow 说久一点")
    await expect(page.locator(tid("live-run"))).to_have_count(2)
    slow = page.locator(tid("live-run")).nth(1)  # not .last: the queued run's view comes after it
    await expect(slow.locator(tid("assistant-text"))).to_contain_text("字 字")
    await expect(page.locator(tid("cancel-run"))).to_be_visible()
    assert (await head.bounding_box())["height"] == idle_height
    await expect(page.locator(tid("send-message"))).to_have_text("排在这条之后")
    await send(page, "KEY-after 然后这个")
    await expect(page.locator(tid("queued-note"))).to_be_visible()
    await expect(page.locator(tid("send-error"))).to_have_count(0)

    await page.locator(tid("cancel-run")).click()
    await expect(slow.locator(tid("run-cancelled"))).to_be_visible()
    await expect(slow).to_have_attribute("data-status", "cancelled")
    partial = await slow.locator(tid("assistant-text")).inner_text()
    assert 0 < len(partial) < len("字 " * 200)
    # The queued message runs next, followed by the page without a reload.
    await expect(page.locator(tid("live-run"))).to_have_count(3, timeout=20_000)
    after = page.locator(tid("live-run")).last
    await expect(after.locator(tid("assistant-text"))).to_have_text("排队的回答", timeout=20_000)
    await expect(page.locator(tid("cancel-run"))).to_be_hidden()
    await expect(page.locator(tid("send-message"))).to_have_text("发送")

    # After a reload: the partial answer, the cancelled notice, cards closed as live.
    await page.reload()
    await page.locator(tid("task-item")).filter(has_text="工具").click()
    box = page.locator(tid("messages"))
    await expect(box.locator(tid("user-message"))).to_have_count(3)
    await expect(box.locator(tid("run-cancelled"))).to_have_count(1)
    await expect(box.locator(tid("assistant-text")).filter(has_text="字 字")).to_have_count(1)
    stored = box.locator(f'{tid("tool-card")}[data-tool="write"]')
    assert await stored.get_attribute("open") is None
    args = await stored.locator(tid("tool-args")).text_content()
    assert '"path": "你好.txt"' in args and "\\u" not in args


async def test_disconnected_indicator_and_reconnect(stack: Stack, page: Page) -> None:
    await login_with_key(page, stack, "offline-olga")
    await create_task(page, "断线")
    conn = page.locator(tid("conn-status"))
    await expect(conn).to_have_attribute("data-state", "online")
    await page.context.set_offline(True)
    await send(page, "断线时发的")
    await expect(conn).to_have_attribute("data-state", "offline")
    await expect(conn).to_contain_text("连接已断开")
    await expect(page.locator(tid("send-error"))).to_contain_text("无法连接服务器")
    assert "Failed to fetch" not in await page.locator(tid("messages")).inner_text()
    await page.context.set_offline(False)
    await expect(conn).to_have_attribute("data-state", "online", timeout=10_000)


SSE_CHECK = """async () => {
  localStorage.setItem("zcbot.token", "TKN");
  const { sse } = await import("/static/js/sse.js");
  const calls = [];
  const bodies = [
    // First connection: CRLF line ends, frames split across chunks, a comment; closes before done.
    ["retry: 10\\r\\n\\r\\n", "id: 5\\r\\nevent: text\\r\\nda", "ta: {\\"delta\\":\\"he\\"}\\r", "\\n\\r\\n: reconnect\\n\\n"],
    // The resumed connection; nothing after `done` is read.
    ["id: 6\\nevent: text\\ndata: {\\"delta\\":\\"llo\\"}\\n\\nid: 7\\nevent: done\\ndata: {\\"status\\":\\"ok\\"}\\n\\n",
     "id: 8\\nevent: text\\ndata: {}\\n\\n"],
  ];
  const enc = new TextEncoder();
  window.fetch = async (url, opts) => {
    calls.push({url, headers: opts.headers});
    const parts = bodies.shift();
    return {ok: true, status: 200, body: new ReadableStream({start(c) {
      for (const p of parts) c.enqueue(enc.encode(p));
      c.close();
    }})};
  };
  const events = [];
  for await (const e of sse("/v1/tasks/t/events?run_id=r")) events.push(e);
  // An already-open response (the POST's stream) is read first, then resumed by URL.
  const stream = (text) => new ReadableStream({start(c) { c.enqueue(enc.encode(text)); c.close(); }});
  const resumed = [];
  window.fetch = async (url, opts) => {
    calls.push({url, headers: opts.headers});
    return {ok: true, status: 200, body: stream("id: 4\\nevent: done\\ndata: {\\"status\\":\\"ok\\"}\\n\\n")};
  };
  const opened = {ok: true, status: 200, body: stream("id: 3\\nevent: run_start\\ndata: {}\\n\\n")};
  for await (const e of sse("/v1/tasks/t/events?run_id=r", {opened})) resumed.push(e);
  return {events, resumed, calls};
}"""


async def test_sse_reader_parses_frames_and_resumes_with_last_event_id(stack: Stack, page: Page) -> None:
    """The fetch()-based SSE reader (js/sse.js) against a scripted fetch in the browser."""
    await page.goto(stack.base_url + "/static/admin.html")  # any page of this origin: the module loads from it
    out = await page.evaluate(SSE_CHECK)
    assert [(e["id"], e["event"], e["data"]) for e in out["events"]] == [
        ("5", "text", {"delta": "he"}), ("6", "text", {"delta": "llo"}), ("7", "done", {"status": "ok"})]
    first, second, third = (c["headers"] for c in out["calls"])
    # The page's language goes with every request (server messages in the labels' language).
    assert first == {"Accept": "text/event-stream", "Accept-Language": "zh", "Authorization": "Bearer TKN"}
    assert second == {**first, "Last-Event-ID": "5"}
    assert [(e["id"], e["event"]) for e in out["resumed"]] == [("3", "run_start"), ("4", "done")]
    assert third.get("Last-Event-ID") == "3"
    await asyncio.sleep(0)
