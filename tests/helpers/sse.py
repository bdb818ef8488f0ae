"""Reading an SSE response in tests: the gateway's frames as {id, event, data} dicts, and `SseFollower`,
a client that reconnects like a browser's EventSource."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
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


@dataclass
class SseFollower:
    """Follow one run's events like EventSource: reconnect with Last-Event-ID until its `done`.

    With `other_urls` (more gateways), each reconnect goes to the next address in turn, as a load
    balancer would send it elsewhere."""

    base_url: str
    token: str
    task_id: str
    run_id: str
    events: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0
    errors: list[str] = field(default_factory=list)
    reconnect_delay: float = 0.2
    other_urls: list[str] = field(default_factory=list)

    @property
    def last_id(self) -> int | None:
        ids = [e["id"] for e in self.events if "id" in e]
        return ids[-1] if ids else None

    @property
    def done(self) -> dict[str, Any] | None:
        for e in self.events:
            if e["event"] == "done":
                return e
        return None

    def names(self) -> list[str]:
        return [e["event"] for e in self.events]

    async def run(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        url = f"/v1/tasks/{self.task_id}/events?run_id={self.run_id}"
        async with asyncio.timeout(timeout):
            attempt = 0
            while self.done is None:
                headers = {"Authorization": f"Bearer {self.token}"}
                if self.last_id is not None:
                    headers["Last-Event-ID"] = str(self.last_id)
                try:
                    await self._read(url, headers, self._base(attempt))
                except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                    self.errors.append(f"{exc.__class__.__name__}: {exc}")
                if self.done is None:
                    attempt += 1
                    await asyncio.sleep(self.reconnect_delay)
        return self.events

    def _base(self, attempt: int) -> str:
        urls = [self.base_url, *self.other_urls]
        return urls[attempt % len(urls)]

    async def _read(self, url: str, headers: dict[str, str], base_url: str) -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(30, connect=2)) as client:
            async with client.stream("GET", url, headers=headers) as resp:
                resp.raise_for_status()
                self.connections += 1
                async for event in sse_events(resp):
                    self.events.append(event)
                    if event["event"] == "done":
                        return
