"""Memory (read-only), shortcuts and the docx export over the real app."""

from __future__ import annotations

import io
import os
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from docx import Document

from tests.helpers.gateway import create_task, db, user_dir
from zcbot_core.db.models import Message
from zcbot_core.platform.config import Settings

pytestmark = pytest.mark.asyncio

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# ---- memory ----------------------------------------------------------------------------------


async def test_memory_read_only_api(app_client: httpx.AsyncClient, settings: Settings, make_user,
                                    tmp_path: Path) -> None:
    a = await make_user(app_client, "alice")
    b = await make_user(app_client, "bob")
    empty = await app_client.get("/v1/memory", headers=a)
    assert empty.status_code == 200 and empty.json() == {"core": "", "extended": []}

    root = user_dir(settings, "alice")
    write(root, ".memory/core.md", "Alice prefers short answers.\n")
    write(root, ".memory/extended/projects.md", "---\ndescription: Active projects\n---\n- Deck for ACME\n")
    write(root, ".memory/extended/legacy.md", "Legacy first line\nmore\n")
    write(root, ".memory/extended/bad name.md", "not listed")
    outside = tmp_path / "outside.md"
    outside.write_text("---\ndescription: SECRET\n---\nSECRET BODY")
    os.symlink(outside, root / ".memory/extended/escape.md")
    write(user_dir(settings, "bob"), ".memory/core.md", "Bob's memory")

    body = (await app_client.get("/v1/memory", headers=a)).json()
    assert body["core"] == "Alice prefers short answers."
    assert [(e["filename"], e["description"], e["size"]) for e in body["extended"]] == [
        ("legacy.md", "Legacy first line", 23), ("projects.md", "Active projects", 53)]
    assert all(set(e) == {"filename", "description", "size", "mtime"} for e in body["extended"])
    one = await app_client.get("/v1/memory/extended/projects.md", headers=a)
    assert one.status_code == 200
    assert one.json() == {"filename": "projects.md", "content": "---\ndescription: Active projects\n---\n- Deck for ACME\n"}

    cases = [("missing.md", 404), ("escape.md", 404), ("bad name.md", 400), ("notes.txt", 400), (".hidden.md", 400),
             ("..%2Fcore.md", 404), ("%2E%2E.md", 400), ("core", 400), ("a%00.md", 400)]
    for name, code in cases:
        resp = await app_client.get(f"/v1/memory/extended/{name}", headers=a)
        assert resp.status_code == code, (name, resp.status_code, resp.text)
        assert "SECRET" not in resp.text

    # Bob's memory is his own.
    assert (await app_client.get("/v1/memory", headers=b)).json() == {"core": "Bob's memory", "extended": []}
    assert (await app_client.get("/v1/memory/extended/projects.md", headers=b)).status_code == 404
    assert (await app_client.get("/v1/memory")).status_code == 401
    # Read-only: no write methods.
    assert (await app_client.post("/v1/memory", headers=a, json={"core": "x"})).status_code == 405
    # Memory stays hidden from the files API.
    listing = (await app_client.get("/v1/files", headers=a)).json()
    assert listing["items"] == []


async def test_shortcuts_list_and_expansion_at_the_entry_point(app_client: httpx.AsyncClient, settings: Settings,
                                                                make_user) -> None:
    a = await make_user(app_client, "alice")
    b = await make_user(app_client, "bob")
    assert (await app_client.get("/v1/shortcuts", headers=a)).json()["items"] == []
    write(user_dir(settings, "alice"), ".memory/shortcuts.md",
          "# Shortcuts\n- `daily`: Write today's report into daily.md.\n- `周报`: 整理本周周报\n")
    got = (await app_client.get("/v1/shortcuts", headers=a)).json()
    assert got["items"] == [{"trigger": "daily", "instruction": "Write today's report into daily.md."},
                            {"trigger": "周报", "instruction": "整理本周周报"}] and got["total"] == 2
    assert (await app_client.get("/v1/shortcuts", headers=b)).json()["items"] == []

    task = await create_task(app_client, a, name="Reports")
    posted = await app_client.post(f"/v1/tasks/{task['task_id']}/messages", headers=a, json={"content": " daily "})
    assert posted.status_code == 202, posted.text
    msgs = (await app_client.get(f"/v1/tasks/{task['task_id']}/messages", headers=a)).json()["items"]
    assert msgs[-1]["payload"]["content"] == "Write today's report into daily.md."

    bob_task = await create_task(app_client, b, name="Bob")
    posted = await app_client.post(f"/v1/tasks/{bob_task['task_id']}/messages", headers=b, json={"content": "daily"})
    assert posted.status_code == 202
    msgs = (await app_client.get(f"/v1/tasks/{bob_task['task_id']}/messages", headers=b)).json()["items"]
    assert msgs[-1]["payload"]["content"] == "daily"  # Alice's shortcuts are not Bob's


