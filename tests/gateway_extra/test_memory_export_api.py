"""Memory (read-only), shortcuts and the docx export over the real app."""

from __future__ import annotations

import io
import os
from pathlib import Path

import httpx
import pytest
from docx import Document

from extra_helpers import create_task, db, user_dir
from zcbot_core.config import Settings
from zcbot_core.db.models import Message

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
    assert listing["entries"] == []


async def test_shortcuts_list_and_expansion_at_the_entry_point(app_client: httpx.AsyncClient, settings: Settings,
                                                                make_user) -> None:
    a = await make_user(app_client, "alice")
    b = await make_user(app_client, "bob")
    assert (await app_client.get("/v1/shortcuts", headers=a)).json() == {"shortcuts": []}
    write(user_dir(settings, "alice"), ".memory/shortcuts.md",
          "# Shortcuts\n- `daily`: Write today's report into daily.md.\n- `周报`: 整理本周周报\n")
    got = (await app_client.get("/v1/shortcuts", headers=a)).json()
    assert got == {"shortcuts": [{"trigger": "daily", "instruction": "Write today's report into daily.md."},
                                 {"trigger": "周报", "instruction": "整理本周周报"}]}
    assert (await app_client.get("/v1/shortcuts", headers=b)).json() == {"shortcuts": []}

    task = await create_task(app_client, a, name="Reports")
    posted = await app_client.post(f"/v1/tasks/{task['task_id']}/messages", headers=a, json={"content": " daily "})
    assert posted.status_code == 202, posted.text
    msgs = (await app_client.get(f"/v1/tasks/{task['task_id']}/messages", headers=a)).json()["messages"]
    assert msgs[-1]["payload"]["content"] == "Write today's report into daily.md."

    bob_task = await create_task(app_client, b, name="Bob")
    posted = await app_client.post(f"/v1/tasks/{bob_task['task_id']}/messages", headers=b, json={"content": "daily"})
    assert posted.status_code == 202
    msgs = (await app_client.get(f"/v1/tasks/{bob_task['task_id']}/messages", headers=b)).json()["messages"]
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
    for expected in ("Draft the budget section", "Let me look.", "Budget", "Total: 10k", "print('hi')", "• item one",
                     "And a picture\n[image]", "Morning brief"):
        assert expected in full, expected
    assert "SYSTEM PROMPT" not in full
    headings = [p.text for p in doc.paragraphs if p.style.name.startswith("Heading")]
    assert [h.split("  ")[0] for h in headings] == ["User", "Assistant", "Assistant", "User", "Assistant — push"]
    call = next(t for t in texts if t.startswith("→ read("))
    assert 'budget.xlsx' in call
    result = next(t for t in texts if t.startswith("← read: "))
    assert "row1" in result and len(result) < 200 and "\x01" not in result and "\x1b" not in result
    mono = [r for p in doc.paragraphs for r in p.runs if r.text.startswith("→ read(")]
    assert mono[0].font.name == "Consolas"

    for who, task_id in ((b, task["task_id"]), (a, "nope"), (a, "x" * 40)):
        assert (await app_client.get(f"/v1/tasks/{task_id}/export", headers=who)).status_code == 404
    assert (await app_client.get(f"/v1/tasks/{task['task_id']}/export")).status_code == 401

    empty = await create_task(app_client, a, name="Empty")
    resp = await app_client.get(f"/v1/tasks/{empty['task_id']}/export", headers=a)
    assert resp.status_code == 200 and Document(io.BytesIO(resp.content)).paragraphs[0].text == "Empty"
