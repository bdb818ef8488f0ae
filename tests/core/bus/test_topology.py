"""The topology on a real JetStream: a server list in ZCBOT_NATS_URL, the replica count and the byte
limits applied to every stream, bucket and durable consumer (issue 23 items 1-2)."""

from __future__ import annotations

import logging
import socket

import pytest
from nats.js.api import DiscardPolicy, RetentionPolicy, StreamConfig

from zcbot_core.bus import Topology
from zcbot_core.bus.grants import GRANT_TTL_SECONDS
from zcbot_core.bus.servers import server_list
from zcbot_core.bus.topology import StreamLimits, _replicas, connect, ensure_topology
from zcbot_core.platform.config import ConfigError, Settings, load_settings


def test_a_server_list_is_split_and_checked() -> None:
    assert server_list("nats://a:4222, nats://b:4222,,tls://c") == ["nats://a:4222", "nats://b:4222", "tls://c"]
    for bad in ("", " , ", "a:4222", "nats://a:4222,http://b", "nats://:4222", "nats://a:x"):
        with pytest.raises(ValueError):
            server_list(bad)


def test_settings_take_a_server_list_and_refuse_a_bad_entry_without_echoing_a_password() -> None:
    ok = load_settings(Settings, ZCBOT_NATS_URL="nats://u:pw@a:4222,nats://u:pw@b:4222")
    assert ok.zcbot_nats_url == "nats://u:pw@a:4222,nats://u:pw@b:4222"
    with pytest.raises(ConfigError) as err:
        load_settings(Settings, ZCBOT_NATS_URL="nats://u:secretpw@a:4222,b:4222")
    assert "ZCBOT_NATS_URL" in str(err.value) and "secretpw" not in str(err.value)


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_connect_takes_a_list_and_uses_the_server_that_answers(nats_server_url: str) -> None:
    url = f"nats://127.0.0.1:{_dead_port()},{nats_server_url}"
    nc = await connect(url, "list-test")
    try:
        assert nc.is_connected
        await nc.jetstream().account_info()
    finally:
        await nc.close()


def test_an_operators_higher_count_is_kept_and_said(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="zcbot_core.bus.topology"):
        assert _replicas("stream", "S", 3, 1) == 3
        assert _replicas("stream", "S", 1, 3) == 3
        assert _replicas("stream", "S", None, 3) == 3  # a new one
        assert _replicas("stream", "S", 3, 3) == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "keeping the higher count" in lines[0] and "raising it" in lines[1]


async def test_every_stream_bucket_and_consumer_gets_the_count_and_limits(nats_server_url: str, bus_prefix: str) -> None:
    topo = Topology(bus_prefix)
    nc = await connect(nats_server_url, "replicas-test")
    try:
        js = nc.jetstream()
        # A stream from before (discard old, no replica count named), then two service starts.
        await js.add_stream(StreamConfig(name=topo.runs_stream, subjects=[topo.runs_wildcard()],
                                         retention=RetentionPolicy.WORK_QUEUE, discard=DiscardPolicy.OLD))
        await ensure_topology(js, topo)
        limits = StreamLimits(replicas=1, events_max_bytes=64 * 1024 * 1024, queues_max_bytes=8 * 1024 * 1024)
        await ensure_topology(js, topo, limits)
        events = (await js.stream_info(topo.events_stream)).config
        runs = (await js.stream_info(topo.runs_stream)).config
        chin = (await js.stream_info(topo.channel_inbound_stream)).config
        assert events.max_bytes == 64 * 1024 * 1024 and runs.max_bytes == chin.max_bytes == 8 * 1024 * 1024
        assert str(getattr(runs.discard, "value", runs.discard)) == "new"  # a full queue refuses a new request, never drops a queued one
        for config in (events, runs, chin):
            assert config.num_replicas == 1
        assert len(topo.kv_buckets) == 4
        for bucket in topo.kv_buckets:
            assert (await js.stream_info(f"KV_{bucket}")).config.num_replicas == 1
            await js.key_value(bucket)  # a KV bucket, as the services open it
        # The ended runs (bus/ended_runs.py): kept past every grant, and no client can remove a mark early.
        ended = (await js.stream_info(f"KV_{topo.ended_runs_bucket}")).config
        assert ended.max_age >= GRANT_TTL_SECONDS and ended.max_msgs_per_subject == 1
        assert ended.deny_delete and ended.deny_purge and not ended.allow_rollup_hdrs
        consumer = await js.consumer_info(topo.runs_stream, topo.runners_consumer)
        assert consumer.config.num_replicas in (0, 1)
        with pytest.raises(Exception):  # noqa: B017  a single server cannot hold 3 replicas: said at start-up, not ignored
            await ensure_topology(js, Topology(bus_prefix + "r3"), StreamLimits(replicas=3))
    finally:
        await nc.close()


