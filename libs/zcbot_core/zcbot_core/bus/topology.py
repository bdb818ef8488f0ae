"""Connecting to NATS and declaring (idempotently) every stream, consumer and KV bucket.

Only the setup identity declares (`zcbot bus setup`, the bus-setup job in deploy/, `zcbot up` before
its services): the runtime identities may not create or change a stream, a bucket or a durable
consumer (bus/access.py); they verify the topology at start (bus/topology_setup.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError, ServiceUnavailableError
from nats.js.kv import KeyValue

from zcbot_core.bus.grants import GRANT_TTL_SECONDS
from zcbot_core.bus.retry import retry_until
from zcbot_core.bus.servers import server_list
from zcbot_core.bus.subjects import Topology

log = logging.getLogger(__name__)

CANCEL_TTL_SECONDS = 3600.0
SANDBOX_LEASE_TTL_SECONDS = 30.0
LEADER_LEASE_TTL_SECONDS = 20.0
CHANNEL_ACK_WAIT_SECONDS = 30.0
# An ended run's mark outlives every grant of that run (a grant is made before its run ends).
ENDED_RUNS_TTL_SECONDS = GRANT_TTL_SECONDS + 3600.0


@dataclass(frozen=True)
class StreamLimits:
    events_max_age_seconds: float = 24 * 3600.0
    ack_wait_seconds: float = 30.0
    max_deliver: int = 5
    max_ack_pending: int = 10_000
    duplicate_window_seconds: float = 120.0
    # Replicas of every stream, KV bucket and durable consumer (`ZCBOT_JS_REPLICAS`); never lowered.
    replicas: int = 1
    events_max_bytes: int = -1  # -1: no byte limit (JetStream's own "unlimited")
    queues_max_bytes: int = -1


_KV_CACHE: dict[tuple[int, str], tuple[JetStreamContext, KeyValue]] = {}


async def kv_bucket(js: JetStreamContext, bucket: str) -> KeyValue:
    """A bucket handle, looked up once per JetStream context (each lookup is a STREAM.INFO round trip)."""
    key = (id(js), bucket)
    cached = _KV_CACHE.get(key)
    if cached is not None and cached[0] is js:
        return cached[1]
    handle = await js.key_value(bucket)
    _KV_CACHE[key] = (js, handle)
    return handle


async def connect(url: str, name: str, *, user: str | None = None, password: str | None = None,
                  ca_file: str | None = None) -> NATS:
    """Connect with unbounded reconnects so a NATS restart is ridden out, not fatal.

    With `user` (a service identity, `bus/access.py`) the replies arrive under that identity's own
    inbox prefix, the only inbox its permissions let it read. `ca_file` verifies a TLS server.
    """

    async def on_error(exc: Exception) -> None:
        log.warning("nats error: %s", exc.__class__.__name__, extra={"detail": str(exc)})

    async def on_disconnect() -> None:
        # Our own close() calls this too (the client is closed by then): only a lost connection warns.
        closing = client is not None and client.is_closed
        log.log(logging.DEBUG if closing else logging.WARNING, "nats disconnected")

    async def on_reconnect() -> None:
        log.info("nats reconnected")

    client: NATS | None = None
    client = await nats.connect(
        server_list(url),  # one URL or a cluster's servers, comma-separated
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        connect_timeout=5,
        allow_reconnect=True,
        error_cb=on_error,
        disconnected_cb=on_disconnect,
        reconnected_cb=on_reconnect,
        pending_size=64 * 1024 * 1024,
        **_access_options(user, password, ca_file),
    )
    return client


def _access_options(user: str | None, password: str | None, ca_file: str | None) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if user:
        from zcbot_core.bus.access import inbox_prefix

        opts.update(user=user, password=password or "", inbox_prefix=inbox_prefix(user))
    if ca_file:
        import ssl

        opts["tls"] = ssl.create_default_context(cafile=ca_file)
    return opts


def max_deliveries_advisory(topo: Topology) -> str:
    """JetStream's advisory when a run request used up `max_deliver` without an ack. Such a request
    stays in the work-queue stream but is never delivered again; runners delete it on this advisory so
    the reaper can end its run (it only reaps runs whose request is no longer queued)."""
    return f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{topo.runs_stream}.{topo.runners_consumer}"


def runs_consumer_config(topo: Topology, limits: StreamLimits) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=topo.runners_consumer,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=limits.ack_wait_seconds,
        max_deliver=limits.max_deliver,
        max_ack_pending=limits.max_ack_pending,
        filter_subject=topo.runs_wildcard(),
        num_replicas=limits.replicas,
    )


def file_changes_consumer_config(topo: Topology, limits: StreamLimits | None = None) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=topo.file_changes_consumer,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=(limits or StreamLimits()).ack_wait_seconds,
        max_deliver=(limits or StreamLimits()).max_deliver,
        filter_subject=topo.file_changes_subject(),
        num_replicas=(limits or StreamLimits()).replicas,
    )


def channels_consumer_config(topo: Topology, limits: StreamLimits | None = None) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=topo.channels_consumer,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=CHANNEL_ACK_WAIT_SECONDS,
        max_deliver=5,
        filter_subject=topo.channel_inbound_wildcard(),
        num_replicas=(limits or StreamLimits()).replicas,
    )


def _replicas(kind: str, name: str, current: int | None, wanted: int) -> int:
    """The count to apply: ours, or an operator's higher one (kept, with a line saying so)."""
    current = int(current or 0)
    if current and current != wanted:
        log.info("%s %s has %d replicas, ZCBOT_JS_REPLICAS says %d; %s", kind, name, current, wanted,
                 "keeping the higher count" if current > wanted else "raising it")
    return max(current, wanted)


