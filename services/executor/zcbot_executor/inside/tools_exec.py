"""`shell` and `run_python` inside the sandbox (stdlib only; staged beside `tool_runner.py`,
run by the sandbox's python as the sandbox user: see inside/__init__.py).

One thread (`ExecLoop`) owns every child of the runner: it spawns them, reads their output,
watches their exit through pidfds and enforces deadlines. No thread is started per call, so a
fork bomb that exhausts the sandbox's process budget cannot stop the runner from killing it.

Each call runs in its own session and process group. When the call ends — exit, timeout, cancel
or output flood — the whole group is SIGKILLed while the leader is still a zombie (so its pgid
cannot be reused), and with `sweep` (bwrap: the runner owns a PID namespace) every process that
belongs to no running call is killed too, which catches daemons that escaped with setsid().
Nothing survives a call; long jobs go through `background=true` (a sandbox of their own).
"""

from __future__ import annotations

import os
import select
import time
from _queue import (  # `queue`, `subprocess`, `selectors`, `signal`, `tempfile` cost tens of ms to import
    Empty,
    SimpleQueue,
)

SIGKILL = 9
_SIGNAL_NAMES = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}

OUTPUT_HEAD = 48 * 1024
OUTPUT_TAIL = 16 * 1024
OUTPUT_KILL_BYTES = 10 * 1024 * 1024
READ_CHUNK = 65536
# Past the model's limit the whole output is kept in the task folder (issue 40, seed 003 §8.2), written
# here inside the sandbox so it counts in the user's disk quota like any file the command makes.
MODEL_CHARS = 16_000  # = zcbot_core.tools.results.MODEL_LIMIT (this module cannot import it; a test pins it)
OUTPUTS_DIR = ".zcbot/outputs"


def kill_group(pgid: int) -> None:
    """SIGKILL a process group. The kernel delivers a group kill atomically with respect to fork
    (a fork racing with it is restarted and dies), so one signal reaches every member; the second
    is belt and braces."""
    for _ in range(2):
        try:
            os.killpg(pgid, SIGKILL)
        except (ProcessLookupError, PermissionError):
            return


def sweep_strays(keep_sessions: set[int]) -> int:
    """Kill every process of this PID namespace outside `keep_sessions` (never pid 1 or ourselves).

    One pass over /proc is not enough: a stray that forks after the directory was listed leaves a
    child the pass never saw (CI caught a `(setsid sh -c 'sleep N' &)` chain doing exactly this).
    Passes repeat until one finds nobody new; a process cannot fork once SIGKILL is pending, so
    each pass shrinks the set of forkers and the loop ends."""
    me = os.getpid()
    killed: set[int] = set()
    for _ in range(50):
        fresh = 0
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid in (1, me) or pid in killed:
                continue
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
                state, session = fields[0], int(fields[3])
            except (OSError, IndexError, ValueError):
                continue
            if session in keep_sessions or state == b"Z":
                continue
            try:
                os.kill(pid, SIGKILL)
                killed.add(pid)
                fresh += 1
            except OSError:
                pass
        if not fresh:
            break
    return len(killed)


