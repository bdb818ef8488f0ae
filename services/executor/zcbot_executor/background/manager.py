"""Background processes (seed 003 §8.12): `shell`/`run_python` with background=true, and check_process.

Each runs in a sandbox of its own, launched detached from the executor (see sandbox/launch.py),
under a time limit (default 7200 s) with a capped log. State is files only, in
`<user_root>/.zcbot_procs/<task_id>/<proc_id>/` (files.py; written by inside/proc_wrapper.py);
`exit_code` appearing is the only terminal signal. A process is "running" while its wrapper's
heartbeat is fresh, so any executor host can answer check_process. Those files are the user's
(forgeable): the launching host keeps its own record (record.py) and enforces the time limit,
kills and the cap from outside the process tree (watch.py). A sweeper removes terminal proc folders
older than the retention (7 days; sweep.py).

`ProcManager` is the package's one entry point for the service and the web: `start`, `check`,
`kill`, `list`, `find`, `stop_task` and `sweep`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from pathlib import Path
from typing import Any

from zcbot_core import safe_fs
from zcbot_core.tools.sandbox_schemas import DEFAULT_BACKGROUND_LIMIT
from zcbot_executor.background import files
from zcbot_executor.background.files import PROC_ID, PROCS_DIR
from zcbot_executor.background.record import ProcRecord
from zcbot_executor.background.sweep import sweep_procs
from zcbot_executor.background.watch import KILLED_CODE, BackgroundWatch
from zcbot_executor.config import ExecutorConfig
from zcbot_executor.sandbox import policy
from zcbot_executor.sandbox.base import BackgroundSpec, SandboxBackend, ToolResult

log = logging.getLogger(__name__)

KILL_WAIT_POLLS = 30  # x 0.1 s for the wrapper to obey the kill file (it polls every 0.2 s)


class ProcManager:
    def __init__(self, config: ExecutorConfig, backend: SandboxBackend) -> None:
        self.config = config
        self.backend = backend
        self.private_dir = config.state_dir / "procs"
        self._user_locks: dict[str, asyncio.Lock] = {}  # the per-user cap is counted and taken under it
        self.watch = BackgroundWatch(backend, self.private_dir)  # limits and kills from outside (watch.py)

    def forget_watch(self, record: ProcRecord) -> None:
        """Its file changes were reported: the private record no longer carries the before-scan
        (so a restart does not report them again)."""
        record.watch = None
        self.watch.save(record)

    def counted(self, user_id: str, user_root: Path) -> list[str]:
        """What counts against ZCBOT_MAX_BG_PROCS: this host's live processes (from the processes
        themselves, whatever their files say) and any other not yet terminal — "lost" included —
        until its time limit has passed."""
        ids = set(self.watch.live_for_user(user_id))
        now = time.time()
        for path in files.user_procs(user_root):
            info = files.proc_status(path, now)
            if info["status"] == "running" or (info["status"] == "lost" and "exit_code" not in info
                                               and not files.past_limit(path, now)):
                ids.add(path.name)
        return sorted(ids)

    def _time_limit(self, given: object) -> float | None:
        """The process's time limit in seconds (None: a given limit that is not a finite number)."""
        limit = float(given) if isinstance(given, (int, float)) and not isinstance(given, bool) else 0.0
        if not math.isfinite(limit):
            return None  # NaN passed `limit <= 0` and removed the limit (issue 36); service.py refuses it first
        if limit <= 0:
            limit = self.config.bg_time_limit or DEFAULT_BACKGROUND_LIMIT
        return float(min(limit, self.config.bg_time_limit_max))

    # ---- the public API -------------------------------------------------------------------------
    async def start(self, user_id: str, user_root: Path, task_id: str, cwd_rel: str, tool: str,
                    args: dict[str, Any], run_id: str = "", watch: dict[str, Any] | None = None) -> ToolResult:
        """Launch a background process; `watch` (file_watch.Before.to_json) rides in its private
        record until it ends, when the executor reports its file changes for `run_id`."""
        body = args.get("command") if tool == "shell" else args.get("code")
        field = "command" if tool == "shell" else "code"
        if not isinstance(body, str) or not body.strip():
            return ToolResult(False, error=f"argument '{field}' must be a non-empty string")
        limit = self._time_limit(args.get("timeout"))
        if limit is None:
            return ToolResult(False, error="argument 'timeout' must be a finite number of seconds")
        async with self._user_locks.setdefault(user_id, asyncio.Lock()):
            running = await asyncio.to_thread(self.counted, user_id, user_root)
            if len(running) >= self.config.max_bg_procs:
                ids = ", ".join(running)
                return ToolResult(False, error=(
                    f"too many background processes: {len(running)} not ended (limit {self.config.max_bg_procs}): {ids}. "
                    "Wait for one to finish or stop one with check_process(action='kill')."))
            proc_id = "p" + secrets.token_hex(6)
            task_key = files.task_key(task_id)
            rel_dir = f"{PROCS_DIR}/{task_key}/{proc_id}"
            owner = self.config.owner
            started_at = time.time()
            spec = {"proc_id": proc_id, "task_id": task_id, "user_id": user_id, "kind": tool,
                    "command": body if tool == "shell" else None, "cwd": f"{policy.WORKSPACE}/{cwd_rel}".rstrip("/"),
                    "time_limit": limit, "log_cap": self.config.bg_log_cap_mb * 1024 * 1024,
                    "started_at": started_at, "host": self.config.host}
            try:
                proc_dir = await asyncio.to_thread(files.prepare, user_root, rel_dir, tool, body, owner)
                await asyncio.to_thread(files.write_json, proc_dir / "proc.json", spec, owner)
            except safe_fs.SafeFsError as exc:
                return ToolResult(False, error=f"could not prepare the background process folder: {exc}")
            bg = BackgroundSpec(proc_id, user_id, user_root, f"{policy.WORKSPACE}/{rel_dir}")
            try:
                private = await self.backend.start_background(bg)
            except Exception as exc:
                log.exception("background launch failed", extra={"user_id": user_id})
                files.rmtree(user_root, rel_dir)
                return ToolResult(False, error=f"could not start the background process: {exc}")
            record = ProcRecord(proc_id=proc_id, user_id=user_id, user_root=user_root, dir=rel_dir, task_key=task_key,
                                task_id=task_id, run_id=run_id, started_at=started_at, time_limit=limit,
                                keep=args.get("keep") is True, watch=watch, private=private)
            record.save(self.private_dir, create=True)
            self.watch.add(record)
        text = (f"started background process {proc_id} ({tool}); time limit {limit:g} s. Output goes to "
                f"/workspace/{rel_dir}/output.log. Use check_process(proc_id='{proc_id}') for its status and output, "
                "or action='kill' to stop it.")
        return ToolResult(True, text, meta={"proc_id": proc_id, "background": True, "time_limit": limit})

    async def check(self, user_root: Path, task_id: str, args: dict[str, Any]) -> ToolResult:
        """check_process: a process's status and output, or (action='kill') stop it."""
        proc_id = args.get("proc_id")
        if not isinstance(proc_id, str) or not PROC_ID.match(proc_id):
            return ToolResult(False, error="argument 'proc_id' must be a proc id like 'p1a2b3c4d5e6' (from the background start)")
        action = args.get("action") or "status"
        if action not in ("status", "kill"):
            return ToolResult(False, error="argument 'action' must be 'status' or 'kill'")
        tail_lines = args.get("tail_lines", 50)
        if not isinstance(tail_lines, int) or isinstance(tail_lines, bool):
            tail_lines = 50
        proc_dir = await self.find(user_root, proc_id, task_id)
        if proc_dir is None:
            return ToolResult(False, error=f"no background process {proc_id} (it may have been cleaned up after 7 days)")
        if action == "kill":
            info = await self.kill(proc_dir)
        else:
            info = await self._settle_lost(proc_dir)
        tail = await asyncio.to_thread(files.tail, proc_dir / "output.log", min(tail_lines, 500))
        lines = [f"proc {proc_id}: {info['status']}"]
        if info.get("exit_code") is not None:
            lines[0] += f" (exit code {info['exit_code']})"
        started, ended = info.get("started_at"), info.get("ended_at") or time.time()
        if isinstance(started, (int, float)) and isinstance(ended, (int, float)):
            lines.append(f"runtime: {ended - started:.1f} s")
        lines.append(f"output (last {tail_lines} lines):\n{tail}" if tail else "output: (none yet)")
        return ToolResult(True, "\n".join(lines), meta={k: v for k, v in info.items() if v is not None})

    async def _settle_lost(self, proc_dir: Path) -> dict[str, Any]:
        """A status read: a "lost" process (wrapper frozen or gone) launched here is killed — it must
        not outlive that —, another host's past its limit is marked ended (that host's watch killed it)."""
        info = await asyncio.to_thread(files.proc_status, proc_dir)
        if info["status"] != "lost" or "exit_code" in info:
            return info
        if proc_dir.name in self.watch.entries:
            await self.watch.kill(proc_dir.name, "lost", -1)
            return await asyncio.to_thread(files.proc_status, proc_dir)
        if files.past_limit(proc_dir, time.time()):
            await asyncio.to_thread(files.finish, proc_dir)
        return info

    async def kill(self, proc_dir: Path) -> dict[str, Any]:
        """Stop a process (check_process kill, the web's kill) and return its status. Through the
        wrapper's kill file — any host can ask it — and, for a process launched here, from outside
        in any state; another host's whose wrapper does not answer is marked killed."""
        info = await asyncio.to_thread(files.proc_status, proc_dir)
        here = proc_dir.name in self.watch.entries  # launched here and alive, whatever its files say
        if not here and info["status"] not in ("running", "lost"):
            return info
        await asyncio.to_thread(files.touch, proc_dir / "kill")
        for _ in range(KILL_WAIT_POLLS if info["status"] == "running" else 0):
            await asyncio.sleep(0.1)
            if await asyncio.to_thread(files.exists, proc_dir / "exit_code"):
                break
        if proc_dir.name in self.watch.entries:
            await self.watch.kill(proc_dir.name, "killed", KILLED_CODE)
        elif not await asyncio.to_thread(files.exists, proc_dir / "exit_code"):
            await asyncio.to_thread(files.finish, proc_dir, "killed", KILLED_CODE)
        return await asyncio.to_thread(files.proc_status, proc_dir)

    async def find(self, user_root: Path, proc_id: str, task_id: str = "") -> Path | None:
        """The folder of one of the user's processes (None: no such process, or not a proc id)."""
        return await asyncio.to_thread(files.find, user_root, proc_id, task_id)

    def keeps(self, proc_id: str) -> bool | None:
        """Whether a process launched here was started with keep=true (None: not one of this host's live ones)."""
        record = self.watch.entries.get(proc_id)
        return None if record is None else record.keep

    async def stop_task(self, user_id: str, task_id: str, reason: str) -> list[str]:
        """A run was cancelled or the task deleted: kill this host's processes of that task
        (keep=true ones stay)."""
        return await self.watch.stop_task(user_id, files.task_key(task_id), reason)

    async def sweep(self, retention_seconds: float) -> int:
        """Remove ended processes older than the retention (sweep.py); returns how many."""
        return await asyncio.to_thread(sweep_procs, self.config.storage_root, retention_seconds, self.watch)

    async def list(self, user_root: Path, task_id: str = "") -> list[Path]:
        """The folders of the user's processes (of one task, when given). Last in the class: the
        name shadows the builtin for what follows it."""
        dirs = await asyncio.to_thread(files.user_procs, user_root)
        return [d for d in dirs if not task_id or d.parent.name == task_id]
