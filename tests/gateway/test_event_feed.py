"""The gateway's event feed on a real JetStream: the sequence it gives a message being submitted
(`events_from`, so the submit need not ask JetStream) is at or before every event published after it,
and it gives none while the feed is not live."""

from __future__ import annotations

import asyncio

from zcbot_core.bus import encode
from zcbot_core.bus import events as ev
from zcbot_core.service import Runtime
from zcbot_gateway.sse import EventHub


async def publish(rt: Runtime, task_id: str, n: int) -> list[int]:
    seqs = []
    for i in range(n):
        ack = await rt.js.publish(rt.topo.event_subject(task_id), encode(ev.RunStart(run_id=f"r{i}", task_id=task_id)))
        seqs.append(int(ack.seq))
    return seqs


async def test_events_from_is_at_or_before_every_later_event(rt: Runtime) -> None:
    earlier = await publish(rt, "t-old", 3)  # before the feed starts: it begins from the stream's end
    hub = EventHub(rt)
    assert hub.events_from() is None  # not live yet
    await hub.start()
    try:
        assert hub.events_from() == earlier[-1] + 1
        for _ in range(5):
            bound = hub.events_from()
            assert bound is not None
            later = await publish(rt, "t-new", 2)
            assert min(later) >= bound
        async with asyncio.timeout(5):  # once received, the bound moves up to right after the last event
            while hub.events_from() != later[-1] + 1:
                await asyncio.sleep(0.01)
    finally:
        await hub.stop()
    assert hub.events_from() is None  # stopping: a submit asks JetStream instead
