"""Channel conversations: one persistent task per user and channel (seed 003 §8.7).

An inbound message goes through the same entry as the web (`submit.submit_message`, strategy
`reject`): while a run is active the sender gets a short "still working" reply instead of a
second run. Otherwise we wait for the run's end (the `done` event on the task's event subject,
with a database poll as a fallback), then send back the final assistant text (read from the
database: the `done` event's `final_text` is capped at 2000 characters) and every new file in
the task folder (mtime after the run started; hidden files skipped; at most `MAX_FILES`).
`ReplyHooks` report progress (submitted / text sent / finished) so an owner can persist the
pending reply, and `resume_reply` finishes one whose original waiter went away.

Channel tasks: `channel` = 'wecom' / 'ilink', working dir `wecom` / `wechat` (or a variant when
that folder nests with another task's), created on first use under an advisory lock shared with
the gateway's task creation (`zcbot:folders:<user_id>`), so concurrent first messages on two
replicas cannot create two tasks. Push deliveries are recorded in the same task as assistant
messages of kind `push` (a summary and the file path, not the whole body).
"""

from __future__ import annotations

import asyncio
import logging
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core import safe_fs
from zcbot_core.bus import BusDecodeError, Topology, decode
from zcbot_core.bus import events as ev
from zcbot_core.db.models import Message, Task
from zcbot_core.platform.config import Settings
from zcbot_core.runstate.status import ACTIVE
from zcbot_core.runstate.submit import RunLimits, submit_message
from zcbot_core.runstate.transitions import BusUnavailable, RunConflict, RunQuotaExceeded, append_message
from zcbot_core.safe_fs import paths
from zcbot_core.workspace.folders import lock_user_folders
from zcbot_core.workspace.tasks import create_task

log = logging.getLogger(__name__)

CHANNEL_FOLDERS = {"wecom": "wecom", "ilink": "wechat"}
CHANNEL_TASK_NAMES = {"wecom": "WeCom", "ilink": "WeChat"}
BUSY_REPLY = ("I'm still working on your previous message; I'll reply to it first. "
              "Send this one again after my answer (or cancel the run in the web app).")
MEDIA_ONLY_REPLY = ("I can only read text (and voice transcripts) here for now. "
                    "To give me a file, upload it in the web app.")
MAX_FILES = 5
PUSH_SUMMARY_CHARS = 300
DB_POLL_SECONDS = 2.0

Sessions = async_sessionmaker[AsyncSession]


class Replier(Protocol):
    """Where a conversation's answers go (one WeCom member or one iLink chat)."""

    async def send_text(self, text: str) -> None: ...

    async def send_file(self, path: safe_fs.UserFile) -> None: ...


@dataclass
class ConversationDeps:
    settings: Settings
    sessions: Sessions
    nc: NATS
    js: JetStreamContext
    topo: Topology
    reply_timeout: float | None = None

    @property
    def timeout(self) -> float:
        return self.reply_timeout or (self.settings.zcbot_run_wall_clock_seconds + 60.0)


@dataclass
class RunOutcome:
    status: str  # ok | error | cancelled | stopped | busy | rejected | timeout
    run_id: str | None = None
    task_id: str | None = None
    text: str = ""
    files: list[safe_fs.UserFile] | None = None


# ---- the channel task ---------------------------------------------------------------------------
def _folder_candidates(channel: str) -> list[str]:
    base = CHANNEL_FOLDERS[channel]
    return [base, f"{base}-chat", *(f"{base}-{n}" for n in range(2, 10))]


async def ensure_channel_task(sessions: Sessions, settings: Settings, user_id: str, channel: str) -> Task:
    """The user's persistent task for `channel`, created (with its folder) on first use."""
    async with sessions() as session:
        task = (await session.scalars(
            select(Task).where(Task.user_id == user_id, Task.channel == channel, Task.deleted_at.is_(None))
            .order_by(Task.created_at).limit(1)
        )).first()
        if task is not None:
            return task
    root = paths.user_root(settings.storage_root, user_id)
    async with sessions() as session, session.begin():
        await lock_user_folders(session, user_id)
        task = (await session.scalars(
            select(Task).where(Task.user_id == user_id, Task.channel == channel, Task.deleted_at.is_(None))
            .order_by(Task.created_at).limit(1)
        )).first()
        if task is not None:
            return task
        existing = set((await session.scalars(
            select(Task.working_dir).where(Task.user_id == user_id, Task.deleted_at.is_(None))
        )).all())
        working_dir = None
        for candidate in _folder_candidates(channel):
            wd = paths.to_db_path(candidate)
            if wd in existing or any(paths.is_prefix_nested(wd, other) for other in existing):
                continue
            if _taken(root, wd):
                continue
            working_dir = wd
            break
        if working_dir is None:
            raise RuntimeError(f"no free folder for the {channel} conversation of this user")
        task = await create_task(session, settings.storage_root, user_id=user_id,
                                 name=paths.validate_task_name(CHANNEL_TASK_NAMES[channel]), working_dir=working_dir,
                                 channel=channel)
        log.info("channel task created", extra={"user_id": user_id, "channel": channel, "task_id": task.task_id})
        return task


