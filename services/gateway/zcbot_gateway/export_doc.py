"""The conversation as a Word document, laid out by the platform rendering layer (seed 003 §7.2).

The messages become one Markdown document tree (`rendering.mdparse`) and are rendered with the
brief layout (A4, Latin + East Asian fonts, headings, Word lists, tables, code, links, formulas),
so an export reads like the deliverables rather than a log:

- the task name as title; a byline with the folder, the export time and the message count;
- each user / assistant message under a heading "用户 · 2026-12-01 09:30" (English labels for an
  English conversation), its content rendered as Markdown (its own headings moved below the
  message heading, its footnotes kept apart from other messages' footnotes);
- tool calls and results summarised on one indented line each: the tool's name and its
  arguments as `key: value` (JSON decoded, so Chinese reads as Chinese, never `\\u6d4b`);
- tool results readable: records (a JSON list of objects) as a small table, an object or a list
  as list items, other text as one grey line;
- the user's turns set apart (amber heading, a tinted block with a bar on the left);
- images named, never read: a path in a message is the model's text, not a file to open here.
Times are shown in the requested time zone (the route's `tz`), with the zone named in the byline.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import replace
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any

from docx import Document as open_docx
from docx.shared import RGBColor

from zcbot_core.rendering import BRIEF, render_docx
from zcbot_core.rendering.common import left_bar, shade_paragraph
from zcbot_core.rendering.mdparse import (
    Block,
    Document,
    Heading,
    Image,
    ListBlock,
    ListItem,
    Paragraph,
    Quote,
    Table,
    parse,
)

MAX_TEXT_CHARS = 100_000
PREVIEW_CHARS = 160
ARG_CHARS = 80
CELL_CHARS = 60
RESULT_ROWS = 8
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_U_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")
_PUSH_MARK = re.compile(r"^\s*\[pushed to the user\]\s*")
_NOTE_ID = re.compile(r"\[\^([^\]\s]{1,40})\]")

EXPORT = replace(BRIEF, name="export", heading_sizes=(13.0, 11.0, 10.5, 10.5, 10.5, 10.5), space_after=3.0,
                 quote_color="666666", quote_size=9.0)

USER_COLOR, USER_BAR, USER_FILL = "9C5700", "E69138", "FFF7EC"  # the user's turns: amber, apart from the blue

LABELS: dict[str, dict[str, str]] = {
    "zh": {"user": "用户", "assistant": "助手", "push": "推送", "call": "调用工具", "result": "工具结果",
           "folder": "文件夹", "exported": "导出于", "messages": "{n} 条消息", "image": "[图片]",
           "image_named": "[图片：{name}]", "cut": "[……以下内容过长，已截断]",
           "truncated": "[仅导出前 {n} 条消息]", "no_args": "无参数", "empty": "（空）", "colon": "：",
           "records": "{n} 条记录", "more": "……另有 {n} 条"},
    "en": {"user": "User", "assistant": "Assistant", "push": "push", "call": "Tool call", "result": "Tool result",
           "folder": "Folder", "exported": "exported", "messages": "{n} messages", "image": "[image]",
           "image_named": "[image: {name}]", "cut": "[... the rest was too long and is cut]",
           "truncated": "[only the first {n} messages are exported]", "no_args": "no arguments", "empty": "(empty)", "colon": ": ",
           "records": "{n} records", "more": "... {n} more"},
}


def clean(text: str) -> str:
    """Text XML can hold: terminal colour codes and control characters from tool output dropped."""
    return _XML_BAD.sub("", _ANSI.sub("", text))


def escape_md(text: str) -> str:
    """Literal text inside the Markdown tree (a task name, a label): no emphasis or code markers."""
    return re.sub(r"([*_`])", r"\\\1", text)


def content_text(content: Any, labels: dict[str, str]) -> str:
    """LiteLLM message content (a string or a list of parts) as text."""
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
                parts.append(labels["image"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n\n".join(parts)  # each part its own paragraph
    return str(content)


def shorten(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def readable(raw: Any) -> str:
    """A JSON value (or JSON text) as a person reads it: strings bare, Chinese unescaped."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return _U_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), raw)
    if isinstance(raw, str):
        return raw
    return json.dumps(raw, ensure_ascii=False)


