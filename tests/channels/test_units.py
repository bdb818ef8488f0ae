"""Leases on a real NATS KV bucket, the push tool's path handling, send_to_user without a service."""

from __future__ import annotations

import pytest

from zcbot_channels.leases import Lease
from zcbot_core.bus import Topology
from zcbot_core.bus.topology import connect, ensure_topology
from zcbot_core.channels.push import send_to_user
from zcbot_core.safe_fs.paths import PathRejected
from zcbot_core.tools.push_tool import PUSH_TOOL_SCHEMA, _user_relative, register_push_tool


async def test_lease_is_exclusive_refreshable_and_releasable(nats_server_url: str, bus_prefix: str) -> None:
    nc = await connect(nats_server_url, "lease-test")
    try:
        js = nc.jetstream()
        topo = Topology(bus_prefix)
        await ensure_topology(js, topo)
        kv = await js.key_value(topo.leases_bucket)
        a, b = Lease(kv, "ilink-1", "replica-a"), Lease(kv, "ilink-1", "replica-b")
        assert await a.acquire() and a.held()
        assert not await b.acquire() and not b.held()
        assert await a.refresh() and a.held()
        # A holder whose revision is stale (someone else wrote) loses the lease on refresh.
        stale = Lease(kv, "ilink-1", "replica-a")
        stale.revision, stale.valid_until = 1, a.valid_until
        assert not await stale.refresh() and stale.lost.is_set()
        await a.release()
        assert not a.held()
        assert await b.acquire() and b.held()  # released: the other replica takes over at once
        await b.release()
        # The push subject has no responder here: a clear error, no exception.
        reply = await send_to_user(nc, topo, "nobody", "hi", timeout=1)
        assert reply.delivered == [] and "not running" in reply.errors["service"]
    finally:
        await nc.close()


def test_push_tool_paths_and_registration() -> None:
    assert _user_relative("wechat", "out/report.docx") == "wechat/out/report.docx"
    assert _user_relative("wechat", "/workspace/projects/a.pdf") == "projects/a.pdf"
    with pytest.raises(PathRejected):
        _user_relative("wechat", "../../etc/passwd")
    with pytest.raises(PathRejected):
        _user_relative("wechat", "/etc/passwd")

    class Box:
        cwd = "wechat"

        def __init__(self) -> None:
            self.tools: dict[str, object] = {}

        def add_host_tool(self, tool: object) -> None:
            self.tools[tool.schema["function"]["name"]] = tool  # type: ignore[attr-defined]

    box = Box()
    register_push_tool(box, None, Topology("t"), "alice")  # type: ignore[arg-type]
    assert list(box.tools) == ["wechat_push"]
    assert PUSH_TOOL_SCHEMA["function"]["parameters"]["required"] == ["text"]


async def test_channels_service_process_starts_and_drains(start_service) -> None:  # type: ignore[no-untyped-def]
    """`zcbot channels` (zcbot_channels.main) runs as its own process: healthy, then a clean SIGTERM drain."""
    svc = start_service("channels", {"ZCBOT_WECOM_SECRET": "s3cr3t-not-logged-ever"}, wait=False)
    await svc.wait_healthy_async(timeout=30)
    assert svc.terminate(timeout=20) == 0, svc.log_tail()
    log = svc.log_text()
    assert "channels service started" in log and "channels service drained" in log
    assert "s3cr3t-not-logged-ever" not in log
