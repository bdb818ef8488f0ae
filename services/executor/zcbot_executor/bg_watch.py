"""Background processes enforced from outside their tree (issue 19, item 5).

The wrapper inside a background sandbox enforces the time limit and the `kill` file itself, but
code in the sandbox can stop it (`kill -STOP $PPID`), forge its files (`exit_code`, `heartbeat`,
`proc.json` are in the user's tree) or detach from it. So the executor that launched a process
keeps its own record (`<state_dir>/procs/<proc_id>.json`, never in the user tree) and, from
outside:
- decides liveness from the process itself — the user's cgroup leaf of that process (any member
  left) or, without cgroups, its pid with the recorded start time — never from the proc files;
- kills at the time limit (plus a grace for the wrapper to do it first), on check_process kill,
  on a run cancel or task deletion (`stop_task`, unless it was started with keep=true), in every
  state: running, stopped, or "lost" (wrapper gone or frozen): SIGKILL through a pidfd and the
  cgroup leaf, which needs no cooperation from anything inside;
- counts its live processes against ZCBOT_MAX_BG_PROCS whatever their files say.
After a kill, the executor writes the terminal files itself (exit code 124 time limit, 137 killed).
Records are reloaded at start, so an executor restart keeps enforcing.

When a process is seen gone (ended, killed), `on_end(proc_id, record)` runs once: the executor
reports what it did to the user's files (issue 29; the record's "watch" is the before-scan). A
record still holding its "watch" is reloaded even when its process ended while the executor was
down, so the report is not lost to a restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from zcbot_executor.sandbox.base import BackgroundSpec, SandboxBackend

log = logging.getLogger(__name__)

WATCH_SECONDS = 1.0
LIMIT_GRACE_SECONDS = 2.0  # the wrapper kills at its limit; the executor only when it did not


class BackgroundWatch:
    def __init__(self, backend: SandboxBackend, private_dir: Path) -> None:
        self.backend = backend
        self.private_dir = private_dir
        self.entries: dict[str, dict[str, Any]] = {}  # proc_id -> private record, live ones only
        self._task: asyncio.Task[None] | None = None
        self.on_end: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None

    # ---- records ----------------------------------------------------------------------------
    def load(self) -> int:
        """Records of processes this host launched before a restart (only those still alive)."""
        if not self.private_dir.is_dir():
            return 0
        for path in self.private_dir.glob("p*.json"):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and record.get("user_id") and (record.get("watch") or self.alive(path.stem, record)):
                self.entries[path.stem] = record
        return len(self.entries)

    def add(self, proc_id: str, record: dict[str, Any]) -> None:
        self.entries[proc_id] = record

    def alive(self, proc_id: str, record: dict[str, Any]) -> bool:
        spec = BackgroundSpec(proc_id, str(record.get("user_id")), Path(str(record.get("user_root"))), "")
        return self.backend.background_alive(spec, record)

    def live_for_user(self, user_id: str) -> list[str]:
        return [pid for pid, rec in list(self.entries.items()) if rec.get("user_id") == user_id and self.alive(pid, rec)]

    # ---- killing ----------------------------------------------------------------------------
    async def kill(self, proc_id: str, reason: str, code: int) -> bool:
        """Hard-kill a process this host launched and make it terminal with `reason`/`code`."""
        record = self.entries.get(proc_id)
        if record is None:
            return False
        user_root = Path(str(record.get("user_root")))
        spec = BackgroundSpec(proc_id, str(record.get("user_id")), user_root, "")
        try:
            await self.backend.kill_background(spec, record)
        except Exception:
            log.exception("background kill failed", extra={"proc_id": proc_id})
        gone = not await asyncio.to_thread(self.alive, proc_id, record)
        if gone:
            self.entries.pop(proc_id, None)
            from zcbot_executor.procs import _finish_lost  # procs imports this module

            await asyncio.to_thread(_finish_lost, user_root / str(record.get("dir")), reason, code)
            await self._ended(proc_id, record)
        log.info("background process killed", extra={"proc_id": proc_id, "reason": reason, "gone": gone})
        return gone

    async def stop_task(self, user_id: str, task_key: str, reason: str) -> list[str]:
        """Kill this host's processes of a task (run cancelled, task deleted), except keep=true ones."""
        victims = [pid for pid, rec in list(self.entries.items())
                   if rec.get("user_id") == user_id and rec.get("task_key") == task_key and not rec.get("keep")]
        killed = [pid for pid in victims if await self.kill(pid, "killed", 137)]
        if victims:
            log.info("background processes stopped", extra={"user_id": user_id, "reason": reason, "killed": killed})
        return killed

    async def enforce(self, now: float | None = None) -> list[str]:
        """One pass: kill what is past its time limit; forget what is gone."""
        now = time.time() if now is None else now
        killed = []
        for proc_id, record in list(self.entries.items()):
            if not await asyncio.to_thread(self.alive, proc_id, record):
                self.entries.pop(proc_id, None)
                groups = self.backend.cgroups
                if groups is not None:
                    groups.remove(str(record.get("user_id")), proc_id)
                await self._ended(proc_id, record)
                continue
            try:
                deadline = float(record["started_at"]) + float(record["time_limit"]) + LIMIT_GRACE_SECONDS
            except (KeyError, TypeError, ValueError):
                continue
            if now > deadline and await self.kill(proc_id, "time limit", 124):
                killed.append(proc_id)
        return killed

    async def _ended(self, proc_id: str, record: dict[str, Any]) -> None:
        if self.on_end is None:
            return
        try:
            await self.on_end(proc_id, record)
        except Exception:
            log.exception("background end hook failed", extra={"proc_id": proc_id})

    # ---- loop -------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="background-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _loop(self) -> None:
        await asyncio.to_thread(self.load)
        while True:
            try:
                await self.enforce()
            except Exception:
                log.exception("background watch failed")
            await asyncio.sleep(WATCH_SECONDS)
