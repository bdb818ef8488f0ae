"""Sandbox tools through the real NATS executor service (bwrap backend)."""

from __future__ import annotations

import os
import stat

from tests.helpers.executor_stack import SANDBOX_UID, Stack


async def test_write_read_edit_glob_grep(one: Stack) -> None:
    r = await one.call("write", {"path": "notes/a.md", "content": "alpha\nbeta\ngamma\n"})
    assert r.ok, r.error
    assert r.host == "h1"
    r = await one.call("read", {"path": "notes/a.md"})
    assert r.ok and r.output.splitlines()[1] == "     2\tbeta"
    assert r.meta["preview"].startswith("     1\talpha") and r.meta["truncated"] is False
    r = await one.call("read", {"path": "/workspace/task/notes/a.md", "offset": 2, "limit": 1})
    assert r.ok and r.output.startswith("     2\tbeta") and "offset=3" in r.output
    r = await one.call("edit", {"path": "notes/a.md", "old_str": "beta", "new_str": "BETA"})
    assert r.ok, r.error
    r = await one.call("glob", {"pattern": "**/*.md"})
    assert r.ok and r.output.strip() == "notes/a.md"
    r = await one.call("grep", {"pattern": "^BE", "glob": "*.md"})
    assert r.ok and "notes/a.md:2: BETA" in r.output
    r = await one.call("grep", {"pattern": "("})
    assert not r.ok and "invalid regular expression" in r.error
    host_file = one.storage / "u1" / "task" / "notes" / "a.md"
    assert host_file.read_text() == "alpha\nBETA\ngamma\n"
    assert host_file.stat().st_uid == SANDBOX_UID


async def test_edit_unique_match_rule(one: Stack) -> None:
    await one.call("write", {"path": "f.py", "content": "x = 1\nx = 1\ny = 2\n"})
    r = await one.call("edit", {"path": "f.py", "old_str": "x = 1", "new_str": "x = 3"})
    assert not r.ok and "matches 2 times" in r.error and "lines 1, 2" in r.error
    r = await one.call("edit", {"path": "f.py", "old_str": "z = 9", "new_str": "z = 0"})
    assert not r.ok and "0 matches" in r.error
    assert (one.storage / "u1" / "task" / "f.py").read_text() == "x = 1\nx = 1\ny = 2\n"  # untouched
    r = await one.call("edit", {"path": "f.py", "old_str": "y = 2", "new_str": "y = 5"})
    assert r.ok
    r = await one.call("edit", {"path": "f.py", "old_str": "x = 1", "new_str": "x = 0", "replace_all": True})
    assert r.ok and "2 occurrences" in r.output
    assert (one.storage / "u1" / "task" / "f.py").read_text() == "x = 0\nx = 0\ny = 5\n"


async def test_write_is_atomic(one: Stack) -> None:
    """Readers see the old or the new content, never a mix; no temp files are left behind."""
    size = 400 * 1024
    r = await one.call("write", {"path": "big.txt", "content": "a" * size})
    assert r.ok
    os.chmod(one.storage / "u1" / "task" / "big.txt", 0o640)
    reader = one.call("run_python", {"code": (
        "import time\nbad = 0\nn = 0\nend = time.time() + 1.5\n"
        "while time.time() < end:\n"
        "    data = open('big.txt').read()\n    n += 1\n"
        f"    if len(data) != {size} or len(set(data)) != 1: bad += 1\n"
        "print(n, bad)\n")})
    import asyncio

    reader_task = asyncio.ensure_future(reader)
    for i in range(12):
        r = await one.call("write", {"path": "big.txt", "content": ("b" if i % 2 == 0 else "a") * size})
        assert r.ok, r.error
    out = await reader_task
    assert out.ok, out.error
    reads, bad = map(int, out.output.split())
    assert reads > 5 and bad == 0
    files = os.listdir(one.storage / "u1" / "task")
    assert files == ["big.txt"], files
    assert stat.S_IMODE(os.stat(one.storage / "u1" / "task" / "big.txt").st_mode) == 0o640  # mode kept


async def test_path_refusals(one: Stack) -> None:
    (one.storage / "u1" / "task").mkdir(parents=True, exist_ok=True)
    outside = one.root / "outside.txt"
    outside.write_text("host secret")
    os.symlink(str(outside), one.storage / "u1" / "task" / "link.txt")
    os.symlink("/etc", one.storage / "u1" / "task" / "etc_link")
    cases = [
        ("read", {"path": "../../etc/passwd"}, "outside /workspace"),
        ("read", {"path": "/etc/shadow"}, "outside /workspace"),
        ("read", {"path": "link.txt"}, "outside /workspace"),
        ("read", {"path": "etc_link/passwd"}, "outside /workspace"),
        ("write", {"path": "../../tmp/x", "content": "x"}, "outside /workspace"),
        ("write", {"path": "/tmp/evil", "content": "x"}, "outside /workspace"),
        ("write", {"path": "link.txt", "content": "overwrite"}, "outside /workspace"),
        ("edit", {"path": "link.txt", "old_str": "host", "new_str": "x"}, "outside /workspace"),
        ("glob", {"pattern": "/etc/*"}, "outside /workspace"),
        ("grep", {"pattern": "root", "path": "/etc"}, "outside /workspace"),
        ("read", {"path": "nope.txt"}, "not found"),
        ("read", {"path": 5}, "must be a string"),
    ]
    for tool, args, expect in cases:
        r = await one.call(tool, args)
        assert not r.ok, (tool, args, r.output)
        assert expect in r.error, (tool, args, r.error)
    assert outside.read_text() == "host secret"
    # inside the root, going up is fine: /workspace/other/ is the same user's
    r = await one.call("write", {"path": "../other/ok.txt", "content": "fine"})
    assert r.ok and (one.storage / "u1" / "other" / "ok.txt").read_text() == "fine"
    # a bad cwd is refused before anything runs
    r = await one.call("read", {"path": "x"}, cwd="../u2")
    assert not r.ok and "bad request" in r.error


async def test_output_truncated_for_model(one: Stack) -> None:
    r = await one.shell("python3 -c \"print('x' * 40000)\"")
    assert r.ok
    assert len(r.output) <= 16_000 and "truncated" in r.output
    assert r.meta["truncated"] is True and r.meta["preview"] == "x" * 399 + "…"
    r = await one.call("nope", {})
    assert not r.ok and "unknown sandbox tool" in r.error
