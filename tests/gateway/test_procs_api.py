"""GET /v1/procs and POST /v1/procs/{id}/kill (issue 27, seed §8.12) through the real stack: the
gateway asks a real executor over the bus, which reads only that user's process folders."""

from __future__ import annotations

import secrets
import time
from typing import Any

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


async def _timed_procs(client: Any, headers: dict[str, str]) -> tuple[float, Any]:
    started = time.monotonic()
    resp = await client.get("/v1/procs", headers=headers)
    return time.monotonic() - started, resp


async def test_no_executor_yet_is_a_prompt_503_in_the_request_language(app_client: Any, make_user: Any) -> None:
    """Issue 34: while the executor is starting the job cards got a 10 s hang. No executor
    subscribed is known at once; one subscribed but silent (still starting, or stuck) is given
    LIST_TIMEOUT, not the kill's 10 s. Either way: 503, Retry-After, a sentence in the request's
    language; the page keeps its cards and asks again."""
    from zcbot_gateway.routes.procs import LIST_TIMEOUT, TEXTS

    h = await make_user(app_client, "procs-early")
    took, resp = await _timed_procs(app_client, h)
    assert took < 2.0 and resp.status_code == 503, (took, resp.text)
    assert resp.headers["retry-after"] == "5" and resp.json()["detail"] == TEXTS["no_executor"]["zh"]

    rt = app_client.app.state.rt
    silent = await rt.nc.subscribe(rt.topo.exec_procs_subject(), queue=rt.topo.executor_queue_group)
    try:
        await rt.nc.flush()
        took, resp = await _timed_procs(app_client, {**h, "Accept-Language": "en-US,en;q=0.9"})
        assert LIST_TIMEOUT - 0.5 < took < LIST_TIMEOUT + 2.0 and resp.status_code == 503, (took, resp.text)
        assert resp.json()["detail"] == TEXTS["no_executor"]["en"] and resp.headers["retry-after"] == "5"
        assert (await silent.next_msg(timeout=1)).subject == rt.topo.exec_procs_subject()  # it was asked
    finally:
        await silent.unsubscribe()
