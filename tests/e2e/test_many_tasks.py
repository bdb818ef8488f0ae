"""Every task of a user is writable, not only the first (issue 34).

The stack runs as root (as `zcbot up` does in a container or a fresh VM), so the executor drops
its sandboxes to `ZCBOT_SANDBOX_UID`; every folder the gateway makes as root in the user's tree
(later task folders, upload targets, folders made through the files API) must belong to that uid,
or the agent cannot write there. The sandbox is warm before the later tasks exist: its start-up
chown of the whole tree cannot be what makes them writable.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.executor_stack import SANDBOX_UID
from tests.helpers.stack import Stack
from zcbot_core.safe_fs import paths

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox uid is only dropped to when the stack is root")


async def _run(stack: Stack, token: str, task_id: str, key: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One run whose model makes `calls` (one step) and then answers; the tool results."""
    stack.fake.script(key, [{"tool_calls": calls}, {"text": f"{key} done"}])
    r = await stack.post(token, task_id, f"{key} go")
    assert r.status_code == 202, r.text
    events = await stack.events(token, r.json()["events_url"])
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-1]
    return [e["data"] for e in events if e["event"] == "tool_result"]


def _owned_by_sandbox(path: Path) -> bool:
    st = path.lstat()
    return (st.st_uid, st.st_gid) == (SANDBOX_UID, SANDBOX_UID)


async def test_every_task_is_writable_when_created_while_the_sandbox_is_warm(stack: Stack) -> None:
    user = "wendy"
    token = await stack.login(user)
    root = paths.user_root(stack.settings.storage_root, user)
    first = await stack.create_task(token, "第一个任务")
    results = await _run(stack, token, first["task_id"], "KEY-first",
                         [{"name": "write", "arguments": {"path": "one.txt", "content": "1\n"}}])
    assert all(t["ok"] for t in results), results  # the sandbox is now warm

    later = [await stack.create_task(token, f"任务{i}") for i in range(2, 5)]
    later.append(await stack.create_task(token, "Project", working_dir="项目 A"))
    for n, task in enumerate(later):
        folder = root / task["working_dir"]
        assert _owned_by_sandbox(folder), (task["working_dir"], folder.stat())
        results = await _run(stack, token, task["task_id"], f"KEY-later-{n}", [
            {"name": "write", "arguments": {"path": "notes.md", "content": f"task {n}\n"}},
            {"name": "shell", "arguments": {"command": "mkdir -p out && echo ok > out/x.txt && cat out/x.txt"}}])
        assert [t["ok"] for t in results] == [True, True], results
        assert (folder / "notes.md").read_text() == f"task {n}\n" and (folder / "out" / "x.txt").exists()

    # An upload into a later task (into a folder the upload creates), then edited by the agent.
    target = later[1]
    async with stack.client(token) as c:
        r = await c.post("/v1/files/upload", params={"path": f"{target['working_dir']}/资料"},
                         files=[("file", ("brief.md", b"draft: one\n", "text/markdown"))])
        assert r.status_code == 201, r.text
        r = await c.post("/v1/files/mkdir", json={"path": f"{target['working_dir']}/drafts"})
        assert r.status_code == 201, r.text
    uploaded = root / target["working_dir"] / "资料" / "brief.md"
    assert _owned_by_sandbox(uploaded) and _owned_by_sandbox(uploaded.parent)
    results = await _run(stack, token, target["task_id"], "KEY-edit-upload", [
        {"name": "edit", "arguments": {"path": "资料/brief.md", "old_str": "one", "new_str": "two"}},
        {"name": "write", "arguments": {"path": "资料/more.md", "content": "more\n"}},
        {"name": "write", "arguments": {"path": "drafts/a.md", "content": "a\n"}}])
    assert [t["ok"] for t in results] == [True, True, True], results
    assert uploaded.read_text() == "draft: one\n".replace("one", "two")


async def test_a_task_folder_left_owned_by_root_is_repaired_at_the_next_call(stack: Stack) -> None:
    """Data dirs from before the fix hold task folders the gateway made as root: the next tool call
    in the task gives the folder to the sandbox uid, even while the sandbox is warm."""
    user = "rhea"
    token = await stack.login(user)
    root = paths.user_root(stack.settings.storage_root, user)
    first = await stack.create_task(token, "Warm")
    assert all(t["ok"] for t in await _run(stack, token, first["task_id"], "KEY-warm",
                                           [{"name": "write", "arguments": {"path": "a.txt", "content": "a"}}]))
    old = await stack.create_task(token, "Old")
    folder = root / old["working_dir"]
    os.chown(folder, 0, 0)  # as the gateway left it before the fix
    results = await _run(stack, token, old["task_id"], "KEY-repaired",
                         [{"name": "write", "arguments": {"path": "b.txt", "content": "b"}}])
    assert [t["ok"] for t in results] == [True], results
    assert _owned_by_sandbox(folder) and (folder / "b.txt").read_text() == "b"
