"""The sandbox interface every backend implements, and the per-user pool with idle reaping."""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zcbot_core.errors import ZcbotError
from zcbot_executor.sandbox.launch import detached_alive

log = logging.getLogger(__name__)


class SandboxError(ZcbotError, RuntimeError):
    """The sandbox itself failed (could not start, died): not the model's fault."""

    code = "sandbox_error"


@dataclass
class ToolResult:
    ok: bool
    output: str = ""
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_runner(cls, msg: dict[str, Any]) -> "ToolResult":
        """A runner reply is untrusted (code in the sandbox can forge it): coerce every field and
        keep `meta` to a few small scalars so a reply always fits on the bus."""
        raw_meta = msg.get("meta")
        meta: dict[str, Any] = {}
        if isinstance(raw_meta, dict):
            for key, value in list(raw_meta.items())[:32]:
                if isinstance(key, str) and len(key) <= 64 and (
                        value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 1000)):
                    meta[key] = value
        error = msg.get("error")
        return cls(
            ok=msg.get("ok") is True,
            output=str(msg.get("output") or ""),
            error=None if error is None else str(error)[:4000],
            meta=meta,
        )


@dataclass
class BackgroundSpec:
    """What a backend needs to launch a detached background process sandbox."""

    proc_id: str
    user_id: str
    user_root: Path
    proc_dir_virtual: str  # /workspace/.zcbot_procs/<task>/<proc>


class Sandbox(abc.ABC):
    """One user's sandbox on this host. Calls may run concurrently."""

    def __init__(self, user_id: str, user_root: Path) -> None:
        self.user_id = user_id
        self.user_root = user_root
        self.last_used = time.monotonic()
        self.active = 0

    @property
    @abc.abstractmethod
    def alive(self) -> bool: ...

    @abc.abstractmethod
    async def call(self, call_id: str, tool: str, args: dict[str, Any], cwd: str, timeout: float) -> ToolResult:
        """Run a tool with `cwd` given as the sandbox sees it (`/workspace/...`)."""

    @abc.abstractmethod
    async def cancel(self, call_id: str) -> None:
        """Kill the call's process group; the call then returns a 'cancelled' result."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop everything in the sandbox."""


class SandboxBackend(abc.ABC):
    name: str = "?"
    cgroups: Any = None  # cgroups.UserCgroups when this host has per-user cgroups (bwrap, unsafe)
    egress: Any = None  # egress.hub.EgressHub when sandboxes get package-install egress (bwrap, docker)
    kernel_quota = False  # set by the service when the btrfs qgroup quota is on (quota/kernel.py)

    async def start_egress(self, config: Any) -> None:
        """Start the egress proxy when ZCBOT_EGRESS is on (a backend whose sandboxes have no network)."""
        if config.egress:
            from zcbot_executor.egress.hub import EgressHub

            self.egress = EgressHub(config.egress_allow, config.audit_log_path,
                                    cap_bytes=config.user_egress_mb_per_day * 2**20)
            await self.egress.start()

    async def egress_socket(self, user_id: str) -> Path | None:
        """The host path of the user's egress socket, to bind into the user's sandbox (None: no egress)."""
        return None if self.egress is None else await self.egress.socket_for(user_id)

    def egress_env(self, config: Any) -> dict[str, str]:
        """The sandbox variables for the egress bridge (none when egress is off)."""
        from zcbot_executor import egress

        return egress.proxy_env(config.pip_index_url) if config.egress else {}

    def cgroup_procs(self, user_id: str, leaf: str) -> list[str]:
        """The `cgroup.procs` files a new sandbox process of `user_id` joins (none without cgroups)."""
        if self.cgroups is None:
            return []
        try:
            return self.cgroups.prepare(user_id, leaf)
        except (OSError, RuntimeError) as exc:
            raise SandboxError(f"could not prepare the user's cgroup: {exc}") from exc

    async def start(self) -> None:
        """Prepare (stage files, check the engine, remove leftovers of a previous run)."""

    @abc.abstractmethod
    async def open(self, user_id: str, user_root: Path) -> Sandbox: ...

    @abc.abstractmethod
    async def start_background(self, spec: BackgroundSpec) -> dict[str, Any]:
        """Launch a detached sandbox running the proc wrapper; returns private details (pid, ...)."""

    @abc.abstractmethod
    async def kill_background(self, spec: BackgroundSpec, private: dict[str, Any]) -> bool:
        """Hard-kill a background sandbox launched by this host (when its wrapper did not react)."""

    def background_alive(self, spec: BackgroundSpec, private: dict[str, Any]) -> bool:
        """Is a background sandbox launched by this host still alive? Asked of the process itself, never
        of its (user-writable) proc files: any member left in its cgroup leaf, or, without cgroups,
        its pid with the recorded start time (a zombie is dead) or its pid namespace's init. Blocking (call in a thread)."""
        if self.cgroups is not None:  # every process of it was born in its leaf and cannot leave it
            return bool(self.cgroups.pids(spec.user_id, spec.proc_id))
        return detached_alive(private)  # its pid, or its pid namespace's init (launch.py)

    async def close(self) -> None:
        """Release backend resources (sandboxes are closed by the pool)."""
        if self.egress is not None:
            await self.egress.close()
        if self.cgroups is not None:
            self.cgroups.close()


