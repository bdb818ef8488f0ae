"""Layer 5, bad input from the model: `read` (and `edit`, `grep`) refuse FIFOs, sockets and devices.

A plain open of a FIFO blocks until a writer appears: `read` on one used to hang the user's
sandbox for the call's whole timeout. Through a real run (gateway -> runner -> executor with bwrap
-> fake model), each special file, and a symlink to a FIFO, is a clear tool error at once.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time

import pytest

from tests.helpers.stack import Stack
from tests.security.conftest import scripted_run

SANDBOX_UID = 10001
CASES = [  # (file name, what the model reads, the error's words)
    ("pipe", {"path": "pipe"}, "is a FIFO"),
    ("sock", {"path": "sock"}, "is a socket"),
    ("null", {"path": "null"}, "is a device"),
    ("to_pipe", {"path": "to_pipe"}, "is a FIFO"),
]


def _plant(folder: os.PathLike[str]) -> socket.socket:
    os.mkfifo(os.path.join(folder, "pipe"))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(os.path.join(folder, "sock"))
    sock.listen(1)
    os.mknod(os.path.join(folder, "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.symlink("pipe", os.path.join(folder, "to_pipe"))
    return sock


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a device node needs root (the executor runs as root here)")
async def test_read_refuses_fifo_socket_device_at_once(stack: Stack) -> None:
    key = "KEY-read-special"
    calls = [{"name": "read", "arguments": json.dumps(args)} for _name, args, _words in CASES]
    calls += [{"name": "edit", "arguments": json.dumps({"path": "pipe", "old_str": "a", "new_str": "b"})},
              {"name": "grep", "arguments": json.dumps({"pattern": "x"})}]
    token = await stack.login("mallory")
    task = await stack.create_task(token, "special files")
    folder = stack.settings.storage_root / "mallory" / task["working_dir"]
    folder.mkdir(parents=True, exist_ok=True)
    sock = _plant(folder)
    try:
        started = time.monotonic()
        _task, events = await scripted_run(stack, "mallory", key, [{"tool_calls": calls}, {"text": "Not regular files."}],
                                           token=token, task=task)
        elapsed = time.monotonic() - started
    finally:
        sock.close()
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    results = [e["data"] for e in events if e["event"] == "tool_result"]
    assert len(results) == len(calls)
    for (name, _args, words), result in zip(CASES, results):
        assert not result["ok"] and words in result["preview"], (name, result["preview"])
    assert not results[len(CASES)]["ok"] and "is a FIFO" in results[len(CASES)]["preview"]  # edit
    assert results[-1]["ok"] and "no matches" in results[-1]["preview"].lower()  # grep skips them, no hang
    assert elapsed < 20, f"the run took {elapsed:.1f} s: a special file blocked a call"
