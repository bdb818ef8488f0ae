"""Messages, run events (SSE) and cancel (DESIGN §4, seed 003 §7.2)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Query, Request, status
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy import and_, bindparam, func, select

from zcbot_core.accounts import budgets
from zcbot_core.agent.lang import detect
from zcbot_core.db.engine import read_session
from zcbot_core.db.models import Message, Task, User
from zcbot_core.platform.service import Runtime
from zcbot_core.runstate import sql, submit
from zcbot_core.runstate import transitions as runs
from zcbot_core.runstate.status import ACTIVE, RunOutcome, RunStatus
from zcbot_gateway.config import GatewaySettings
from zcbot_gateway.deps import USER_GONE, CurrentUser, RuntimeDep, SessionDep, SettingsDep, TokenUser, unauthorized
from zcbot_gateway.hooks import add_shutdown_hook, add_startup_hook
from zcbot_gateway.http import PagingDep
from zcbot_gateway.message_page import MessagePage, files_by_run
from zcbot_gateway.schemas import iso
from zcbot_gateway.sse import EventHub, StreamPlan, done_frame, stream_events
from zcbot_gateway.task_access import TASK_NOT_FOUND, check_task_id, get_user_task

router = APIRouter(prefix="/v1", tags=["runs"])
MAX_CONTENT_CHARS = 200_000
DONE_GRACE_SECONDS = 3.0


Multitask = Literal["reject", "enqueue", "interrupt"]


class MessageIn(BaseModel):
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    multitask: Multitask = "reject"


class SubmitOut(BaseModel):
    run_id: str
    task_id: str
    status: str
    position: int = 0
    events_url: str
    message_idx: int | None = None  # the stored user message's idx (what an edit-and-resend names)


def get_hub(request: Request) -> EventHub:
    hub: EventHub | None = getattr(request.app.state, "event_hub", None)
    if hub is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, detail="gateway is starting or stopping; retry shortly")
    return hub


def install(app: Any) -> None:
    """Start the process-wide event hub with the app; end every SSE stream when the gateway stops."""
    async def start_hub(app: Any) -> None:
        rt = app.state.rt
        hub = EventHub(rt, heartbeat=app.state.settings.zcbot_sse_heartbeat_seconds)
        await hub.start()
        app.state.event_hub = hub

        async def stop_when_draining() -> None:
            await rt.stopping.wait()
            await hub.stop()  # streams end with a reconnect hint; clients resume via Last-Event-ID

        app.state.event_hub_watch = asyncio.create_task(stop_when_draining())

    async def stop_hub(app: Any) -> None:
        hub = getattr(app.state, "event_hub", None)
        if hub is not None:
            await hub.stop()
            app.state.event_hub = None

    add_startup_hook(app, start_hub)
    add_shutdown_hook(app, stop_hub)


def message_to_json(msg: Message) -> dict[str, Any]:
    return {"idx": msg.idx, "kind": msg.kind, "run_id": msg.run_id, "payload": msg.payload,
            "tokens_in": msg.tokens_in, "tokens_out": msg.tokens_out, "model_profile": msg.model_profile,
            "created_at": iso(msg.created_at)}


MessagePaging = PagingDep(500, 1000)


@router.get("/tasks/{task_id}/messages", response_model=MessagePage)
async def list_messages(
    task_id: str, user_id: CurrentUser, session: SessionDep, paging: MessagePaging,
    after: Annotated[int, Query(ge=-1, le=10_000_000, description="only messages with a larger idx")] = -1,
) -> dict[str, Any]:
    """The task's history in order (list envelope, plus `task_id`; `total` counts those after `after`) and,
    per run on this page that changed files, how many (`files_changed`: what "undo this run" offers) and
    which of them were undone since (`files_undone`)."""
    await get_user_task(session, user_id, task_id)
    where = (Message.task_id == task_id, Message.idx > after)
    total = await session.scalar(select(func.count()).select_from(Message).where(*where)) or 0
    rows = (
        await session.execute(
            select(Message).where(*where).order_by(Message.idx).offset(paging.offset).limit(paging.page_size)
        )
    ).scalars().all()
    files = await files_by_run(session, user_id, task_id, (m.run_id for m in rows))
    return paging.envelope([message_to_json(m) for m in rows], total, task_id=task_id, files_changed=files.changed,
                           files_undone=files.undone)


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "Connection": "keep-alive"}


def wants_event_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "").lower()


# Scoped to the task (so to its user): the key only has to be unique among one task's messages.
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", min_length=1, max_length=128,
                                              pattern=r"^[A-Za-z0-9._:-]+$")]


@router.post("/tasks/{task_id}/messages", status_code=status.HTTP_202_ACCEPTED, response_model=SubmitOut,
             responses={200: {"content": {"text/event-stream": {}},
                              "description": "With `Accept: text/event-stream`: the new run's events, as "
                                             "`GET events_url` would stream them (run id in `X-Run-Id`)"}})
async def post_message(request: Request, task_id: str, body: MessageIn, user_id: CurrentUser, rt: RuntimeDep,
                       settings: SettingsDep, idempotency_key: IdempotencyKey = None) -> Any:
    """Send a message: 202 with the run's `events_url`; or, asked with `Accept: text/event-stream`,
    the run's event stream itself (one request instead of two: the stream starts where the run's
    events will, so nothing is missed even when the runner is faster than the client).

    `Idempotency-Key` (one per composed message): a resend with the key of a message this task
    already stored stores nothing; its run is queued again if the bus refused it (the 503), else the
    answer is that run as it stands (200)."""
    return await submit_and_answer(request, task_id, body.content, body.multitask, user_id, rt, settings,
                                   client_key=idempotency_key)


async def submit_and_answer(request: Request, task_id: str, content: str, multitask: Multitask, user_id: str,
                            rt: Runtime, settings: GatewaySettings, client_key: str | None = None) -> Any:
    """Submit `content` as the task's next user message and answer as `POST …/messages` does (202 JSON, or
    the run's event stream when asked for one); also the resend of an edited message (routes/resend.py)."""
    check_task_id(task_id)
    stream = wants_event_stream(request)
    hub = get_hub(request) if stream else None  # before saving anything: a message is never half-sent
    feed: EventHub | None = getattr(request.app.state, "event_hub", None)
    # Refusals propagate as domain errors (zcbot_core.errors), mapped once in zcbot_gateway/errors.py:
    # UserNotFound 401 (a user deleted since the token check),
    # TaskNotFound 404, WrongChannel / RunConflict 409, RunQuotaExceeded 429, BudgetExceeded 429, BusUnavailable 503.
    defaults = budgets.Defaults.from_settings(settings)
    # A used-up budget: 429 before anything is saved. None to check when the auth statement found no
    # limit of the user's own and no default is set (`get_current_user`).
    if getattr(request.state, "user_has_own_limit", True) or defaults.daily > 0 or defaults.monthly > 0:
        async with read_session(rt.sessions) as session:
            await budgets.check_new_message(session, settings, user_id=user_id, task_id=task_id, lang=detect(content))
    result = await submit.submit_message(
        rt.sessions, rt.js, rt.nc, rt.topo, user_id=user_id, task_id=task_id, content=content,
        multitask=multitask, channel="web", storage_root=settings.storage_root,
        limits=submit.RunLimits.from_settings(settings),
        events_from=feed.events_from() if feed is not None else None, grant_key=settings.zcbot_run_grant_key,
        client_key=client_key,
    )
    events_url = f"/v1/tasks/{task_id}/events?run_id={result.run_id}"
    if hub is not None:
        # A pending run's events come after the active run's: the plan follows this run only. A
        # replayed run that is over is streamed from its start to its `done` (as `GET events_url`).
        over = result.replayed and result.status not in ACTIVE and result.status != "pending"
        plan = StreamPlan(start_seq=result.events_from or 1, run_id=result.run_id, idle_when_caught_up=over,
                          done_grace=DONE_GRACE_SECONDS if over else 0.0,
                          queued_position=result.position if result.status == RunStatus.WAITING else 0)
        headers = {**SSE_HEADERS, "X-Run-Id": result.run_id, "X-Run-Status": result.status,
                   "X-Queue-Position": str(result.position), "Content-Location": events_url,
                   "X-Message-Idx": "" if result.message_idx is None else str(result.message_idx)}
        return StreamingResponse(stream_events(hub, task_id, plan), media_type="text/event-stream", headers=headers)
    out = SubmitOut(run_id=result.run_id, task_id=task_id, status=result.status, position=result.position,
                    events_url=events_url, message_idx=result.message_idx)
    if result.replayed:  # nothing new was accepted: the earlier request's run, as it stands
        return JSONResponse(out.model_dump(), status_code=status.HTTP_200_OK)
    return out


