"""Fault: the NATS server restarts (same port, same JetStream store) mid-run and with a run queued."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.wait import wait_for
from tests.reliability.faults_support import Harness, assert_consistent, fake_llm, harness, roles, task_status  # noqa: F401
from zcbot_devstack.embedded import EmbeddedNats, free_port

pytestmark = pytest.mark.heavy

OUTAGE_SECONDS = 2.0
# A run still running after this long past the restart counts as stuck (ack_wait is 3 s).
SETTLE_SECONDS = 30.0
# An SSE client must see a settled run end within this long: the gateway's live feed recovers after
# a reconnect at once (it would otherwise stay deaf for ~10 s, until two idle heartbeats are missed).
CLIENT_LAG_SECONDS = 4.0


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A NATS server of this test's own, on a fixed port, that the test may stop and start again."""
    server = EmbeddedNats(tmp_path / "own-nats", port=free_port()).start()
    try:
        yield server
    finally:
        server.stop()


async def _restart(server: EmbeddedNats, *, crash: bool) -> None:
    if crash:
        assert server.process is not None
        server.process.kill()
        await asyncio.to_thread(server.process.wait)
    else:
        await asyncio.to_thread(server.stop)
    assert not server.running
    await asyncio.sleep(OUTAGE_SECONDS)
    server.start()  # same port (requested at construction) and same store dir


async def test_nats_restart_mid_run_and_with_a_queued_run(own_nats: EmbeddedNats, harness: Harness) -> None:
    h = harness
    h.apply(ZCBOT_NATS_URL=own_nats.url)
    await h.executor()
    await h.gateway()
    runner = await h.runner()
    stack = h.stack()
    token = await stack.login("nr")

    # 1. The server dies (kill -9) while a run streams, and comes back on the same port/store.
    h.fake.script("KEY-nats-mid", [
        {"text": "noting", "tool_calls": [{"name": "write", "arguments": {"path": "n.txt", "content": "N"}}]},
        {"chunks": [f"n{i} " for i in range(50)], "chunk_delay": 0.1},
    ])
    task = await stack.create_task(token, "nats restart mid-run")
    run = (await stack.post(token, task["task_id"], "KEY-nats-mid go")).json()
    follower = h.follower(token, task["task_id"], run["run_id"])
    reader = asyncio.create_task(follower.run(timeout=SETTLE_SECONDS + 20))
    await wait_for(lambda: follower.names().count("text") >= 3, what="second step streaming")
    await _restart(own_nats, crash=True)

    def settled() -> bool:
        return task_status(h.db_url, task["task_id"])[0] in ("idle", "error")

    await wait_for(settled, timeout=SETTLE_SECONDS, interval=0.25, what="run settled after the NATS restart")
    status, owner, error = task_status(h.db_url, task["task_id"])
    # The client following the run sees it end too (done, or error + done), without reloading.
    events = await asyncio.wait_for(reader, CLIENT_LAG_SECONDS)
    done = follower.done
    assert done is not None and follower.connections == 1  # the stream outlived the NATS restart
    if status == "idle":
        assert done["data"]["status"] == "ok", events
        assert roles(h.db_url, task["task_id"]) == ["user", "assistant", "tool", "assistant"]
    else:
        assert error and done["data"]["status"] == "error" and "error" in follower.names(), (error, events)

    # 2. A run queued while no runner is up survives a NATS restart (JetStream file store) and
    #    runs once a runner comes.
    await h.stop(runner)
    h.fake.script("KEY-nats-queued", [{"text": "queued run answered"}])
    task2 = await stack.create_task(token, "queued across a restart")
    run2 = (await stack.post(token, task2["task_id"], "KEY-nats-queued hi")).json()
    assert task_status(h.db_url, task2["task_id"])[0] == "queued"
    await _restart(own_nats, crash=False)
    follower2 = h.follower(token, task2["task_id"], run2["run_id"])
    reader2 = asyncio.create_task(follower2.run(timeout=60))
    await h.runner()
    await wait_for(lambda: task_status(h.db_url, task2["task_id"])[0] == "idle", timeout=20, what="queued run done")
    events2 = await asyncio.wait_for(reader2, CLIENT_LAG_SECONDS)
    assert events2[-1]["event"] == "done" and events2[-1]["data"]["status"] == "ok", events2
    assert roles(h.db_url, task2["task_id"]) == ["user", "assistant"]
    assert_consistent(h.db_url)