class Call:
    def __init__(self, call_id: str, pid: int, out_fd: int, timeout: float, tmpfile: str | None) -> None:
        self.id = call_id
        self.pid = pid
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.timeout = timeout
        self.tmpfile = tmpfile
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.fd: int | None = out_fd
        self.pidfd: int | None = None
        self.exited = False
        self.reason: str | None = None  # timeout | cancelled | flood
        self.spill_dir: str | None = None  # the task folder's .zcbot/outputs (real path)
        self.spill_name: str | None = None
        self.spill_fd: int | None = None
        self.spill_error: str | None = None

    def feed(self, data: bytes) -> None:
        if self.spill_fd is None and self.spill_dir and not self.spill_error and self.total + len(data) > MODEL_CHARS:
            # bytes >= characters: up to MODEL_CHARS bytes the model sees everything, so no file. Opened
            # before this chunk is taken in: what came before (<= MODEL_CHARS) is all in `head` still.
            self._open_spill()
            if self.spill_fd is not None:
                self._spill(bytes(self.head))
        if self.spill_fd is not None:
            self._spill(data)
        self.total += len(data)
        room = OUTPUT_HEAD - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > OUTPUT_TAIL:
                del self.tail[: len(self.tail) - OUTPUT_TAIL]

    def _open_spill(self) -> None:
        name = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(4).hex()}.txt"
        try:
            os.makedirs(self.spill_dir, exist_ok=True)
            self.spill_fd = os.open(os.path.join(self.spill_dir, name),
                                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            self.spill_name = name
        except OSError as exc:
            self.spill_error = exc.strerror or str(exc)

    def _spill(self, data: bytes) -> None:
        try:
            while data and self.spill_fd is not None:
                data = data[os.write(self.spill_fd, data):]
        except OSError as exc:  # quota reached (EDQUOT/ENOSPC) or the file limit: no half file left behind
            self.spill_error = exc.strerror or str(exc)
            self.drop_spill()

    def close_spill(self) -> str | None:
        """The saved file's path relative to the task folder when the model cannot see the whole
        output; the file is removed otherwise (or when it could not be written whole)."""
        if self.spill_fd is None:
            return None
        os.close(self.spill_fd)
        self.spill_fd = None
        complete = self.total <= len(self.head) + len(self.tail)
        if complete and len(self.text()) <= MODEL_CHARS:
            self.drop_spill()
            return None
        return f"{OUTPUTS_DIR}/{self.spill_name}"

    def drop_spill(self) -> None:
        if self.spill_fd is not None:
            os.close(self.spill_fd)
            self.spill_fd = None
        if self.spill_dir and self.spill_name:
            _unlink(os.path.join(self.spill_dir, self.spill_name))
        self.spill_name = None

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        if self.total <= len(self.head) + len(self.tail):
            return head + self.tail.decode("utf-8", errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        return f"{head}\n\n[... {omitted} bytes of output omitted ...]\n\n{self.tail.decode('utf-8', errors='replace')}"


class ExecLoop:
    """Runs shell/run_python calls; `reply(call_id, ok, output, error, meta)` is called once per call."""

    def __init__(self, reply, *, shell: str, python: str, env: dict, tmp_dir: str, sweep: bool,
                 cpu_margin: float = 5.0, calls_dir: str | None = None) -> None:
        self.reply = reply
        self.shell = shell
        self.python = python
        self.env = env
        self.tmp_dir = tmp_dir
        self.sweep = sweep
        self.cpu_margin = cpu_margin
        self.calls_dir = calls_dir  # single-shot mode: pgid files for `tool_runner.py kill`
        self.calls: dict[str, Call] = {}
        self.commands: SimpleQueue = SimpleQueue()
        self.poll = select.epoll()
        self.fds: dict[int, tuple[str, Call | None]] = {}
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self._watch(self.wake_r, "wake", None)

    def _watch(self, fd: int, kind: str, call: Call | None) -> None:
        self.fds[fd] = (kind, call)
        self.poll.register(fd, select.EPOLLIN)

    def _unwatch(self, fd: int) -> None:
        if self.fds.pop(fd, None) is not None:
            try:
                self.poll.unregister(fd)
            except (OSError, ValueError):
                pass

    # ---- called from other threads ---------------------------------------------------------
    def submit(self, call_id: str, tool: str, args: dict, cwd: str, timeout: float) -> None:
        self.commands.put(("start", call_id, tool, args, cwd, timeout))
        os.write(self.wake_w, b"x")

    def cancel(self, call_id: str) -> None:
        self.commands.put(("cancel", call_id))
        os.write(self.wake_w, b"x")

    def stop(self) -> None:
        self.commands.put(("stop",))
        os.write(self.wake_w, b"x")

    # ---- the loop thread -----------------------------------------------------------------------
    def run(self) -> None:
        while True:
            now = time.monotonic()
            timeout = None
            pending = [c.deadline for c in self.calls.values() if not c.reason]
            if pending:
                timeout = max(0.0, min(pending) - now)
            elif self.calls:
                timeout = 0.05  # killed calls: their exit arrives through the pidfd in a moment
            if any(c.pidfd is None for c in self.calls.values()):
                timeout = 0.02 if timeout is None else min(timeout, 0.02)
            for fd, _ in self.poll.poll(-1 if timeout is None else timeout):
                kind, call = self.fds.get(fd, ("gone", None))
                if kind == "wake":
                    try:
                        os.read(self.wake_r, 4096)
                    except BlockingIOError:
                        pass
                    if self._commands():
                        return
                elif kind == "out":
                    self._read(call)
                elif kind == "exit":
                    call.exited = True
            now = time.monotonic()
            for call in list(self.calls.values()):
                if not call.exited and call.pidfd is None:
                    call.exited = _exited(call.pid)
                if not call.exited and not call.reason and now >= call.deadline:
                    call.reason = "timeout"
                    kill_group(call.pid)
                if call.exited:
                    self._finish(call)

    def _commands(self) -> bool:
        while True:
            try:
                cmd = self.commands.get_nowait()
            except Empty:
                return False
            if cmd[0] == "start":
                self._start(*cmd[1:])
            elif cmd[0] == "cancel":
                call = self.calls.get(cmd[1])
                if call is not None and not call.reason:
                    call.reason = "cancelled"
                    kill_group(call.pid)
            elif cmd[0] == "stop":
                for call in self.calls.values():
                    kill_group(call.pid)
                return True

    def _start(self, call_id: str, tool: str, args: dict, cwd: str, timeout: float) -> None:
        tmpfile = None
        try:
            if tool == "shell":
                command = args.get("command")
                if not isinstance(command, str) or not command.strip():
                    raise ValueError("argument 'command' must be a non-empty string")
                argv = [self.shell, "-c", command]
            else:
                code = args.get("code")
                if not isinstance(code, str) or not code.strip():
                    raise ValueError("argument 'code' must be a non-empty string")
                tmpfile = os.path.join(self.tmp_dir, f"zcbot-run-{os.urandom(6).hex()}.py")
                fd = os.open(tmpfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(code)
                argv = [self.python, tmpfile]
        except (ValueError, OSError) as exc:
            self.reply(call_id, False, "", str(exc), {})
            return
        out_r, out_w = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            os.chdir(cwd)  # only this thread spawns; fs tools never use the process cwd
            pid = os.posix_spawn(argv[0], argv, self.env, setsid=True, file_actions=[
                (os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, out_w, 2)])
        except OSError as exc:
            os.close(out_r)
            _unlink(tmpfile)
            msg = "the sandbox's process limit is reached; wait for running commands to end" \
                if exc.errno == 11 else f"could not start the command: {exc}"
            self.reply(call_id, False, "", msg, {})
            return
        finally:
            os.close(out_w)
            os.close(devnull)
        call = Call(call_id, pid, out_r, timeout, tmpfile)
        call.spill_dir = os.path.join(cwd, OUTPUTS_DIR)
        try:  # CPU-time backstop per call; the wall-clock deadline is the real limit
            import resource

            cpu = int(timeout + self.cpu_margin)
            resource.prlimit(pid, resource.RLIMIT_CPU, (cpu, cpu + 1))
        except (OSError, ValueError):
            pass
        if self.calls_dir:
            _write_pgid(self.calls_dir, call_id, pid)
        os.set_blocking(out_r, False)
        self._watch(out_r, "out", call)
        try:
            call.pidfd = os.pidfd_open(pid)
            self._watch(call.pidfd, "exit", call)
        except (AttributeError, OSError):
            call.pidfd = None
        self.calls[call_id] = call

    def _read(self, call: Call) -> None:
        try:
            data = os.read(call.fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_out(call)
            return
        call.feed(data)
        if call.total > OUTPUT_KILL_BYTES and not call.reason:
            call.reason = "flood"
            kill_group(call.pid)

    def _close_out(self, call: Call) -> None:
        if call.fd is not None:
            self._unwatch(call.fd)
            os.close(call.fd)
            call.fd = None

    def _finish(self, call: Call) -> None:
        kill_group(call.pid)  # leader is a zombie until reaped: the pgid is still ours
        if self.sweep:
            sweep_strays({os.getsid(0), *(c.pid for c in self.calls.values() if c is not call)})
        end = time.monotonic() + 0.2
        while call.fd is not None and time.monotonic() < end:  # drain what is left in the pipe
            try:
                data = os.read(call.fd, READ_CHUNK)
            except BlockingIOError:
                time.sleep(0.005)
                continue
            except OSError:
                data = b""
            if not data:
                break
            call.feed(data)
        self._close_out(call)
        if call.pidfd is not None:
            self._unwatch(call.pidfd)
            os.close(call.pidfd)
        code = _reap(call.pid)
        del self.calls[call.id]
        _unlink(call.tmpfile)
        if self.calls_dir:
            _unlink(os.path.join(self.calls_dir, call.id + ".pgid"))
        duration = round(time.monotonic() - call.started, 3)
        meta: dict[str, object] = {"exit_code": code, "duration": duration, "output_bytes": call.total,
                "truncated": call.total > len(call.head) + len(call.tail)}
        text = call.text()
        saved = call.close_spill()
        if saved:
            meta["output_file"] = saved
        elif call.spill_error:
            meta["output_file_error"] = call.spill_error
        if call.reason == "timeout":
            meta["timed_out"] = True
            err = (f"timed out after {call.timeout:g} s; the command and all its processes were killed. "
                   "For long-running work use background=true and check_process.")
            self.reply(call.id, False, text, err, meta)
        elif call.reason == "cancelled":
            self.reply(call.id, False, text, "cancelled; the command and all its processes were killed", meta)
        elif call.reason == "flood":
            self.reply(call.id, False, text, f"output exceeded {OUTPUT_KILL_BYTES // (1024 * 1024)} MB; the command was killed", meta)
        elif code == 0:
            self.reply(call.id, True, text, None, meta)
        elif code < 0:
            name = _SIGNAL_NAMES.get(-code, f"signal {-code}")
            self.reply(call.id, False, text, f"the command was killed by {name}", meta)
        else:
            self.reply(call.id, False, text, f"exit code {code}", meta)


def _exited(pid: int) -> bool:
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _reap(pid: int) -> int:
    try:
        _pid, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return -SIGKILL
    return os.waitstatus_to_exitcode(status)


def _unlink(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


def _write_pgid(calls_dir: str, call_id: str, pgid: int) -> None:
    try:
        os.makedirs(calls_dir, exist_ok=True)
        with open(os.path.join(calls_dir, call_id + ".pgid"), "w") as fh:
            fh.write(str(pgid))
    except OSError:
        pass


def kill_call(calls_dir: str, call_id: str) -> bool:
    """`tool_runner.py kill CALL_ID` (single-shot/docker mode): kill the group recorded for a call."""
    try:
        with open(os.path.join(calls_dir, os.path.basename(call_id) + ".pgid")) as fh:
            pgid = int(fh.read().strip())
    except (OSError, ValueError):
        return False
    kill_group(pgid)
    return True
