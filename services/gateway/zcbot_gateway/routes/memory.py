"""Read-only memory panel (seed 003 §3.7): the agent maintains memory; the web only reads it.

- `GET /v1/memory` -> `{core, extended: [{filename, description, size, mtime}]}`
- `GET /v1/memory/extended/{filename}` -> `{filename, content}`; a name that is not
  `[A-Za-z0-9_-]+.md` is 400, a missing file 404.
Deliberately no write/delete API: changes go through the conversation (single writer).
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, HTTPException, status

from zcbot_core.safe_fs import paths
from zcbot_core.workspace import memory
from zcbot_gateway.deps import CurrentUser, SettingsDep

router = APIRouter(prefix="/v1/memory", tags=["memory"])
MAX_CORE_CHARS = 200_000  # the panel shows the whole file; only the prompt copy is capped


def _overview(root: Any) -> dict[str, Any]:
    return {
        "core": memory.read_core(root, max_chars=MAX_CORE_CHARS),
        "extended": [asdict(entry) for entry in memory.list_extended(root)],
    }


@router.get("")
async def get_memory(user: CurrentUser, settings: SettingsDep) -> dict[str, Any]:
    """Your core memory and the index of extended memory files."""
    root = paths.user_root(settings.storage_root, user)
    return await asyncio.to_thread(_overview, root)


@router.get("/extended/{filename}")
async def get_extended(filename: str, user: CurrentUser, settings: SettingsDep) -> dict[str, Any]:
    """One extended memory file."""
    memory.validate_extended_name(filename)  # 400 before touching the disk
    root = paths.user_root(settings.storage_root, user)
    try:
        content = await asyncio.to_thread(memory.read_extended, root, filename)
    except FileNotFoundError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail="no such memory file") from None
    return {"filename": filename, "content": content}
