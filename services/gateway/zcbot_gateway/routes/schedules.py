"""Scheduled jobs, read-only dashboard + disable/delete (seed 003 §8.5, DESIGN §7).

Creating and editing jobs happens in conversation (`schedule_*` host tools); both go through
`zcbot_core.schedules`, so the rules cannot drift. Every query is scoped by the current user;
another user's job is a 404 (`ScheduleNotFound`, mapped at the edge: zcbot_gateway/errors.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response, status

from zcbot_core import schedules
from zcbot_gateway.deps import CurrentUser, SessionDep
from zcbot_gateway.http import MAX_PAGE_SIZE, PagingDep

router = APIRouter(prefix="/v1", tags=["schedules"])
SchedulePaging = PagingDep(MAX_PAGE_SIZE, MAX_PAGE_SIZE)


@router.get("/schedules")
async def list_schedules(user: CurrentUser, session: SessionDep, paging: SchedulePaging) -> dict[str, Any]:
    """The user's scheduled jobs (oldest first) with next/last run and failure count (list envelope)."""
    return paging.slice([schedules.job_to_dict(job) for job in await schedules.list_schedules(session, user)])


@router.get("/schedules/{job_id}")
async def get_schedule(job_id: str, user: CurrentUser, session: SessionDep) -> dict[str, Any]:
    return schedules.job_to_dict(await schedules.get_schedule(session, user, job_id))


@router.post("/schedules/{job_id}/disable")
async def disable_schedule(job_id: str, user: CurrentUser, session: SessionDep) -> dict[str, Any]:
    """Stop future runs (a run in progress finishes). Re-enable in conversation."""
    job = await schedules.disable_schedule(session, user, job_id)
    data = schedules.job_to_dict(job)
    await session.commit()
    return data


@router.delete("/schedules/{job_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_schedule(job_id: str, user: CurrentUser, session: SessionDep) -> Response:
    """Delete the job for good; tasks of its past runs are kept."""
    await schedules.delete_schedule(session, user, job_id)
    await session.commit()
    return Response(status_code=status.HTTP_204_NO_CONTENT)
