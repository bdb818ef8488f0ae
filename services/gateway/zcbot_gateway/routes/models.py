"""The model profiles a task may use (`GET /v1/models`): the page's per-task model picker lists them
and `PATCH /v1/tasks/{id}` `{"model_profile": name}` switches a task (null: back to the default).

Only the valid profiles of the configured directories (`zcbot_core.llm.profiles`); an invalid file's
profiles are missing here just as a run could not use them. No secrets: the name, the provider's
model id, and the few facts a person picks by (context size, thinking)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from zcbot_core.llm.profiles import load_profiles
from zcbot_gateway.deps import CurrentUser, SettingsDep
from zcbot_gateway.http import MAX_PAGE_SIZE, Paging

router = APIRouter(prefix="/v1", tags=["tasks"])


class ModelOut(BaseModel):
    name: str
    model: str
    default: bool
    thinking: bool
    max_context: int


class ModelPage(BaseModel):
    items: list[ModelOut]
    total: int
    page: int
    page_size: int
    default: str


@router.get("/models", response_model=ModelPage)
async def list_models(user: CurrentUser, settings: SettingsDep) -> dict[str, Any]:
    """The configured model profiles by name (the list envelope, one page of at most 100, plus `default`:
    the profile of a task whose `model_profile` is null)."""
    default = settings.zcbot_default_model
    rows = [{"name": name, "model": p.model, "default": name == default, "thinking": p.thinking,
             "max_context": p.max_context} for name, p in sorted(load_profiles(settings).items())]
    return Paging(1, MAX_PAGE_SIZE).slice(rows, default=default)