@router.post("/tasks/{task_id}/cancel", status_code=status.HTTP_202_ACCEPTED)
async def cancel_run(task_id: str, user_id: CurrentUser, rt: RuntimeDep) -> dict[str, Any]:
    # TaskNotFound 404, NothingToCancel 409 (domain errors, mapped at the edge)
    run_id, waited = await runs.request_cancel(rt.sessions, rt.js, rt.nc, rt.topo, user_id=user_id, task_id=task_id,
                                               grant_key=rt.settings.zcbot_run_grant_key,
                                               max_active=rt.settings.zcbot_max_runs_per_user)
    # A waiting run never started: it is cancelled at once.
    return {"task_id": task_id, "run_id": run_id,
            "status": RunOutcome.CANCELLED.value if waited else RunStatus.CANCELLING.value}


def _parse_last_event_id(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 18:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, detail="Last-Event-ID must be a stream sequence number")
    return int(value)


_users, _tasks = User.__table__, Task.__table__
# The token's user and its task's run state in one autocommit statement (no row: the user is gone or the token was revoked).
_USER_TASK_RUN = (
    select(_tasks.c.task_id, _tasks.c.run_status, _tasks.c.run_id, _tasks.c.run_events_from, _tasks.c.pending_inputs)
    .select_from(_users.outerjoin(_tasks, and_(_tasks.c.task_id == bindparam("events_task"),
                                               _tasks.c.user_id == _users.c.user_id, _tasks.c.deleted_at.is_(None))))
    .where(_users.c.user_id == bindparam("events_user"), _users.c.token_version == bindparam("events_version"))
)


