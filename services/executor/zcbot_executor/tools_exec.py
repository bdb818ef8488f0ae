"""`shell` and `run_python` inside the sandbox (stdlib only; copied next to `tool_runner.py`).

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
import queue
import selectors
import signal
import subprocess
import tempfile
import time

OUTPUT_HEAD = 48 * 1024
OUTPUT_TAIL = 16 * 1024
OUTPUT_KILL_BYTES = 10 * 1024 * 1024
READ_CHUNK = 65536


def kill_group(pgid: int) -> None:
    """SIGKILL a process group. The kernel delivers a group kill atomically with respect to fork
    (a fork racing with it is restarted and dies), so one signal reaches every member; the second
    is belt and braces."""
    for _ in range(2):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return


def sweep_strays(keep_sessions: set[int]) -> int:
    """Kill every process of this PID namespace outside `keep_sessions` (never pid 1 or ourselves)."""
    me = os.getpid()
    killed = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in (1, me):
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            session = int(fields[3])
        except (OSError, IndexError, ValueError):
            continue
        if session in keep_sessions:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except OSError:
            pass
    return killed


class Call:
    def __init__(self, call_id: str, proc: subprocess.Popen, timeout: float, tmpfile: str | None) -> None:
        self.id = call_id
        self.proc = proc
        self.pid = proc.pid
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.timeout = timeout
        self.tmpfile = tmpfile
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.fd: int | None = proc.stdout.fileno() if proc.stdout else None
        self.pidfd: int | None = None
        self.exited = False
        self.reason: str | None = None  # timeout | cancelled | flood

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = OUTPUT_HEAD - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > OUTPUT_TAIL:
                del self.tail[: len(self.tail) - OUTPUT_TAIL]

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
        self.commands: queue.SimpleQueue = queue.SimpleQueue()
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake", None))

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
            for key, _ in self.sel.select(timeout):
                kind, call = key.data
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
            except queue.Empty:
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
                fd, tmpfile = tempfile.mkstemp(prefix="zcbot-run-", suffix=".py", dir=self.tmp_dir)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(code)
                argv = [self.python, tmpfile]
        except (ValueError, OSError) as exc:
            self.reply(call_id, False, "", str(exc), {})
            return
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        except OSError as exc:
            _unlink(tmpfile)
            msg = "the sandbox's process limit is reached; wait for running commands to end" \
                if exc.errno == 11 else f"could not start the command: {exc}"
            self.reply(call_id, False, "", msg, {})
            return
        call = Call(call_id, proc, timeout, tmpfile)
        try:  # CPU-time backstop per call; the wall-clock deadline is the real limit
            import resource

            cpu = int(timeout + self.cpu_margin)
            resource.prlimit(proc.pid, resource.RLIMIT_CPU, (cpu, cpu + 1))
        except (OSError, ValueError):
            pass
        if self.calls_dir:
            _write_pgid(self.calls_dir, call_id, proc.pid)
        os.set_blocking(call.fd, False)
        self.sel.register(call.fd, selectors.EVENT_READ, ("out", call))
        try:
            call.pidfd = os.pidfd_open(proc.pid)
            self.sel.register(call.pidfd, selectors.EVENT_READ, ("exit", call))
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
            try:
                self.sel.unregister(call.fd)
            except (KeyError, ValueError):
                pass
            call.proc.stdout.close()
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
            self.sel.unregister(call.pidfd)
            os.close(call.pidfd)
        code = call.proc.wait()
        del self.calls[call.id]
        _unlink(call.tmpfile)
        if self.calls_dir:
            _unlink(os.path.join(self.calls_dir, call.id + ".pgid"))
        duration = round(time.monotonic() - call.started, 3)
        meta = {"exit_code": code, "duration": duration, "output_bytes": call.total}
        text = call.text()
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
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            self.reply(call.id, False, text, f"the command was killed by {name}", meta)
        else:
            self.reply(call.id, False, text, f"exit code {code}", meta)


def _exited(pid: int) -> bool:
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


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
