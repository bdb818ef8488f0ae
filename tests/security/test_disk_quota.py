"""Layer 4, whole-sandbox limits: the per-user disk quota (ZCBOT_USER_DISK_QUOTA_MB).

Through the real services with a 2 MB quota: a run (gateway -> runner -> executor with bwrap ->
fake model) fills the user's root with a shell command, and then every way of writing more is a
clear tool error (write, a command that keeps writing — killed, a skill save, a new background
process) while deleting still works and frees the space; the gateway's upload API answers 507
with a JSON message and writes nothing; another user is not affected by any of it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.stack import Stack
from tests.helpers.wait import wait_for
from tests.security.conftest import scripted_run
from zcbot_core.quota import MB, Ledger, TreeMeter, measure

QUOTA_MB = 2
SKILL = "---\nname: demo\ndescription: a demo skill\n---\nSteps.\n"


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    return {**settings_env, "ZCBOT_USER_DISK_QUOTA_MB": str(QUOTA_MB)}


def _call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": json.dumps(args)}]}


def _results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    return [e["data"] for e in events if e["event"] == "tool_result"]


async def test_a_run_cannot_write_past_the_quota_and_can_free_space(stack: Stack) -> None:
    slow = "for i in $(seq 1 100); do head -c 100000 /dev/zero >> slow; sleep 0.05; done; echo finished"
    turns = [
        _call("shell", command="head -c 1500000 /dev/zero > fill && echo filled"),
        _call("write", path="big.txt", content="b" * 600_000),
        _call("shell", command=slow),
        _call("save_skill", name="demo", content=SKILL),
        _call("shell", command="sleep 1", background=True),
        _call("shell", command="rm -f fill slow && echo freed"),
        _call("write", path="small.txt", content="fits now"),
        {"text": "Done."},
    ]
    started = time.monotonic()
    task, events = await scripted_run(stack, "mallory", "KEY-quota-run", turns)
    elapsed = time.monotonic() - started
    fill, big, slow_r, skill, bg, rm, small = _results(events)
    assert fill["ok"] and "filled" in fill["preview"]
    for refused in (big, skill, bg):
        assert not refused["ok"] and "disk quota exceeded" in refused["preview"], refused["preview"]
    assert not slow_r["ok"] and "disk quota exceeded" in slow_r["preview"] and "killed" in slow_r["preview"]
    assert rm["ok"] and "freed" in rm["preview"], rm["preview"]
    assert small["ok"], small["preview"]
    assert elapsed < 30, "the slow writer ran to its end instead of being killed"
    folder = stack.settings.storage_root / "mallory" / task["working_dir"]
    assert not (folder / "big.txt").exists() and (folder / "small.txt").read_text() == "fits now"
    assert not (stack.settings.storage_root / "mallory" / ".skills" / "demo").exists()
    # Another user writes as much as they like under their own quota meanwhile.
    _task, events = await scripted_run(stack, "bob", "KEY-quota-other", [
        _call("write", path="mine.txt", content="c" * 600_000), {"text": "ok"}])
    (mine,) = _results(events)
    assert mine["ok"], mine["preview"]


async def test_upload_over_the_quota_is_507_and_writes_nothing(stack: Stack) -> None:
    carol, bob = await stack.login("carol"), await stack.login("bob")
    async with stack.client(carol) as c:
        r = await c.post("/v1/files/upload", params={"path": "in"}, files={"file": ("a.bin", b"a" * 1_500_000)})
        assert r.status_code == 201, r.text
        r = await c.post("/v1/files/upload", params={"path": "in"}, files={"file": ("b.bin", b"b" * 1_000_000)})
        assert r.status_code == 507 and "disk quota exceeded" in r.json()["detail"], r.text
        assert not (stack.settings.storage_root / "carol" / "in" / "b.bin").exists()
        listing = (await c.get("/v1/files", params={"path": "in"})).json()
        assert [e["name"] for e in listing["items"]] == ["a.bin"]
        r = await c.post("/v1/files/delete", json={"path": "in/a.bin"})
        assert r.status_code == 200, r.text
        r = await c.post("/v1/files/upload", params={"path": "in"}, files={"file": ("b.bin", b"b" * 1_000_000)})
        assert r.status_code == 201, r.text  # the delete freed the space
    async with stack.client(bob) as c:
        r = await c.post("/v1/files/upload", files={"file": ("x.bin", b"x" * 1_500_000)})
        assert r.status_code == 201, r.text


def test_meter_counts_changes_without_a_walk_and_agrees_with_a_full_measure(tmp_path: Path) -> None:
    import subprocess

    root = tmp_path / "users" / "u1"
    (root / "a" / "b").mkdir(parents=True)
    meter = TreeMeter(Ledger(tmp_path / "users", 100 * MB))
    try:
        assert meter.track("u1", root) == measure(root)
        steps = ["head -c 5000000 /dev/urandom > a/b/f", "mkdir -p x/y && head -c 3000000 /dev/zero > x/y/g",
                 "mv x a/x2 && rm a/b/f", "head -c 2000000 /dev/zero > a/x2/y/h", "truncate -s 0 a/x2/y/g",
                 "ln -s /etc e && ln -s / r", "rm -rf a"]
        for step in steps:
            subprocess.run(step, shell=True, cwd=root, check=True)
            assert meter.refresh("u1") == measure(root), step
            assert Ledger(tmp_path / "users", 100 * MB).used("u1") == measure(root)
    finally:
        meter.close()


async def test_a_background_process_writing_past_the_quota_is_killed(stack: Stack) -> None:
    import asyncio

    writer = "for i in $(seq 1 100); do head -c 100000 /dev/zero >> bg.bin; sleep 0.2; done"
    # Waits (up to 30 s) for the writer to pass the quota, then until the file stops growing for a
    # second (up to 30 s more): a fixed `sleep 3` failed under load with docker, where the background
    # container had not written yet, or its kill through the engine had not landed.
    over = f"[ \"$(stat -c %s bg.bin 2>/dev/null || echo 0)\" -gt {QUOTA_MB * MB} ]"
    still = 'now=$(stat -c %s bg.bin); [ "$now" = "$prev" ] && break; prev=$now; sleep 1'
    wait = f"for i in $(seq 1 300); do {over} && break; sleep 0.1; done; prev=-1; for i in $(seq 1 30); do {still}; done; echo waited"
    task, events = await scripted_run(stack, "dave", "KEY-quota-bg", [
        _call("shell", command=writer, background=True),
        _call("shell", command=wait),
        {"text": "Done."},
    ])
    started, waited = _results(events)
    assert started["ok"], started["preview"]
    # The meter kills a writer it sees growing while over the quota; a stalled one (load) is killed at its
    # next write. So the sizes are read once the process has ended (`GET /v1/procs`), not after a time.
    async with stack.client(await stack.login("dave")) as c:
        async def ended() -> bool:
            items = (await c.get("/v1/procs")).json()["items"]
            return bool(items) and all(p["state"] != "running" for p in items)

        await wait_for(ended, 60, what="the background writer ended (killed for the quota, or done)")
    target = stack.settings.storage_root / "dave" / task["working_dir"] / "bg.bin"
    size = target.stat().st_size
    assert size < 3_000_000, f"{size} bytes: the background writer was not stopped at the 2 MB quota"
    await asyncio.sleep(1.5)
    assert target.stat().st_size == size  # it is gone, not just slow
    assert "disk quota exceeded" in waited["preview"]  # the user's commands say why meanwhile
