"""`GET /v1/tasks/{task_id}/export`: the conversation as a Word document (seed 003 §7.2).

The document is laid out by the platform rendering layer (`zcbot_gateway/export_doc.py`), built in
memory in a worker thread without holding a pooled connection. Scoped by user: another user's
task is 404.

- `lang` (`zh` | `en`): the labels' language; default: the language of the conversation's latest
  user message (`agent.lang.user_language`), as the agent's own texts.
- `tz` (an IANA zone such as `Asia/Shanghai`, what a browser reports as
  `Intl.DateTimeFormat().resolvedOptions().timeZone`): the zone the times are shown in; default
  `Asia/Shanghai` for a Chinese export and `UTC` for an English one. An unknown zone is a 400.
"""

from __future__ import annotations

import asyncio
import re
from typing import Literal
from urllib.parse import quote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import APIRouter, Query, Response
from sqlalchemy import select

from zcbot_core.agent.context import SUPERSEDED
from zcbot_core.agent.lang import user_language
from zcbot_core.db.models import Message, Task
from zcbot_gateway.deps import CurrentUser, SessionDep
from zcbot_gateway.http import bad_request
from zcbot_gateway.task_access import get_user_task

router = APIRouter(prefix="/v1", tags=["tasks"])

DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MAX_MESSAGES = 5000
DEFAULT_ZONES = {"zh": "Asia/Shanghai", "en": "UTC"}


def attachment(filename: str) -> str:
    """A Content-Disposition value with an ASCII fallback and the UTF-8 name (RFC 6266)."""
    ascii_name = re.sub(r'[^A-Za-z0-9._ -]', "_", filename).strip() or "export.docx"
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename, safe='')}"


def time_zone(name: str) -> ZoneInfo:
    if len(name) > 64 or not re.fullmatch(r"[A-Za-z0-9_+\-/]+", name) or ".." in name:
        raise bad_request("tz must be an IANA time zone name such as Asia/Shanghai")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise bad_request(f"unknown time zone {name!r}; use an IANA name such as Asia/Shanghai") from None


@router.get("/tasks/{task_id}/export", response_class=Response,
            responses={200: {"content": {DOCX_TYPE: {}}, "description": "the conversation as .docx"}})
async def export_task(task_id: str, user: CurrentUser, session: SessionDep,
                      lang: Literal["zh", "en"] | None = Query(None, description="labels' language"),
                      tz: str | None = Query(None, max_length=64, description="IANA time zone of the times")) -> Response:
    """Download the conversation as a Word document."""
    zone = time_zone(tz) if tz else None
    task: Task = await get_user_task(session, user, task_id)
    rows = (await session.scalars(
        # The conversation as it stands: messages replaced by an edit or a regenerate are left out.
        select(Message).where(Message.task_id == task.task_id, ~Message.kind.startswith(SUPERSEDED))
        .order_by(Message.idx).limit(MAX_MESSAGES + 1)
    )).all()
    messages = [{"payload": m.payload, "kind": m.kind, "created_at": m.created_at} for m in rows[:MAX_MESSAGES]]
    info = {"name": task.name, "working_dir": task.working_dir}
    await session.close()  # the document is built without holding a pooled connection
    language = lang or user_language([m["payload"] for m in messages if isinstance(m["payload"], dict)])
    zone = zone or ZoneInfo(DEFAULT_ZONES[language])
    truncated = MAX_MESSAGES if len(rows) > MAX_MESSAGES else 0
    # Imported here: the rendering stack (python-docx, lxml; ~10 MiB) stays out of an idle gateway.
    from zcbot_gateway.export_doc import build_docx

    data = await asyncio.to_thread(build_docx, info, messages, truncated, language, zone)
    return Response(data, media_type=DOCX_TYPE, headers={"Content-Disposition": attachment(f"{info['name']}.docx")})
