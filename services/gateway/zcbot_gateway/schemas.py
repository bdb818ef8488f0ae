"""Request/response shapes shared by the gateway routes.

`task_to_json(task)` is THE task representation: every route that returns a task uses it
(`TaskOut` mirrors it for the OpenAPI schema).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from zcbot_core.db.models import Task
from zcbot_core.safe_fs.paths import MAX_NAME
from zcbot_core.workspace.folders import MAX_WORKING_DIR
from zcbot_core.workspace.tasks import WEB_CHANNEL

# User-settable task status values (a label: `run_status` is the run state machine).
TASK_STATUSES = ("active", "done", "archived")


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def task_to_json(task: Task) -> dict[str, Any]:
    channel = task.channel or WEB_CHANNEL
    return {
        "task_id": task.task_id,
        "name": task.name,
        "working_dir": task.working_dir,
        "skill": task.skill,
        "description": task.description,
        "status": task.status,
        "model_profile": task.model_profile,
        "wall_clock_seconds": task.wall_clock_seconds,
        "channel": channel,
        "read_only": channel != WEB_CHANNEL,
        "run_status": task.run_status,
        "run_error": task.run_error,
        "run_id": task.run_id,
        "scheduled_job_id": task.scheduled_job_id,
        "tokens_in": int(task.tokens_in or 0),
        "tokens_out": int(task.tokens_out or 0),
        "tokens_cached": int(task.tokens_cached or 0),
        "cost_usd": float(task.cost_usd or 0),
        "queued_messages": len(task.pending_inputs or []),
        "run_timings": task.run_timings,
        "context_base_idx": int(task.context_base_idx or 0),
        "created_at": iso(task.created_at),
        "updated_at": iso(task.updated_at),
        "deleted_at": iso(task.deleted_at),
    }


MIN_WALL_CLOCK = 1
MAX_WALL_CLOCK = 7 * 24 * 3600


class TaskMatch(BaseModel):
    """Where a search (`GET /v1/tasks?q=`) found the task in its messages: the latest such message."""

    idx: int
    role: str
    snippet: str


class TaskOut(BaseModel):
    task_id: str
    name: str
    working_dir: str
    skill: str | None
    description: str | None
    status: str
    model_profile: str | None
    wall_clock_seconds: int | None
    channel: str
    read_only: bool
    run_status: str
    run_error: str | None
    run_id: str | None
    scheduled_job_id: str | None
    tokens_in: int
    tokens_out: int
    tokens_cached: int
    cost_usd: float
    queued_messages: int
    run_timings: dict[str, Any] | None
    context_base_idx: int
    created_at: str | None
    updated_at: str | None
    deleted_at: str | None


class TaskListed(TaskOut):
    match: TaskMatch | None = Field(default=None, description="with `q`: the message that matched, else null")


class TaskPage(BaseModel):
    """The list envelope (`http.Paging.envelope`) of tasks."""

    items: list[TaskListed]
    total: int
    page: int
    page_size: int


class FolderOut(BaseModel):
    working_dir: str
    task_count: int
    last_used_at: str | None


class FolderPage(BaseModel):
    items: list[FolderOut]
    total: int
    page: int
    page_size: int


class TaskCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=MAX_NAME, description="display name (simple name: no '/', '\\', NUL, leading '.')")
    working_dir: str | None = Field(
        default=None, max_length=MAX_WORKING_DIR, description="folder under your root (one simple name); defaults to the name"
    )
    description: str | None = Field(default=None, max_length=20_000)
    skill: str | None = Field(default=None, max_length=128)
    model_profile: str | None = Field(default=None, max_length=128)
    wall_clock_seconds: int | None = Field(default=None, ge=MIN_WALL_CLOCK, le=MAX_WALL_CLOCK, description=(
        "this task's wall-clock backstop per run in seconds (null: the server's ZCBOT_RUN_WALL_CLOCK_SECONDS)"))


class TaskPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: Literal["active", "done", "archived"] | None = None
    description: str | None = Field(default=None, max_length=20_000)
    name: str | None = Field(default=None, max_length=MAX_NAME)
    skill: str | None = Field(default=None, max_length=128)
    model_profile: str | None = Field(default=None, max_length=128)
    wall_clock_seconds: int | None = Field(default=None, ge=MIN_WALL_CLOCK, le=MAX_WALL_CLOCK, description=(
        "this task's wall-clock backstop per run in seconds (null: the server's ZCBOT_RUN_WALL_CLOCK_SECONDS)"))


class LoginIn(BaseModel):
    user_id: str = Field(max_length=1000)
    platform_key: str = Field(max_length=4096)
    name: str | None = Field(default=None, max_length=256)
    user_name: str | None = Field(default=None, max_length=256)


class PasswordLoginIn(BaseModel):
    email: str = Field(max_length=320)
    password: str = Field(max_length=1024)


class ChangePasswordIn(BaseModel):
    old_password: str = Field(max_length=1024)
    new_password: str = Field(max_length=1024)


class TokenOut(BaseModel):
    token: str
    user_id: str


class MeOut(BaseModel):
    user_id: str
    email: str | None
    name: str | None
    user_name: str | None
    role: str
    plan: str | None
    created_at: str | None


class OkOut(BaseModel):
    ok: bool = True
