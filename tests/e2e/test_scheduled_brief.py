"""A scheduled brief end to end (issue 25): the scheduler fires the job -> the runner runs it with
the brief skill -> the fake model searches (`web_search`, the fake SearXNG on loopback), reads a
source (`web_fetch`), writes the brief citing it and renders it with the skill's script in the
sandbox -> the .docx and .pdf are in the run's task folder with the citation as a clickable link.
Real gateway, runner, executor (bwrap), scheduler, NATS and PostgreSQL; fakes: the model, the web."""

from __future__ import annotations

import asyncio
import io
import zipfile
from datetime import datetime, timedelta, timezone

import pytest
from docx import Document
from sqlalchemy import select

from tests.helpers.fake_web import FakeWeb, fake_web  # noqa: F401  (fixture)
from tests.helpers.stack import Stack
from zcbot_core.db.models import ScheduledJob, Task
from zcbot_core.platform.service import close_runtime, open_runtime
from zcbot_core.schedules import create_schedule
from zcbot_scheduler.config import SchedulerConfig
from zcbot_scheduler.service import SchedulerService

T0 = datetime(2026, 6, 1, 8, 59, 30, tzinfo=timezone.utc)

BRIEF = """---
title: 能源简报 · 2026-06-01
date: 2026-06-01
---

## 要点
- **光伏**：5 月光伏发电创纪录，同比增长 23%（[Solar output hits record]({article})）。
- **储能**：同期储能装机翻倍。

## 来源
- [Solar output hits record]({article})
"""


@pytest.mark.heavy  # LibreOffice renders the PDF (and measures the page budget) in the sandbox
async def test_a_scheduled_brief_gathers_cites_and_renders(bare_stack: Stack, fake_web: FakeWeb,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    stack = bare_stack
    monkeypatch.setenv("ZCBOT_SEARXNG_URL", fake_web.base_url)
    monkeypatch.setenv("ZCBOT_WEB_FETCH_ALLOW_LOOPBACK_FOR_TESTS", "true")
    article = f"{fake_web.base_url}/article"
    fake_web.results[0] = {**fake_web.results[0], "url": article}
    await stack.add_runner()
    stack.fake.script("KEY-sbrief", [
        {"tool_calls": [{"name": "load_skill", "arguments": {"name": "brief"}}]},
        {"tool_calls": [{"name": "web_search", "arguments": {"query": "solar output record May 2026"}}]},
        {"tool_calls": [{"name": "web_fetch", "arguments": {"url": article}}]},
        {"tool_calls": [{"name": "write", "arguments": {"path": "brief-2026-06-01.md",
                                                         "content": BRIEF.format(article=article)}}]},
        {"tool_calls": [{"name": "shell", "arguments": {
            "command": "python /sandbox/skills/brief/scripts/render_brief.py brief-2026-06-01.md --docx --pdf",
            "timeout": 180}}]},
        {"text": "今日简报已生成：5 月光伏发电创纪录（同比 +23%），储能装机翻倍。"},
    ])
    await stack.login("bria")  # the user exists
    clock = [T0]
    rt = await open_runtime("scheduler", stack.settings)
    scheduler = SchedulerService(clock=lambda: clock[0],
                                 config=SchedulerConfig.defaults(tick_seconds=0, reconcile_grace_seconds=1))
    await scheduler.start(rt)
    try:
        async with rt.sessions() as s, s.begin():
            job = await create_schedule(s, user_id="bria", name="Energy brief", cron="0 9 * * *", timezone="UTC",
                                        prompt="KEY-sbrief 写今天的能源简报，附来源", now=T0)
        clock[0] = T0 + timedelta(seconds=31)
        [run] = (await scheduler.tick()).started
        for _ in range(1800):
            async with rt.sessions() as s:
                row = (await s.execute(select(ScheduledJob).where(ScheduledJob.job_id == job.job_id))).scalar_one()
            if row.last_status in ("ok", "error", "stopped", "cancelled"):
                break
            await asyncio.sleep(0.1)
        assert row.last_status == "ok", row.last_error
        async with rt.sessions() as s:
            task = (await s.execute(select(Task).where(Task.task_id == run.task_id))).scalar_one()
    finally:
        await scheduler.drain()
        await close_runtime(rt)

    # The sources were really gathered: one search, one fetch of the cited page.
    assert [h["path"] for h in fake_web.hits] == ["/search", "/article"]
    folder = stack.settings.storage_root / "bria" / task.working_dir
    docx_bytes = (folder / "brief-2026-06-01.docx").read_bytes()
    doc = Document(io.BytesIO(docx_bytes))
    text = "\n".join(p.text for p in doc.paragraphs)
    assert "光伏" in text and "Solar output hits record" in text
    with zipfile.ZipFile(io.BytesIO(docx_bytes)) as z:
        rels = z.read("word/_rels/document.xml.rels").decode()
    assert article in rels and 'TargetMode="External"' in rels  # the citation is a clickable link
    assert (folder / "brief-2026-06-01.pdf").read_bytes().startswith(b"%PDF")