async def test_declaring_the_topology_waits_out_a_server_that_is_not_answering(
        tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    """A service that starts while JetStream does not answer (a cluster electing its leader; here a
    server that is down for a moment) retries the idempotent declaration instead of crashing."""
    import asyncio
    import contextlib

    from zcbot_devstack.embedded import EmbeddedNats, free_port

    server = EmbeddedNats(tmp_path / "nats", port=free_port()).start()
    nc = await connect(server.url, "topology-retry")
    try:
        await asyncio.to_thread(server.stop)
        topo = Topology("retry")
        with caplog.at_level(logging.WARNING, logger="zcbot_core.bus.topology"):
            declaring = asyncio.create_task(ensure_topology(nc.jetstream(timeout=0.5), topo, retry_seconds=30))
            await asyncio.sleep(2.0)
            assert not declaring.done()
            server.start()
            await asyncio.wait_for(declaring, 30)
        assert any("retrying" in r.getMessage() for r in caplog.records)
        assert (await nc.jetstream().stream_info(topo.runs_stream)).config.name == topo.runs_stream
        # With no server at all it gives up after its budget with the API's own error.
        await asyncio.to_thread(server.stop)
        with pytest.raises(Exception) as err:
            await ensure_topology(nc.jetstream(timeout=0.3), Topology("retry2"), retry_seconds=1.5)
        assert type(err.value).__name__ in ("TimeoutError", "NoRespondersError", "ServiceUnavailableError", "ConnectionResetError")
    finally:
        with contextlib.suppress(ConnectionError):  # closing flushes, and the server may be gone
            await nc.close()
        server.stop()


async def test_a_freshly_declared_topology_verifies_without_differences(nats_server_url: str, bus_prefix: str) -> None:
    """The server reports "no limit" as max_age 0 and max_bytes -1 where the declaration says None: not a
    difference (each service of `zcbot up` used to warn three times about it at every start)."""
    from zcbot_core.bus.topology_setup import verify_topology

    topo = Topology(bus_prefix + "v")
    nc = await connect(nats_server_url, "verify-test")
    try:
        js = nc.jetstream()
        limits = StreamLimits(replicas=1)
        await ensure_topology(js, topo, limits)
        assert await verify_topology(js, topo, limits) == []
        bounded = StreamLimits(replicas=1, events_max_bytes=1024 * 1024)
        assert [d for d in await verify_topology(js, topo, bounded) if "max_bytes" in d]  # a real one is said
    finally:
        await nc.close()


async def test_closing_our_own_connection_is_not_a_warning(nats_server_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """`zcbot up`'s topology step closes its connection: that used to print "nats disconnected"."""
    nc = await connect(nats_server_url, "close-test")
    with caplog.at_level(logging.DEBUG, logger="zcbot_core.bus.topology"):
        await nc.close()
    said = [r for r in caplog.records if r.getMessage() == "nats disconnected"]
    assert said and all(r.levelno == logging.DEBUG for r in said)
