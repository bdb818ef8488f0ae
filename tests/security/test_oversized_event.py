"""Layer 5, bad input from the model: an event over the bus's max payload is cut, never dropped.

Through a real run (gateway -> runner -> fake model): the model writes a 1.2 MB file, so its
`tool_call` event (arguments plus preview) is over NATS's 1 MB limit. The event still reaches the
client over SSE, cut with the marker; the call itself gets a clear tool error (too large for the
bus), and the run ends `ok`.
"""

from __future__ import annotations

import json

from tests.helpers.stack import Stack
from tests.security.conftest import scripted_run
from zcbot_core.bus import events as ev


def test_fit_event_keeps_small_events_and_cuts_every_kind_of_field() -> None:
    small = ev.Warn(run_id="r", msg="hi")
    assert ev.fit_event(small, 1024 * 1024)[0] is small
    limit = 64 * 1024
    cases = [
        ev.ToolCallEvent(run_id="r", call_id="c", name="write", args={"content": "é" * 100_000}, args_preview="p"),
        ev.Done(run_id="r", status="ok", final_text="x" * 200_000),
        ev.ErrorEvent(run_id="r", msg="z" * 140_000),
        ev.ContextFold(run_id="r", phase="z" * 40_000, detail="w" * 40_000),  # two fields, each under the limit
    ]
    for event in cases:
        cut, data = ev.fit_event(event, limit)
        assert len(data) <= limit and type(cut) is type(event)
        assert "truncated by zcbot" in json.dumps(cut.payload(), ensure_ascii=False)
        assert cut.run_id == "r"


async def test_oversized_tool_call_event_arrives_truncated_and_the_run_ends_ok(stack: Stack) -> None:
    key = "KEY-oversized-event"
    content = "a" * 1_200_000
    _task, events = await scripted_run(stack, "mallory", key, [
        {"tool_calls": [{"name": "write", "arguments": json.dumps({"path": "big.txt", "content": content})}]},
        {"text": "The file was too large for one call."},
    ])
    names = [e["event"] for e in events]
    assert names[-1] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    calls = [e["data"] for e in events if e["event"] == "tool_call"]
    assert len(calls) == 1 and calls[0]["name"] == "write"
    assert ev.TRUNCATED_KEY in calls[0]["args"] and "truncated by zcbot" in calls[0]["args"][ev.TRUNCATED_KEY]
    results = [e["data"] for e in events if e["event"] == "tool_result"]
    assert len(results) == 1 and not results[0]["ok"]
    text = "".join(e["data"]["delta"] for e in events if e["event"] == "text")
    assert "too large for one call" in text
