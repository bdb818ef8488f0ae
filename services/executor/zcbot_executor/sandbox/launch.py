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
    return {"pid": pid, "create_time": created}


def kill_detached(private: dict[str, Any], exe: str) -> bool:
    """SIGKILL a detached sandbox and everything below it, if it is still the process we started.

    Through a pidfd: once the fd is open and the start time matches, the signal cannot reach a
    recycled pid. Stopped processes die too (SIGKILL needs no cooperation). For bwrap the sandbox's
    pid 1 is enough (its PID namespace dies with it); the descendants are killed for the others."""
    try:
        pid = int(private["pid"])
        pidfd = os.pidfd_open(pid)
    except (KeyError, ValueError, TypeError, OSError):
        return False
    try:
        proc = psutil.Process(pid)
        if private.get("create_time") is not None and abs(proc.create_time() - float(private["create_time"])) > 0.01:
            return False
        if exe and os.path.basename(proc.exe()) != os.path.basename(exe):
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
