"""Layer 5, bad input from the model: tool-call arguments are bounded before they are parsed.

Each case goes through a real run (gateway -> runner loop -> fake model): the model's call gets a
clear tool error, nothing runs, and the run goes on to the model's next turn and ends `ok`.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.db import db_rows
from tests.helpers.stack import Stack
from zcbot_core.agent.tool_args import MAX_ARGS_CHARS, MAX_ARGS_DEPTH, nesting_depth, parse_args

DEEP = "[" * 100_000 + "]" * 100_000  # json.loads alone raises RecursionError on this
DEEP_IN_OBJECT = '{"path": ' + "[" * 5000 + "]" * 5000 + "}"
HUGE = json.dumps({"path": "x.txt", "content": "a" * (MAX_ARGS_CHARS + 10)})

CASES = [
    ("deep_array", DEEP, "nested more than"),
    ("deep_in_object", DEEP_IN_OBJECT, "nested more than"),
    ("huge", HUGE, "too large"),
    ("not_json", '{"path": "x.txt", "content": "cut', "not valid JSON"),
    ("not_object", "[1, 2]", "must be a JSON object"),
]


@pytest.mark.parametrize(("raw", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_parse_args_refuses_with_a_message(raw: str, expected: str) -> None:
    args, error = parse_args(raw)
    assert args is None and error is not None and expected in error


def test_brackets_inside_strings_are_not_nesting() -> None:
    raw = json.dumps({"content": "[" * 10_000})
    assert nesting_depth(raw) <= 1
    args, error = parse_args(raw)
    assert error is None and args == {"content": "[" * 10_000}
    nested = json.dumps({"a": [[[{"b": 1}]]]})
    assert parse_args(nested) == ({"a": [[[{"b": 1}]]]}, None)
    at_limit = "[" * (MAX_ARGS_DEPTH - 1) + "]" * (MAX_ARGS_DEPTH - 1)
    assert parse_args('{"a": ' + at_limit + "}") == ({"a": json.loads(at_limit)}, None)


@pytest.mark.parametrize(("case", "raw", "expected"), CASES[:3], ids=[c[0] for c in CASES[:3]])
async def test_bad_arguments_are_a_tool_error_and_the_run_goes_on(stack: Stack, case: str, raw: str,
                                                                  expected: str) -> None:
    key = f"KEY-bad-args-{case}"
    stack.fake.script(key, [
        {"tool_calls": [{"name": "write", "arguments": raw}]},
        {"text": "Understood, the call was refused."},
    ])
    token = await stack.login("mallory")
    task = await stack.create_task(token, "bad args")
    r = await stack.post(token, task["task_id"], f"{key} go")
    assert r.status_code == 202, r.text
    events = await stack.events(token, r.json()["events_url"], timeout=60)
    names = [e["event"] for e in events]
    assert names[-1] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    assert "error" not in names
    results = [e["data"] for e in events if e["event"] == "tool_result"]
    assert len(results) == 1 and not results[0]["ok"] and expected in results[0]["preview"]
    text = "".join(e["data"]["delta"] for e in events if e["event"] == "text")
    assert "Understood, the call was refused." in text
    # The model saw the error in its next request; the stored tool result says the same.
    second = [b for b in stack.fake.requests if key in json.dumps(b["messages"][1:2])][-1]
    assert expected in second["messages"][-1]["content"]
    rows = db_rows(stack.settings.zcbot_db_url,
                   "select payload->>'content' from messages where task_id=:t and payload->>'role'='tool'",
                   t=task["task_id"])
    assert len(rows) == 1 and expected in rows[0][0]
