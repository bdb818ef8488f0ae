"""The host-side web and image tools through the real stack (gateway, runner, executor, NATS,
PostgreSQL): the fake model calls `web_search` (a keyed provider: the fake Tavily on loopback),
`web_fetch` (pages on loopback, under the test-only override) and `look_at_image` (the vision
profile is a second fake profile); only the LLM and the web are fakes.

The provider key must reach the provider and nothing else: not a sandbox (the model runs `env`),
not an event, not a stored message, not a log line."""

from __future__ import annotations

import base64
import io
import json
import logging
from pathlib import Path

import pytest
from PIL import Image

from tests.helpers.db import db_rows_async
from tests.helpers.fake_web import FakeWeb, fake_web  # noqa: F401  (fixture)
from tests.helpers.stack import Stack, write_fake_profile

KEY = "tvly-test-secret-key"


def results_by_call(events: list[dict]) -> list[dict]:
    return [e["data"] for e in events if e["event"] == "tool_result"]


async def test_search_and_fetch_through_the_runner(bare_stack: Stack, fake_web: FakeWeb, monkeypatch: pytest.MonkeyPatch,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for name, value in {"ZCBOT_TAVILY_API_KEY": KEY, "ZCBOT_TAVILY_URL": fake_web.base_url,
                        "ZCBOT_WEB_SEARCH_PER_MINUTE": "2", "ZCBOT_WEB_SEARCH_COST_USD": "0.008",
                        "ZCBOT_WEB_FETCH_ALLOW_LOOPBACK_FOR_TESTS": "true", "ZCBOT_WEB_FETCH_INLINE_CHARS": "2000"}.items():
        monkeypatch.setenv(name, value)
    stack = bare_stack
    await stack.add_runner()
    stack.fake.script("KEY-web", [
        {"tool_calls": [{"name": "web_search", "arguments": {"query": "solar record May"}}]},
        {"tool_calls": [{"name": "web_fetch", "arguments": {"url": f"{fake_web.base_url}/article"}},
                        {"name": "web_fetch", "arguments": {"url": f"{fake_web.base_url}/long"}},
                        {"name": "web_fetch", "arguments": {"url": "http://169.254.169.254/latest/meta-data/"}}]},
        {"tool_calls": [{"name": "web_search", "arguments": {"query": "battery prices"}},
                        {"name": "web_search", "arguments": {"query": "third search"}}]},
        {"tool_calls": [{"name": "shell", "arguments": {"command": "env; tr '\\0' '\\n' < /proc/self/environ; printf 'nul:\\0:end'"}}]},
        {"text": "Solar output hit a record in May [Solar output hits record](https://news.example.com/solar-record)."},
    ])
    token = await stack.login("wendy")
    task = await stack.create_task(token, "Sources")
    r = await stack.post(token, task["task_id"], "KEY-web find sources on solar")
    events = await stack.events(token, r.json()["events_url"], timeout=90)
    assert events[-1]["data"]["status"] == "ok", events[-1]
    calls = [e["data"]["name"] for e in events if e["event"] == "tool_call"]
    assert calls == ["web_search", "web_fetch", "web_fetch", "web_fetch", "web_search", "web_search", "shell"]
    results = results_by_call(events)
    search = results[0]
    assert search["ok"] and "Solar output hits record" in search["preview"]
    assert "https://news.example.com/solar-record" in search["preview"]
    article, long_page, metadata = results[1:4]
    assert article["ok"] and "record solar generation" in article["preview"]
    assert long_page["ok"] and "saved the whole page" in long_page["preview"]
    assert not metadata["ok"] and "metadata" in metadata["preview"]
    second, third = results[4:6]
    assert second["ok"] and not third["ok"] and "limit" in third["preview"]  # 2 per minute for this user
    assert results[6]["ok"]

    # The model saw the full results (the preview is cut): titles, links, dates.
    tool_messages = [m for req in stack.fake.requests for m in req["messages"] if m.get("role") == "tool"]
    seen = json.dumps(tool_messages, ensure_ascii=False)
    assert "(2026-05-28)" in seen and "https://energy.example.org/batteries" in seen
    assert "https://grid.example.com/bulletin-may" in seen  # the article's link, for citations
    assert "nul:\ufffd:end" in seen  # a NUL byte in a tool's output neither reaches JSONB nor breaks the run

    # The long page is kept whole in the task folder, with its source URL on top.
    folder = stack.settings.storage_root / "wendy" / task["working_dir"] / "sources"
    [saved] = list(folder.iterdir())
    text = saved.read_text()
    assert text.startswith("# Energy plan minutes") and f"Source: <{fake_web.base_url}/long>" in text
    assert "Paragraph 199" in text

    # The key went to the provider in the Authorization header, and nowhere else.
    searches = fake_web.hits_on("/search")
    assert len(searches) == 2 and all(h["headers"]["Authorization"] == f"Bearer {KEY}" for h in searches)
    assert KEY not in json.dumps(events)
    assert KEY not in seen  # not in the sandbox's env output either (the shell result went to the model)
    assert "ZCBOT_TAVILY" not in seen
    stored = await db_rows_async(stack.env["ZCBOT_DB_URL"], "SELECT payload::text FROM messages WHERE task_id = %s",
                                 task["task_id"])
    assert stored and not any(KEY in row[0] for row in stored)
    assert KEY not in caplog.text

    usage = await db_rows_async(stack.env["ZCBOT_DB_URL"],
                                "SELECT kind, units::text, cost FROM usage_events WHERE task_id = %s AND kind <> 'chat' "
                                "ORDER BY id", task["task_id"])
    kinds = [row[0] for row in usage]
    assert kinds.count("web_search") == 2 and kinds.count("web_fetch") == 2  # the refused ones are not counted
    assert all(float(row[2]) == 0.008 for row in usage if row[0] == "web_search")
    cost = await db_rows_async(stack.env["ZCBOT_DB_URL"], "SELECT cost_usd FROM tasks WHERE task_id = %s",
                               task["task_id"])
    assert float(cost[0][0]) >= 0.016  # the searches' cost is in the task's totals


async def test_look_at_image_sends_a_downsized_data_url(bare_stack: Stack, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    stack = bare_stack
    write_fake_profile(tmp_path / "models", stack.fake.base_url, name="vision")
    monkeypatch.setenv("ZCBOT_VISION_PROFILE", "vision")
    monkeypatch.setenv("ZCBOT_VISION_MAX_SIDE", "512")
    await stack.add_runner()
    question = "VISIONQ which colour fills this chart?"
    stack.fake.script("VISIONQ", [{"text": "The chart is filled with red."}])
    stack.fake.script("KEY-img", [
        {"tool_calls": [{"name": "look_at_image", "arguments": {"path": "figs/chart.png", "question": question}}]},
        {"tool_calls": [{"name": "look_at_image", "arguments": {"path": "../../etc/passwd", "question": "x"}}]},
        {"text": "It is red."},
    ])
    token = await stack.login("ivan")
    task = await stack.create_task(token, "Figures")
    figs = stack.settings.storage_root / "ivan" / task["working_dir"] / "figs"
    figs.mkdir(parents=True)
    Image.new("RGB", (2000, 1000), (220, 20, 20)).save(figs / "chart.png")
    r = await stack.post(token, task["task_id"], "KEY-img what is in figs/chart.png")
    events = await stack.events(token, r.json()["events_url"], timeout=90)
    assert events[-1]["data"]["status"] == "ok", events[-1]
    first, escape = results_by_call(events)
    assert first["name"] == "look_at_image" and first["ok"], first
    assert "filled with red" in first["preview"] and "512x256" in first["preview"]
    assert not escape["ok"]

    [vision] = [req for req in stack.fake.requests if "VISIONQ" in json.dumps(req["messages"][-1])]
    [message] = vision["messages"]
    text_part, image_part = message["content"]
    assert text_part == {"type": "text", "text": question}
    url = image_part["image_url"]["url"]
    assert image_part["type"] == "image_url" and url.startswith("data:image/jpeg;base64,")
    sent = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert sent.size == (512, 256) and sent.getpixel((10, 10))[0] > 180
    assert "tools" not in vision  # a plain question, no tools

    usage = await db_rows_async(stack.env["ZCBOT_DB_URL"],
                                "SELECT model_profile, cost FROM usage_events WHERE task_id = %s AND kind = 'vision'",
                                task["task_id"])
    assert len(usage) == 1 and usage[0][0] == "vision" and float(usage[0][1]) > 0
