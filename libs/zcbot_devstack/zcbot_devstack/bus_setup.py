"""`zcbot up`'s topology step (issue 36): the streams, buckets and durable consumers are declared by the
setup identity before any service starts, as `zcbot db upgrade` prepares the database; the services'
own identities may not (zcbot_core/bus/access.py)."""

from __future__ import annotations

import asyncio

from zcbot_core.bus.access import SETUP
from zcbot_core.bus.topology_setup import setup_topology
from zcbot_core.platform.config import Settings
from zcbot_devstack.embedded.nats_auth import NatsCredentials


def declare_topology(settings: Settings, nats_url: str, creds: NatsCredentials | None) -> None:
    """Declare with the embedded server's setup identity (`creds`), or, beside an operator's NATS, with
    the identity in this environment (ZCBOT_NATS_USER/ZCBOT_NATS_PASSWORD, unset on an open server)."""
    update: dict[str, object] = {"zcbot_nats_url": nats_url}
    if creds is not None:
        env = creds.service_env(SETUP)
        update.update(zcbot_nats_user=env["ZCBOT_NATS_USER"], zcbot_nats_password=env["ZCBOT_NATS_PASSWORD"])
    asyncio.run(setup_topology(settings.model_copy(update=update)))
