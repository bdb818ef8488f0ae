"""Reading what the events stream stored for a task (not what a client was sent)."""

from __future__ import annotations

from typing import Any

from zcbot_core.bus import Topology, decode
from zcbot_core.bus import events as ev


async def stored_raw(js: Any, topo: Topology, task_id: str) -> list[Any]:
    """Every message stored on the task's subject (with headers), in stream order."""
    out, seq = [], 1
    while True:
        try:
            raw = await js.get_msg(topo.events_stream, seq=seq, subject=topo.event_subject(task_id), next=True)
        except Exception:
            return out
        out.append(raw)
        seq = raw.seq + 1


async def stored_events(js: Any, topo: Topology, task_id: str) -> list[ev.RunEvent]:
    return [decode(raw.data, ev.RunEvent) for raw in await stored_raw(js, topo, task_id)]
