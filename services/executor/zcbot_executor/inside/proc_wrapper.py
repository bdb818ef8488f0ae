"""The wrapper of a background process, inside its own sandbox (stdlib only; seed 003 §8.12;
run by the sandbox's python as the sandbox user: see inside/__init__.py).

State is plain files in `<user_root>/.zcbot_procs/<task_id>/<proc_id>/`:
- `proc.json`   written by the executor before launch (what to run, limits);
- `output.log`  stdout+stderr, capped (the rest is dropped with a note);
- `heartbeat`   touched every few seconds while the wrapper lives (liveness from any host);
- `kill`        created by `check_process(action=kill)`; the wrapper kills the process group;
- `end.json`    why it ended, written just before
- `exit_code`   the ONLY terminal signal: its presence means the process is over (124 = time
                limit, 137 = killed).

Nothing of the job outlives it: the wrapper is a child subreaper, so a process that leaves the job's
process group and session (`setsid`, a double fork) is still reparented to the wrapper, and at the
limit, on a kill and when the job's leader ends, the wrapper kills its group and every process below
itself (`_kill_job`). That needs the wrapper's cooperation; the executor's watch does the same from
outside (the sandbox's pid namespace, its cgroup leaf) when the wrapper is frozen or killed.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time

HEARTBEAT_SECONDS = 2.0
POLL_SECONDS = 0.2
PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS = 20  # a job forking while it is killed: scan again until nothing is left


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def run(proc_dir: str, ws, shell: str, python: str, env: dict) -> int:
    with open(os.path.join(proc_dir, "proc.json")) as fh:
        spec = json.load(fh)
    try:
        limit = float(spec.get("time_limit", 7200))
    except (TypeError, ValueError):
        limit = 7200.0
    if not limit > 0 or limit == float("inf"):  # NaN, infinity (issue 36): the default, never no limit
        limit = 7200.0
    log_cap = int(spec.get("log_cap", 10 * 1024 * 1024))
    if spec.get("kind") == "run_python":
        argv = [python, os.path.join(proc_dir, "script.py")]
    else:
        argv = [shell, "-c", spec["command"]]
    log_path = os.path.join(proc_dir, "output.log")
    kill_path = os.path.join(proc_dir, "kill")
    beat_path = os.path.join(proc_dir, "heartbeat")
    reason = "exited"
    code = 127
    _become_subreaper()
    with open(log_path, "ab", buffering=0) as log:
        try:
            proc = subprocess.Popen(argv, cwd=ws.cwd(spec.get("cwd") or ""), env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except Exception as exc:  # OSError, or the cwd is gone (ToolError)
            log.write(f"could not start: {exc}\n".encode())
            _finish(proc_dir, 127, "failed to start")
            return 127
        _write_atomic(os.path.join(proc_dir, "pid"), str(proc.pid))
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        sink = _Sink(log, log_cap)
        started = time.monotonic()
        next_beat = 0.0
        eof = False
        while True:
            now = time.monotonic()
            if now >= next_beat:
                with open(beat_path, "a"):
                    os.utime(beat_path)
                next_beat = now + HEARTBEAT_SECONDS
            if reason == "exited" and now - started > limit:
                reason = "time limit"
                _kill_job(proc.pid)
            if reason == "exited" and os.path.exists(kill_path):
                reason = "killed"
                _kill_job(proc.pid)
            if eof:
                time.sleep(POLL_SECONDS)
            elif sel.select(POLL_SECONDS):
                eof = not sink.pump(fd)
            if proc.poll() is not None:
                _kill_job(proc.pid)  # nothing of the job outlives its leader
                deadline = time.monotonic() + 0.5
                while not eof and time.monotonic() < deadline:
                    if sel.select(0.05):
                        eof = not sink.pump(fd)
                break
        code = proc.returncode
    if reason == "time limit":
        code = 124
    elif reason == "killed":
        code = 137
    elif code < 0:
        code = 128 - code
    _finish(proc_dir, code, reason)
    return code


class _Sink:
    """Copies output to the log up to the cap, then drops it with one note."""

    def __init__(self, log, cap: int) -> None:
        self.log = log
        self.cap = cap
        self.written = 0

    def pump(self, fd: int) -> bool:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        if self.written < self.cap:
            chunk = data[: self.cap - self.written]
            self.log.write(chunk)
            self.written += len(chunk)
            if self.written >= self.cap:
                self.log.write(f"\n[output truncated at {self.cap // (1024 * 1024)} MB]\n".encode())
        return True


def _become_subreaper() -> None:
    """Orphans of the job are reparented to this process, not to the sandbox's init (or the host's)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # without it a double-forked process escapes this walk; the executor's kill still reaches it


def _kill_job(pgid: int) -> None:
    """SIGKILL the job's process group and every live process below this one (a `setsid` child of
    the job included: as the subreaper, its orphans are ours)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    for _ in range(KILL_ROUNDS):
        left = _descendants(os.getpid())
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _descendants(root: int) -> list[int]:
    """The live (not zombie) processes below `root`, from /proc (the sandbox's own, in a pid namespace)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields and fields[0] != b"Z" and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _finish(proc_dir: str, code: int, reason: str) -> None:
    _write_atomic(os.path.join(proc_dir, "end.json"), json.dumps({"exit_code": code, "reason": reason, "ended_at": time.time()}))
    _write_atomic(os.path.join(proc_dir, "exit_code"), f"{code}\n")