def _taken(root: Path, rel: str) -> bool:
    """True when something other than a plain folder is at `rel` (a file, a symlink)."""
    try:
        with safe_fs.Root.open(root, create=True) as user:
            st = user.lstat(rel)
    except paths.PathRejected:
        return True
    return st is not None and not stat.S_ISDIR(st.st_mode)


# ---- files ------------------------------------------------------------------------------------
def new_files(root: Path, rel_dir: str, since: float, limit: int = MAX_FILES) -> list[safe_fs.UserFile]:
    """Regular files under the folder `rel_dir` of the user root modified at/after `since` (hidden
    entries and symlinks skipped; walked through directory fds, never following a link)."""
    try:
        with safe_fs.Root.open(root) as user:
            files = user.walk_files(paths.normalize_rel(rel_dir), skip=lambda name: name == "__pycache__")
    except paths.PathRejected:
        return []
    found = sorted((st.st_mtime, rel) for rel, st in files if st.st_mtime >= since)
    return [safe_fs.UserFile(root, rel) for _, rel in found[-limit:]]


# ---- runs -------------------------------------------------------------------------------------
async def _final_text(sessions: Sessions, task_id: str, run_id: str) -> str:
    async with sessions() as session:
        rows = (await session.execute(
            select(Message.payload).where(Message.task_id == task_id, Message.run_id == run_id)
            .order_by(Message.idx.desc()).limit(50)
        )).scalars().all()
    for payload in rows:
        if payload.get("role") == "assistant":
            content = payload.get("content")
            if isinstance(content, str) and content.strip():
                return content.strip()
            if isinstance(content, list):
                text = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
                if text.strip():
                    return text.strip()
    return ""


async def _task_state(sessions: Sessions, task_id: str) -> tuple[str | None, str, str | None]:
    async with sessions() as session:
        row = (await session.execute(
            select(Task.run_id, Task.run_status, Task.run_error).where(Task.task_id == task_id)
        )).one_or_none()
    return (row[0], row[1], row[2]) if row else (None, "idle", None)


async def wait_for_run(deps: ConversationDeps, task_id: str, run_id: str, done_q: "asyncio.Queue[ev.Done]",
                       timeout: float) -> tuple[str, str]:
    """(status, final_text) once the run ends; status `timeout` if it does not within `timeout`."""
    deadline = time.monotonic() + timeout
    finished_seen_at: float | None = None
    db_status: str | None = None
    while time.monotonic() < deadline:
        try:
            done = await asyncio.wait_for(done_q.get(), DB_POLL_SECONDS if finished_seen_at is None else 0.5)
            if done.run_id == run_id:
                return done.status, done.final_text
            continue
        except asyncio.TimeoutError:
            pass
        if finished_seen_at is not None:
            return db_status or "ok", ""
        current, status, error = await _task_state(deps.sessions, task_id)
        if current != run_id or status not in ACTIVE:
            finished_seen_at = time.monotonic()  # give the done event a moment to arrive
            db_status = "error" if (current == run_id and status == "error") else "ok"
    return "timeout", ""


@dataclass
class ReplyHooks:
    """Progress callbacks, so an owner can persist a pending reply and resume it elsewhere.

    `submitted(task_id, run_id, started)` after the run is queued; `text_sent(run_id)` once the
    answer text went out; `finished(run_id)` when nothing remains to send.
    """

    submitted: Callable[[str, str, float], Awaitable[None]] | None = None
    text_sent: Callable[[str], Awaitable[None]] | None = None
    finished: Callable[[str], Awaitable[None]] | None = None


class _DoneWatch:
    """A core subscription to the task's events that keeps the `done` events (subscribe first)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[ev.Done] = asyncio.Queue()
        self.sub: Any = None

    async def start(self, deps: ConversationDeps, task_id: str) -> "_DoneWatch":
        async def on_event(msg: Any) -> None:
            try:
                event = decode(msg.data)
            except BusDecodeError:
                return
            if isinstance(event, ev.Done):
                self.queue.put_nowait(event)

        self.sub = await deps.nc.subscribe(deps.topo.event_subject(task_id), cb=on_event)
        return self

    async def stop(self) -> None:
        try:
            await self.sub.unsubscribe()
        except Exception:
            pass


async def run_message(deps: ConversationDeps, user_id: str, channel: str, text: str, replier: Replier,
                      hooks: ReplyHooks | None = None) -> RunOutcome:
    """Submit one inbound message to the user's channel task and send the result back."""
    settings = deps.settings
    hooks = hooks or ReplyHooks()
    task = await ensure_channel_task(deps.sessions, settings, user_id, channel)
    watch = await _DoneWatch().start(deps, task.task_id)
    try:
        started = time.time()
        try:
            result = await submit_message(
                deps.sessions, deps.js, deps.nc, deps.topo, user_id=user_id, task_id=task.task_id, content=text,
                multitask="reject", origin=f"channel:{channel}", storage_root=settings.storage_root,
                limits=RunLimits.from_settings(settings),
                grant_key=settings.zcbot_run_grant_key,
            )
        except RunConflict:
            await replier.send_text(BUSY_REPLY)
            return RunOutcome(status="busy", task_id=task.task_id)
        except (RunQuotaExceeded, BusUnavailable) as exc:
            await replier.send_text(f"I can't start on this right now: {exc}")
            return RunOutcome(status="rejected", task_id=task.task_id)
        log.info("channel run started", extra={"channel": channel, "task_id": task.task_id, "run_id": result.run_id})
        if hooks.submitted is not None:
            await hooks.submitted(task.task_id, result.run_id, started)
        status, final_text = await wait_for_run(deps, task.task_id, result.run_id, watch.queue, deps.timeout)
    finally:
        await watch.stop()
    return await deliver_result(deps, user_id, channel, task.task_id, task.working_dir, result.run_id, started,
                                status, final_text, replier, hooks)


