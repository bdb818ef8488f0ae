"""Edit a user message and send it again, or regenerate the last answer (issue 37):
`POST /v1/tasks/{task_id}/messages/{idx}/resend` `{content?}`.

Decided (docs/decisions.md): the later conversation is replaced, not branched, and nothing is
deleted. The message at `idx` and everything after it are marked superseded (their kind gets the
`superseded:` prefix, `agent.context.SUPERSEDED`): the model no longer sees them, the history still
shows them (folded, marked as replaced), and what those runs did to files stays done and undoable.
Then `content` (default: the message's own text, i.e. regenerate) is sent as a new message, answered
as `POST …/messages` answers (202 JSON or the run's event stream).

Refused: a message that is not one of the task's user messages (404 `message_not_found`), one already
replaced or one before the context fold's window (409 `message_not_resendable`: the summary stands in
for it), a task with an active run (409 `run_conflict`), a channel's task (409). When the submit
itself is refused before the new message is written (a run started meanwhile, a quota, a budget), the
marks are taken back.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, status
from pydantic import BaseModel, Field
from sqlalchemy import and_, func, literal, select, update

from zcbot_core.accounts.budgets import BudgetExceeded
from zcbot_core.agent.context import SUPERSEDED, is_superseded
from zcbot_core.db.models import Message
from zcbot_core.errors import ZcbotError
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate.errors import RunConflict, RunQuotaExceeded
from zcbot_core.runstate.status import ACTIVE
from zcbot_gateway.deps import CurrentUser, RuntimeDep, SettingsDep
from zcbot_gateway.routes.runs import MAX_CONTENT_CHARS, SubmitOut, submit_and_answer
from zcbot_gateway.task_access import get_user_task, require_web_task

router = APIRouter(prefix="/v1", tags=["runs"])


class MessageNotFound(ZcbotError):
    code, http_status, public_detail = "message_not_found", 404, "no such user message in this task"


class NotResendable(ZcbotError):
    code, http_status = "message_not_resendable", 409


class ResendIn(BaseModel):
    content: str | None = Field(default=None, min_length=1, max_length=MAX_CONTENT_CHARS,
                                description="the edited text; absent: the message's own text (regenerate)")


async def supersede(rt: Runtime, user_id: str, task_id: str, idx: int) -> tuple[str, list[int]]:
    """Mark `idx` and the later messages superseded; the message's text and the marked idxs."""
    async with rt.sessions() as session, session.begin():
        task = await get_user_task(session, user_id, task_id, for_update=True)
        require_web_task(task)
        if task.run_status in ACTIVE:
            raise RunConflict(f"task has an active run ({task.run_status}); wait for it or cancel it first")
        msg = (await session.scalars(select(Message).where(Message.task_id == task_id, Message.idx == idx))).first()
        payload = msg.payload if msg is not None else {}
        if msg is None or payload.get("role") != "user":
            raise MessageNotFound()
        if is_superseded(msg.kind):
            raise NotResendable("this message was replaced already")
        if idx < int(task.context_base_idx or 0):
            raise NotResendable("this message is before the conversation's summary; it can no longer be resent")
        content = payload.get("content")
        marked = (await session.scalars(
            update(Message)
            .where(Message.task_id == task_id, Message.idx >= idx, ~Message.kind.startswith(SUPERSEDED))
            .values(kind=func.concat(literal(SUPERSEDED), Message.kind))
            .returning(Message.idx)
        )).all()
    return (content if isinstance(content, str) else ""), list(marked)


async def take_back(rt: Runtime, task_id: str, marked: list[int]) -> None:
    async with rt.sessions() as session, session.begin():
        await session.execute(
            update(Message)
            .where(and_(Message.task_id == task_id, Message.idx.in_(marked), Message.kind.startswith(SUPERSEDED)))
            .values(kind=func.substr(Message.kind, len(SUPERSEDED) + 1)))


@router.post("/tasks/{task_id}/messages/{idx}/resend", status_code=status.HTTP_202_ACCEPTED,
             response_model=SubmitOut, responses={200: {"content": {"text/event-stream": {}},
                                                        "description": "as `POST …/messages` with Accept: text/event-stream"}})
async def resend_message(request: Request, task_id: str, idx: Annotated[int, Path(ge=0, le=10_000_000)], body: ResendIn, user_id: CurrentUser,
                         rt: RuntimeDep, settings: SettingsDep) -> Any:
    """Replace the conversation from user message `idx` on with `content` (or the same text: regenerate)."""
    original, marked = await supersede(rt, user_id, task_id, idx)
    content = body.content if body.content is not None else original
    if not content.strip():
        await take_back(rt, task_id, marked)
        raise NotResendable("the message has no text to send again")
    try:
        return await submit_and_answer(request, task_id, content, "reject", user_id, rt, settings)
    except (RunConflict, RunQuotaExceeded, BudgetExceeded):  # refused before the new message was written
        await take_back(rt, task_id, marked)
        raise
