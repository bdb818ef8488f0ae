"""Process groups of `zcbot up`'s children: signalling a group, finding what a dead leader left."""

from __future__ import annotations

import contextlib
import os
from typing import Protocol


class GroupLeader(Protocol):
    """A child leading its own process group: a `subprocess.Popen` or a `forked.ForkedProcess`."""

    pid: int
    returncode: int | None


def group_leftovers(pgid: int) -> list[int]:
    """Pids still in process group `pgid` other than a (dead) leader: grandchildren left behind."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid"]):
        pid = proc.info["pid"]
        if pid == pgid:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            if os.getpgid(pid) == pgid:
                found.append(pid)
    return found


def signal_group(proc: GroupLeader, sig: int) -> None:
    """Signal the process group led by `proc` (started with process_group=0).

    While `proc` is unreaped its pid (= the pgid) cannot be reused, so killpg is safe; once it is
    reaped, the remaining members are found and signalled one by one instead.
    """
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        return
    for pid in group_leftovers(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
