"""The run request's publish through a JetStream election (issue 23 item 5), on a real stream that
refuses publishes for a while (503, as a stream without a leader answers)."""

from __future__ import annotations

import asyncio
import time

import pytest
from nats.js.errors import ServiceUnavailableError

from zcbot_core.bus import RunRequest, Topology
from zcbot_core.bus.topology import connect, ensure_topology
from zcbot_core.runstate.transitions import publish_run


async def _refuse(js, stream: str, subject: str) -> None:  # type: ignore[no-untyped-def]
    await js.publish(subject, b"filler")
    info = await js.stream_info(stream)
    config = info.config
    config.max_msgs = int(info.state.messages)
    await js.update_stream(config)


async def _accept(js, stream: str) -> None:  # type: ignore[no-untyped-def]
    config = (await js.stream_info(stream)).config
    config.max_msgs = -1
    await js.update_stream(config)


async def test_the_publish_rides_out_an_election_and_gives_up_after_its_budget(nats_server_url: str,
                                                                              bus_prefix: str) -> None:
    topo = Topology(bus_prefix)
    nc = await connect(nats_server_url, "publish-retry")
    try:
        js = nc.jetstream()
        await ensure_topology(js, topo)
        stream = topo.runs_stream
        await _refuse(js, stream, topo.run_subject("filler"))
        req = RunRequest(run_id="r-election", task_id="t-election", user_id="u", enqueued_at=time.time())
        asyncio.get_running_loop().call_later(1.2, lambda: asyncio.ensure_future(_accept(js, stream)))
        t0 = time.monotonic()
        await publish_run(js, topo, req, retry_seconds=8)
        assert 1.0 < time.monotonic() - t0 < 6
        await publish_run(js, topo, req)  # a second publish of the same run: deduplicated
        assert (await js.stream_info(stream)).state.messages == 2  # the filler and the request, once
        last = await js.get_last_msg(stream, topo.run_subject("t-election"))
        assert last.headers["Nats-Msg-Id"] == "r-election"

        await _refuse(js, stream, topo.run_subject("filler2"))
        t0 = time.monotonic()
        with pytest.raises(ServiceUnavailableError):
            await publish_run(js, topo, RunRequest(run_id="r-never", task_id="t-never", user_id="u",
                                                   enqueued_at=time.time()), retry_seconds=0.8)
        assert time.monotonic() - t0 < 3
    finally:
        await nc.close()
