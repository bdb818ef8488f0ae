"""Launching a sandbox that must outlive the executor (background processes).

A tiny launcher forks, `setsid`s, points stdio at /dev/null and execs the sandbox command, then
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
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open(os.devnull, os.O_RDWR)
    for target in (0, 1, 2):
        os.dup2(fd, target)
    try:
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


async def launch_detached(argv: list[str], env: dict[str, str], args_fd: bool = False) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-S", "-c", _LAUNCHER, json.dumps({"argv": argv, "args_fd": args_fd}),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"launcher failed: {err.decode(errors='replace')[:500]}")
    pid = int(out.split()[0])
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        created = None
    return {"pid": pid, "create_time": created}


def kill_detached(private: dict[str, Any], exe: str) -> bool:
    """SIGKILL a detached sandbox and everything below it, if it is still the process we started."""
    try:
        proc = psutil.Process(int(private["pid"]))
        if private.get("create_time") is not None and abs(proc.create_time() - float(private["create_time"])) > 0.01:
            return False
        if exe and os.path.basename(proc.exe()) != os.path.basename(exe):
            return False
        victims = proc.children(recursive=True)
    except (psutil.Error, KeyError, ValueError, TypeError):
        return False
    for p in [proc, *victims]:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    return True
