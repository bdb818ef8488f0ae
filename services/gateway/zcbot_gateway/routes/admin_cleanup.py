"""Admin clean-up (issue 40): the hard delete of old soft-deleted tasks and the orphan-folder scan.

- `POST /v1/admin/purge {older_than: "30d" | days, apply: false}`: the tasks soft-deleted before
  then, with their messages, data events and the versions only they named (`zcbot_core.purge`).
  A dry run unless `apply` is true: the same counts, nothing changed. Bad age -> 422.
- `GET /v1/admin/orphans[?user_id=]`: folders under the user roots that no task or scheduled job
  references, and roots of users that no longer exist (`zcbot_core.orphans`); list envelope.
- `POST /v1/admin/orphans/delete {user_id, path, confirm}`: deletes one of them; `confirm` must be
  true (else 400 `confirmation_required`); a folder in use by a task (e.g. one created there since
  the listing) -> 409 `orphan_refused`, nothing deleted; missing -> 404.

The same operations as `zcbot admin purge` / `zcbot admin orphans`.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from zcbot_core import orphans
from zcbot_core.purge import parse_age, purge_deleted
from zcbot_gateway.deps import AdminUser, RuntimeDep, SettingsDep
from zcbot_gateway.http import MAX_PAGE_SIZE, Paging, invalid_query, paging
from zcbot_gateway.lang import LangDep

router = APIRouter(prefix="/v1/admin", tags=["admin"])
OrphanPaging = Annotated[Paging, Depends(paging(MAX_PAGE_SIZE, MAX_PAGE_SIZE))]


class PurgeIn(BaseModel):
    older_than: str | float = Field(description='age of the soft delete: "30d", "12h", "90m" or a number of days')
    apply: bool = Field(False, description="false (default): a dry run that only counts")


class OrphanDeleteIn(BaseModel):
    user_id: str = Field(max_length=128)
    path: str = Field(max_length=1024, description='the folder, relative to the user root ("" : a gone user\'s root)')
    confirm: bool = False


@router.post("/purge")
async def purge(body: PurgeIn, admin: AdminUser, rt: RuntimeDep, settings: SettingsDep) -> dict[str, Any]:
    """Hard-delete tasks soft-deleted longer ago than `older_than` (a dry run unless `apply`)."""
    try:
        age = parse_age(body.older_than)
    except ValueError:
        raise invalid_query("older_than", zh="须为天数，或如 30d、12h、90m 的时长（0 到 100 年）",
                            en="must be a number of days, or e.g. 30d, 12h, 90m (0 to 100 years)") from None
    report = await purge_deleted(rt.sessions, settings.storage_root, age, apply=body.apply)
    return report.as_json()


@router.get("/orphans")
async def list_orphans(admin: AdminUser, rt: RuntimeDep, settings: SettingsDep, page: OrphanPaging,
                       user_id: Annotated[str | None, Query(max_length=128, pattern=r"^[A-Za-z0-9_-]+$")] = None,
                       ) -> dict[str, Any]:
    """Folders no task references (nothing is deleted here)."""
    found = await orphans.find_orphans(rt.sessions, settings.storage_root, user_id)
    return page.slice([o.as_json() for o in found], total_bytes=sum(o.bytes for o in found))


@router.post("/orphans/delete")
async def delete_orphan(body: OrphanDeleteIn, admin: AdminUser, rt: RuntimeDep, settings: SettingsDep,
                        lang: LangDep) -> dict[str, Any]:
    """Delete one orphan folder; needs `confirm: true` and is refused for a folder in use."""
    gone = await orphans.delete_orphan(rt.sessions, settings.storage_root, body.user_id, body.path,
                                       confirm=body.confirm, lang=lang)
    return {"deleted": gone.as_json()}
