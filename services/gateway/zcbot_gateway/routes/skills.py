"""Skills (seed 003 §3.5): `GET /v1/skills` — the current user's merged skill registry.

Built-in skills plus the user's own (`<user_root>/.skills`); a user skill with a built-in's name
replaces it for this user and is marked `overrides: true`. Skills that failed to load are listed
under `load_errors` (path shown relative to the user root for user skills) instead of failing the
request. Read-only: skills are authored through the agent's `save_skill` / `fork_skill` tools.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from pydantic import BaseModel

from zcbot_core.safe_fs import paths
from zcbot_core.workspace.skills import SkillPaths, registry_for_user
from zcbot_gateway.deps import CurrentUser, SettingsDep
from zcbot_gateway.http import MAX_PAGE_SIZE, PagingDep

router = APIRouter(prefix="/v1", tags=["skills"])
SkillPaging = PagingDep(MAX_PAGE_SIZE, MAX_PAGE_SIZE)


class SkillOut(BaseModel):
    name: str
    description: str
    source: str  # builtin | user
    overrides: bool
    model: str | None = None  # built-in skills only: the model profile the skill switches to


class SkillLoadError(BaseModel):
    source: str
    path: str
    error: str


class SkillList(BaseModel):
    """The list envelope, plus the skills that failed to load."""

    items: list[SkillOut]
    total: int
    page: int
    page_size: int
    load_errors: list[SkillLoadError]


@router.get("/skills", response_model=SkillList)
async def list_skills(user_id: CurrentUser, settings: SettingsDep, paging: SkillPaging) -> SkillList:
    root = paths.user_root(settings.storage_root, user_id)
    registry = await asyncio.to_thread(registry_for_user, root, SkillPaths.from_settings(settings))
    skills = [SkillOut(name=s.name, description=s.description, source=s.source, overrides=s.overrides, model=s.model)
              for s in registry.list()]
    load_errors = [SkillLoadError(source=e.source, path=e.path, error=e.error) for e in registry.load_errors]
    return SkillList(**paging.slice(skills, load_errors=load_errors))
