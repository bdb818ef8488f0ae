"""Reading an SSE response in tests: the gateway's frames as {id, event, data} dicts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx


async def sse_events(resp: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Each event of the stream (comments such as keep-alives are skipped), until it closes."""
    current: dict[str, Any] = {}
    async for line in resp.aiter_lines():
        if line == "":
            if "event" in current:
                yield current
            current = {}
        elif line.startswith("id: "):
            current["id"] = int(line[4:])
        elif line.startswith("event: "):
            current["event"] = line[7:]
        elif line.startswith("data: "):
            current["data"] = json.loads(line[6:])