@router.get("/tasks/{task_id}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}, "description": "SSE stream of run events"}})
async def run_events(
    request: Request, task_id: str, claims: TokenUser, rt: RuntimeDep,
    run_id: Annotated[str | None, Query(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    check_task_id(task_id)
    resume = _parse_last_event_id(last_event_id)
    async with rt.autocommit.connect() as conn:  # no pooled connection is held while the stream lives
        task = (await conn.execute(_USER_TASK_RUN, {"events_task": task_id, "events_user": claims.user_id,
                                                     "events_version": claims.version})).first()
    if task is None:
        raise unauthorized(USER_GONE)
    if task.task_id is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=TASK_NOT_FOUND)
    active = task.run_status in ACTIVE
    pending_ids = {item.get("run_id") for item in (task.pending_inputs or [])}
    current_from = task.run_events_from or 1
    if resume is not None:
        plan = StreamPlan(start_seq=resume + 1, run_id=run_id or (task.run_id if active else None),
                          idle_when_caught_up=not active and run_id not in pending_ids,
                          done_grace=DONE_GRACE_SECONDS if run_id == task.run_id and not active else 0.0)
    elif run_id is not None:
        known = run_id == task.run_id or run_id in pending_ids
        just_ended = run_id == task.run_id and not active
        plan = StreamPlan(start_seq=current_from if known else 1, run_id=run_id,
                          idle_when_caught_up=not known or just_ended,
                          done_grace=DONE_GRACE_SECONDS if just_ended else 0.0)
    elif active:
        plan = StreamPlan(start_seq=current_from, run_id=task.run_id, idle_when_caught_up=False)
    else:
        plan = None
    if plan is not None and task.run_status == RunStatus.WAITING and plan.run_id == task.run_id:
        async with rt.autocommit.connect() as conn:
            plan.queued_position = int((await conn.execute(sql.WAITING_POSITION, {"position_task": task_id})).scalar_one())
    headers = SSE_HEADERS
    if plan is None:
        async def idle() -> Any:
            yield done_frame(None, "idle")

        return StreamingResponse(idle(), media_type="text/event-stream", headers=headers)
    hub = get_hub(request)
    return StreamingResponse(stream_events(hub, task_id, plan),
                             media_type="text/event-stream", headers=headers)
