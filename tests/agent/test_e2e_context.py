"""Context governance through the real stack (gateway -> runner -> fake LLM), issue 9.

The runner calls `prepare_run_context` (soft reset, threshold fold, reload) at every run start.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from tests.helpers.stack import Stack, write_fake_profile
from zcbot_core.accounts.usage import daily_trend, task_usage, usage_by_model, usage_by_user, usage_totals
from zcbot_core.agent.context import COMPRESSED_TAG, SUMMARY_PREFIX, check_protocol
from zcbot_core.agent.fold import FOLD_MARKER, SUMMARY_HEADINGS
from zcbot_core.db.engine import make_engine, make_sessionmaker
from zcbot_core.db.models import Message, Task, UsageEvent
from zcbot_core.runstate.transitions import append_message

SMALL = dict(reliable_context=6000, max_context=32000)  # compress from ~3000 tokens, fold from ~5100
BIG_RESULT = "".join(f"{i:04d} | sample row with a measurement of {i * 3.25:.2f} units\n" for i in range(70))  # ~3.5K chars


@pytest.fixture
async def db(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    write_fake_profile(Path(stack.env["ZCBOT_MODELS_DIR"]), stack.fake.base_url, name="small", **SMALL)
    engine = make_engine(stack.settings.zcbot_db_url, pool_size=2, max_overflow=2)
    yield make_sessionmaker(engine)
    await engine.dispose()


def history_turn(n: int, result: str = BIG_RESULT) -> list[dict[str, Any]]:
    call_id = f"call_hist_{n}"
    return [
        {"role": "user", "content": f"turn {n}: summarise data/file{n}.csv"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "read", "arguments": json.dumps({"path": f"data/file{n}.csv"})}}]},
        {"role": "tool", "tool_call_id": call_id, "name": "read", "content": f"[file{n}]\n{result}"},
        {"role": "assistant", "content": f"file{n}.csv has 70 rows; the total is {n * 1000 + 7}."},
    ]


async def seed(db: async_sessionmaker[AsyncSession], task_id: str, payloads: list[dict[str, Any]],
               age_hours: float = 0.0) -> None:
    async with db() as session, session.begin():
        for payload in payloads:
            await append_message(session, task_id, payload)
        if age_hours:
            await session.execute(text("update messages set created_at = now() - make_interval(secs => :s) "
                                       "where task_id = :t"), {"s": age_hours * 3600, "t": task_id})


async def run(stack: Stack, token: str, task_id: str, content: str) -> list[dict[str, Any]]:
    r = await stack.post(token, task_id, content)
    assert r.status_code == 202, r.text
    events = await stack.events(token, r.json()["events_url"])
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    return events


async def task_row(db: async_sessionmaker[AsyncSession], task_id: str) -> Task:
    async with db() as session:
        return (await session.execute(select(Task).where(Task.task_id == task_id))).scalar_one()


def chat_requests(stack: Stack, since: int) -> list[dict[str, Any]]:
    return [r for r in stack.fake.requests[since:] if FOLD_MARKER not in str(r["messages"][-1].get("content"))]


def as_json(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------

COST_SCRIPT = [
    {"tool_calls": [{"id": "call_fixed_1", "name": "lookup_notes", "arguments": {"topic": "budget"}}],
     "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "cached_tokens": 400}},
    {"text": "The budget notes are not available.",
     "usage": {"prompt_tokens": 1200, "completion_tokens": 80, "cached_tokens": 1000}},
]


async def test_byte_identical_requests_below_threshold_and_costs_add_up(stack: Stack, db: Any) -> None:
    stack.fake.script("KEY-alpha", COST_SCRIPT)
    stack.fake.script("KEY-beta", [{"text": "Noted."}])
    bodies, tasks = [], []
    for user in ("alice", "bob"):
        token = await stack.login(user)
        task = await stack.create_task(token, "Same name")
        tasks.append(task["task_id"])
        start = len(stack.fake.requests)
        await run(stack, token, task["task_id"], "KEY-alpha what do my budget notes say?")
        await run(stack, token, task["task_id"], "KEY-beta thanks, remember that")
        bodies.append([r["messages"] for r in stack.fake.requests[start:]])
    first, second = bodies
    assert len(first) == 3
    # same conversation, same bytes (the system prompt names the task, so it is compared per task:
    # below, each request of a task starts with the previous request's exact bytes)
    assert [as_json(m[1:]) for m in first] == [as_json(m[1:]) for m in second]
    # prefix-cache friendly: each request starts with the previous one's exact bytes, also across
    # runs (the second run reads the first run's messages back from PostgreSQL)
    for before, after in zip(first, first[1:]):
        assert as_json(after[: len(before)]) == as_json(before)
    assert COMPRESSED_TAG not in as_json(first[-1])

    # ---- costs: usage_events == task rows == usage.py aggregates -----------------------------
    token = await stack.login("hank")
    task = await stack.create_task(token, "Costs", model_profile="small")
    tasks.append(task["task_id"])
    await run(stack, token, task["task_id"], "KEY-alpha once more")
    async with db() as session:
        raw = (await session.execute(text(
            "select count(*), coalesce(sum(cost), 0), coalesce(sum((units->>'prompt_tokens')::bigint), 0), "
            "coalesce(sum((units->>'cached_tokens')::bigint), 0) from usage_events where task_id = any(:t)"),
            {"t": tasks})).one()
        task_sums = (await session.execute(text(
            "select coalesce(sum(cost_usd), 0), coalesce(sum(tokens_in), 0), coalesce(sum(tokens_cached), 0) "
            "from tasks where task_id = any(:t)"), {"t": tasks})).one()
        totals = await usage_totals(session)
        by_model = await usage_by_model(session)
        by_user = await usage_by_user(session)
        trend = await daily_trend(session, 7)
        per_task = [await task_usage(session, t) for t in tasks]
    assert raw[0] == 3 + 3 + 2
    assert float(raw[1]) == pytest.approx(float(task_sums[0]), abs=1e-9)
    assert (int(raw[2]), int(raw[3])) == (int(task_sums[1]), int(task_sums[2]))
    # the test database holds only this test's rows, so the aggregates must match exactly
    assert totals["calls"] == raw[0] and totals["cost_usd"] == pytest.approx(float(raw[1]), abs=1e-6)
    assert totals["prompt_tokens"] == int(raw[2]) and totals["cached_tokens"] == int(raw[3])
    for breakdown in (by_model, by_user, trend):
        assert sum(d["calls"] for d in breakdown) == totals["calls"]
        assert sum(d["cost_usd"] for d in breakdown) == pytest.approx(totals["cost_usd"], abs=1e-6)
        assert sum(d["prompt_tokens"] for d in breakdown) == totals["prompt_tokens"]
    assert {d["model_profile"]: d["calls"] for d in by_model} == {"fake": 6, "small": 2}
    assert {d["user_id"]: d["calls"] for d in by_user} == {"alice": 3, "bob": 3, "hank": 2}
    assert len(trend) == 7 and trend[-1]["calls"] == totals["calls"]
    assert all(t["consistent"] for t in per_task)
    # the profile's pricing (1.0 / 2.0 / cached 0.5 per Mtok) applied to the scripted usage
    scripted = ((1000 - 400) * 1.0 + 400 * 0.5 + 50 * 2.0 + (1200 - 1000) * 1.0 + 1000 * 0.5 + 80 * 2.0) / 1e6
    assert per_task[2]["cost_usd"] == pytest.approx(scripted, abs=1e-6)
    assert json.dumps([totals, by_model, by_user, trend])  # plain JSON-ready values


async def test_compression_then_a_failed_fold_then_a_fold(stack: Stack, db: Any) -> None:
    token = await stack.login("carol")
    task = await stack.create_task(token, "Fold", model_profile="small")
    task_id = task["task_id"]
    stored = [m for n in range(8) for m in history_turn(n)]  # ~8K tokens > 85% of 6000
    await seed(db, task_id, stored)

    # ---- run 1: the summary call fails -> warn, and the run goes on with the compressed window ----
    stack.fake.script(FOLD_MARKER, [{"error": {"status": 400, "message": "summary backend down"}}])
    stack.fake.script("KEY-compress", [
        {"tool_calls": [{"id": "call_new_1", "name": "lookup_notes", "arguments": {"topic": "totals"}}]},
        {"text": "Totals: 7, 1007, 2007."},
    ])
    start = len(stack.fake.requests)
    events = await run(stack, token, task_id, "KEY-compress add up the totals")
    assert [e["data"]["phase"] for e in events if e["event"] == "context_fold"] == ["start", "failed"]
    assert any(e["event"] == "warn" and "summarise" in e["data"]["msg"] for e in events)
    row = await task_row(db, task_id)
    assert row.context_base_idx == 0 and row.context_summary is None
    first, second = [r["messages"] for r in chat_requests(stack, start)]
    newest = len(stored) - 4  # the newest stored turn (plus the new one) is never compressed
    sent_history = first[1:1 + len(stored)]
    for idx, (orig, sent) in enumerate(zip(stored, sent_history, strict=True)):
        assert sent["role"] == orig["role"]
        if orig["role"] == "user" or idx >= newest:
            assert sent == orig, idx
        elif orig["role"] == "assistant":
            assert sent.get("tool_calls") == orig.get("tool_calls") and sent["content"] == orig["content"]
        else:
            assert sent["tool_call_id"] == orig["tool_call_id"] and sent["name"] == orig["name"]
            assert COMPRESSED_TAG in sent["content"] and f"message idx {idx}" in sent["content"]
            assert sent["content"].startswith(orig["content"][:200])
    assert first[-1] == {"role": "user", "content": "KEY-compress add up the totals"}
    assert check_protocol(first) == [] and check_protocol(second) == []
    assert as_json(second[: len(first)]) == as_json(first)  # compression is stable within the run
    async with db() as session:  # the stored history itself is untouched
        rows = (await session.execute(select(Message.payload).where(Message.task_id == task_id)
                                      .order_by(Message.idx))).scalars().all()
    assert rows[: len(stored)] == stored
    full = stored + rows[len(stored):]

    # ---- run 2: the fold succeeds; the request carries the summary ----------------------------
    summary = ("## Goal\nSum the totals of data/file0.csv .. file7.csv\n## Constraints & decisions\nCSV only\n"
               "## Progress\nfile0..file5 read\n## Open items\nfiles 6 and 7\n## Verbatim facts\n- data/file3.csv total 3007")
    stack.fake.script(FOLD_MARKER, [{"text": summary}])
    stack.fake.script("KEY-after-fold", [{"text": "Continuing with files 6 and 7."}])
    start = len(stack.fake.requests)
    events = await run(stack, token, task_id, "KEY-after-fold go on")
    names = [e["event"] for e in events]
    assert [e["data"]["phase"] for e in events if e["event"] == "context_fold"] == ["start", "done"]
    assert names.index("context_fold") < names.index("llm_start")
    fold_reqs = [r for r in stack.fake.requests[start:] if FOLD_MARKER in str(r["messages"][-1].get("content"))]
    assert len(fold_reqs) == 1
    fold_msgs = fold_reqs[0]["messages"]
    chat = chat_requests(stack, start)
    assert len(chat) == 1
    chat_msgs = chat[0]["messages"]
    row = await task_row(db, task_id)
    base = row.context_base_idx
    # the summary call is the chat prefix up to the cut + the instruction
    assert fold_msgs[0] == chat_msgs[0] and fold_msgs[0]["role"] == "system"
    assert len(fold_msgs) == base + 2 and check_protocol(fold_msgs[:-1]) == []
    assert [m["content"] for m in fold_msgs[1:-1] if m["role"] == "user"] == \
        [m["content"] for m in full[:base] if m["role"] == "user"]
    assert fold_msgs[-1]["role"] == "user" and fold_msgs[-1]["content"].startswith(FOLD_MARKER)
    # stored: the summary, and the base advanced to a user message
    assert row.context_summary == summary and 0 < base < len(full) and full[base]["role"] == "user"
    for heading in SUMMARY_HEADINGS:
        assert f"## {heading}" in row.context_summary
    # the next request: system, the summary, the window from the base on, the new message
    assert chat_msgs[1] == {"role": "user", "content": SUMMARY_PREFIX + summary}
    assert chat_msgs[2:-1] == full[base:]
    assert chat_msgs[-1]["content"] == "KEY-after-fold go on"
    assert COMPRESSED_TAG not in as_json(chat_msgs)  # back under 50%: compression is off

    # ---- run 3: no second fold, and the folded window keeps its bytes --------------------------
    stack.fake.script("KEY-again", [{"text": "Still here."}])
    start = len(stack.fake.requests)
    events = await run(stack, token, task_id, "KEY-again and now?")
    assert "context_fold" not in {e["event"] for e in events}
    again = chat_requests(stack, start)[0]["messages"]
    assert as_json(again[: len(chat_msgs)]) == as_json(chat_msgs)
    async with db() as session:
        kinds = (await session.execute(select(UsageEvent.kind).where(UsageEvent.task_id == task_id)
                                       .order_by(UsageEvent.id))).scalars().all()
        usage = await task_usage(session, task_id)
    # the failed call had no usage; the fold call is billed like any other
    assert kinds == ["chat", "chat", "fold", "chat", "chat"] and usage["consistent"]


async def test_a_gap_resets_the_window_and_new_topic_starts_fresh(stack: Stack, db: Any) -> None:
    token = await stack.login("frank")
    task = await stack.create_task(token, "Gap")
    task_id = task["task_id"]
    stored = [m for n in range(3) for m in history_turn(n, result="small result")]
    await seed(db, task_id, stored, age_hours=7)
    start = len(stack.fake.requests)
    await run(stack, token, task_id, "good morning, where were we?")
    row = await task_row(db, task_id)
    assert row.context_base_idx == 8  # the last turn before the gap is the anchor
    msgs = stack.fake.requests[start]["messages"]
    assert msgs[1:-1] == stored[8:] and msgs[-1]["content"] == "good morning, where were we?"
    # no gap: the window stays
    await run(stack, token, task_id, "and the second file?")
    assert (await task_row(db, task_id)).context_base_idx == 8
    # a new-topic command moves the base to itself and clears the summary
    async with db() as session, session.begin():
        await session.execute(text("update tasks set context_summary = 'old' where task_id = :t"), {"t": task_id})
    start = len(stack.fake.requests)
    await run(stack, token, task_id, "新话题")
    row = await task_row(db, task_id)
    assert row.context_base_idx == 16 and row.context_summary is None
    assert [m["role"] for m in stack.fake.requests[start]["messages"]] == ["system", "user"]
    assert stack.fake.requests[start]["messages"][1]["content"] == "新话题"
