"""Task search by name, description and message text (issue 37): `GET /v1/tasks?q=`.

A case-insensitive substring match (`ILIKE '%q%'`) on the task's name, its description, and the text
of its user and assistant messages (`payload->>'content'`; tool results, the agent's own summaries
and tool-call arguments are not searched). Substrings rather than full-text search because Chinese
has no spaces: PostgreSQL's text-search parsers do not segment it, so "报告" would not find
"季度报告初稿" (docs/decisions.md). The messages are reached through the user's tasks
(`messages.task_id`, indexed by `uq_messages_task_idx`), so a search reads only that user's rows.

Each task found by its messages carries `match: {idx, role, snippet}`: its latest matching message
and a short excerpt around the first hit, for the page to show under the task's name. One query
does the filter, the match and the total (docs/decisions.md has the measurement).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, true
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


def snippet(text: str, needle: str) -> str:
    """About SNIPPET_LEN characters of `text` around the first case-insensitive `needle`, on one line."""
    flat = " ".join(text.split())
    at = flat.casefold().find(needle.casefold())
    start = max(0, at - SNIPPET_BEFORE) if at >= 0 else 0
    piece = flat[start:start + SNIPPET_LEN]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_LEN < len(flat) else "")


async def search_page(session: AsyncSession, conds: list[ColumnElement[bool]], needle: str, order_by: list[Any],
                      offset: int, limit: int) -> tuple[list[tuple[Task, dict[str, Any] | None]], int]:
    """One page of the tasks matching `conds` whose name, description or a user/assistant message
    contains `needle`, each with its latest matching message (`{idx, role, snippet}` or None), and
    the total. One pass over the user's messages: a lateral subquery per task (newest first through
    the `(task_id, idx)` index) gives both the filter and the match; the total is a window count."""
    pattern = f"%{escape_like(needle)}%"
    hit = (
        select(Message.idx.label("idx"), Message.payload["role"].astext.label("role"), _content().label("text"))
        .where(Message.task_id == Task.task_id, _message_hit(pattern))
        .order_by(Message.idx.desc())
        .limit(1)
        .lateral("hit")
    )
    found = or_(Task.name.ilike(pattern, escape="\\"), Task.description.ilike(pattern, escape="\\"),
                hit.c.idx.is_not(None))
    stmt = (
        select(Task, hit.c.idx, hit.c.role, hit.c.text, func.count().over())
        .select_from(Task).outerjoin(hit, true())
        .where(*conds, found).order_by(*order_by).offset(offset).limit(limit)
    )
    rows = (await session.execute(stmt)).all()
    if rows:
        total = int(rows[0][4])
    elif offset:  # past the last page: the window count has no row to ride on
        total = int(await session.scalar(
            select(func.count()).select_from(Task).outerjoin(hit, true()).where(*conds, found)) or 0)
    else:
        total = 0
    page = [(task, None if idx is None else {"idx": idx, "role": role, "snippet": snippet(text or "", needle)})
            for task, idx, role, text, _ in rows]
    return page, total
