"""GET /v1/procs and POST /v1/procs/{id}/kill (issue 27, seed §8.12) through the real stack: the
gateway asks a real executor over the bus, which reads only that user's process folders."""

from __future__ import annotations

import secrets

from tests.helpers.executor_stack import wait_no_processes, wait_processes
from tests.helpers.stack import Stack, bare_stack, fake_llm, stack  # noqa: F401  (fixtures)
from tests.helpers.wait import wait_for

RUN = f"{secrets.randbelow(10**6):06d}"  # unique sleep durations: other sessions run sandboxes too
LONG = f"sleep 4251.{RUN}"


async def test_list_and_kill_background_processes(stack: Stack) -> None:
    stack.fake.script("KEY-procs", [
        {"text": "Starting.", "tool_calls": [
            {"name": "shell", "arguments": {"command": f"exec {LONG}", "background": True}},
            {"name": "shell", "arguments": {"command": "echo quick-one", "background": True}}]},
        {"text": "Started."},
    ])
    alice, bob = await stack.login("procs-alice"), await stack.login("procs-bob")
    task = await stack.create_task(alice, "Jobs")
    r = await stack.post(alice, task["task_id"], "KEY-procs start")
    assert r.status_code == 202, r.text
    events = await stack.events(alice, r.json()["events_url"], timeout=30)
    assert events[-1]["data"]["status"] == "ok", events[-1]
    await wait_processes(lambda cmd: cmd == LONG)
    try:
        async with stack.client(alice) as c:
            async def both_listed() -> dict | None:
                body = (await c.get("/v1/procs")).json()
                states = {p["command"]: p["state"] for p in body["items"]}
                return body if states.get(f"exec {LONG}") == "running" and states.get("echo quick-one") == "exited" else None

            body = await wait_for(both_listed, 15, what="both processes listed")
            assert body["total"] == 2 and body["page"] == 1 and body["page_size"] == 100
            long = next(p for p in body["items"] if p["command"] == f"exec {LONG}")
            assert long["task_id"] == task["task_id"] and long["kind"] == "shell" and long["exit_code"] is None
            assert long["elapsed_seconds"] >= 0 and long["started_at"] > 0 and long["keep"] is False
            only_task = (await c.get("/v1/procs", params={"task_id": task["task_id"]})).json()
            assert only_task["total"] == 2
            assert (await c.get("/v1/procs", params={"task_id": "nothere"})).json()["total"] == 0
            assert (await c.get("/v1/procs", params={"page_size": 0})).status_code == 422

            async with stack.client(bob) as b:  # another user: sees nothing, cannot kill
                assert (await b.get("/v1/procs")).json()["items"] == []
                denied = await b.post(f"/v1/procs/{long['proc_id']}/kill")
                assert denied.status_code == 404 and denied.json()["code"] == "not_found", denied.text
            assert sorted(await wait_no_processes(lambda cmd: cmd == LONG, timeout=0)) == [LONG]  # still alive

            killed = await c.post(f"/v1/procs/{long['proc_id']}/kill")
            assert killed.status_code == 200, killed.text
            assert killed.json()["proc_id"] == long["proc_id"] and killed.json()["state"] == "killed"
            assert await wait_no_processes(lambda cmd: cmd == LONG, timeout=5) == []
            assert (await c.post("/v1/procs/p0123456789ab/kill")).status_code == 404
            assert (await c.post("/v1/procs/..%2Fx/kill")).status_code in (404, 422)
    finally:
        for left in await wait_no_processes(lambda cmd: cmd == LONG, timeout=0):
            raise AssertionError(f"left running: {left}")
