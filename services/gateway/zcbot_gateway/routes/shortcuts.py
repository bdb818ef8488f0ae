"""`GET /v1/shortcuts`: the user's shortcuts (read-only; `.memory/shortcuts.md`, see `zcbot_core.shortcuts`).

Returns `{shortcuts: [{trigger, instruction}]}`. Shortcuts are added or changed in conversation.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter

from zcbot_core import paths, shortcuts

from zcbot_gateway.deps import CurrentUser, SettingsDep

router = APIRouter(prefix="/v1", tags=["memory"])


@router.get("/shortcuts")
async def list_shortcuts(user: CurrentUser, settings: SettingsDep) -> dict[str, Any]:
    """Your shortcuts: a message that is exactly a trigger is replaced by its instruction."""
    root = paths.user_root(settings.storage_root, user)
    items = await asyncio.to_thread(shortcuts.load, root)
    return {"shortcuts": [asdict(item) for item in items]}
