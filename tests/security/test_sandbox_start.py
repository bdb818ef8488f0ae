"""Layer 1, the sandbox start (issue 19, items 1 and 8): modules planted in the workspace never run
at a sandbox start (least of all as host uid 0); inside, no capability is left (bounding and ambient
sets included), /proc/sys is read-only, no nested user namespace, no host storage path on a command
line. Once at the executor level (real NATS executor, real bwrap) and once through a real run (the
fake model writes the plants and kills the warm runner with its tool calls)."""

from __future__ import annotations

import asyncio

from tests.helpers.executor_stack import Stack as ExecutorStack
from tests.helpers.stack import Stack
from tests.security.hijack import markers, plants, root_markers

KILL_RUNNER = "kill -9 2"  # bwrap is pid 1 of the sandbox's PID namespace, the warm runner pid 2
INSIDE = ("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status; "
          "for f in kernel/core_pattern kernel/panic user/max_user_namespaces; do (echo 1 > /proc/sys/$f) 2>&1; done; "
          "unshare --user true 2>/dev/null && echo NESTED_USERNS; "
          "awk '$5 == \"/proc/sys\" {print \"procsys\", $6}' /proc/self/mountinfo; "
          "tr '\\0' ' ' < /proc/1/cmdline; echo; tr '\\0' ' ' < /proc/2/cmdline; echo; tr '\\0' '\\n' < /proc/self/environ")


def assert_locked_down(output: str, host_paths: list[str]) -> None:
    caps = dict(line.split(":") for line in output.splitlines() if line.startswith("Cap"))
    assert set(caps) == {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}, output
    assert all(int(v, 16) == 0 for v in caps.values()), caps
    assert output.count("Read-only file system") == 3, output
    assert "NESTED_USERNS" not in output
    assert "procsys ro," in output, output
    for path in host_paths:
        assert path not in output, path


async def plant(s: ExecutorStack, folder: str) -> None:
    results = await asyncio.gather(*(s.call("write", {"path": f"/workspace/{rel}", "content": body})
                                      for rel, body in plants(folder).items()))
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]


async def test_planted_modules_never_run_at_a_sandbox_start(executor_one: ExecutorStack) -> None:
    s = executor_one
    user_root = s.storage / "u1"
    assert (await s.shell("true")).ok  # the sandbox is up: the plants go in as the model would write them
    await plant(s, "")
    await plant(s, "task")  # the calls' cwd
    r = await s.shell(KILL_RUNNER)
    assert not r.ok, r.output
    # The next call starts a fresh warm runner; a background process starts a sandbox of its own.
    r = await s.shell(INSIDE)
    assert r.ok, r.error
    assert_locked_down(r.output, [str(s.root), str(s.storage)])
    r = await s.call("read", {"path": "/workspace/task/json.py"})
    assert r.ok and "posix" in r.output
    r = await s.call("shell", {"command": INSIDE, "background": True})
    assert r.ok, r.error
    proc_id = r.meta["proc_id"]
    for _ in range(100):
        r = await s.call("check_process", {"proc_id": proc_id})
        if "exited" in r.output:
            break
        await asyncio.sleep(0.1)
    assert "exited (exit code 0)" in r.output, r.output
    assert_locked_down(r.output, [str(s.root), str(s.storage)])
    assert root_markers(user_root) == []
    assert markers(user_root) == []  # not even after the drop: nothing of the workspace is on the runner's path
    # User code itself may import them (as the sandbox user, never uid 0): the plants are live.
    r = await s.shell("cd /workspace/task && python3 -c 'import json'")
    assert r.ok, r.error
    assert markers(user_root) and root_markers(user_root) == [], markers(user_root)


def _plant_turn() -> dict:
    calls = [{"name": "write", "arguments": {"path": f"/workspace/{rel}", "content": body}}
             for rel, body in plants("").items()]
    return {"text": "Preparing the workspace.", "tool_calls": calls}


async def test_hijack_through_a_real_run_never_runs_as_root(stack: Stack) -> None:
    stack.fake.script("KEY-hijack", [
        _plant_turn(),
        {"text": "Restarting the runner.", "tool_calls": [{"name": "shell", "arguments": {"command": KILL_RUNNER}}]},
        {"text": "Looking around.", "tool_calls": [{"name": "shell", "arguments": {"command": INSIDE}}]},
        {"text": "Done."},
    ])
    token = await stack.login("mallory")
    task = await stack.create_task(token, "Hijack")
    r = await stack.post(token, task["task_id"], "KEY-hijack set up my project")
    assert r.status_code == 202, r.text
    events = await stack.events(token, r.json()["events_url"], timeout=60)
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-1]
    results = [e["data"] for e in events if e["event"] == "tool_result"]
    writes = [t for t in results if t["name"] == "write"]
    assert len(writes) == len(plants("")) and all(t["ok"] for t in writes)
    user_root = stack.settings.storage_root / "mallory"
    assert root_markers(user_root) == [] and markers(user_root) == []
    # What the model saw of the fresh sandbox (the last request carries the last tool result).
    tool_messages = [m for m in stack.fake.requests[-1]["messages"] if m.get("role") == "tool"]
    assert_locked_down(str(tool_messages[-1]["content"]), [str(stack.settings.storage_root)])
