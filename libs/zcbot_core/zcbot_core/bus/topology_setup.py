"""The topology's setup step, and a service's start-up against a topology it may not change (issue 36).

The setup identity declares the topology (`zcbot bus setup`: `zcbot up` runs it before the services;
deploy/ runs it as a job). A service connected with its own identity (`ZCBOT_NATS_USER`) may not
create or change a stream, a KV bucket or a durable consumer (bus/access.py), so at start it only
reads them: it waits for each to exist (the setup job may still be running), logs a line for each
setting that differs from what its own settings would declare (the setup step applies them), and
refuses to start when the ended-runs bucket lets marks go before their TTL (that would make an
ended run's grant good again). A service connected without an identity (an unauthenticated server,
or an admin URL in the tests) declares the topology itself, as before: such a connection may change
anything anyway.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from zcbot_core.bus.retry import retry_until
from zcbot_core.bus.subjects import Topology
from zcbot_core.bus.topology import (
    _NOT_ANSWERING,
    TOPOLOGY_RETRY_SECONDS,
    StreamLimits,
    append_only_weakened,
    declared_consumers,
    declared_streams,
    ensure_topology,
    kv_specs,
)
from zcbot_core.errors import ZcbotError

if TYPE_CHECKING:
    from zcbot_core.platform.config import Settings

log = logging.getLogger(__name__)

SETUP_HINT = "run `zcbot bus setup` with the setup identity (deploy/: the zcbot-bus-setup job) first"


class TopologyError(ZcbotError):
    """The topology is missing or unsafe, and this identity may not fix it."""

    code = "bus_topology"
    http_status = 503


class _Missing(Exception):
    """A stream, bucket or consumer not (yet) declared: retried until the deadline."""


async def verify_topology(js: JetStreamContext, topo: Topology, limits: StreamLimits) -> list[str]:
    """The differences from the declaration (settings only an operator's `zcbot bus setup` applies).
    Raises `_Missing` for anything not declared, `TopologyError` for a weakened ended-runs bucket."""
    differences: list[str] = []
    for wanted in declared_streams(topo, limits):
        have = await _stream(js, wanted.name or "")
        if sorted(have.subjects or []) != sorted(wanted.subjects or []) or have.retention != wanted.retention:
            raise TopologyError(f"stream {wanted.name} has subjects {have.subjects} / retention {have.retention}, "
                                f"not {wanted.subjects} / {wanted.retention}; {SETUP_HINT}")
        for field in ("max_age", "max_bytes", "discard"):
            if _differs(getattr(have, field), getattr(wanted, field)):
                differences.append(f"stream {wanted.name}: {field} {getattr(have, field)} "
                                   f"(these settings declare {getattr(wanted, field)})")
    for stream, consumer in declared_consumers(topo, limits):
        try:
            await js.consumer_info(stream, consumer.durable_name or "")
        except NotFoundError:
            raise _Missing(f"consumer {consumer.durable_name} of {stream}") from None
    for bucket, ttl, append_only in kv_specs(topo):
        have = await _stream(js, f"KV_{bucket}")
        if append_only:
            weakened = append_only_weakened(have, ttl)
            if weakened:
                raise TopologyError(f"KV bucket {bucket} lets marks go before their TTL ({'; '.join(weakened)}); "
                                    f"{SETUP_HINT} to restore it")
        elif _differs(have.max_age, ttl):
            differences.append(f"KV bucket {bucket}: max age {have.max_age} s (declared {ttl:g} s)")
    return differences


def _no_limit(value: object) -> bool:
    """None, 0 and -1 all mean "no limit": the server reports an unset max_age as 0 and max_bytes as -1."""
    return value is None or (isinstance(value, (int, float)) and value <= 0)


def _differs(have: object, wanted: object) -> bool:
    if _no_limit(have) and _no_limit(wanted):
        return False
    if isinstance(have, (int, float)) and isinstance(wanted, (int, float)):
        return abs(float(have) - float(wanted)) > 1.0
    return have != wanted


async def _stream(js: JetStreamContext, name: str) -> Any:  # nats' StreamConfig (untyped)
    try:
        return (await js.stream_info(name)).config
    except NotFoundError:
        raise _Missing(f"stream {name}") from None


async def prepare_topology(js: JetStreamContext, topo: Topology, limits: StreamLimits, *, identity: str | None,
                           wait_seconds: float = TOPOLOGY_RETRY_SECONDS) -> None:
    """A service's start: declare without an identity, else verify (waiting up to `wait_seconds` for
    the setup step to have declared everything)."""
    if not identity:
        await ensure_topology(js, topo, limits, retry_seconds=wait_seconds)
        return
    try:
        differences = await retry_until(lambda _remaining: verify_topology(js, topo, limits),
                                        retryable=(_Missing, *_NOT_ANSWERING), deadline_seconds=wait_seconds,
                                        first_delay=0.25, max_delay=4.0, what="checking the bus topology", logger=log)
    except _Missing as exc:
        raise TopologyError(f"the bus topology of prefix {topo.prefix!r} is not declared ({exc} is missing); "
                            f"{SETUP_HINT}") from None
    for line in differences:
        log.warning("bus topology differs from this service's settings: %s; `zcbot bus setup` applies them", line,
                    extra={"identity": identity})


async def setup_topology(settings: Settings, wait_seconds: float = TOPOLOGY_RETRY_SECONDS) -> Topology:
    """`zcbot bus setup`: declare (or repair) the topology of `ZCBOT_BUS_PREFIX` with the connection's
    identity (`ZCBOT_NATS_USER` = `setup` in deploy/; the admin or none on a dev server) and the
    limits of these settings."""
    from zcbot_core.bus.topology import connect
    from zcbot_core.platform.config import ConfigError

    nats_url = settings.zcbot_nats_url
    if not nats_url:
        raise ConfigError("ZCBOT_NATS_URL must be set for `zcbot bus setup`")
    nc = await connect(nats_url, "zcbot-bus-setup", user=settings.zcbot_nats_user,
                       password=settings.zcbot_nats_password,
                       ca_file=str(settings.zcbot_nats_ca) if settings.zcbot_nats_ca else None)
    try:
        topo = Topology(settings.zcbot_bus_prefix)
        await ensure_topology(nc.jetstream(), topo, stream_limits(settings), retry_seconds=wait_seconds)
        return topo
    finally:
        await nc.close()


def stream_limits(settings: Settings) -> StreamLimits:
    """The streams' and consumers' limits from the process settings."""
    return StreamLimits(
        events_max_age_seconds=settings.zcbot_events_max_age_hours * 3600,
        ack_wait_seconds=settings.zcbot_ack_wait_seconds,
        max_deliver=settings.zcbot_max_deliver,
        replicas=settings.zcbot_js_replicas,
        events_max_bytes=settings.zcbot_events_max_bytes or -1,
        queues_max_bytes=settings.zcbot_queues_max_bytes or -1,
    )