async def resume_reply(deps: ConversationDeps, user_id: str, channel: str, task_id: str, run_id: str, started: float,
                       replier: Replier, hooks: ReplyHooks | None = None, text_sent: bool = False) -> RunOutcome:
    """Finish a reply whose waiter went away (e.g. its replica drained): wait if needed, then send."""
    async with deps.sessions() as session:
        working_dir = (await session.execute(select(Task.working_dir).where(Task.task_id == task_id))).scalar_one()
    watch = await _DoneWatch().start(deps, task_id)
    try:
        current, state, _ = await _task_state(deps.sessions, task_id)
        if current == run_id and state in ACTIVE:
            status, final_text = await wait_for_run(deps, task_id, run_id, watch.queue, deps.timeout)
        else:
            status, final_text = ("error" if current == run_id and state == "error" else "ok"), ""
    finally:
        await watch.stop()
    return await deliver_result(deps, user_id, channel, task_id, working_dir, run_id, started, status, final_text,
                                replier, hooks or ReplyHooks(), skip_text=text_sent)


async def deliver_result(deps: ConversationDeps, user_id: str, channel: str, task_id: str, working_dir: str,
                         run_id: str, started: float, status: str, final_text: str, replier: Replier,
                         hooks: ReplyHooks, skip_text: bool = False) -> RunOutcome:
    root = paths.user_root(deps.settings.storage_root, user_id)
    outcome = RunOutcome(status=status, run_id=run_id, task_id=task_id)
    if status == "timeout":
        outcome.text = "This is taking longer than expected; I'm still on it. The result will be in the web app."
        await replier.send_text(outcome.text)
        if hooks.finished is not None:
            await hooks.finished(run_id)
        return outcome
    body = await _final_text(deps.sessions, task_id, run_id) or final_text
    if status == "error":
        _, _, error = await _task_state(deps.sessions, task_id)
        body = f"{body}\n\n" if body else ""
        body += f"⚠️ The run failed: {error or 'unknown error'}. Reply \"continue\" to retry."
    elif status == "cancelled":
        body = body or "(The run was cancelled.)"
    outcome.text = body or "(No text answer.)"
    if not skip_text:
        await replier.send_text(outcome.text)
        if hooks.text_sent is not None:
            await hooks.text_sent(run_id)
    outcome.files = new_files(root, working_dir, started)
    for path in outcome.files:
        try:
            await replier.send_file(path)
        except Exception as exc:
            log.warning("channel file send failed", extra={"channel": channel, "file": path.name,
                                                           "error": exc.__class__.__name__})
            rel = path.relative_to(paths.normalize_rel(working_dir))
            await replier.send_text(f"(Could not send {rel} here: {str(exc)[:200]}. It is in the web app.)")
    if hooks.finished is not None:
        await hooks.finished(run_id)
    return outcome


# ---- push records -----------------------------------------------------------------------------
def push_summary(text: str, file_path: str | None) -> str:
    body = text.strip()
    if len(body) > PUSH_SUMMARY_CHARS:
        body = body[:PUSH_SUMMARY_CHARS - 1] + "…"
    out = f"[pushed to the user] {body}" if body else "[pushed to the user]"
    if file_path:
        out += f"\n[file: {file_path}]"
    return out


async def record_push(sessions: Sessions, settings: Settings, user_id: str, channel: str, text: str,
                      file_path: str | None) -> int:
    """Write a delivered push into the channel task as an assistant message of kind `push`."""
    task = await ensure_channel_task(sessions, settings, user_id, channel)
    async with sessions() as session, session.begin():
        # Lock the task row like the runner's step store: idx allocation must not race.
        await session.execute(update(Task).where(Task.task_id == task.task_id).values(updated_at=Task.updated_at))
        return await append_message(session, task.task_id,
                                    {"role": "assistant", "content": push_summary(text, file_path)}, kind="push")