class SandboxPool:
    """At most one live sandbox per user on this host; idle ones are reaped."""

    def __init__(self, backend: SandboxBackend, idle_seconds: float,
                 on_close: Callable[[str], Awaitable[None]] | None = None,
                 on_change: Callable[[int], None] | None = None) -> None:
        self.backend = backend
        self.idle_seconds = idle_seconds
        self.sandboxes: dict[str, Sandbox] = {}
        self._opening: dict[str, asyncio.Future[Sandbox]] = {}
        self._on_close = on_close
        self._on_change = on_change or (lambda n: None)
        self._reaper: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap_loop(), name="sandbox-reaper")

    async def get(self, user_id: str, user_root: Path) -> Sandbox:
        if self._closing:
            raise SandboxError("executor is shutting down")
        box = self.sandboxes.get(user_id)
        if box is not None and box.alive:
            return box
        if box is not None:
            await self._drop(user_id, box)
        pending = self._opening.get(user_id)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Sandbox] = asyncio.get_running_loop().create_future()
        self._opening[user_id] = fut
        try:
            box = await self.backend.open(user_id, user_root)
        except BaseException as exc:
            fut.set_exception(exc if isinstance(exc, Exception) else SandboxError("cancelled"))
            fut.exception()  # mark retrieved
            raise
        finally:
            self._opening.pop(user_id, None)
        self.sandboxes[user_id] = box
        fut.set_result(box)
        self._on_change(len(self.sandboxes))
        return box

    async def discard(self, user_id: str) -> None:
        """Close a user's sandbox now (it misbehaved); the next call starts a fresh one."""
        box = self.sandboxes.get(user_id)
        if box is not None:
            await self._drop(user_id, box)

    async def _drop(self, user_id: str, box: Sandbox) -> None:
        if self.sandboxes.get(user_id) is box:
            del self.sandboxes[user_id]
            self._on_change(len(self.sandboxes))
        try:
            await box.close()
        except Exception:
            log.exception("closing sandbox failed", extra={"user_id": user_id})
        if self._on_close is not None and user_id not in self.sandboxes:
            await self._on_close(user_id)

    async def reap_idle(self) -> int:
        now = time.monotonic()
        victims = [(u, b) for u, b in self.sandboxes.items()
                   if not b.alive or (b.active == 0 and now - b.last_used > self.idle_seconds)]
        for user_id, box in victims:
            log.info("reaping sandbox", extra={"user_id": user_id, "alive": box.alive})
            await self._drop(user_id, box)
        return len(victims)

    async def _reap_loop(self) -> None:
        interval = max(0.2, min(30.0, self.idle_seconds / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.reap_idle()
            except Exception:
                log.exception("sandbox reaper failed")

    async def close_all(self) -> None:
        self._closing = True
        if self._reaper is not None:
            self._reaper.cancel()
        boxes = list(self.sandboxes.items())
        await asyncio.gather(*(self._drop(u, b) for u, b in boxes), return_exceptions=True)
