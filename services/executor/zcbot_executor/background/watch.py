"""Background processes enforced from outside their tree (issue 19, item 5).

The wrapper inside a background sandbox enforces the time limit and the `kill` file itself, but
code in the sandbox can stop it (`kill -STOP $PPID`), forge its files (`exit_code`, `heartbeat`,
`proc.json` are in the user's tree) or detach from it. So the executor that launched a process
keeps its own record (record.py: `<state_dir>/procs/<proc_id>.json`, never in the user tree) and, from
outside:
- decides liveness from the process itself — the user's cgroup leaf of that process (any member
  left) or, without cgroups, its pid with the recorded start time — never from the proc files;
- kills at the time limit (plus a grace for the wrapper to do it first), on check_process kill,
  on a run cancel or task deletion (`stop_task`, unless it was started with keep=true), in every
  state: running, stopped, or "lost" (wrapper gone or frozen): SIGKILL through a pidfd and the
  cgroup leaf, which needs no cooperation from anything inside;
- counts its live processes against ZCBOT_MAX_BG_PROCS whatever their files say.
After a kill, the executor writes the terminal files itself (exit code 124 time limit, 137 killed).
Records are reloaded at start, so an executor restart keeps enforcing. An executor configured to stop
its processes with it (ZCBOT_BG_STOP_WITH_EXECUTOR, what `zcbot up` sets) kills them all as it drains
(`stop_all`), recorded as ended by "shutdown" (exit code 137); `stop_left_behind` does the same from
the records alone, for `zcbot up` once its executor has gone (one killed before it could).

Every kill and every enforcement step of one process holds that process's lock, so a time-limit
pass, a check_process kill, a run cancel and a quota kill never race each other over one process.

When a process is seen gone (ended, killed), `on_end(record)` runs once: the executor
reports what it did to the user's files (issue 29; the record's "watch" is the before-scan). A
record still holding its "watch" is reloaded even when its process ended while the executor was
down, so the report is not lost to a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from zcbot_executor.background import files
from zcbot_executor.background.record import ProcRecord
from zcbot_executor.config import ExecutorConfig
from zcbot_executor.sandbox import make_backend
from zcbot_executor.sandbox.base import BackgroundSpec, SandboxBackend

log = logging.getLogger(__name__)

WATCH_SECONDS = 1.0
SHUTDOWN = "shutdown"  # the end reason of a process stopped because its executor (or the stack) stopped
KILLED_CODE = 137  # 128 + SIGKILL, as a shell reports a process killed from outside
TIME_LIMIT_CODE = 124
KILL_SETTLE_SECONDS = 2.0


def jobs(count: int) -> str:
    return f"{count} background job{'' if count == 1 else 's'}"


class BackgroundWatch:
    def __init__(self, backend: SandboxBackend, private_dir: Path) -> None:
        self.backend = backend
        self.private_dir = private_dir
        self.entries: dict[str, ProcRecord] = {}  # proc_id -> private record, live ones only
        self._locks: dict[str, asyncio.Lock] = {}  # proc_id -> the lock around its kill / enforcement
        self._task: asyncio.Task[None] | None = None
        self._loaded = False
        self.on_end: Callable[[ProcRecord], Awaitable[None]] | None = None

    # ---- records ----------------------------------------------------------------------------
    def load(self) -> int:
        """Records of processes this host launched before a restart (only those still alive)."""
        self._loaded = True
        if not self.private_dir.is_dir():
            return 0
        for path in self.private_dir.glob("p*.json"):
            record = ProcRecord.load(path)
            if record is not None and (record.watch or self.alive(record)):
                self.entries[record.proc_id] = record
        return len(self.entries)

    def add(self, record: ProcRecord) -> None:
        self.entries[record.proc_id] = record

    def save(self, record: ProcRecord) -> None:
        record.save(self.private_dir)

    def alive(self, record: ProcRecord) -> bool:
        """Asked of the process itself (blocking: call in a thread), never of its files."""
        return self.backend.background_alive(_spec(record), record.private)

    def live_for_user(self, user_id: str) -> list[str]:
        return [pid for pid, rec in list(self.entries.items()) if rec.user_id == user_id and self.alive(rec)]

    def _lock(self, proc_id: str) -> asyncio.Lock:
        return self._locks.setdefault(proc_id, asyncio.Lock())

    def _release(self, proc_id: str) -> None:
        """Drop the lock of a process no longer watched, once nobody holds or waits for it."""
        lock = self._locks.get(proc_id)
        if proc_id not in self.entries and lock is not None and not lock.locked():
            del self._locks[proc_id]

    # ---- killing ----------------------------------------------------------------------------
    async def kill(self, proc_id: str, reason: str, code: int) -> bool:
        """Hard-kill a process this host launched and make it terminal with `reason`/`code`."""
        async with self._lock(proc_id):
            gone = await self._kill(proc_id, reason, code)
        self._release(proc_id)
        return gone

    async def _kill(self, proc_id: str, reason: str, code: int) -> bool:
        record = self.entries.get(proc_id)
        if record is None:  # not ours, or another kill of it finished first
            return False
        try:
            await self.backend.kill_background(_spec(record), record.private)
        except Exception:
            log.exception("background kill failed", extra={"proc_id": proc_id})
        gone = await self._gone(record)
        if gone:
            self.entries.pop(proc_id, None)
            await asyncio.to_thread(files.finish, record.proc_dir, reason, code)
            await self._ended(record)
        log.info("background process killed", extra={"proc_id": proc_id, "reason": reason, "gone": gone})
        return gone

    async def _gone(self, record: ProcRecord) -> bool:
        """Whether a process just sent SIGKILL is gone, given a moment to die (without cgroups its
        pid lives on until the kernel has torn it down and its parent has reaped it)."""
        deadline = time.monotonic() + KILL_SETTLE_SECONDS
        while await asyncio.to_thread(self.alive, record):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def stop_task(self, user_id: str, task_key: str, reason: str) -> list[str]:
        """Kill this host's processes of a task (run cancelled, task deleted), except keep=true ones."""
        victims = [pid for pid, rec in list(self.entries.items())
                   if rec.user_id == user_id and rec.task_key == task_key and not rec.keep]
        killed = [pid for pid in victims if await self.kill(pid, "killed", KILLED_CODE)]
        if victims:
            log.info("background processes stopped", extra={"user_id": user_id, "reason": reason, "killed": killed})
        return killed

    async def stop_all(self, reason: str = SHUTDOWN, announce: Callable[[int], None] | None = None) -> list[str]:
        """Kill every live process this host launched, keep=true ones too, in parallel (the executor or
        the whole stack is stopping); `announce(n)` is told how many first. Ended ones are left to
        their own record. Returns the ids killed."""
        if not self._loaded:  # stopping before the watch loop read the records
            await asyncio.to_thread(self.load)
        entries = list(self.entries.items())
        alive = await asyncio.gather(*(asyncio.to_thread(self.alive, rec) for _, rec in entries))
        live = [pid for (pid, _), up in zip(entries, alive) if up]
        if not live:
            return []
        if announce is not None:
            announce(len(live))
        done = await asyncio.gather(*(self.kill(pid, reason, KILLED_CODE) for pid in live))
        return [pid for pid, gone in zip(live, done) if gone]

    async def enforce(self, now: float | None = None) -> list[str]:
        """One pass: kill what is past its time limit; forget what is gone."""
        now = time.time() if now is None else now
        killed = []
        for proc_id in list(self.entries):
            async with self._lock(proc_id):
                if await self._enforce(proc_id, now):
                    killed.append(proc_id)
            self._release(proc_id)
        return killed

    async def _enforce(self, proc_id: str, now: float) -> bool:
        record = self.entries.get(proc_id)
        if record is None:  # killed meanwhile
            return False
        if not await asyncio.to_thread(self.alive, record):
            self.entries.pop(proc_id, None)
            groups = self.backend.cgroups
            if groups is not None:
                groups.remove(record.user_id, proc_id)
            await self._ended(record)
            return False
        return now > record.deadline() and await self._kill(proc_id, "time limit", TIME_LIMIT_CODE)

    async def _ended(self, record: ProcRecord) -> None:
        if self.on_end is None:
            return
        try:
            await self.on_end(record)
        except Exception:
            log.exception("background end hook failed", extra={"proc_id": record.proc_id})

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


def _spec(record: ProcRecord) -> BackgroundSpec:
    return BackgroundSpec(record.proc_id, record.user_id, record.user_root, "")


async def stop_left_behind(config: ExecutorConfig, announce: Callable[[int], None] | None = None) -> list[str]:
    """Kill the background processes this host's records say still run, from outside any executor
    (`zcbot up` after its services stopped: an executor killed mid-drain, or one that crashed, left
    them). Their file changes are reported by the next executor start (the records keep the scan)."""
    watch = BackgroundWatch(make_backend(config), config.state_dir / "procs")
    return await watch.stop_all(SHUTDOWN, announce)
