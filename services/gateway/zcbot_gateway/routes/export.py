"""`GET /v1/tasks/{task_id}/export`: the conversation as a Word document (seed 003 §7.2).

The document (python-docx, built in memory in a worker thread): the task name as title, a line of
metadata, then every user and assistant message under a small heading (role and UTC time); pushes
(kind `push`) are marked as such. Tool calls and tool results are summarized as small monospace
lines (name + a short preview), never reproduced in full. Light markdown handling: fenced code
blocks are monospace, `#` headings bold, list bullets kept. Characters XML cannot hold (control
characters from tool output) are dropped. Scoped by user: another user's task is 404.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from docx import Document
from docx.shared import Pt, RGBColor
from docx.text.paragraph import Paragraph
from fastapi import APIRouter, Response
from sqlalchemy import select

from zcbot_core.db.models import Message, Task

from zcbot_gateway.deps import CurrentUser, SessionDep
from zcbot_gateway.task_access import get_user_task

router = APIRouter(prefix="/v1", tags=["tasks"])

DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MAX_MESSAGES = 5000
MAX_TEXT_CHARS = 100_000
PREVIEW_CHARS = 160
MONO_FONT = "Consolas"
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_GREY = RGBColor(0x66, 0x66, 0x66)


def clean(text: str) -> str:
    return _XML_BAD.sub("", text)


def content_text(content: Any) -> str:
    """LiteLLM message content (a string or a list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text") or ""))
            elif isinstance(part, dict) and part.get("type") in ("image_url", "image"):
                parts.append("[image]")
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _small_mono(doc: Any, text: str) -> None:
    run = doc.add_paragraph().add_run(clean(text))
    run.font.name = MONO_FONT
    run.font.size = Pt(8)
    run.font.color.rgb = _GREY


def _add_lines(par: Paragraph, lines: list[str], *, mono: bool = False, bold: bool = False) -> None:
    for i, line in enumerate(lines):
        run = par.add_run(clean(line))
        run.bold = bold or None
        if mono:
            run.font.name = MONO_FONT
            run.font.size = Pt(9)
        if i < len(lines) - 1:
            run.add_break()


def add_markdown(doc: Any, text: str) -> None:
    """Paragraphs from markdown-ish text (code fences monospace, headings bold)."""
    text = text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + "\n[... cut]"
    block: list[str] = []
    in_code = False

    def flush(mono: bool = False) -> None:
        if block:
            _add_lines(doc.add_paragraph(), block, mono=mono)
            block.clear()

    for line in text.splitlines():
        if line.strip().startswith("```"):
            flush(mono=in_code)
            in_code = not in_code
            continue
        if in_code:
            block.append(line)
            continue
        stripped = line.strip()
        if not stripped:
            flush()
        elif stripped.startswith("#"):
            flush()
            _add_lines(doc.add_paragraph(), [stripped.lstrip("#").strip()], bold=True)
        elif stripped[:2] in ("- ", "* "):
            flush()
            _add_lines(doc.add_paragraph(), ["• " + stripped[2:]])
        else:
            block.append(line)
    flush(mono=in_code)


def _label(role: str, kind: str) -> str:
    base = {"user": "User", "assistant": "Assistant"}.get(role, role.title())
    if kind == "push":
        return f"{base} — push"
    if kind not in ("chat", ""):
        return f"{base} — {kind}"
    return base


def _when(ts: datetime | None) -> str:
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if ts else ""


def _tool_call_line(call: Any) -> str:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return "→ (tool call)"
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return f"→ {fn.get('name') or '?'}({preview(args or '', PREVIEW_CHARS)})"


def build_docx(task: dict[str, Any], messages: list[dict[str, Any]], truncated: bool) -> bytes:
    doc = Document()
    doc.core_properties.title = clean(task["name"])[:255]
    doc.add_heading(clean(task["name"]), level=0)
    meta = f"Folder: {task['working_dir']} · exported {_when(datetime.now(timezone.utc))} · {len(messages)} messages"
    _small_mono(doc, meta)
    for msg in messages:
        payload = msg["payload"] if isinstance(msg["payload"], dict) else {}
        role = str(payload.get("role") or "")
        kind = msg["kind"] or "chat"
        if role == "tool":
            body = content_text(payload.get("content"))
            _small_mono(doc, f"← {payload.get('name') or 'tool'}: {preview(body)}")
            continue
        if role not in ("user", "assistant"):
            continue  # system prompts and unknown roles are not part of the conversation
        text = content_text(payload.get("content"))
        calls = payload.get("tool_calls") or []
        if not text.strip() and not calls:
            continue
        heading = doc.add_heading(level=2)
        heading.add_run(clean(_label(role, kind)))
        when = _when(msg["created_at"])
        if when:
            small = heading.add_run(f"  {when}")
            small.font.size = Pt(8)
            small.font.color.rgb = _GREY
        if text.strip():
            add_markdown(doc, text)
        for call in calls if isinstance(calls, list) else []:
            _small_mono(doc, _tool_call_line(call))
    if truncated:
        _small_mono(doc, f"[... only the first {MAX_MESSAGES} messages are exported]")
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def attachment(filename: str) -> str:
    """A Content-Disposition value with an ASCII fallback and the UTF-8 name (RFC 6266)."""
    ascii_name = re.sub(r'[^A-Za-z0-9._ -]', "_", filename).strip() or "export.docx"
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename, safe='')}"


@router.get("/tasks/{task_id}/export", response_class=Response,
            responses={200: {"content": {DOCX_TYPE: {}}, "description": "the conversation as .docx"}})
async def export_task(task_id: str, user: CurrentUser, session: SessionDep) -> Response:
    """Download the conversation as a Word document."""
    task: Task = await get_user_task(session, user, task_id)
    rows = (await session.scalars(
        select(Message).where(Message.task_id == task.task_id).order_by(Message.idx).limit(MAX_MESSAGES + 1)
    )).all()
    messages = [{"payload": m.payload, "kind": m.kind, "created_at": m.created_at} for m in rows[:MAX_MESSAGES]]
    info = {"name": task.name, "working_dir": task.working_dir}
    await session.close()  # the document is built without holding a pooled connection
    data = await asyncio.to_thread(build_docx, info, messages, len(rows) > MAX_MESSAGES)
    return Response(data, media_type=DOCX_TYPE, headers={"Content-Disposition": attachment(f"{info['name']}.docx")})
