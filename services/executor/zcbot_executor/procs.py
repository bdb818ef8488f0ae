"""Background processes (seed 003 §8.12): `shell`/`run_python` with background=true, and check_process.

Each runs in a sandbox of its own, launched detached from the executor (see sandbox/launch.py),
under a time limit (default 7200 s) with a capped log. State is files only, in
`<user_root>/.zcbot_procs/<task_id>/<proc_id>/` (layout in proc_wrapper.py); `exit_code` appearing
is the only terminal signal. A process is "running" while its wrapper's heartbeat is fresh, so any
executor host can answer check_process. Those files are the user's (forgeable): the launching host
keeps its own record (`<state_dir>/procs/<proc_id>.json`) and enforces the time limit, kills and the
cap from outside the process tree (bg_watch.py). A sweeper removes terminal proc folders older than
the retention (7 days).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Any

from zcbot_core import safe_fs
from zcbot_core.tools.sandbox_schemas import DEFAULT_BACKGROUND_LIMIT, MAX_BACKGROUND_LIMIT
from zcbot_executor.bg_watch import BackgroundWatch
from zcbot_executor.config import ExecutorConfig
from zcbot_executor.sandbox import policy
from zcbot_executor.sandbox.base import BackgroundSpec, SandboxBackend, ToolResult

log = logging.getLogger(__name__)

PROCS_DIR = ".zcbot_procs"
STALE_SECONDS = 15.0  # heartbeat older than this (and no exit_code): the process is lost
_PROC_ID = re.compile(r"^p[0-9a-f]{8,32}$")
_TAIL_BYTES = 64 * 1024


def _split(path: Path) -> tuple[Path, str]:
    """(user root, path relative to it) of `<user_root>/.zcbot_procs/...`: every file operation
    resolves from the user root's fd (zcbot_core.safe_fs), never by this path."""
    for parent in path.parents:
        if parent.name == PROCS_DIR:
            return parent.parent, path.relative_to(parent.parent).as_posix()
    return path.parent, path.name  # the executor's private state folder


def _read(path: Path) -> str | None:
    return policy.safe_read(*_split(path))


def _exists(path: Path) -> bool:
    return _lstat(path) is not None


def _lstat(path: Path) -> os.stat_result | None:
    root, rel = _split(path)
    try:
        with safe_fs.Root.open(root) as user:
            return user.lstat(rel)
    except safe_fs.SafeFsError:
        return None


