"""Leader leases in the `Topology.leases_bucket` KV bucket (bucket TTL = LEADER_LEASE_TTL_SECONDS).

`acquire` is `kv.create` (fails while another holder's entry is alive); `refresh` is
`kv.update(last=<our revision>)` every TTL/4 (fails if the entry expired or someone else took it:
then the lease is lost and the holder must stop); `release` deletes the key at our revision.
`held()` is also false once the local validity window (TTL minus a safety margin since the last
successful write) has passed, so a holder whose refreshes stall stops acting before the entry
can expire and be taken over.
"""

from __future__ import annotations

import asyncio
import logging
import time

from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from zcbot_core.bus.topology import LEADER_LEASE_TTL_SECONDS

log = logging.getLogger(__name__)

SAFETY_MARGIN_SECONDS = 3.0


class Lease:
    def __init__(self, kv: KeyValue, key: str, owner: str, ttl: float = LEADER_LEASE_TTL_SECONDS) -> None:
        self.kv = kv
        self.key = key
        self.owner = owner
        self.ttl = ttl
        self.revision: int | None = None
        self.valid_until = 0.0
        self.lost = asyncio.Event()

    @property
    def refresh_interval(self) -> float:
        return max(self.ttl / 4, 0.5)

    def held(self) -> bool:
        return self.revision is not None and not self.lost.is_set() and time.monotonic() < self.valid_until

    async def acquire(self) -> bool:
        started = time.monotonic()
        try:
            self.revision = await self.kv.create(self.key, self.owner.encode())
        except KeyWrongLastSequenceError:
            return False
        self.valid_until = started + self.ttl - SAFETY_MARGIN_SECONDS
        self.lost.clear()
        return True

    async def refresh(self) -> bool:
        if self.revision is None or self.lost.is_set():
            return False
        started = time.monotonic()
        try:
            self.revision = await self.kv.update(self.key, self.owner.encode(), last=self.revision)
        except KeyWrongLastSequenceError:
            log.warning("lease lost", extra={"lease": self.key})
            self.lost.set()
            return False
        except Exception as exc:  # NATS hiccup: keep trying until the local window runs out
            log.warning("lease refresh failed", extra={"lease": self.key, "error": exc.__class__.__name__})
            if time.monotonic() >= self.valid_until:
                self.lost.set()
            return False
        self.valid_until = started + self.ttl - SAFETY_MARGIN_SECONDS
        return True

    async def keep(self) -> None:
        """Refresh until lost (run as a task; cancel it to stop)."""
        while not self.lost.is_set():
            await asyncio.sleep(self.refresh_interval)
            await self.refresh()

    async def release(self) -> None:
        if self.revision is None:
            return
        rev, self.revision = self.revision, None
        self.lost.set()
        try:
            await self.kv.delete(self.key, last=rev)
        except Exception:  # someone else holds it now, or NATS is gone: the TTL cleans up
            pass
