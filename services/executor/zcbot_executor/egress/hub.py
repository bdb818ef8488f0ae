"""The host side of sandbox egress: one unix socket per user, proxy.py behind them, metering, audit.

For each user with a sandbox on this host the hub listens on its own unix socket (in a 0700
folder of the executor's; the backend binds that one file into the user's sandboxes, so a sandbox
can reach its own user's socket and no other). A connection accepted there belongs to that user —
the kernel says which socket it came in on; nothing the sandbox sends is trusted for it. The hub
hands proxy.py one end of a socketpair (proxy.py's threaded work: parsing, CONNECT tunnels, the
upstream connection; `plugin.EgressPlugin` applies the allowlist) and relays the other end to the
sandbox, counting every byte both ways. When the connection ends it appends one JSON line to the
audit log (user, host, port, method, allowed, reason, bytes) and adds the bytes to the user's meter.

The per-user byte cap (`cap.ByteCap`, ZCBOT_USER_EGRESS_MB_PER_DAY) is counted live, chunk by chunk:
the plugin refuses a new connection of a user at the cap (403), and the chunk that takes a user to
the cap is the last one a running connection or tunnel relays — both ends are then closed (the
overshoot is at most one chunk per open connection).

Why in the executor's process rather than proxy.py's own multi-process server: identity comes
from the listening socket, which needs no IPC here, and proxy.py's acceptor processes would fork
the executor (its event loop, NATS connection). proxy.py's threads only ever talk to the hub's
socketpairs and to allowlisted upstreams.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zcbot_executor import metrics
from zcbot_executor.egress.allowlist import Allowlist
from zcbot_executor.egress.cap import ByteCap

log = logging.getLogger(__name__)

CHUNK = 65536
SYNC_SECONDS = 2.0  # how often the bytes go to the shared count (and other hosts' come back)
SYNC_TIMEOUT = 3.0  # a user's first connection waits at most this for the shared total
Report = Callable[[dict[str, dict[int, int]], list[str]], Awaitable[dict[str, int]]]


@dataclass
class Conn:
    """One sandbox connection: its user (from the socket) and, once the plugin decided, its target."""

    user_id: str
    started: float = field(default_factory=time.time)
    target: tuple[str, int, str, bool, str] | None = None  # host, port, method, allowed, reason
    up: int = 0  # sandbox -> proxy
    down: int = 0  # proxy -> sandbox
    cut: bool = False  # closed by the hub at the user's byte cap

    def set_target(self, host: str, port: int, method: str, allowed: bool, reason: str) -> None:
        self.target = (host, port, method, allowed, reason)


@dataclass
class Usage:
    bytes_up: int = 0
    bytes_down: int = 0
    connections: int = 0
    refused: int = 0

    @property
    def total(self) -> int:
        return self.bytes_up + self.bytes_down


class EgressHub:
    def __init__(self, allow: tuple[str, ...], audit_log: Path, idle_timeout: int = 60, cap_bytes: int = 0) -> None:
        self.allowlist = Allowlist(allow)
        self.cap = ByteCap(cap_bytes)
        self.audit_log = audit_log
        self.idle_timeout = idle_timeout
        self.usage: dict[str, Usage] = {}
        self._conns: dict[socket.socket, Conn] = {}
        self._servers: dict[str, tuple[asyncio.AbstractServer, Path]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._dir: Path | None = None
        self.flags: Any = None
        self._report: Report | None = None  # the shared count (PostgreSQL through a runner), see `share`
        self._sync_lock = asyncio.Lock()

    async def start(self) -> None:
        from proxy.common.flag import FlagParser

        from zcbot_executor.egress.plugin import EgressPlugin

        # proxy.py logs every refusal as a warning and each connection at info; the audit log says it all
        logging.getLogger("proxy").setLevel(logging.ERROR)
        self.flags = FlagParser.initialize(["--threaded", "--timeout", str(self.idle_timeout)], plugins=[EgressPlugin])
        self.flags.zcbot_egress = self
        # A short private folder: unix socket paths are limited to 107 bytes, ZCBOT_HOME may be deep.
        self._dir = Path(tempfile.mkdtemp(prefix="zcbot-egress-"))
        os.chmod(self._dir, 0o700)
        self.audit_log.parent.mkdir(parents=True, exist_ok=True)
        log.info("egress proxy ready", extra={"allow": [e.pattern for e in self.allowlist.entries],
                                              "user_cap_mb_per_day": self.cap.limit_mb or None})

    def share(self, report: Report) -> None:
        """Count the cap across hosts: `report(bytes, users)` sends this host's new bytes per user
        and hour (and asks for `users`' totals), answering every host's totals."""
        if not self.cap.limit:
            return
        self._report = report
        task = asyncio.create_task(self._sync_loop(), name="egress-usage-sync")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(SYNC_SECONDS)
            active = sorted({c.user_id for c in self._conns.values()})  # refreshed while they move bytes
            await self.sync(active)

    async def sync(self, users: list[str]) -> bool:
        """One report; False when no runner answered (the bytes are sent with the next one)."""
        if self._report is None:
            return False
        async with self._sync_lock:
            taken = self.cap.take_pending()
            if not taken and not users:
                return True
            try:
                totals = await asyncio.wait_for(self._report(taken, users), SYNC_TIMEOUT)
            except Exception as exc:  # no runner, bus trouble: this host's own count still holds
                self.cap.restore(taken)
                log.info("egress usage not shared", extra={"error": f"{exc.__class__.__name__}: {exc}"})
                return False
            self.cap.set_totals(taken, totals)
            return True

    def conn_of(self, sock: Any) -> Conn | None:
        return self._conns.get(sock)

    async def socket_for(self, user_id: str) -> Path:
        """The user's socket on the host (created on first use, kept while the executor runs: the
        user's background sandboxes use it too)."""
        known = self._servers.get(user_id)
        if known is not None:
            return known[1]
        assert self._dir is not None, "EgressHub.start() first"
        path = self._dir / (hashlib.sha256(user_id.encode()).hexdigest()[:24] + ".sock")
        path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(lambda r, w: self._accept(user_id, r, w), path=str(path))
        # The folder is 0700; the socket itself must admit the sandbox's uid (a root executor's
        # sandboxes run as ZCBOT_SANDBOX_UID) once bound into the sandbox, where only its own mode counts.
        os.chmod(path, 0o666)
        self._servers[user_id] = (server, path)
        return path

    def _accept(self, user_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._relay(user_id, reader, writer), name=f"egress-{user_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _relay(self, user_id: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from proxy.core.work.threaded import start_threaded_work

        if self._report is not None and not self.cap.known(user_id):
            await self.sync([user_id])  # first connection on this host: the user's total on every host
        conn = Conn(user_id)
        theirs, ours = socket.socketpair()
        self._conns[theirs] = conn
        proxy_writer: asyncio.StreamWriter | None = None

        def count(n: int) -> None:
            # Only an allowed connection is cut: one the plugin has not decided yet is refused
            # by it at the cap, and a refusal's 403 must reach the sandbox whole.
            if self.cap.add(user_id, n) and not conn.cut and conn.target is not None and conn.target[3]:
                conn.cut = True
                metrics.EGRESS_CAPPED.labels("cut").inc()
                log.warning("egress cap reached: connection closed", extra={"user_id": user_id,
                                                                           "cap_mb": self.cap.limit_mb})
                for w in (writer, proxy_writer):  # both pumps see the end at once
                    if w is not None:
                        w.transport.abort()

        try:
            start_threaded_work(self.flags, theirs, ("sandbox", 0))  # proxy.py's thread owns `theirs` now
            proxy_reader, proxy_writer = await asyncio.open_unix_connection(sock=ours)
            up = asyncio.create_task(_pump(reader, proxy_writer, conn, "up", count))
            try:
                await _pump(proxy_reader, writer, conn, "down", count)
            finally:
                if not up.done():  # the proxy closed: whatever the sandbox still sends goes nowhere
                    up.cancel()
                await asyncio.gather(up, return_exceptions=True)
        except Exception:
            log.exception("egress relay failed", extra={"user_id": user_id})
        finally:
            for w in (writer, proxy_writer):
                if w is not None:
                    w.close()
            if proxy_writer is None:
                ours.close()
            self._conns.pop(theirs, None)
            self._record(conn)

    def _record(self, conn: Conn) -> None:
        host, port, method, allowed, reason = conn.target or (None, None, None, False, "no request")
        usage = self.usage.setdefault(conn.user_id, Usage())
        usage.bytes_up += conn.up
        usage.bytes_down += conn.down
        usage.connections += 1
        usage.refused += 0 if allowed else 1
        metrics.EGRESS_BYTES.labels("up").inc(conn.up)
        metrics.EGRESS_BYTES.labels("down").inc(conn.down)
        metrics.EGRESS_CONNECTIONS.labels("allowed" if allowed else "refused").inc()
        line = {"ts": round(conn.started, 3), "user": conn.user_id, "host": host, "port": port, "method": method,
                "allowed": allowed, "reason": reason or None, "bytes_up": conn.up, "bytes_down": conn.down,
                "bytes": conn.up + conn.down, "duration_ms": round((time.time() - conn.started) * 1000),
                "cut": conn.cut}
        try:
            with open(self.audit_log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(line, ensure_ascii=False) + "\n")
        except OSError:
            log.exception("could not write the egress audit log", extra={"path": str(self.audit_log)})

    async def close(self) -> None:
        for server, path in self._servers.values():
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._servers.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, conn: Conn, direction: str,
                count: Callable[[int], None]) -> None:
    try:
        while True:
            data = await src.read(CHUNK)
            if not data:
                break
            if direction == "up":
                conn.up += len(data)
            else:
                conn.down += len(data)
            dst.write(data)
            count(len(data))  # may close both ends (the cap): drain then fails and the loop ends
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except (ConnectionError, OSError):
        pass
