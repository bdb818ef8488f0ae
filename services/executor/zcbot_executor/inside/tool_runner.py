"""The tool runner: the process inside a user's sandbox that executes sandbox tools (stdlib only;
run by the sandbox's python as the sandbox user: see inside/__init__.py).

The executor copies this file and its siblings (`tools_fs.py`, `tools_search.py`, `tools_exec.py`,
`proc_wrapper.py`, `sandbox_init.py`, `wire.py`) into a staging folder that is mounted read-only at `/opt/zcbot` in the sandbox.

Usage: `python -S tool_runner.py MODE CONFIG_JSON [ARG]`
- `serve`  warm runner (bwrap/unsafe): line-delimited JSON on stdin/stdout, one request per line,
           many in flight at once, matched by `id`:
             -> {"id", "op": "call", "tool", "args", "cwd", "timeout"}   <- {"id", "ok", "output", "error", "meta"}
             -> {"id", "op": "cancel"}                                   (the call then answers "cancelled")
             -> {"id", "op": "ping"}                                     <- {"id", "ok": true, ...}
           fs tools run on a few pre-started worker threads; shell/run_python on the ExecLoop.
- `once`   single shot (docker exec): ARG is a request file (deleted after reading); prints one reply.
- `kill`   single shot companion: ARG is a call id; kills that call's process group.
- `proc`   background process wrapper: ARG is the proc folder (see proc_wrapper.py).

CONFIG_JSON: root, virtual, drop [uid, gid] | null, userns, limits {memory_mb, max_procs,
max_file_mb, max_open_files}, sweep, python, shell, tmp, calls_dir, fs_workers,
venv (the user's venv: created if missing, its python runs `run_python`) | null, venv_base (the
sandbox Python's site-packages, when the executor knows them),
egress {socket, port} (serve/proc: the egress forwarder, egress_forward.py) | null.
"""

from __future__ import annotations

import _thread
import os
import sys
import time
from _queue import SimpleQueue

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sandbox_init  # noqa: E402
import tools_exec  # noqa: E402
import tools_fs  # noqa: E402
import tools_search  # noqa: E402
import wire  # noqa: E402

FS_TOOLS = {**tools_fs.TOOLS, **tools_search.TOOLS}

# Imports are kept to C modules and these siblings: the first call on a cold sandbox waits for them.

EXEC_TOOLS = ("shell", "run_python")


class Runner:
    def __init__(self, config: dict, write) -> None:
        self.config = config
        self.write = write
        self.ws = tools_fs.Workspace(config.get("root", "/workspace"), config.get("virtual", "/workspace"))
        self.env = dict(os.environ)  # inside the sandbox (stdlib only): the environment its commands get
        self.exec = tools_exec.ExecLoop(
            self.reply,
            shell=config.get("shell") or ("/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"),
            python=config.get("python") or sys.executable,
            env=self.env,
            tmp_dir=config.get("tmp") or "/tmp",
            sweep=bool(config.get("sweep")),
            calls_dir=config.get("calls_dir"),
        )
        self.exec_done = _thread.allocate_lock()
        self.exec_done.acquire()
        _thread.start_new_thread(self._exec_main, ())
        self.venv_pending = None  # a held lock while the user's venv is being made (prepare_user)
        self.deferred: dict = {}  # call id -> cancelled? for exec calls waiting for the venv
        self.fs_queue: SimpleQueue = SimpleQueue()
        for _ in range(int(config.get("fs_workers", 4))):
            _thread.start_new_thread(self._fs_worker, ())

    def _exec_main(self) -> None:
        try:
            self.exec.run()
        finally:
            self.exec_done.release()

    def reply(self, call_id, ok, output, error, meta) -> None:
        self.write({"id": call_id, "ok": ok, "output": output, "error": error, "meta": meta or {}})

    def handle(self, msg: dict) -> None:
        op = msg.get("op", "call")
        call_id = msg.get("id")
        if op == "ping":
            self.reply(call_id, True, "pong", None, {"pid": os.getpid()})
        elif op == "cancel":
            if call_id in self.deferred:
                self.deferred[call_id] = True
            self.exec.cancel(call_id)
        elif op == "call":
            tool = msg.get("tool")
            args = msg.get("args") if isinstance(msg.get("args"), dict) else {}
            if tool in EXEC_TOOLS:
                try:
                    cwd = self.ws.cwd(msg.get("cwd") or "")
                except tools_fs.ToolError as exc:
                    self.reply(call_id, False, "", str(exc), {})
                    return
                timeout = float(msg.get("timeout") or (60 if tool == "shell" else 120))
                if self.venv_pending is not None:
                    self.deferred[call_id] = False
                    _thread.start_new_thread(self._submit_after_venv, (call_id, tool, args, cwd, timeout))
                else:
                    self.exec.submit(call_id, tool, args, cwd, timeout)
            elif tool in FS_TOOLS:
                self.fs_queue.put((call_id, tool, args, msg.get("cwd") or ""))
            else:
                self.reply(call_id, False, "", f"unknown tool {tool!r}", {})
        else:
            self.reply(call_id, False, "", f"unknown op {op!r}", {})

    def _submit_after_venv(self, call_id, tool, args, cwd, timeout) -> None:
        pending = self.venv_pending
        if pending is not None:
            with pending:  # released by prepare_user's thread once the venv exists (or failed)
                pass
            self.exec.python = self.config.get("python") or self.exec.python
            self.venv_pending = None
        if self.deferred.pop(call_id, False):
            self.reply(call_id, False, "", "cancelled before it started", {})
            return
        self.exec.submit(call_id, tool, args, cwd, timeout)

    def _fs_worker(self) -> None:
        while True:
            call_id, tool, args, cwd = self.fs_queue.get()
            self.reply(call_id, *run_fs(self.ws, tool, args, cwd))


