"""A path's history across renames (issue 29; the rule is in docs/decisions.md).

The history of path P is every `data_events` row at P, plus, for each rename that brought P's
content here — a `rename` row whose path is P or a folder above P — the history of the old path
(the same rule, recursively) up to that rename. Rows are never rewritten: the old path keeps its
own rows, so its history still lists them after the rename. Bounded: at most MAX_SEGMENTS
(path, before-id) pieces are followed.
"""

from __future__ import annotations

import posixpath

from sqlalchemy import and_, or_, select, true
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.elements import ColumnElement

from zcbot_core.db.models import DataEvent

MAX_SEGMENTS = 32
Segment = tuple[str, int | None]  # (path, rows before this id; None: all)


def _self_and_parents(path: str) -> list[str]:
    out = [path]
    while (head := posixpath.dirname(out[-1])) and head != out[-1]:
        out.append(head)
    return out


async def segments(session: AsyncSession, user_id: str, path: str) -> list[Segment]:
    """The (path, before-id) pieces whose rows make up `path`'s history, `path` itself first."""
    out: list[Segment] = []
    todo: list[Segment] = [(path, None)]
    while todo and len(out) < MAX_SEGMENTS:
        seg = todo.pop(0)
        if seg in out:
            continue
        out.append(seg)
        cur, upto = seg
        stmt = select(DataEvent.id, DataEvent.path, DataEvent.old_path).where(
            DataEvent.user_id == user_id, DataEvent.kind == "rename", DataEvent.old_path.is_not(None),
            DataEvent.path.in_(_self_and_parents(cur)))
        if upto is not None:
            stmt = stmt.where(DataEvent.id < upto)
        for rid, new, old in (await session.execute(stmt.order_by(DataEvent.id.desc()))).all():
            todo.append((old + cur[len(new):], rid))  # the same file under the name it had then
    return out


def where(segs: list[Segment]) -> ColumnElement[bool]:
    """The rows of these pieces (for a WHERE beside the user's)."""
    return or_(*(and_(DataEvent.path == p, DataEvent.id < upto if upto is not None else true()) for p, upto in segs))


def covers(segs: list[Segment], row_path: str, row_id: int) -> bool:
    return any(row_path == p and (upto is None or row_id < upto) for p, upto in segs)
