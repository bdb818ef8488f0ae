"""Per-user cost budgets through the real services (issue 26 item 8): gateway -> runner loop with the
fake model -> usage events; the reservation before each streamed call, the 429 for a new message."""

from __future__ import annotations

import asyncio

from tests.helpers.db import db_exec, db_rows
from tests.helpers.stack import Stack

# The fake profile: input $1/Mtok, output $2/Mtok, max_output 2048 (tests/e2e/conftest.py).
WRITE = {"name": "write", "arguments": {"path": "n.txt", "content": "x\n"}}


def _set_budget(stack: Stack, user_id: str, daily: float | None, monthly: float | None = None) -> None:
    db_exec(stack.settings.zcbot_db_url,
            "update users set budget_daily_usd=:d, budget_monthly_usd=:m where user_id=:u", d=daily, m=monthly, u=user_id)


def _spent(stack: Stack, user_id: str) -> float:
    return float(db_rows(stack.settings.zcbot_db_url,
                         "select coalesce(sum(cost), 0) from usage_events where user_id=:u", u=user_id)[0][0])


async def test_a_budget_reached_mid_stream_stops_the_run_before_the_next_call(stack: Stack) -> None:
    token = await stack.login("bea")
    _set_budget(stack, "bea", 0.5)
    # The first (streamed) call reports a prompt far larger than estimated: $0.495 + its output.
    stack.fake.script("KEY-budget", [
        {"text": "writing", "tool_calls": [WRITE], "chunk_delay": 0.01,
         "usage": {"prompt_tokens": 495_000, "completion_tokens": 1000}},
        {"text": "never asked for"},
    ])
    task = await stack.create_task(token, "Budget")
    stack.fake.clear_requests()
    r = await stack.post(token, task["task_id"], "KEY-budget 写一个文件")
    assert r.status_code == 202, r.text
    events = await stack.events(token, r.json()["events_url"])
    names = [e["event"] for e in events]
    assert names.count("llm_start") == 1 and "tool_result" in names, names  # the tool ran; no second call
    assert len(stack.fake.requests) == 1
    errors = [e["data"] for e in events if e["event"] == "error"]
    assert errors and errors[0]["code"] == "budget_exceeded", errors
    assert "每日费用上限" in errors[0]["msg"] and "重置" in errors[0]["msg"], errors  # Chinese by default
    assert events[-1]["data"]["status"] == "error"
    assert _spent(stack, "bea") > 0.495
    assert db_rows(stack.settings.zcbot_db_url, "select count(*) from budget_reservations where user_id='bea'")[0][0] == 0
    # A new message is refused at once, in the user's language, naming the limit and its reset.
    r = await stack.post(token, task["task_id"], "please go on")
    assert r.status_code == 429, r.text
    assert "daily cost limit" in r.json()["detail"] and "resets at" in r.json()["detail"]
    async with stack.client(token) as c:
        usage = (await c.get("/v1/me/usage")).json()
    assert usage["daily"]["limit_usd"] == 0.5 and usage["daily"]["spent_usd"] > 0.495
    assert usage["monthly"]["limit_usd"] is None and usage["month_usage"]["calls"] == 1
    # An admin raises the limit through the API: the user may go on.
    await stack.login("root")
    db_exec(stack.settings.zcbot_db_url, "update users set role='admin', email='root@x.test' where user_id='root'")
    db_exec(stack.settings.zcbot_db_url, "update users set email='bea@x.test' where user_id='bea'")
    admin = await stack.login("root")  # the role change revoked the older token
    async with stack.client(admin) as c:
        bad = await c.put("/v1/admin/users/bea@x.test/budget", json={"daily_usd": -1})
        assert bad.status_code == 422, bad.text
        assert (await c.put("/v1/admin/users/nobody@x.test/budget", json={"daily_usd": 1})).status_code == 404
        put = await c.put("/v1/admin/users/bea@x.test/budget", json={"daily_usd": 5, "monthly_usd": None})
        assert put.status_code == 200, put.text
        assert put.json()["daily"]["limit_usd"] == 5.0 and put.json()["daily_usd"] == 5.0
    async with stack.client(token) as c:
        assert (await c.put("/v1/admin/users/bea@x.test/budget", json={"daily_usd": 99})).status_code == 403
    stack.fake.script("KEY-budget-2", [{"text": "ok then"}])
    r = await stack.post(token, task["task_id"], "KEY-budget-2 go on")
    assert r.status_code == 202, r.text
    events = await stack.events(token, r.json()["events_url"])
    assert events[-1]["data"]["status"] == "ok", events[-3:]


