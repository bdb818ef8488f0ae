"""Issue 36: a number the model sends is finite, or the call is refused.

JSON as Python parses it accepts `NaN` and `Infinity`, and `1e309` overflows to infinity; every
comparison with NaN is false, so `timeout: NaN` in a background call passed the `limit <= 0` check
and removed the process's time limit in the executor and in its wrapper. The attacker here is the
model (through a real run: its raw arguments text) and a bus client holding a valid grant (straight
to the executor, past the runner's parsing).
"""

from __future__ import annotations

import json
import math
import secrets

import pytest

from tests.helpers.executor_stack import Stack as ExecutorStack
from tests.helpers.executor_stack import wait_no_processes
from tests.helpers.stack import Stack
from tests.security.conftest import scripted_run
from zcbot_core.agent.tool_args import non_finite_path, parse_args

RUN = f"{secrets.randbelow(10**6):06d}"
RAW_NUMBERS = {"nan": "NaN", "infinity": "Infinity", "minus_infinity": "-Infinity", "overflow": "1e309"}


def _sleep(n: int) -> str:
    return f"sleep {n}.{RUN}"


@pytest.mark.parametrize("raw", RAW_NUMBERS.values(), ids=RAW_NUMBERS.keys())
def test_parse_args_refuses_non_finite_numbers_anywhere(raw: str) -> None:
    for text in (f'{{"command": "true", "background": true, "timeout": {raw}}}',
                 f'{{"edits": [{{"line": 1}}, {{"line": {raw}}}]}}'):
        args, error = parse_args(text)
        assert args is None and error is not None and "finite" in error, (text, error)
    assert non_finite_path(json.loads(f'{{"edits": [{{"line": 1}}, {{"line": {raw}}}]}}')) == "edits[1].line"
    assert parse_args('{"timeout": 30.5, "n": 1e308}') == ({"timeout": 30.5, "n": 1e308}, None)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, float("1e309")], ids=["nan", "inf", "-inf", "1e309"])
async def test_executor_refuses_a_non_finite_background_limit_off_the_bus(exec_stack: ExecutorStack,
                                                                          value: float) -> None:
    """A bus client with a valid grant skips the runner: the executor checks the same way."""
    await exec_stack.executor("h1")
    r = await exec_stack.call("shell", {"command": f"exec {_sleep(4250)}", "background": True, "timeout": value})
    assert not r.ok and "finite" in r.error, r
    r = await exec_stack.call("read", {"path": "x.txt", "offset": value})  # every tool, not only `shell`
    assert not r.ok and "finite" in r.error, r
    assert await wait_no_processes(lambda c: c == _sleep(4250), timeout=0.5) == []
    procs = exec_stack.storage / "u1" / ".zcbot_procs"
    assert not procs.exists() or not any(procs.rglob("proc.json")), "a process folder was prepared"


async def test_executor_refuses_a_non_finite_call_timeout(exec_stack: ExecutorStack) -> None:
    await exec_stack.executor("h1")
    r = await exec_stack.call("shell", {"command": "echo ran"}, timeout=math.nan)
    assert not r.ok and "finite" in r.error and "ran" not in r.output, r


@pytest.mark.parametrize("raw", RAW_NUMBERS.values(), ids=RAW_NUMBERS.keys())
async def test_model_background_call_with_a_non_finite_timeout_is_a_tool_error(stack: Stack, raw: str) -> None:
    """Through a real run: the model's raw arguments carry the literal; the call is a tool error the
    model reads, no process starts, the run goes on."""
    n = 4251 + list(RAW_NUMBERS.values()).index(raw)
    arguments = '{"command": "exec ' + _sleep(n) + '", "background": true, "timeout": ' + raw + "}"
    _, events = await scripted_run(stack, f"nan{n}", f"KEY-nonfinite-{n}", [
        {"tool_calls": [{"name": "shell", "arguments": arguments}]},
        {"text": "The call was refused."},
    ])
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    results = [e["data"] for e in events if e["event"] == "tool_result"]
    assert len(results) == 1 and not results[0]["ok"] and "finite" in results[0]["preview"], results
    assert await wait_no_processes(lambda c: c == _sleep(n), timeout=1.0) == []