def proc_status(proc_dir: Path, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    spec = _json(proc_dir / "proc.json")
    code = _read(proc_dir / "exit_code")
    info: dict[str, Any] = {"proc_id": proc_dir.name, "task_id": proc_dir.parent.name, "kind": spec.get("kind"),
                            "started_at": spec.get("started_at"), "host": spec.get("host")}
    if code is not None:
        end = _json(proc_dir / "end.json")
        try:
            info["exit_code"] = int(code.strip())
        except ValueError:
            info["exit_code"] = None
        reason = end.get("reason", "exited")
        info["status"] = {"time limit": "timed out", "killed": "killed", "lost": "lost",
                          "shutdown": "stopped by shutdown"}.get(reason, "exited")
        info["ended_at"] = end.get("ended_at")
        return info
    beat_st = _lstat(proc_dir / "heartbeat")
    if beat_st is not None:
        beat = beat_st.st_mtime
    else:
        beat = float(spec.get("started_at") or 0) if isinstance(spec.get("started_at"), (int, float)) else 0.0
    info["status"] = "running" if now - beat < STALE_SECONDS else "lost"
    return info


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(_read(path) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _tail(path: Path, lines: int) -> str:
    root, rel = _split(path)
    try:
        with safe_fs.Root.open(root) as user:
            data = user.tail(rel, _TAIL_BYTES).decode("utf-8", errors="replace")
    except safe_fs.SafeFsError:
        return ""
    if lines <= 0:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def _write_json(path: Path, obj: dict[str, Any], owner: tuple[int, int] | None = None) -> None:
    policy.safe_write(*_split(path), json.dumps(obj), owner)


class ProcManager:
    def __init__(self, config: ExecutorConfig, backend: SandboxBackend) -> None:
        self.config = config
        self.backend = backend
        self.private_dir = config.state_dir / "procs"
        self._locks: dict[str, asyncio.Lock] = {}
        self.watch = BackgroundWatch(backend, self.private_dir)  # limits and kills from outside (bg_watch.py)

    def forget_watch(self, proc_id: str, record: dict[str, Any]) -> None:
        """Its file changes were reported: the private record no longer carries the before-scan
        (so a restart does not report them again)."""
        record.pop("watch", None)
        self.save_record(proc_id, record)

    def save_record(self, proc_id: str, record: dict[str, Any]) -> None:
        path = self.private_dir / f"{proc_id}.json"
        if path.exists():  # host state, not a user tree (the sweeper may have removed it)
            _write_json(path, record)

    def _user_procs(self, user_root: Path) -> list[Path]:
        base = user_root / PROCS_DIR
        try:
            with safe_fs.Root.open(user_root) as user:
                return [base / task / proc for task, st in user.listdir(PROCS_DIR) if stat.S_ISDIR(st.st_mode)
                        for proc, pst in _listdir(user, f"{PROCS_DIR}/{task}")
                        if stat.S_ISDIR(pst.st_mode) and _PROC_ID.match(proc)]
        except safe_fs.SafeFsError:
            return []

    def counted(self, user_id: str, user_root: Path) -> list[str]:
        """What counts against ZCBOT_MAX_BG_PROCS: this host's live processes (from the processes
        themselves, whatever their files say) and any other not yet terminal — "lost" included —
        until its time limit has passed."""
        ids = set(self.watch.live_for_user(user_id))
        now = time.time()
        for path in self._user_procs(user_root):
            info = proc_status(path, now)
            if info["status"] == "running" or (info["status"] == "lost" and "exit_code" not in info
                                               and not _past_limit(path, now)):
                ids.add(path.name)
        return sorted(ids)

    async def start(self, user_id: str, user_root: Path, task_id: str, cwd_rel: str, tool: str,
                    args: dict[str, Any], run_id: str = "", watch: dict[str, Any] | None = None) -> ToolResult:
        """Launch a background process; `watch` (file_watch.Before.to_json) rides in its private
        record until it ends, when the executor reports its file changes for `run_id`."""
        body = args.get("command") if tool == "shell" else args.get("code")
        field = "command" if tool == "shell" else "code"
        if not isinstance(body, str) or not body.strip():
            return ToolResult(False, error=f"argument '{field}' must be a non-empty string")
        given = args.get("timeout")
        numeric = isinstance(given, (int, float)) and not isinstance(given, bool)
        limit = float(given) if numeric and given is not None else 0.0
        if numeric and not math.isfinite(limit):
            # NaN passed `limit <= 0` and removed the limit (issue 36); service.py refuses it first.
            return ToolResult(False, error="argument 'timeout' must be a finite number of seconds")
        if limit <= 0:
            limit = self.config.bg_time_limit or DEFAULT_BACKGROUND_LIMIT
        limit = float(min(limit, self.config.bg_time_limit_max or MAX_BACKGROUND_LIMIT))
        async with self._locks.setdefault(user_id, asyncio.Lock()):
            running = await asyncio.to_thread(self.counted, user_id, user_root)
            if len(running) >= self.config.max_bg_procs:
                ids = ", ".join(running)
                return ToolResult(False, error=(
                    f"too many background processes: {len(running)} not ended (limit {self.config.max_bg_procs}): {ids}. "
                    "Wait for one to finish or stop one with check_process(action='kill')."))
            proc_id = "p" + secrets.token_hex(6)
            task_key = _task_key(task_id)
            rel_dir = f"{PROCS_DIR}/{task_key}/{proc_id}"
            owner = self.config.owner
            try:
                proc_dir = await asyncio.to_thread(self._prepare_dir, user_root, rel_dir, tool, body, owner)
            except safe_fs.SafeFsError as exc:
                return ToolResult(False, error=f"could not prepare the background process folder: {exc}")
            spec = {"proc_id": proc_id, "task_id": task_id, "user_id": user_id, "kind": tool,
                    "command": body if tool == "shell" else None, "cwd": f"{policy.WORKSPACE}/{cwd_rel}".rstrip("/"),
                    "time_limit": limit, "log_cap": self.config.bg_log_cap_mb * 1024 * 1024,
                    "started_at": time.time(), "host": self.config.host}
            try:
                _write_json(proc_dir / "proc.json", spec, owner)
            except safe_fs.SafeFsError as exc:
                return ToolResult(False, error=f"could not prepare the background process folder: {exc}")
            bg = BackgroundSpec(proc_id, user_id, user_root, f"{policy.WORKSPACE}/{rel_dir}")
            try:
                private = await self.backend.start_background(bg)
            except Exception as exc:
                log.exception("background launch failed", extra={"user_id": user_id})
                _rmtree(user_root, rel_dir)
                return ToolResult(False, error=f"could not start the background process: {exc}")
            self.private_dir.mkdir(parents=True, exist_ok=True)
            record = {**private, "user_root": str(user_root), "dir": rel_dir, "user_id": user_id, "task_key": task_key,
                      "started_at": spec["started_at"], "time_limit": limit, "keep": args.get("keep") is True,
                      "task_id": task_id, "run_id": run_id}
            if watch is not None:
                record["watch"] = watch
            _write_json(self.private_dir / f"{proc_id}.json", record)
            self.watch.add(proc_id, record)
        text = (f"started background process {proc_id} ({tool}); time limit {limit:g} s. Output goes to "
                f"/workspace/{rel_dir}/output.log. Use check_process(proc_id='{proc_id}') for its status and output, "
                "or action='kill' to stop it.")
        return ToolResult(True, text, meta={"proc_id": proc_id, "background": True, "time_limit": limit})

    async def stop_task(self, user_id: str, task_id: str, reason: str) -> list[str]:
        """A run was cancelled or the task deleted: kill this host's processes of that task
        (keep=true ones stay)."""
        return await self.watch.stop_task(user_id, _task_key(task_id), reason)

    @staticmethod
    def _prepare_dir(user_root: Path, rel_dir: str, tool: str, body: str, owner: tuple[int, int] | None) -> Path:
        with safe_fs.Root.open(user_root) as user:
            user.makedirs(rel_dir, owner=owner)
            if tool == "run_python":
                user.write_bytes(f"{rel_dir}/script.py", body, owner=owner)
            user.write_bytes(f"{rel_dir}/output.log", b"", owner=owner)
        return user_root / rel_dir

    def _find(self, user_root: Path, proc_id: str, task_id: str) -> Path | None:
        base = user_root / PROCS_DIR
        task_key = re.sub(r"[^A-Za-z0-9_-]", "_", task_id)[:128]
        direct = base / task_key / proc_id
        if task_key and _PROC_ID.match(proc_id) and _is_dir(direct):
            return direct
        for path in self._user_procs(user_root):
            if path.name == proc_id:
                return path
        return None

    async def check(self, user_root: Path, task_id: str, args: dict[str, Any]) -> ToolResult:
        proc_id = args.get("proc_id")
        if not isinstance(proc_id, str) or not _PROC_ID.match(proc_id):
            return ToolResult(False, error="argument 'proc_id' must be a proc id like 'p1a2b3c4d5e6' (from the background start)")
        action = args.get("action") or "status"
        if action not in ("status", "kill"):
            return ToolResult(False, error="argument 'action' must be 'status' or 'kill'")
        tail_lines = args.get("tail_lines", 50)
        if not isinstance(tail_lines, int) or isinstance(tail_lines, bool):
            tail_lines = 50
        proc_dir = await asyncio.to_thread(self._find, user_root, proc_id, task_id)
        if proc_dir is None:
            return ToolResult(False, error=f"no background process {proc_id} (it may have been cleaned up after 7 days)")
        info = await asyncio.to_thread(proc_status, proc_dir)
        here = proc_id in self.watch.entries  # launched here and alive, whatever its files say
        if action == "kill" and (here or info["status"] in ("running", "lost")):
            info = await self._kill(user_root, proc_dir, wait=info["status"] == "running")
        elif info["status"] == "lost" and "exit_code" not in info:
            if here:  # wrapper frozen or gone: the process must not outlive that
                await self.watch.kill(proc_id, "lost", -1)
                info = await asyncio.to_thread(proc_status, proc_dir)
            elif _past_limit(proc_dir, time.time()):
                _finish_lost(proc_dir)  # another host's, past its limit: that host's watch killed it
        tail = await asyncio.to_thread(_tail, proc_dir / "output.log", min(tail_lines, 500))
        lines = [f"proc {proc_id}: {info['status']}"]
        if info.get("exit_code") is not None:
            lines[0] += f" (exit code {info['exit_code']})"
        started, ended = info.get("started_at"), info.get("ended_at") or time.time()
        if isinstance(started, (int, float)) and isinstance(ended, (int, float)):
            lines.append(f"runtime: {ended - started:.1f} s")
        lines.append(f"output (last {tail_lines} lines):\n{tail}" if tail else "output: (none yet)")
        return ToolResult(True, "\n".join(lines), meta={k: v for k, v in info.items() if v is not None})

    async def _kill(self, user_root: Path, proc_dir: Path, wait: bool = True) -> dict[str, Any]:
        policy.safe_touch(*_split(proc_dir / "kill"))  # the wrapper's way (any host can ask it)
        for _ in range(30 if wait else 0):  # the wrapper polls every 0.2 s
            await asyncio.sleep(0.1)
            if _exists(proc_dir / "exit_code"):
                break
        if proc_dir.name in self.watch.entries:  # launched here: from outside, in any state
            await self.watch.kill(proc_dir.name, "killed", 137)
        elif not _exists(proc_dir / "exit_code"):
            _finish_lost(proc_dir, reason="killed", code=137)
        return proc_status(proc_dir)


def _task_key(task_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", task_id)[:128] or "task"


def _past_limit(proc_dir: Path, now: float) -> bool:
    spec = _json(proc_dir / "proc.json")
    try:
        return now > float(spec["started_at"]) + float(spec["time_limit"]) + STALE_SECONDS
    except (KeyError, TypeError, ValueError):
        return True


def _finish_lost(proc_dir: Path, reason: str = "lost", code: int = -1) -> None:
    """Make a process whose wrapper is gone terminal (its exit_code is then ours). A proc folder
    swapped for a symlink meanwhile is left alone (safe_fs refuses it; nothing is written)."""
    try:
        _write_json(proc_dir / "end.json", {"exit_code": code, "reason": reason, "ended_at": time.time()})
        policy.safe_write(*_split(proc_dir / "exit_code"), f"{code}\n")
    except safe_fs.SafeFsError as exc:
        log.warning("could not mark a proc as ended", extra={"proc_id": proc_dir.name, "error": str(exc)})


def _listdir(root: safe_fs.Root, rel: str) -> list[tuple[str, os.stat_result]]:
    try:
        return root.listdir(rel)
    except safe_fs.SafeFsError:
        return []


def _is_dir(path: Path) -> bool:
    st = _lstat(path)
    return st is not None and stat.S_ISDIR(st.st_mode)


def _rmtree(user_root: Path, rel: str) -> None:
    try:
        with safe_fs.Root.open(user_root) as user:
            user.rmtree(rel)
    except safe_fs.SafeFsError:
        log.warning("could not remove a proc folder", extra={"path": rel})


def sweep_procs(storage_root: Path, retention_seconds: float, watch: BackgroundWatch | None = None) -> int:
    """Remove ended background processes older than the retention; returns how many.

    Processes this host launched are decided only from its private record (`watch.private_dir`) and
    the process itself, never from a file in the user's tree: a live one (its cgroup leaf or pid) is
    never touched; a dead one gets `ended_at` in its record the first time the sweep sees it, and its
    folder and record go once that is older than the retention. A backdated `exit_code` written by
    the sandbox used to make this sweep delete the record of a live process, and with it every limit
    on it after a restart (issue 36). Folders with no record here (another host's, or the user's own
    making) are the user's data only: they go on their `exit_code`'s age, and no record is touched.

    Every step in a user root resolves beneath its fd and never follows a symlink (safe_fs): a task
    folder swapped for a symlink while the sweep runs makes that step fail, nothing else.
    """
    cutoff = time.time() - retention_seconds
    removed, recorded = _sweep_records(watch, cutoff) if watch is not None else (0, set())
    try:
        storage = safe_fs.Root.open(storage_root)
    except safe_fs.SafeFsError:
        return removed
    with storage:
        users = [name for name, st in storage.listdir() if stat.S_ISDIR(st.st_mode)]
    for name in users:
        try:
            user = safe_fs.Root.open(storage_root / name)
        except safe_fs.SafeFsError:
            continue
        with user:
            removed += _sweep_user(user, cutoff, recorded)
    return removed


def _sweep_records(watch: BackgroundWatch, cutoff: float) -> tuple[int, set[str]]:
    """(records removed, ids of every record kept or removed here: the user sweep leaves those alone)."""
    removed = 0
    recorded: set[str] = set()
    if not watch.private_dir.is_dir():
        return 0, recorded
    for path in watch.private_dir.glob("p*.json"):  # host state, not a user tree
        proc_id = path.stem
        if not _PROC_ID.match(proc_id):
            continue
        recorded.add(proc_id)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # unreadable: kept (and its folder), never guessed from the user's files
        if not isinstance(record, dict):
            continue
        if proc_id in watch.entries or record.get("watch") or watch.alive(proc_id, record):
            continue  # live, or its file changes not reported yet
        ended = record.get("ended_at")
        if not isinstance(ended, (int, float)) or isinstance(ended, bool) or not math.isfinite(ended):
            record["ended_at"] = time.time()  # first seen dead now: the retention starts here
            _write_json(path, record)
            continue
        if ended > cutoff:
            continue
        user_root, rel = record.get("user_root"), record.get("dir")
        if isinstance(user_root, str) and isinstance(rel, str) and rel.startswith(f"{PROCS_DIR}/"):
            _rmtree(Path(user_root), rel)
        path.unlink(missing_ok=True)
        removed += 1
    return removed, recorded


def _sweep_user(user: safe_fs.Root, cutoff: float, recorded: set[str]) -> int:
    removed = 0
    for task, st in _listdir(user, PROCS_DIR):
        if not stat.S_ISDIR(st.st_mode):
            continue
        task_rel = f"{PROCS_DIR}/{task}"
        for proc, pst in _listdir(user, task_rel):
            if not stat.S_ISDIR(pst.st_mode) or proc in recorded:
                continue  # a process of this host's: its record decides (`_sweep_records`)
            try:
                marker = user.lstat(f"{task_rel}/{proc}/exit_code")
            except safe_fs.SafeFsError:
                continue
            if marker is None or marker.st_mtime > cutoff:
                continue  # no exit_code: not terminal
            try:
                user.rmtree(f"{task_rel}/{proc}")
            except safe_fs.SafeFsError:
                continue
            removed += 1
        try:
            user.rmdir(task_rel)  # only when empty
        except safe_fs.SafeFsError:
            pass
    return removed
