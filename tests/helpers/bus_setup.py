"""The topology's setup step for tests that run services with their own NATS identities (issue 36):
those identities may not declare streams or buckets, so the test declares them first with the setup
identity, as `zcbot up` and the deploy/ job do."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from zcbot_core.bus.access import SETUP
from zcbot_core.bus.topology_setup import setup_topology
from zcbot_core.platform.config import Settings
from zcbot_devstack.embedded.nats_auth import NatsCredentials


def declare_topology(url: str, prefix: str, creds: NatsCredentials, ca: Path | None = None,
                     services_env: Mapping[str, str] | None = None) -> None:
    """`zcbot bus setup` against `url` as the setup identity (from sync code: its own loop, in a thread,
    apart from any loop of the tests). `services_env`: the services' environment, whose stream limits
    (replicas, ack wait, ...) the setup declares."""
    env = {k: v for k, v in (services_env or {}).items() if k.startswith("ZCBOT_")}
    env.update({"ZCBOT_NATS_URL": url, "ZCBOT_BUS_PREFIX": prefix, **creds.service_env(SETUP)})
    if ca is not None:
        env["ZCBOT_NATS_CA"] = str(ca)
    settings = Settings(**env)  # type: ignore[arg-type]
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, setup_topology(settings)).result()
