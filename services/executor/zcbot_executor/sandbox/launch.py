"""Launching a sandbox that must outlive the executor (background processes).

A tiny launcher joins the user's cgroup (sandbox/cgroups.py), forks, `setsid`s, points stdio at
/dev/null, closes every other fd and execs the sandbox command, then
prints the child's pid and exits at once: the sandbox is reparented to init, belongs to no
executor process group, and survives executor restarts and deploys. The executor keeps the pid
and its start time privately (not in the user-writable proc folder) for a hard kill.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import psutil

_LAUNCHER = r"""
import json, os, sys
spec = json.loads(sys.argv[1])
argv = spec["argv"]
for path in spec.get("cgroup_procs") or ():  # join the user's cgroup: the sandbox is born inside it
    with open(path, "w") as fh:
        fh.write("0")
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(fd, target)
    # Nothing the executor had open reaches the sandbox. Under uvloop the launcher inherits fds that
    # are not close-on-exec (a copy of its stdout pipe among them): kept open here, the parent's
    # read of the pid waited for the background process to exit (every start timed out).
    os.closerange(3, 1 << 20)
    try:
        if spec.get("seccomp"):  # bwrap --seccomp FD: the filter (sandbox/seccomp.py) through a pipe
            r, w = os.pipe()
            os.write(w, bytes.fromhex(spec["seccomp"]))
            os.close(w)
            os.set_inheritable(r, True)
            split = argv.index("--")
            argv = argv[:split] + ["--seccomp", str(r)] + argv[split:]
        if spec.get("args_fd"):  # bwrap --args FD: keep host paths out of the sandbox's cmdline
            r, w = os.pipe()
            split = argv.index("--")
            os.write(w, b"".join(a.encode() + b"\0" for a in argv[1:split]))
            os.close(w)
            os.set_inheritable(r, True)
            argv = [argv[0], "--args", str(r)] + argv[split:]
        os.execv(argv[0], argv)
    finally:
        os._exit(127)
print(pid, flush=True)
os._exit(0)
"""
LAUNCH_TIMEOUT = 15.0
NS_INIT_WAIT = 5.0  # for bwrap to fork the namespace's init (milliseconds, unless the host is starved)


async def launch_detached(argv: list[str], env: dict[str, str], args_fd: bool = False,
                          cgroup_procs: list[str] | None = None, seccomp: bytes | None = None) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", "-c", _LAUNCHER,
        json.dumps({"argv": argv, "args_fd": args_fd, "cgroup_procs": cgroup_procs or [],
                    "seccomp": seccomp.hex() if seccomp else None}),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), LAUNCH_TIMEOUT)
    except asyncio.TimeoutError:
        proc.kill()
        raise RuntimeError(f"launcher did not answer within {LAUNCH_TIMEOUT:g} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"launcher failed: {err.decode(errors='replace')[:500]}")
    pid = int(out.split()[0])
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        created = None
    private: dict[str, Any] = {"pid": pid, "create_time": created}
    if "--unshare-pid" in argv[:argv.index("--") if "--" in argv else len(argv)]:
        init = await asyncio.to_thread(_namespace_init, pid, NS_INIT_WAIT)
        if init is not None:
            private["ns_init_pid"], private["ns_init_create_time"] = init
    return private


def _namespace_init(pid: int, wait: float) -> tuple[int, float] | None:
    """(pid, start time) of the child of `pid` that is the init of a pid namespace other than ours."""
    own = os.readlink("/proc/self/ns/pid")
    deadline = time.monotonic() + wait
    while True:
        try:
            for child in psutil.Process(pid).children():
                if os.readlink(f"/proc/{child.pid}/ns/pid") != own:
                    return child.pid, child.create_time()
        except (psutil.Error, OSError):
            return None  # the launched process is gone already: nothing left to find
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def _matching(pid: Any, created: Any, exe: str) -> psutil.Process | None:
    """The process `pid` if it is still the one recorded (start time, executable), else None."""
    try:
        proc = psutil.Process(int(pid))
        if created is not None and abs(proc.create_time() - float(created)) > 0.01:
            return None
        if exe and os.path.basename(proc.exe()) != os.path.basename(exe):
            return None
        return proc
    except (psutil.Error, OSError, ValueError, TypeError):
        return None


def detached_alive(private: dict[str, Any]) -> bool:
    """Whether the launched process, or its pid namespace's init, still runs (a zombie is dead)."""
    for pid_key, time_key in (("pid", "create_time"), ("ns_init_pid", "ns_init_create_time")):
        if private.get(pid_key) is None:
            continue
        proc = _matching(private[pid_key], private.get(time_key), "")
        try:
            if proc is not None and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            continue
    return False


def kill_detached(private: dict[str, Any], exe: str) -> bool:
    """SIGKILL a detached sandbox and everything below it, if it is still the process we started,
    and its pid namespace's init when one was recorded (that kills the whole namespace).

    Through a pidfd: once the fd is open and the start time matches, the signal cannot reach a
    recycled pid. Stopped processes die too (SIGKILL needs no cooperation). The descendants are
    killed for the backends without a pid namespace."""
    killed = _kill_tree(private.get("pid"), private.get("create_time"), exe)
    if private.get("ns_init_pid") is not None:
        killed = _kill_tree(private["ns_init_pid"], private.get("ns_init_create_time"), exe) or killed
    return killed


def _kill_tree(pid: Any, created: Any, exe: str) -> bool:
    try:
        pidfd = os.pidfd_open(int(pid))
    except (ValueError, TypeError, OSError):
        return False
    try:
        proc = _matching(pid, created, exe)
        if proc is None:
            return False
        victims = proc.children(recursive=True)
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except (psutil.Error, OSError, ValueError):
        return False
    finally:
        os.close(pidfd)
    for p in victims:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    return True


def kill_background_tree(backend: Any, spec: Any, private: dict[str, Any], exe: str) -> bool:
    """Kill a background sandbox from outside its tree: its pid (pidfd) and every process in its
    cgroup leaf, whatever their state (stopped, or reparented away from the tree)."""
    killed = kill_detached(private, exe)
    groups = getattr(backend, "cgroups", None)
    if groups is not None and spec.user_id:
        emptied = groups.kill(spec.user_id, spec.proc_id)
        groups.remove(spec.user_id, spec.proc_id)
        killed = killed or emptied
    return killed
