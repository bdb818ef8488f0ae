"""Issue 36: the disk quota held by the kernel (btrfs subvolume qgroups), probed as an attacker would.

The storage root is a small loop-mounted btrfs filesystem; ZCBOT_USER_DISK_QUOTA_MB=50 and the
default backend `auto`, so the real executor (bwrap, root) makes each user root a subvolume with
a 50 MB qgroup limit. Through the real services (gateway -> runner -> executor -> fake model):

- ten `fallocate -l 200M` in one call: each refused (EDQUOT), nothing kept (it was 2000 MB);
- a file with no name (O_TMPFILE) filled until the kernel refuses: stopped at the limit;
- `mv -T y x` over a folder, then more writes inside: counted, refused past the limit;
- a nested subvolume or snapshot (its own qgroup, outside the limit) cannot be made in the sandbox,
  by any of the four ioctls or with the request's upper 32 bits set; nor can a sandbox process
  trace or write the memory of pid 1 (with docker: docker-init, which has no filter — confine.py);
- usage reported: a background process holding 30 MB in a file with no name shows in the user's
  ledger (the meter alone saw 0), and a write that would pass the limit is refused meanwhile;
- `rm` at the limit still frees space; another user writes their own 40 MB meanwhile;
- a user root that was a plain folder (made before, e.g. by an upload) is migrated with its files.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import btrfs
from tests.helpers.stack import Stack
from tests.helpers.wait import wait_for
from tests.security.conftest import scripted_run
from zcbot_core.quota import MB, Ledger
from zcbot_core.quota import kernel as quota_kernel

QUOTA_MB = 50
SKIP = btrfs.unavailable()
# Both sandbox backends: bwrap, and with ZCBOT_SANDBOX=docker the container bind-mounts the same subvolume.
pytestmark = pytest.mark.skipif(SKIP is not None, reason=f"kernel disk quota tests need a loop btrfs: {SKIP}")


@pytest.fixture
def btrfs_root(tmp_path: Path) -> Iterator[Path]:
    with btrfs.loop_btrfs(tmp_path / "btrfs", size_mb=1024) as mnt:
        yield mnt


@pytest.fixture
def settings_env(settings_env: dict[str, str], btrfs_root: Path) -> dict[str, str]:
    storage = btrfs_root / "users"
    storage.mkdir()
    # carol's root exists as a plain folder before the executor first sees her (made by an upload).
    (storage / "carol" / "notes").mkdir(parents=True)
    (storage / "carol" / "notes" / "keep.txt").write_text("carol's notes")
    return {**settings_env, "ZCBOT_STORAGE_ROOT": str(storage), "ZCBOT_USER_DISK_QUOTA_MB": str(QUOTA_MB)}


def _call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": json.dumps(args)}]}


def _results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    return [e["data"] for e in events if e["event"] == "tool_result"]


def _du_mb(path: Path) -> float:
    out = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0]) / MB


FALLOCATE = 'for i in $(seq 1 10); do fallocate -l 200M f$i 2>/dev/null || echo "refused $i"; done; du -sm . | cut -f1'
TMPFILE = ("python3 -c \"\nimport os\nfd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o600)\nn = 0\ntry:\n"
           "    while n < 400:\n        os.write(fd, b'x' * 1048576); n += 1\nexcept OSError as e:\n"
           "    print('stopped', n, e.errno)\n\"")
MOVE_OVER = ("rm -f f*; mkdir y && head -c 20M /dev/zero > y/f && mkdir x && mv -T y x && "
             "head -c 40M /dev/zero > x/g 2>/dev/null; echo \"head=$?\"; du -sm x | cut -f1")
# SUBVOL_CREATE, SUBVOL_CREATE_V2, SNAP_CREATE, SNAP_CREATE_V2 (of /workspace, the user's subvolume), then
# SUBVOL_CREATE with bit 32 set (the kernel reads the request as 32 bits); then ptrace and /proc/1/mem.
NESTED = ("python3 -c \"\nimport ctypes, os, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
          "fd, src = os.open('.', os.O_RDONLY), os.open('/workspace', os.O_RDONLY)\n"
          "for req in (0x5000940E, 0x50009418, 0x50009401, 0x50009417, 0x15000940E):\n"
          "    head = struct.pack('qQQ', src, 0, 0) + bytes(32) if req & 0xFF in (0x17, 0x18) else struct.pack('q', src)\n"
          "    buf = ctypes.create_string_buffer(head + b'n%x' % req, 4096)\n"
          "    print('ioctl', libc.ioctl(fd, ctypes.c_ulong(req), buf), ctypes.get_errno())\n"
          "print('ptrace', libc.ptrace(16, 1, None, None), ctypes.get_errno())\n"
          "try:\n    open('/proc/1/mem', 'r+b').close(); print('mem opened')\n"
          "except OSError as e:\n    print('mem', e.errno)\n\"; ls")
FREE = "rm -rf x y && head -c 10M /dev/zero > after-rm && echo wrote-after-rm"


async def test_the_kernel_refuses_writes_past_the_quota(stack: Stack) -> None:
    storage = stack.settings.storage_root
    task, events = await scripted_run(stack, "mallory", "KEY-kquota", [
        _call("shell", command=NESTED), _call("shell", command=FALLOCATE), _call("shell", command=TMPFILE),
        _call("shell", command=MOVE_OVER), _call("shell", command=FREE), {"text": "Done."}])
    nested, fall, tmpfile, move, free = _results(events)
    root = storage / "mallory"
    assert quota_kernel.is_subvolume(root), "the executor made the user root a subvolume"
    # Ten fallocate -l 200M: every one refused by the kernel, nothing kept.
    assert all(f"refused {i}" in fall["preview"] for i in range(1, 11)), fall["preview"]
    # A file with no name: the kernel stopped it at the limit (EDQUOT = 122), not at 400 MB.
    words = tmpfile["preview"].split()
    assert words[0] == "stopped" and int(words[1]) <= QUOTA_MB and int(words[2]) == 122, tmpfile["preview"]
    # mv -T over a folder, then more writes inside it: refused past the limit (head failed).
    assert "head=1" in move["preview"], move["preview"]
    assert _du_mb(root) <= QUOTA_MB + 1
    # No nested subvolume or snapshot (it would be outside the limit; made first, while there is room):
    # the seccomp filter refuses each ioctl (EPERM), and pid 1 cannot be made to make one for the sandbox.
    assert nested["preview"].count("ioctl -1 1\n") == 5, nested["preview"]
    assert "ptrace -1 1" in nested["preview"] and "mem opened" not in nested["preview"], nested["preview"]
    assert not [p for p in (root / task["working_dir"]).iterdir() if p.name.startswith("n")], nested["preview"]
    # At the limit, rm still frees space and writing works again.
    assert free["ok"] and "wrote-after-rm" in free["preview"], free["preview"]
    # Another user is not affected by any of it.
    _task, events = await scripted_run(stack, "bob", "KEY-kquota-bob", [
        _call("shell", command="head -c 40M /dev/zero > mine && echo bob-wrote"), {"text": "ok"}])
    (bob,) = _results(events)
    assert "bob-wrote" in bob["preview"] and quota_kernel.is_subvolume(storage / "bob")


HOLD = ("python3 -c \"\nimport os, time\nfd = os.open('.', os.O_TMPFILE | os.O_WRONLY, 0o600)\n"
        "for _ in range(30):\n    os.write(fd, b'h' * 1048576)\nos.fsync(fd)\ntime.sleep(60)\n\"")


async def test_usage_is_reported_with_files_that_have_no_name(stack: Stack) -> None:
    storage = stack.settings.storage_root
    ledger = Ledger(storage, QUOTA_MB * MB)
    _task, events = await scripted_run(stack, "dora", "KEY-kquota-report", [
        _call("shell", command=HOLD, background=True),
        _call("shell", command="sleep 2; sync; echo synced"),
        {"text": "started"}])
    started, synced = _results(events)
    assert started["ok"] and "synced" in synced["preview"], (started, synced)
    root = storage / "dora"
    assert _du_mb(root) < 1, "the held file has no name: du (and the inotify meter) cannot see it"
    # The kernel's count (at the next commit) reaches the ledger the gateway and refusals read.
    await wait_for(lambda: ledger.used("dora") >= 30 * MB, timeout=45,
                   what="the 30 MB held in a file with no name reaching the reported usage")
    assert ledger.used("dora") <= QUOTA_MB * MB
    _task, events = await scripted_run(stack, "dora", "KEY-kquota-over", [
        _call("shell", command="head -c 30M /dev/zero > more 2>/dev/null; echo \"head=$?\""), {"text": "ok"}])
    (over,) = _results(events)
    assert "head=1" in over["preview"], over["preview"]  # 30 held + 30 more > 50: refused by the kernel


async def test_a_plain_user_root_is_migrated_with_its_files(stack: Stack) -> None:
    storage = stack.settings.storage_root
    assert not quota_kernel.is_subvolume(storage / "carol")
    _task, events = await scripted_run(stack, "carol", "KEY-kquota-migrate", [
        _call("shell", command="cat /workspace/notes/keep.txt; fallocate -l 60M big 2>&1 | tail -1"), {"text": "ok"}])
    (out,) = _results(events)
    assert "carol's notes" in out["preview"] and "Disk quota exceeded" in out["preview"], out["preview"]
    assert quota_kernel.is_subvolume(storage / "carol")
    assert (storage / "carol" / "notes" / "keep.txt").read_text() == "carol's notes"
    assert not any(name.startswith(quota_kernel.MIGRATE_PREFIX) for name in os.listdir(storage))