# ---- export ----------------------------------------------------------------------------------


async def test_export_docx(app_client: httpx.AsyncClient, make_user) -> None:
    a = await make_user(app_client, "alice")
    b = await make_user(app_client, "bob")
    task = await create_task(app_client, a, name="Grant 提案")
    payloads = [
        ({"role": "system", "content": "SYSTEM PROMPT"}, "chat"),
        ({"role": "user", "content": "Draft the budget section"}, "chat"),
        ({"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"path": "budget.xlsx"}'}}]},
         "chat"),
        ({"role": "tool", "tool_call_id": "c1", "name": "read", "content": "row1\x01\x1b[31m" + "y" * 5000}, "chat"),
        ({"role": "assistant", "content": "# Budget\nTotal: 10k\n\n```python\nprint('hi')\n```\n- item one"}, "chat"),
        ({"role": "user", "content": [{"type": "text", "text": "And a picture"}, {"type": "image_url", "image_url": {}}]},
         "chat"),
        ({"role": "assistant", "content": "[pushed to the user] Morning brief"}, "push"),
    ]
    async with db(app_client) as s:
        for idx, (payload, kind) in enumerate(payloads):
            s.add(Message(task_id=task["task_id"], idx=idx, payload=payload, kind=kind))
        await s.commit()

    resp = await app_client.get(f"/v1/tasks/{task['task_id']}/export", headers=a)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == DOCX
    assert resp.headers["content-disposition"].startswith("attachment;")
    assert "filename*=UTF-8''Grant%20%E6%8F%90%E6%A1%88.docx" in resp.headers["content-disposition"]

    doc = Document(io.BytesIO(resp.content))
    texts = [p.text for p in doc.paragraphs]
    full = "\n".join(texts)
    assert texts[0] == "Grant 提案" and doc.core_properties.title == "Grant 提案"
    assert doc.core_properties.author != "python-docx"
    for expected in ("Draft the budget section", "Let me look.", "Budget", "Total: 10k", "print('hi')", "item one",
                     "And a picture\n[image]", "Morning brief", "5 messages", "(UTC, UTC+00:00)"):
        assert expected in full, expected
    assert "[pushed to the user]" not in full  # the heading says "push"
    assert "SYSTEM PROMPT" not in full and "•" not in full and "#" not in full and "```" not in full
    headings = [p.text for p in doc.paragraphs if p.style.name.startswith("Heading")]
    assert [h.split(" · 20")[0] for h in headings] == ["User", "Assistant", "Assistant", "Budget", "User",
                                                        "Assistant · push"]
    item = next(p for p in doc.paragraphs if p.text == "item one")
    assert item._p.pPr.numPr is not None  # a Word list item, not a typed bullet
    call = next(t for t in texts if t.startswith("Tool call read"))
    assert call == "Tool call read: path: budget.xlsx"
    result = next(t for t in texts if t.startswith("Tool result read"))
    assert "row1" in result and len(result) < 200 and "\x01" not in result and "\x1b" not in result and "[31m" not in result

    for who, task_id in ((b, task["task_id"]), (a, "nope"), (a, "x" * 40)):
        assert (await app_client.get(f"/v1/tasks/{task_id}/export", headers=who)).status_code == 404
    assert (await app_client.get(f"/v1/tasks/{task['task_id']}/export")).status_code == 401

    empty = await create_task(app_client, a, name="Empty")
    resp = await app_client.get(f"/v1/tasks/{empty['task_id']}/export", headers=a)
    assert resp.status_code == 200 and Document(io.BytesIO(resp.content)).paragraphs[0].text == "Empty"


async def test_export_reads_like_a_document(app_client: httpx.AsyncClient, make_user) -> None:
    """Chinese conversation: Chinese labels, the requested zone, markdown rendered (no markers
    left), A4, East Asian fonts, tool arguments decoded (no \\u escapes)."""
    a = await make_user(app_client, "carol")
    task = await create_task(app_client, a, name="固态电池调研")
    when = datetime(2026, 12, 1, 1, 30, tzinfo=timezone.utc)
    answer = ("## 结论\n\n硫化物路线**进展最快**[^1]，代表材料 Li6PS5Cl，详见[说明](https://example.org/x)。\n\n"
              "| 路线 | 电导率 |\n|---|---:|\n| 硫化物 | 12 |\n\n[^1]: 据企业公告。")
    payloads = [
        {"role": "user", "content": "帮我查一下固态电池的进展"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "web_search", "arguments": '{"query": "\\u56fa\\u6001\\u7535\\u6c60", "max_results": 5}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "web_search", "content": '[{"title": "\\u4e2d\\u8bd5\\u7ebf"}]'},
        {"role": "assistant", "content": answer},
    ]
    async with db(app_client) as s:
        for idx, payload in enumerate(payloads):
            s.add(Message(task_id=task["task_id"], idx=idx, payload=payload, kind="chat", created_at=when))
        await s.commit()
    resp = await app_client.get(f"/v1/tasks/{task['task_id']}/export", params={"tz": "Asia/Tokyo"}, headers=a)
    assert resp.status_code == 200, resp.text
    doc = Document(io.BytesIO(resp.content))
    full = "\n".join(p.text for p in doc.paragraphs)
    headings = [p.text for p in doc.paragraphs if p.style.name.startswith("Heading")]
    assert headings[:2] == ["用户 · 2026-12-01 10:30", "助手 · 2026-12-01 10:30"]  # Asia/Tokyo, UTC+9
    assert "结论" in headings and "Asia/Tokyo, UTC+09:00" in full and "3 条消息" in full
    for leaked in ("**", "](", "|", "\\u", "[^1]", "##"):
        assert leaked not in full, leaked
    assert "调用工具 web_search：query: 固态电池 · max_results: 5" in full
    assert "工具结果 web_search：" in full and "中试线" in full
    assert len(doc.tables) == 1 and doc.tables[0].cell(1, 0).text == "硫化物"
    assert any(r.bold and r.text == "进展最快" for p in doc.paragraphs for r in p.runs)
    assert any(r.font.subscript and r.text == "6" for p in doc.paragraphs for r in p.runs)
    section = doc.sections[0]
    assert (round(section.page_width.cm, 1), round(section.page_height.cm, 1)) == (21.0, 29.7)
    east_asia = doc.styles["Normal"].element.rPr.rFonts.get(
        "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}eastAsia")
    assert east_asia  # a CJK font is named, not left to the viewer's default
    with zipfile.ZipFile(io.BytesIO(resp.content)) as zf:
        assert "据企业公告" in zf.read("word/footnotes.xml").decode()

    english = await app_client.get(f"/v1/tasks/{task['task_id']}/export", params={"lang": "en"}, headers=a)
    doc = Document(io.BytesIO(english.content))
    assert [p.text for p in doc.paragraphs if p.style.name.startswith("Heading")][0] == "User · 2026-12-01 01:30"

    for bad in ("Mars/Olympus", "../etc/passwd", "x" * 80):
        resp = await app_client.get(f"/v1/tasks/{task['task_id']}/export", params={"tz": bad}, headers=a)
        assert 400 <= resp.status_code < 500 and "detail" in resp.json(), bad