def _code_span(text: str) -> str:
    """Inline code for machine text; a backtick inside would end the span, so it becomes '."""
    text = text.replace("`", "'")
    return f"`{text}`" if text.strip() else ""


def tool_call_line(call: Any, labels: dict[str, str]) -> str:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return f"**{labels['call']}**"
    name = str(fn.get("name") or "?")
    args = fn.get("arguments")
    try:
        parsed = json.loads(args) if isinstance(args, str) else args
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        pairs = [f"{k}: {shorten(readable(v), ARG_CHARS)}" for k, v in parsed.items()]
        summary = " · ".join(pairs) if pairs else labels["no_args"]
    else:
        summary = readable(args) if args not in (None, "") else labels["no_args"]
    return f"**{labels['call']}** {_code_span(name)}{labels['colon']}{_code_span(shorten(clean(summary), PREVIEW_CHARS * 2))}"


def tool_result_line(name: str, body: str, labels: dict[str, str]) -> str:
    text = shorten(clean(readable(body)), PREVIEW_CHARS) or labels["empty"]
    return f"**{labels['result']}** {_code_span(name)}{labels['colon']}{_code_span(text)}"


def _cell(value: Any) -> str:
    return escape_md(shorten(clean(readable(value)), CELL_CHARS)).replace("|", "/") or "—"


