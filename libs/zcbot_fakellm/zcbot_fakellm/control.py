"""Scripting a fake server that runs in another process (the bench, `python -m zcbot_fakellm`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zcbot_fakellm.script import Turn


def _root_url(base_url: str) -> str:
    """``http://h:p/v1`` -> ``http://h:p``: control endpoints live outside ``/v1``."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def push_script(base_url: str, key: str, turns: Sequence[Turn]) -> None:
    """Register (or replace) the script for ``key`` on a fake server in another process."""
    import httpx

    async with httpx.AsyncClient(timeout=10.0) as client:
        resp = await client.post(
            f"{_root_url(base_url)}/_script", json={"key": key, "turns": list(turns)}
        )
        resp.raise_for_status()


async def clear_scripts(base_url: str) -> None:
    """Remove every script from a fake server in another process."""
    import httpx

    async with httpx.AsyncClient(timeout=10.0) as client:
        resp = await client.delete(f"{_root_url(base_url)}/_script")
        resp.raise_for_status()


async def get_requests(base_url: str) -> list[dict[str, Any]]:
    """Chat-completion request bodies received by a fake server in another process."""
    import httpx

    async with httpx.AsyncClient(timeout=10.0) as client:
        resp = await client.get(f"{_root_url(base_url)}/_requests")
        resp.raise_for_status()
        data: list[dict[str, Any]] = resp.json()
        return data
