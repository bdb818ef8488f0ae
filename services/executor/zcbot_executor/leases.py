"""Per-user sandbox affinity: the `sandbox_leases` KV bucket (key user_id, value host, bucket TTL).

- A host that takes an unassigned user's call claims the lease with `create` (first wins).
- If the lease names another host that no longer serves (no responders to a probe), the lease is
  taken over at once instead of waiting for the TTL: the old owner is gone, its sandbox with it.
- Held leases are refreshed every TTL/3 (optimistic `update` on the last revision, so a lease
  someone else took over is dropped, not stolen back). A dead host stops refreshing and its
  leases expire after the TTL, so its users move to another executor.
- Closing a user's sandbox (idle reap) or draining releases the lease.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError

from zcbot_core.bus import Topology

log = logging.getLogger(__name__)


class LeaseKeeper:
    def __init__(self, js: JetStreamContext, topo: Topology, host: str, refresh_seconds: float | None = None,
                 host_alive: Callable[[str], Awaitable[bool | None]] | None = None,
                 in_use: Callable[[str], bool] | None = None, idle_seconds: float = 300.0) -> None:
        self.js = js
        self.topo = topo
        self.host = host
        self.refresh_seconds = refresh_seconds
        self.host_alive = host_alive
        self.in_use = in_use or (lambda user_id: False)
        self.idle_seconds = idle_seconds
        self.held: dict[str, int] = {}  # user_id -> revision we wrote
        self.last_used: dict[str, float] = {}
        self.kv = None
        self.ttl = 30.0
        self._task: asyncio.Task[None] | None = None
        self._locks: dict[str, asyncio.Lock] = {}

    async def start(self) -> None:
        self.kv = await self.js.key_value(self.topo.sandbox_leases_bucket)
        status = await self.kv.status()
        self.ttl = float(status.ttl or 30.0)
        if not self.refresh_seconds:
            self.refresh_seconds = max(0.2, self.ttl / 3)
        self._task = asyncio.create_task(self._refresh_loop(), name="lease-refresh")

    def _lock(self, user_id: str) -> asyncio.Lock:
        return self._locks.setdefault(user_id, asyncio.Lock())

    async def claim(self, user_id: str) -> str | None:
        """Make sure this host holds `user_id`'s lease if nobody live does; returns the owner."""
        self.last_used[user_id] = time.monotonic()
        if user_id in self.held:
            return self.host
        key = self.topo.kv_key(user_id)
        async with self._lock(user_id):
            if user_id in self.held:
                return self.host
            try:
                self.held[user_id] = await self.kv.create(key, self.host.encode())
                return self.host
            except KeyWrongLastSequenceError:
                pass
            except (nats.errors.Error, asyncio.TimeoutError) as exc:
                log.warning("lease create failed", extra={"user_id": user_id, "error": str(exc)})
                return None
            try:
                entry = await self.kv.get(key)
            except KeyNotFoundError:
                return None  # expired between the two calls: the next call claims it
            owner = entry.value.decode()
            if owner == self.host:
                self.held[user_id] = entry.revision
                return self.host
            if self.host_alive is not None and await self.host_alive(owner) is False:
                try:
                    self.held[user_id] = await self.kv.update(key, self.host.encode(), last=entry.revision)
                    log.info("took over lease of a dead executor", extra={"user_id": user_id, "from_host": owner})
                    return self.host
                except KeyWrongLastSequenceError:
                    return None
            return owner

    async def release(self, user_id: str) -> None:
        self.last_used.pop(user_id, None)
        revision = self.held.pop(user_id, None)
        if revision is None:
            return
        try:
            await self.kv.delete(self.topo.kv_key(user_id), last=revision)
        except (KeyWrongLastSequenceError, KeyNotFoundError, NotFoundError):
            pass
        except (nats.errors.Error, asyncio.TimeoutError) as exc:
            log.warning("lease release failed", extra={"user_id": user_id, "error": str(exc)})

    async def release_all(self) -> None:
        await asyncio.gather(*(self.release(u) for u in list(self.held)), return_exceptions=True)

    async def refresh(self) -> None:
        now = time.monotonic()
        for user_id in list(self.held):
            # no sandbox here and no recent call (say, only check_process): let the user go
            if not self.in_use(user_id) and now - self.last_used.get(user_id, 0.0) > self.idle_seconds:
                await self.release(user_id)
        for user_id, revision in list(self.held.items()):
            key = self.topo.kv_key(user_id)
            try:
                self.held[user_id] = await self.kv.update(key, self.host.encode(), last=revision)
            except KeyWrongLastSequenceError:
                # expired (then nobody else claimed it: re-create) or taken over (drop it)
                try:
                    self.held[user_id] = await self.kv.create(key, self.host.encode())
                except KeyWrongLastSequenceError:
                    log.info("lease lost to another executor", extra={"user_id": user_id})
                    self.held.pop(user_id, None)
            except (nats.errors.Error, asyncio.TimeoutError) as exc:
                log.warning("lease refresh failed", extra={"user_id": user_id, "error": str(exc)})

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                await self.refresh()
            except Exception:
                log.exception("lease refresh loop error")

    async def stop(self, release: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if release:
            await self.release_all()