async def _ensure_stream(js: JetStreamContext, config: StreamConfig, replicas: int) -> None:
    try:
        info = await js.stream_info(config.name)
    except NotFoundError:
        config.num_replicas = replicas
        await js.add_stream(config)
        return
    # Every update names the count: a config without it would scale the stream back to 1 (issue 23).
    config.num_replicas = _replicas("stream", config.name, info.config.num_replicas, replicas)
    await js.update_stream(config)


async def _ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    wanted = int(config.num_replicas or 1)
    try:
        info = await js.consumer_info(stream, config.durable_name or "")
    except NotFoundError:
        pass
    else:
        # 0 on a durable means "the stream's count": compare what it really has.
        current = info.config.num_replicas or 0
        config.num_replicas = _replicas("consumer", config.durable_name or "", current, wanted) if current else wanted
    try:
        await js.add_consumer(stream, config)
    except BadRequestError as exc:
        # An existing durable with other settings (an operator changed a limit): kept as it is.
        log.info("consumer %s exists (%s); keeping it", config.durable_name, exc.description)


def kv_specs(topo: Topology) -> list[tuple[str, float, bool]]:
    """(bucket, TTL, append-only) of every KV bucket the topology declares."""
    return [(topo.cancel_bucket, CANCEL_TTL_SECONDS, False),
            (topo.sandbox_leases_bucket, SANDBOX_LEASE_TTL_SECONDS, False),
            (topo.leases_bucket, LEADER_LEASE_TTL_SECONDS, False),
            (topo.ended_runs_bucket, ENDED_RUNS_TTL_SECONDS, True)]


def append_only_weakened(config: StreamConfig, ttl: float) -> list[str]:
    """How an append-only bucket's stream differs from its declaration (empty: as declared). Any
    difference lets a mark go before its TTL: a shorter max age, deletes, purges, rollups."""
    problems = []
    if config.max_age is None or abs(float(config.max_age) - ttl) > 1.0:
        problems.append(f"max age {config.max_age} s instead of {ttl:g} s")
    if not config.deny_delete:
        problems.append("message deletes allowed")
    if not config.deny_purge:
        problems.append("purges allowed")
    if config.allow_rollup_hdrs:
        problems.append("rollup headers allowed")
    if config.max_msgs_per_subject not in (1,):
        problems.append(f"{config.max_msgs_per_subject} messages per key instead of 1")
    return problems


