"""Task search by name, description and message text (issue 37): `GET /v1/tasks?q=`.

A case-insensitive substring match (`ILIKE '%q%'`) on the task's name, its description, and the text
of its user and assistant messages (`payload->>'content'`; tool results, the agent's own summaries
and tool-call arguments are not searched). Substrings rather than full-text search because Chinese
has no spaces: PostgreSQL's text-search parsers do not segment it, so "报告" would not find
"季度报告初稿" (docs/decisions.md). The messages are reached through the user's tasks
(`messages.task_id`, indexed by `uq_messages_task_idx`), so a search reads only that user's rows.

Each task found by its messages carries `match: {idx, role, snippet}`: its latest matching message
and a short excerpt around the first hit, for the page to show under the task's name.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, exists, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from zcbot_core.db.models import Message, Task

SEARCHED_ROLES = ("user", "assistant")
SNIPPET_BEFORE = 24
SNIPPET_LEN = 90


def escape_like(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _content() -> Any:
    return Message.payload["content"].astext


def _message_hit(pattern: str) -> ColumnElement[bool]:
    return and_(Message.payload["role"].astext.in_(SEARCHED_ROLES), _content().ilike(pattern, escape="\\"))


def search_condition(needle: str) -> ColumnElement[bool]:
    """Name, description or a user/assistant message of the task contains `needle` (any case)."""
    pattern = f"%{escape_like(needle)}%"
    in_messages = exists().where(Message.task_id == Task.task_id, _message_hit(pattern))
    return or_(Task.name.ilike(pattern, escape="\\"), Task.description.ilike(pattern, escape="\\"), in_messages)


def snippet(text: str, needle: str) -> str:
    """About SNIPPET_LEN characters of `text` around the first case-insensitive `needle`, on one line."""
    flat = " ".join(text.split())
    at = flat.casefold().find(needle.casefold())
    start = max(0, at - SNIPPET_BEFORE) if at >= 0 else 0
    piece = flat[start:start + SNIPPET_LEN]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_LEN < len(flat) else "")


async def message_matches(session: AsyncSession, task_ids: list[str], needle: str) -> dict[str, dict[str, Any]]:
    """For each task, its latest user/assistant message containing `needle`: `{idx, role, snippet}`."""
    if not task_ids:
        return {}
    pattern = f"%{escape_like(needle)}%"
    stmt = (
        select(Message.task_id, Message.idx, Message.payload["role"].astext, _content())
        .where(Message.task_id.in_(task_ids), _message_hit(pattern))
        .distinct(Message.task_id)
        .order_by(Message.task_id, Message.idx.desc())
    )
    rows = (await session.execute(stmt)).all()
    return {tid: {"idx": idx, "role": role, "snippet": snippet(text or "", needle)} for tid, idx, role, text in rows}