def tool_result_blocks(name: str, body: str, labels: dict[str, str]) -> list[Block]:
    """A tool's result as a reader reads it: records (a JSON list of objects with 2-4 fields) as a
    small table, an object or a list as list items, anything else as one grey line."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    head = f"**{labels['result']}** {_code_span(name)}"
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        keys = list(dict.fromkeys(k for x in data for k in x))
        if 2 <= len(keys) <= 4 and len(data) >= 2:
            rows = [[_cell(x.get(k, "")) for k in keys] for x in data[:RESULT_ROWS]]
            blocks: list[Block] = [Quote(head + labels["colon"] + labels["records"].format(n=len(data))),
                                   Table([escape_md(str(k)) for k in keys], rows)]
            return blocks + _more(len(data), labels)
        items = [" · ".join(f"{escape_md(str(k))}{labels['colon']}{_cell(v)}" for k, v in x.items()) for x in data]
    elif isinstance(data, dict) and data:
        items = [f"{escape_md(str(k))}{labels['colon']}{_cell(v)}" for k, v in data.items()]
    elif isinstance(data, list) and data:
        items = [_cell(x) for x in data]
    else:
        return [Quote(tool_result_line(name, body, labels))]
    if len(items) == 1:
        return [Quote(head + labels["colon"] + items[0])]
    shown = [ListItem(0, text, False) for text in items[:RESULT_ROWS]]
    return [Quote(head + labels["colon"]), ListBlock(shown), *_more(len(items), labels)]


def _more(count: int, labels: dict[str, str]) -> list[Block]:
    return [Quote(escape_md(labels["more"].format(n=count - RESULT_ROWS)))] if count > RESULT_ROWS else []


def _message_blocks(text: str, index: int, labels: dict[str, str]) -> tuple[list[Block], dict[str, str]]:
    """A message's Markdown as blocks under the message heading (levels +2); footnote ids are made
    unique per message; images become their names (no file is opened)."""
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + "\n\n" + labels["cut"]
    text = _NOTE_ID.sub(lambda m: f"[^m{index}-{m.group(1)}]", clean(text))
    parsed = parse("\n" + text)  # the leading newline: a message starting with '---' is not frontmatter
    blocks: list[Block] = []
    for block in parsed.blocks:
        if isinstance(block, Heading):
            blocks.append(Heading(min(6, block.level + 2), block.text))
        elif isinstance(block, Image):
            name = block.caption or Path(block.path).name
            blocks.append(Paragraph(escape_md(labels["image_named"].format(name=name))))
        else:
            blocks.append(block)
    return blocks, parsed.footnotes


def _when(ts: datetime | None, tz: tzinfo) -> str:
    return ts.astimezone(tz).strftime("%Y-%m-%d %H:%M") if ts else ""


def zone_label(tz: tzinfo, now: datetime) -> str:
    offset = now.astimezone(tz).strftime("%z")
    return f"{getattr(tz, 'key', str(tz))}, UTC{offset[:3]}:{offset[3:]}"


def conversation_document(task: dict[str, Any], messages: list[dict[str, Any]], truncated: int, lang: str,
                          tz: tzinfo, now: datetime | None = None) -> Document:
    labels = LABELS[lang]
    now = now or datetime.now(timezone.utc)
    blocks: list[Block] = []
    notes: dict[str, str] = {}
    shown = 0
    for index, msg in enumerate(messages):
        payload = msg["payload"] if isinstance(msg["payload"], dict) else {}
        role = str(payload.get("role") or "")
        if role == "tool":
            body = content_text(payload.get("content"), labels)
            blocks.extend(tool_result_blocks(str(payload.get("name") or "tool"), body, labels))
            continue
        if role not in ("user", "assistant"):
            continue  # system prompts and unknown roles are not part of the conversation
        text = content_text(payload.get("content"), labels)
        if msg.get("kind") == "push":
            text = _PUSH_MARK.sub("", text, count=1)  # the heading already says it was pushed
        calls = payload.get("tool_calls") or []
        if not text.strip() and not calls:
            continue
        shown += 1
        label = labels[role]
        kind = msg.get("kind") or "chat"
        if kind == "push":
            label = f"{label} · {labels['push']}"
        elif kind != "chat":
            label = f"{label} · {kind}"
        when = _when(msg.get("created_at"), tz)
        blocks.append(Heading(1, escape_md(f"{label} · {when}" if when else label)))
        if text.strip():
            message_blocks, message_notes = _message_blocks(text, index, labels)
            blocks.extend(message_blocks)
            notes.update(message_notes)
        for call in calls if isinstance(calls, list) else []:
            blocks.append(Quote(tool_call_line(call, labels)))
    if truncated:
        blocks.append(Paragraph(escape_md(labels["truncated"].format(n=truncated))))
    byline = " · ".join([
        f"{labels['folder']} {_code_span(task['working_dir'])}",
        f"{labels['exported']} {_when(now, tz)}（{zone_label(tz, now)}）" if lang == "zh"
        else f"{labels['exported']} {_when(now, tz)} ({zone_label(tz, now)})",
        labels["messages"].format(n=shown),
    ])
    meta = {"title": escape_md(clean(task["name"])), "subtitle": byline, "lang": "zh-CN" if lang == "zh" else "en",
            "author": clean(task.get("author", ""))}
    return Document(meta, blocks, notes)


def mark_user_turns(path: Path, user_label: str) -> int:
    """The user's turns set apart from the assistant's: the heading in the user colour, the turn
    (heading and text) on a light tint with a bar on the left, like a chat's own bubble. Returns
    the number of user turns marked."""
    docx = open_docx(str(path))
    in_user, turns = False, 0
    for para in docx.paragraphs:
        if para.style is not None and para.style.name == "Heading 1":
            in_user = para.text == user_label or para.text.startswith(f"{user_label} · ")
            turns += in_user
            if in_user:
                for run in para.runs:
                    run.font.color.rgb = RGBColor.from_string(USER_COLOR)
        if in_user:
            left_bar(para, 18, USER_BAR, 8)
            shade_paragraph(para, USER_FILL)
    docx.save(str(path))
    return turns


def build_docx(task: dict[str, Any], messages: list[dict[str, Any]], truncated: int, lang: str, tz: tzinfo) -> bytes:
    doc = conversation_document(task, messages, truncated, lang, tz)
    with tempfile.TemporaryDirectory(prefix="zcbot-export-") as tmp:
        out = Path(tmp) / "export.docx"
        render_docx(doc, out, EXPORT, Path(tmp))
        mark_user_turns(out, LABELS[lang]["user"])
        return out.read_bytes()