def run_fs(ws: tools_fs.Workspace, tool: str, args: dict, cwd: str):
    started = time.monotonic()
    try:
        output, meta = FS_TOOLS[tool](ws, args, ws.cwd(cwd))
        meta["duration"] = round(time.monotonic() - started, 6)
        return True, output, None, meta
    except tools_fs.ToolError as exc:
        return False, "", str(exc), {}
    except PermissionError as exc:
        return False, "", f"permission denied: {exc.filename or ''}".strip(), {}
    except OSError as exc:
        return False, "", f"{tool} failed: {exc.strerror or exc}", {}
    except Exception as exc:  # a bug here must not kill the warm runner
        return False, "", f"{tool} failed: {exc.__class__.__name__}: {exc}", {}


def _stdout_writer():
    lock = _thread.allocate_lock()
    out = sys.stdout.buffer

    def write(obj: dict) -> None:
        data = wire.dumps(obj).encode("utf-8", errors="replace") + b"\n"
        with lock:
            out.write(data)
            out.flush()

    return write


def serve(config: dict, venv_pending=None) -> int:
    runner = Runner(config, _stdout_writer())
    runner.venv_pending = venv_pending
    for line in sys.stdin.buffer:
        try:
            msg = wire.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict):
            runner.handle(msg)
    runner.exec.stop()  # stdin closed: the executor is done with this sandbox
    runner.exec_done.acquire(timeout=2)
    return 0


def once(config: dict, request_path: str) -> int:
    with open(request_path, encoding="utf-8") as fh:
        msg = wire.loads(fh.read())
    try:
        os.unlink(request_path)
    except OSError:
        pass
    done = _thread.allocate_lock()
    done.acquire()
    result: dict = {}
    base = _stdout_writer()

    def write(obj: dict) -> None:
        result.update(obj)
        done.release()

    runner = Runner(config, write)
    runner.handle(msg)
    done.acquire()
    base(result)
    runner.exec.stop()
    return 0


def prepare_user(config: dict, mode: str):
    """After the sandbox setup, as the sandbox user: the user's venv and the egress forwarder.

    Returns a held lock while the venv is still being made (warm runner, first start only): fs
    tools answer at once, exec tools wait for it (so `pip` never runs before the venv exists)."""
    pending = None
    venv = config.get("venv")
    if venv:
        import user_venv

        base = config.get("python") or sys.executable
        if user_venv.exists(venv):
            config["python"] = user_venv.venv_python(venv)
        elif mode == "serve":
            pending = _thread.allocate_lock()
            pending.acquire()

            def make() -> None:
                try:
                    config["python"] = user_venv.ensure(venv, base, config.get("venv_base"))
                finally:
                    pending.release()

            _thread.start_new_thread(make, ())
        else:
            config["python"] = user_venv.ensure(venv, base, config.get("venv_base"))
    egress = config.get("egress")
    if egress and mode in ("serve", "proc"):  # docker runs the forwarder as the container's process
        import egress_forward

        egress_forward.start(egress["socket"], int(egress["port"]))
    return pending


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        sys.stderr.write(__doc__ or "")
        return 2
    mode, config = argv[1], wire.loads(argv[2])
    arg = argv[3] if len(argv) > 3 else ""
    if mode == "kill":
        return 0 if tools_exec.kill_call(config.get("calls_dir") or "/tmp/.zcbot-calls", arg) else 1
    sandbox_init.setup(config)
    pending = prepare_user(config, mode)
    if mode == "serve":
        return serve(config, pending)
    if mode == "once":
        return once(config, arg)
    if mode == "proc":
        import proc_wrapper

        shell = config.get("shell") or ("/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh")
        ws = tools_fs.Workspace(config.get("root", "/workspace"), config.get("virtual", "/workspace"))
        return proc_wrapper.run(ws.to_real(arg), ws, shell, config.get("python") or sys.executable,
                               dict(os.environ))  # inside the sandbox: the background command's environment
    sys.stderr.write(f"unknown mode {mode!r}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
