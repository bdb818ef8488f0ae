"""`GET /v1/shortcuts`: the user's shortcuts (read-only; `.memory/shortcuts.md`, see `zcbot_core.workspace.shortcuts`).

Returns the list envelope of `{trigger, instruction}`. Shortcuts are added or changed in conversation.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from zcbot_core.safe_fs import paths
from zcbot_core.workspace import shortcuts
from zcbot_gateway.deps import CurrentUser, SettingsDep
from zcbot_gateway.http import MAX_PAGE_SIZE, PagingDep

router = APIRouter(prefix="/v1", tags=["memory"])
ShortcutPaging = PagingDep(MAX_PAGE_SIZE, MAX_PAGE_SIZE)


@router.get("/shortcuts")
async def list_shortcuts(user: CurrentUser, settings: SettingsDep, paging: ShortcutPaging) -> dict[str, Any]:
    """Your shortcuts: a message that is exactly a trigger is replaced by its instruction."""
    root = paths.user_root(settings.storage_root, user)
    items = await asyncio.to_thread(shortcuts.load, root)
    return paging.slice([asdict(item) for item in items])