async def test_concurrent_runs_of_one_user_cannot_overspend(stack: Stack) -> None:
    """Three runs at once, each wanting four calls at the full output limit: together they stay
    under the limit (each call's real cost is within its reservation), and the budget stops them."""
    token = await stack.login("carl")
    limit = 0.02  # two calls fit (each reserves ~$0.0095), not three: concurrent first calls must queue
    _set_budget(stack, "carl", None, limit)  # the monthly limit this time
    full = {"completion_tokens": 2048}  # the most a call may produce (max_output)
    tasks = []
    for i in range(3):
        stack.fake.script(f"KEY-conc{i}", [{"tool_calls": [WRITE], "usage": full, "chunk_delay": 0.005}] * 4
                          + [{"text": "done", "usage": full}])
        tasks.append((await stack.create_task(token, f"Conc{i}"))["task_id"])
    posts = await asyncio.gather(*(stack.post(token, t, f"KEY-conc{i} go") for i, t in enumerate(tasks)))
    assert all(p.status_code == 202 for p in posts), [p.text for p in posts]
    streams = await asyncio.gather(*(stack.events(token, p.json()["events_url"], timeout=60) for p in posts))
    codes = [e["data"].get("code") for events in streams for e in events if e["event"] == "error"]
    assert "budget_exceeded" in codes, codes
    assert all("monthly cost limit" in e["data"]["msg"]  # the user wrote English
               for events in streams for e in events if e["event"] == "error")
    spent = _spent(stack, "carl")
    assert 0 < spent <= limit, spent
    assert db_rows(stack.settings.zcbot_db_url, "select count(*) from budget_reservations where user_id='carl'")[0][0] == 0


async def test_the_context_fold_call_reserves_too(stack: Stack) -> None:
    """A window over the fold threshold: the summary call is refused by the budget before it is sent
    (the fold fails as any failed fold), and the run's first chat call ends the run."""
    from pathlib import Path

    from tests.helpers.stack import write_fake_profile
    from zcbot_core.db.engine import make_engine, make_sessionmaker
    from zcbot_core.runstate.transitions import append_message

    write_fake_profile(Path(stack.env["ZCBOT_MODELS_DIR"]), stack.fake.base_url, name="small",
                       reliable_context=6000, max_context=32000)
    token = await stack.login("fay")
    _set_budget(stack, "fay", 0.006)  # below one worst case of the ~8K-token window (~$0.008 + output)
    task = await stack.create_task(token, "Fold", model_profile="small")
    engine = make_engine(stack.settings.zcbot_db_url, pool_size=1, max_overflow=1)
    try:
        async with make_sessionmaker(engine)() as session, session.begin():
            for n in range(8):
                await append_message(session, task["task_id"], {"role": "user", "content": f"turn {n} " + "数据" * 10})
                await append_message(session, task["task_id"], {"role": "assistant", "content": "行 " * 1500})
    finally:
        await engine.dispose()
    stack.fake.clear_requests()
    r = await stack.post(token, task["task_id"], "继续汇总")
    assert r.status_code == 202, r.text  # the floor (one full output, $0.004) still fits
    events = await stack.events(token, r.json()["events_url"])
    assert [e["data"]["phase"] for e in events if e["event"] == "context_fold"] == ["start", "failed"]
    assert [e["data"]["code"] for e in events if e["event"] == "error"] == ["budget_exceeded"]
    assert stack.fake.requests == [] and _spent(stack, "fay") == 0
