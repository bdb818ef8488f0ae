"""The executor's side of the per-user disk quota (the logic itself is zcbot_core/quota/).

With a kernel quota (quota/kernel.py: btrfs qgroups) every write past the quota already fails in
the kernel (EDQUOT); what follows then only turns that into clear tool errors. Without one it is
the enforcement, after the fact:

- Before a call: `write`/`edit` that would take the user over the quota are refused (the size is
  known from the arguments and the meter's record of the target); a new background process is
  refused while the user is over it. `shell`/`run_python` still run, so the model can delete files.
- While calls run: a tick (QUOTA_TICK_SECONDS) applies the kernel's change reports; a user who is
  over the quota and whose usage grew since a command started has that command killed, and their
  background processes on this host that keep writing are killed too.
- After a call: its result becomes the quota error when it was killed for it, or when it ended
  over the quota having written more.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zcbot_core.quota import Ledger, TreeMeter, quota_message
from zcbot_core.quota.kernel import BtrfsQuota
from zcbot_executor.background.watch import KILLED_CODE, BackgroundWatch
from zcbot_executor.sandbox import policy
from zcbot_executor.sandbox.base import ToolResult

log = logging.getLogger(__name__)

QUOTA_TICK_SECONDS = 0.2
FORGET_AFTER_SECONDS = 900.0  # a user root is metered this long after its last call
BLOCK = 4096
EXEC_TOOLS = frozenset({"shell", "run_python"})
WRITING_TOOLS = EXEC_TOOLS | {"write", "edit"}  # read, glob, grep, check_process cannot add a byte: no quota work


@dataclass
class _Running:
    user_id: str
    started_usage: int
    cancel: Any  # async () -> None: kills the call's process group
    killed: bool = False


class QuotaGuard:
    def __init__(self, storage_root: Path, limit_bytes: int, watch: BackgroundWatch | None = None, kernel: BtrfsQuota | None = None) -> None:
        self.ledger = Ledger(storage_root, limit_bytes)
        self.kernel = kernel  # the kernel refuses writes past the quota (None: this guard alone)
        self.meter = TreeMeter(self.ledger, kernel.usage if kernel else None) if self.ledger.enabled else None
        self.watch = watch  # the background processes' BackgroundWatch (live_for_user, kill)
        self.running: dict[str, _Running] = {}
        self.last_seen: dict[str, float] = {}
        self._bg_usage: dict[str, int] = {}

    @property
    def limit(self) -> int:
        return self.ledger.limit

    def close(self) -> None:
        if self.meter is not None:
            self.meter.close()

    async def usage(self, user_id: str, user_root: Path) -> int:
        assert self.meter is not None
        self.last_seen[user_id] = time.monotonic()
        # In a thread: usually a few re-stats, but a new tree (git clone) is scanned there too.
        return await asyncio.to_thread(self.meter.track, user_id, user_root)

    # ---- before / after a call -----------------------------------------------------------------
    async def refusal(self, tool: str, args: dict[str, Any], user_id: str, user_root: Path, cwd_rel: str) -> str | None:
        """The quota error for a call that must not run, else None (the kernel's quota refuses each
        write itself: nothing is refused ahead on a count that lags its commits)."""
        if self.meter is None or self.kernel is not None or tool not in WRITING_TOOLS:
            return None
        used = await self.usage(user_id, user_root)
        if tool in EXEC_TOOLS and args.get("background") and used >= self.limit:
            return quota_message(used, 0, self.limit)
        extra = self._growth(tool, args, user_id, cwd_rel)
        if extra > 0 and used + extra > self.limit:
            return quota_message(used, extra, self.limit)
        return None

    def _growth(self, tool: str, args: dict[str, Any], user_id: str, cwd_rel: str) -> int:
        """How much a write/edit can add: new size minus what the meter knows the target holds."""
        if tool == "write" and isinstance(args.get("content"), str):
            new = -(-len(args["content"].encode("utf-8")) // BLOCK) * BLOCK
            return new - self._known_size(args.get("path"), user_id, cwd_rel)
        if tool == "edit" and isinstance(args.get("new_str"), str) and isinstance(args.get("old_str"), str):
            return max(len(args["new_str"].encode("utf-8")) - len(args["old_str"].encode("utf-8")), 0)
        return 0

    def _known_size(self, path: object, user_id: str, cwd_rel: str) -> int:
        assert self.meter is not None
        if not isinstance(path, str):
            return 0
        if path.startswith(policy.WORKSPACE + "/"):
            rel = path[len(policy.WORKSPACE) + 1:]
        else:
            rel = posixpath.join(cwd_rel, path)
        rel = posixpath.normpath(rel)
        return 0 if rel.startswith("..") else self.meter.size_of(user_id, rel)

    def started(self, call_id: str, user_id: str, cancel: Any) -> None:
        """A call is about to run: the tick may kill it (through `cancel`) if it writes past the quota."""
        if self.meter is not None and call_id not in self.running:
            self.running[call_id] = _Running(user_id, self.meter.usage(user_id), cancel)

    async def finished(self, call_id: str, tool: str, user_id: str, user_root: Path, result: ToolResult) -> ToolResult:
        run = self.running.pop(call_id, None)
        if self.meter is None or tool not in WRITING_TOOLS:
            return result
        if self.kernel is not None:  # the kernel refused what went over (EDQUOT in the output); usage is reported
            await self.usage(user_id, user_root)
            return result
        used = await self.usage(user_id, user_root)
        grew = run is not None and used > run.started_usage
        if run is not None and (run.killed or (tool in EXEC_TOOLS and grew and used > self.limit)):
            what = "the command was killed" if run.killed else "the command ended"
            result.ok = False
            result.error = f"{quota_message(used, 0, self.limit)} ({what}; the files it wrote so far were kept)"
            result.meta["disk_quota"] = True
        return result

    # ---- the tick ------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            await asyncio.sleep(QUOTA_TICK_SECONDS)
            try:
                await self.tick()
            except Exception:
                log.exception("disk quota tick failed")

    async def tick(self) -> None:
        if self.meter is None:
            return
        usage = await asyncio.to_thread(self.meter.refresh_all)
        if self.kernel is not None:  # nothing to stop after the fact: the kernel refused it
            usage = {}
        for call_id, run in list(self.running.items()):
            used = usage.get(run.user_id, 0)
            if not run.killed and used > self.limit and used > run.started_usage:
                run.killed = True
                log.info("disk quota: killing a command", extra={"user_id": run.user_id, "call_id": call_id, "bytes": used})
                await run.cancel()
        for user_id, used in usage.items():
            await self._police_background(user_id, used)
        now = time.monotonic()
        for user_id in [u for u, seen in self.last_seen.items() if now - seen > FORGET_AFTER_SECONDS]:
            if not (self.watch and self.watch.live_for_user(user_id)) and not any(
                    r.user_id == user_id for r in self.running.values()):
                self.meter.forget(user_id)
                del self.last_seen[user_id]

    async def _police_background(self, user_id: str, used: int) -> None:
        before = self._bg_usage.get(user_id, used)
        self._bg_usage[user_id] = used
        if self.watch is None or used <= self.limit or used <= before:
            return
        for proc_id in self.watch.live_for_user(user_id):
            log.info("disk quota: killing a background process", extra={"user_id": user_id, "proc_id": proc_id})
            await self.watch.kill(proc_id, "killed: disk quota exceeded", KILLED_CODE)