async def _ensure_kv(js: JetStreamContext, bucket: str, ttl: float, replicas: int, *, append_only: bool = False) -> None:
    """`append_only`: a bucket whose entries no client may remove before their TTL (the ended runs): its
    stream refuses message deletes, purges and rollup headers (a `Nats-Rollup: all` put would wipe it).
    An existing append-only bucket whose TTL or protections were changed is put back (only the setup
    identity may change a bucket: bus/access.py)."""
    stream = f"KV_{bucket}"
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        if append_only:  # a KV bucket's stream (what `key_value` reads), without the removal paths
            await js.add_stream(StreamConfig(
                name=stream, subjects=[f"$KV.{bucket}.>"], max_msgs_per_subject=1, max_age=ttl,
                storage=StorageType.FILE, num_replicas=replicas, discard=DiscardPolicy.NEW,
                deny_delete=True, deny_purge=True, allow_rollup_hdrs=False))
        else:
            await js.create_key_value(KeyValueConfig(bucket=bucket, ttl=ttl, history=1, storage=StorageType.FILE,
                                                     replicas=replicas))
        return
    config = info.config
    count = _replicas("KV bucket", bucket, config.num_replicas, replicas)
    changed = count != int(config.num_replicas or 1)
    if append_only and append_only_weakened(config, ttl):
        log.warning("KV bucket %s was weakened (%s); restoring it", bucket, "; ".join(append_only_weakened(config, ttl)))
        config.max_age = ttl
        config.duplicate_window = min(float(config.duplicate_window or ttl), ttl)
        config.deny_delete = config.deny_purge = True
        config.allow_rollup_hdrs = False
        config.max_msgs_per_subject = 1
        changed = True
    if changed:  # otherwise the bucket keeps its settings (an operator's TTL of another bucket too)
        config.num_replicas = count
        await js.update_stream(config)


def _work_queue(name: str, subject: str, limits: StreamLimits) -> StreamConfig:
    return StreamConfig(
        name=name,
        subjects=[subject],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        duplicate_window=limits.duplicate_window_seconds,
        # Full (ZCBOT_QUEUES_MAX_BYTES): a new request is refused, never a queued one dropped.
        discard=DiscardPolicy.NEW,
        max_bytes=limits.queues_max_bytes,
    )


# A service starting beside a cluster that is still electing its meta leader (a fresh 3-node cluster
# under load took >5 s in CI) gets API timeouts or 503s: wait it out instead of crash-looping.
TOPOLOGY_RETRY_SECONDS = 60.0
_NOT_ANSWERING = (NatsTimeoutError, NoRespondersError, ServiceUnavailableError, ConnectionError)


async def ensure_topology(js: JetStreamContext, topo: Topology, limits: StreamLimits | None = None,
                          retry_seconds: float = TOPOLOGY_RETRY_SECONDS) -> None:
    """Declare everything DESIGN §3 names (the setup step; a service connected without an identity
    too). Every step is idempotent, so a step that times out is retried from the start."""
    await retry_until(lambda _remaining: _declare(js, topo, limits or StreamLimits()),
                      retryable=_NOT_ANSWERING, deadline_seconds=retry_seconds, first_delay=0.25, max_delay=4.0,
                      what="declaring the topology", logger=log)


def events_stream_config(topo: Topology, limits: StreamLimits) -> StreamConfig:
    return StreamConfig(
        name=topo.events_stream,
        subjects=[topo.events_wildcard()],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=limits.events_max_age_seconds,
        max_bytes=limits.events_max_bytes,
        discard=DiscardPolicy.OLD,
        duplicate_window=min(limits.duplicate_window_seconds, limits.events_max_age_seconds),
    )


def declared_streams(topo: Topology, limits: StreamLimits) -> list[StreamConfig]:
    """Every stream but the KV buckets' (`kv_specs`)."""
    # Background processes' file changes (issue 29); Nats-Msg-Id = user and proc id.
    return [_work_queue(topo.runs_stream, topo.runs_wildcard(), limits), events_stream_config(topo, limits),
            _work_queue(topo.channel_inbound_stream, topo.channel_inbound_wildcard(), limits),
            _work_queue(topo.file_changes_stream, topo.file_changes_subject(), limits)]


def declared_consumers(topo: Topology, limits: StreamLimits) -> list[tuple[str, ConsumerConfig]]:
    """The durable consumers (stream, config): the services bind to them, never create them."""
    return [(topo.runs_stream, runs_consumer_config(topo, limits)),
            (topo.channel_inbound_stream, channels_consumer_config(topo, limits)),
            (topo.file_changes_stream, file_changes_consumer_config(topo, limits))]


async def _declare(js: JetStreamContext, topo: Topology, limits: StreamLimits) -> None:
    for config in declared_streams(topo, limits):
        await _ensure_stream(js, config, limits.replicas)
    for stream, consumer in declared_consumers(topo, limits):
        await _ensure_consumer(js, stream, consumer)
    for bucket, ttl, append_only in kv_specs(topo):
        await _ensure_kv(js, bucket, ttl, limits.replicas, append_only=append_only)
