"""Host faults on the fault suite's cluster (issue 42): an executor host lost mid tool call, and clock skew.

- **An executor host lost**: the users' sandboxes live on executor A (their lease points at it); a
  second executor B (another host name, the same storage root: the users' files on shared storage)
  is up. A is killed (-9, its process group: the sandboxed commands with it) while every user's slow
  shell command runs on it. Each run ends with a stated tool error and the model's next turn, never
  hangs; the command's late write never happens; the users' next calls are served by B, which
  finds the files written on A and takes the users' leases over (found here: the executor's NATS
  identity could not probe the dead host, so the leases stayed on it, and a call B served for more
  than two probe intervals was reported "stopped during the call").
- **Clock skew** (`test_clock_skew.py`).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.conftest import FaultEnv
from tests.faults.nemesis import Nemesis
from tests.helpers.sse import SseFollower
from zcbot_fakellm import push_script

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(300)]

USERS = 3
SLOW_COMMAND = "sleep 6; echo late > late.txt"


@dataclass
class User:
    env: FaultEnv
    name: str
    token: str = ""
    task_id: str = ""

    @property
    def url(self) -> str:
        return self.env.stack.gateway_urls[0]

    async def login(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=30) as c:
            r = await c.post("/v1/auth/login", json={"user_id": self.name, "platform_key": self.env.stack.platform_key})
            r.raise_for_status()
            self.token = r.json()["token"]
            r = await c.post("/v1/tasks", json={"name": self.name}, headers=self.auth)
            r.raise_for_status()
            self.task_id = r.json()["task_id"]

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def send(self, key: str, turns: list[dict[str, Any]]) -> SseFollower:
        await push_script(self.env.stack.fake_url, key, turns)
        async with httpx.AsyncClient(base_url=self.url, timeout=30, headers=self.auth) as c:
            r = await c.post(f"/v1/tasks/{self.task_id}/messages", json={"content": f"{key} go"})
            assert r.status_code == 202, r.text
            return SseFollower(self.url, self.token, self.task_id, r.json()["run_id"], reconnect_delay=0.3)


def results(follower: SseFollower) -> list[dict[str, Any]]:
    return [e["data"] for e in follower.events if e["event"] == "tool_result"]


async def lease_of(env: FaultEnv, user_id: str) -> str | None:
    nc = await env.cluster.admin()
    try:
        kv = await nc.jetstream().key_value(env.cluster.topo.sandbox_leases_bucket)
        try:
            entry = await kv.get(user_id)
        except Exception:
            return None
        return (entry.value or b"").decode() or None
    finally:
        await nc.close()


async def test_an_executor_host_lost_mid_tool_call(fault_env: FaultEnv, nemesis: Nemesis) -> None:
    stack = fault_env.stack
    host_a = stack.base_env["ZCBOT_EXECUTOR_HOST"]
    executor_a = next(p for p in stack.procs if p.name == "executor" and p.alive)
    users = [User(fault_env, f"ex{secrets.token_hex(2)}u{u}") for u in range(USERS)]
    for user in users:
        await user.login()
    # Each user's sandbox starts on A (the only executor yet): a file written there.
    firsts = [await u.send(f"KEY-exA-{u.name}", [
        {"tool_calls": [{"name": "write", "arguments": {"path": "before.txt", "content": f"from A {u.name}"}}]},
        {"text": "written"}]) for u in users]
    await asyncio.gather(*(f.run(timeout=60) for f in firsts))
    assert all(results(f) and results(f)[0]["ok"] for f in firsts), [results(f) for f in firsts]
    leases = {u.name: await lease_of(fault_env, u.name) for u in users}
    nemesis.record("sandboxes on A", host=host_a, leases=leases)
    host_b = f"hb{secrets.token_hex(3)}"
    executor_b = stack.service("executor", ZCBOT_EXECUTOR_HOST=host_b)
    await asyncio.to_thread(executor_b.wait_healthy, None, 60.0)

    slow = [await u.send(f"KEY-exSlow-{u.name}", [
        {"tool_calls": [{"name": "shell", "arguments": {"command": SLOW_COMMAND}}]},
        {"text": "the command's host went away; going on"}]) for u in users]
    followers = [asyncio.create_task(f.run(timeout=90)) for f in slow]

    async def all_calling() -> None:
        while not all("tool_call" in f.names() for f in slow):
            await asyncio.sleep(0.1)

    await asyncio.wait_for(all_calling(), 30)
    await asyncio.sleep(1.0)  # the commands run inside A's sandboxes now
    executor_a.kill9()
    killed = time.monotonic()
    nemesis.record("executor A killed", host=host_a, pid=executor_a.pid)
    await asyncio.gather(*followers)
    ended = round(time.monotonic() - killed, 1)
    outcomes = [(f.done or {}).get("data", {}).get("status") for f in slow]
    errors = [results(f)[0]["preview"][:160] if results(f) else None for f in slow]
    nemesis.record("runs ended", after_s=ended, outcomes=outcomes, tool_errors=errors)
    assert outcomes == ["ok"] * USERS, outcomes
    for f in slow:
        res = results(f)
        assert len(res) == 1 and not res[0]["ok"] and "stopped during the call" in res[0]["preview"], res
        assert [e["event"] for e in f.events].count("llm_start") == 2  # the model was told and went on

    # The users' next calls: B takes them (A's lease points at a host nobody serves), on the same files.
    thirds = [await u.send(f"KEY-exB-{u.name}", [
        {"tool_calls": [{"name": "read", "arguments": {"path": "before.txt"}}]}, {"text": "read"}]) for u in users]
    await asyncio.gather(*(f.run(timeout=60) for f in thirds))
    read = [results(f)[0] if results(f) else {} for f in thirds]
    after = {u.name: await lease_of(fault_env, u.name) for u in users}
    nemesis.record("next calls", leases=after, results=[(r.get("ok"), str(r.get("preview"))[:300]) for r in read])
    for user, res in zip(users, read):
        assert res.get("ok") and f"from A {user.name}" in res.get("preview", ""), res
    assert set(after.values()) == {host_b}, after
    # The killed host's commands died with it: none wrote its late file (6 s after it started).
    await asyncio.sleep(max(0.0, killed + 6.0 - time.monotonic()))
    root = Path(stack.base_env["ZCBOT_STORAGE_ROOT"])
    assert not list(root.rglob("late.txt")), list(root.rglob("late.txt"))
    stack.procs.remove(executor_a)  # the next scenario judges the services that are meant to run
