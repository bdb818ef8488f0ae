"""Tasks and folders (seed 003 §7.1, §7.2, §7.4).

- Every query is scoped by `Task.user_id == <current user>`; another user's task is a 404.
- `working_dir` defaults to the name and is stored normalized (`paths.to_db_path`); the folder is
  created eagerly under `storage_root/<user_id>/`. No-subtask rule: a working dir strictly inside,
  or strictly containing, one of the user's live tasks' working dirs is rejected (same dir is
  fine: several tasks share a project folder). Creates/restores of one user are serialized by a
  transaction-scoped advisory lock (`zcbot_core.workspace.folders.claim_folder`) so two concurrent creates cannot nest;
  the create itself is `zcbot_core.workspace.tasks.create_task`, shared with the scheduler and the channels.
- DELETE is a soft delete (`deleted_at`); files on disk are never touched. A task with an active
  run cannot be deleted (409). `POST /restore` undoes it (re-checking the no-subtask rule).
- Tasks created by a channel (`channel != 'web'`) are read-only here: PATCH/DELETE/restore -> 409.
- The list hides soft-deleted tasks and tasks owned by a scheduled job (`include_scheduled=true`
  shows the latter; `deleted=true` lists the trash instead).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from sqlalchemy import ColumnElement, Select, func, select

from zcbot_core.db.models import Task
from zcbot_core.runstate import ACTIVE, RunStatus
from zcbot_core.safe_fs import paths
from zcbot_core.tools.executor_client import stop_background
from zcbot_core.workspace.folders import (
    MAX_WORKING_DIR,
    NestedFolder,
    claim_folder,
    normalize_working_dir,
    simple_working_dir,
)
from zcbot_core.workspace.tasks import create_task as create_task_row
from zcbot_core.workspace.tasks import make_task_dir
from zcbot_gateway.deps import CurrentUser, RuntimeDep, SessionDep, SettingsDep, check_model_profile
from zcbot_gateway.http import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    PagingDep,
    bad_request,
    clean_label,
    clean_text,
    conflict,
    invalid_query,
    one_of,
)
from zcbot_gateway.schemas import (
    TASK_STATUSES,
    FolderPage,
    TaskCreate,
    TaskOut,
    TaskPage,
    TaskPatch,
    iso,
    task_to_json,
)
from zcbot_gateway.task_access import get_user_task, require_web_task
from zcbot_gateway.task_search import search_page

router = APIRouter(prefix="/v1", tags=["tasks"])

ORDERING_FIELDS: dict[str, Any] = {
    "created_at": Task.created_at,
    "updated_at": Task.updated_at,
    "name": Task.name,
    "status": Task.status,
    "run_status": Task.run_status,
    "cost_usd": Task.cost_usd,
}
DEFAULT_ORDERING = "-created_at"


# ---- helpers ---------------------------------------------------------------------------------


def parse_ordering(ordering: str | None) -> list[Any]:
    """DRF-style `field,-other` against the allowlist (400 otherwise); task_id breaks ties."""
    spec = ordering if ordering is not None and ordering.strip() else DEFAULT_ORDERING
    clauses: list[Any] = []
    seen: set[str] = set()
    for raw in spec.split(","):
        item = raw.strip()
        desc = item.startswith("-")
        field = item[1:] if desc else item
        column = ORDERING_FIELDS.get(field)
        if column is None:
            raise invalid_query(
                "ordering",
                zh=f"不能按 {item!r} 排序；可用：{'、'.join(ORDERING_FIELDS)}（前加 '-' 为降序，逗号分隔多个）",
                en=f"field {item!r} is not allowed; use one of {', '.join(ORDERING_FIELDS)} "
                   "(prefix '-' for descending, comma-separated)",
            )
        if field in seen:
            continue
        seen.add(field)
        clauses.append(column.desc() if desc else column.asc())
    clauses.append(Task.task_id.asc())
    return clauses


# ---- routes ----------------------------------------------------------------------------------


@router.post("/tasks", status_code=status.HTTP_201_CREATED, response_model=TaskOut)
async def create_task(body: TaskCreate, user: CurrentUser, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    """Create a task; its folder (`working_dir`, default: the name) is created at once."""
    name = paths.validate_task_name(body.name)
    raw_wd = body.working_dir if body.working_dir is not None and body.working_dir.strip() else name
    working_dir = simple_working_dir(raw_wd)
    description = clean_text(body.description, "description")
    skill = clean_label(body.skill, "skill")
    profile = check_model_profile(settings, body.model_profile)
    task = await create_task_row(session, settings.storage_root, user_id=user, name=name, working_dir=working_dir,
                                 description=description, skill=skill, model_profile=profile)
    task.wall_clock_seconds = body.wall_clock_seconds
    await session.commit()
    await session.refresh(task)
    return task_to_json(task)


TaskPaging = PagingDep(DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
FolderPaging = PagingDep(MAX_PAGE_SIZE, MAX_PAGE_SIZE)
RUN_STATUS_VALUES = tuple(s.value for s in RunStatus)


@router.get("/tasks", response_model=TaskPage)
async def list_tasks(
    user: CurrentUser,
    session: SessionDep,
    paging: TaskPaging,
    status_: Annotated[str | None, Query(alias="status", max_length=200,
                                         description=f"comma-separated of {', '.join(TASK_STATUSES)}")] = None,
    skill: Annotated[str | None, Query(max_length=128)] = None,
    working_dir: Annotated[str | None, Query(max_length=MAX_WORKING_DIR)] = None,
    run_status: Annotated[str | None, Query(max_length=200, description=(
        f"comma-separated of {', '.join(RUN_STATUS_VALUES)}, e.g. running,cancelling"))] = None,
    q: Annotated[str | None, Query(max_length=200, description=(
        "search (any case, substrings, Chinese too) in the name, the description and the text of the "
        "task's user and assistant messages; a task found by a message carries `match`"))] = None,
    ordering: Annotated[
        str | None, Query(max_length=200,
                          description=f"comma-separated of {', '.join(ORDERING_FIELDS)}; '-' = descending")
    ] = None,
    include_scheduled: bool = False,
    deleted: Annotated[bool, Query(description="list soft-deleted tasks (the trash) instead")] = False,
) -> dict[str, Any]:
    """Your tasks, newest first by default: the list envelope `{items, total, page, page_size}`.
    An unknown `status`, `run_status` or `ordering` value is 422."""
    order_by = parse_ordering(ordering)

    conds: list[ColumnElement[bool]] = [Task.user_id == user]
    conds.append(Task.deleted_at.is_not(None) if deleted else Task.deleted_at.is_(None))
    if not include_scheduled:
        conds.append(Task.scheduled_job_id.is_(None))
    if statuses := one_of("status", status_, TASK_STATUSES):
        conds.append(Task.status.in_(statuses))
    if run_statuses := one_of("run_status", run_status, RUN_STATUS_VALUES):
        conds.append(Task.run_status.in_(run_statuses))
    if skill is not None:
        conds.append(Task.skill == clean_text(skill, "skill"))
    if working_dir is not None:
        conds.append(Task.working_dir == normalize_working_dir(working_dir))
    needle = (clean_text(q.strip(), "q") or "") if q is not None else ""
    if needle:
        found, total = await search_page(session, conds, needle, order_by, paging.offset, paging.page_size)
        return paging.envelope([{**task_to_json(t), "match": match} for t, match in found], total)

    count = await session.scalar(select(func.count()).select_from(Task).where(*conds)) or 0
    stmt: Select[tuple[Task]] = (
        select(Task).where(*conds).order_by(*order_by).offset(paging.offset).limit(paging.page_size)
    )
    rows = (await session.scalars(stmt)).all()
    return paging.envelope([task_to_json(t) for t in rows], count)


@router.get("/tasks/{task_id}", response_model=TaskOut)
async def get_task(task_id: str, user: CurrentUser, session: SessionDep) -> dict[str, Any]:
    """One of your tasks (404 for missing, deleted, or someone else's)."""
    return task_to_json(await get_user_task(session, user, task_id))


@router.patch("/tasks/{task_id}", response_model=TaskOut)
async def patch_task(
    task_id: str, body: TaskPatch, user: CurrentUser, session: SessionDep, settings: SettingsDep
) -> dict[str, Any]:
    """Change name, status, description, skill or model profile (next message uses the profile)."""
    task = await get_user_task(session, user, task_id, for_update=True)
    require_web_task(task)
    fields = body.model_fields_set
    if "name" in fields:
        if body.name is None:
            raise bad_request("name must not be null")
        task.name = paths.validate_task_name(body.name)
    if "status" in fields:
        if body.status not in TASK_STATUSES:
            raise bad_request(f"status must be one of {', '.join(TASK_STATUSES)}")
        task.status = body.status
    if "description" in fields:
        task.description = clean_text(body.description, "description")
    if "skill" in fields:
        task.skill = clean_label(body.skill, "skill")
    if "model_profile" in fields:
        task.model_profile = check_model_profile(settings, body.model_profile)
    if "wall_clock_seconds" in fields:  # null: back to the server's default
        task.wall_clock_seconds = body.wall_clock_seconds
    if fields:
        await session.commit()
        await session.refresh(task)
    return task_to_json(task)


@router.delete("/tasks/{task_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_task(task_id: str, user: CurrentUser, session: SessionDep, rt: RuntimeDep) -> Response:
    """Soft delete (the folder and its files stay). 409 while a run is active. The task's background
    processes are killed (except keep=true ones)."""
    task = await get_user_task(session, user, task_id, for_update=True)
    require_web_task(task)
    if task.run_status in ACTIVE:  # busy: no delete, no folder rename
        raise conflict(f"task has an active run ({task.run_status}); cancel it first")
    task.deleted_at = func.now()
    await session.commit()
    await stop_background(rt.nc, rt.topo, user, task_id, "task deleted", grant_key=rt.settings.zcbot_run_grant_key)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/tasks/{task_id}/restore", response_model=TaskOut)
async def restore_task(task_id: str, user: CurrentUser, session: SessionDep, settings: SettingsDep) -> dict[str, Any]:
    """Undo a soft delete (idempotent). 409 if its folder now nests with a live task's folder."""
    task = await get_user_task(session, user, task_id, for_update=True, include_deleted=True)
    require_web_task(task)
    if task.deleted_at is None:
        return task_to_json(task)
    try:
        await claim_folder(session, user, task.working_dir, exclude_task_id=task.task_id)
    except NestedFolder as exc:
        raise conflict(f"cannot restore: {exc}") from None
    await asyncio.to_thread(make_task_dir, settings.storage_root, user, task.working_dir)
    task.deleted_at = None
    await session.commit()
    await session.refresh(task)
    return task_to_json(task)


@router.get("/folders", response_model=FolderPage)
async def list_folders(user: CurrentUser, session: SessionDep, paging: FolderPaging) -> dict[str, Any]:
    """Working dirs of your live tasks with task counts, most recently used first."""
    last_used = func.max(Task.updated_at)
    stmt = (
        select(Task.working_dir, func.count(), last_used)
        .where(Task.user_id == user, Task.deleted_at.is_(None))
        .group_by(Task.working_dir)
        .order_by(last_used.desc(), Task.working_dir)
    )
    rows = (await session.execute(stmt)).all()
    return paging.slice([{"working_dir": wd, "task_count": n, "last_used_at": iso(ts)} for wd, n, ts in rows])
