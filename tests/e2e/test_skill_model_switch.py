"""A built-in skill's `model:` switches the run's model (issue 40, seed 003 §3.5), through the real
stack: the `proposal` skill declares `model: deepseek_v4.pro`; this stack's `deepseek_v4` profile
file points its variants at the fake model (distinct model names, so each request says which
profile made it).

- the switch: the next LLM call uses the new profile, `model_switch` is streamed, the task row
  keeps it and the next run starts on it;
- "切失败降级原模型": a profile that cannot be used (its API key unset) is not switched to, with a
  warning in the user's language (Chinese by default, English for an English user); a switched-to
  profile whose first call fails is switched back (event, row, warning) and the step is answered
  by the original model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from tests.helpers.stack import FAKE_KEY_ENV, Stack
from zcbot_core.db.engine import make_engine, make_sessionmaker
from zcbot_core.db.models import Task

PROFILE = """model: openai/fake-flash
api_base: {base}
api_key_env: {key}
max_context: 64000
reliable_context: 32000
max_output: 2048
parallel_tools: true
max_iterations: 30
pricing: {{input_per_mtok: 1.0, output_per_mtok: 2.0, cached_input_per_mtok: 0.5}}
variants:
  flash: {{}}
  pro:
    model: openai/fake-pro
"""
LOAD = {"tool_calls": [{"name": "load_skill", "arguments": {"name": "proposal"}}]}


async def _stack(stack: Stack, key_env: str = FAKE_KEY_ENV) -> Stack:
    models = Path(stack.env["ZCBOT_MODELS_DIR"])
    (models / "deepseek_v4.yaml").write_text(PROFILE.format(base=stack.fake.base_url, key=key_env))
    await stack.add_runner()
    return stack


def _models(stack: Stack, key: str) -> list[str]:
    """The `model` of each request the fake received for this script, in order."""
    return [r["model"] for r in stack.fake.requests if key in str(r["messages"])]


async def _task_profile(stack: Stack, task_id: str) -> str | None:
    engine = make_engine(stack.settings.zcbot_db_url, pool_size=1, max_overflow=0)
    try:
        async with make_sessionmaker(engine)() as s:
            return await s.scalar(select(Task.model_profile).where(Task.task_id == task_id))
    finally:
        await engine.dispose()


async def _run(stack: Stack, token: str, task: dict[str, Any], text: str) -> list[dict[str, Any]]:
    r = await stack.post(token, task["task_id"], text)
    assert r.status_code == 202, r.text
    events = await stack.events(token, r.json()["events_url"], timeout=60)
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    return events


def _of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["event"] == kind]


async def test_proposal_skill_switches_the_model_for_the_task(bare_stack: Stack) -> None:
    stack = await _stack(bare_stack)
    stack.fake.script("KEY-switch", [LOAD, {"text": "drafting on pro"}])
    token = await stack.login("sam")
    task = await stack.create_task(token, "Grant")
    events = await _run(stack, token, task, "KEY-switch 写一份基金申请书")
    assert [(m["from_profile"], m["to_profile"], m["reason"]) for m in _of(events, "model_switch")] == \
        [("fake", "deepseek_v4.pro", "skill")]
    result = _of(events, "tool_result")[0]
    assert result["name"] == "load_skill" and result["ok"]
    assert _models(stack, "KEY-switch") == ["fake-model", "fake-pro"]  # the next call already on pro
    assert await _task_profile(stack, task["task_id"]) == "deepseek_v4.pro"  # persisted on the task
    assert not _of(events, "warn")
    # the next run of the task starts on the switched model (no automatic switch back)
    stack.fake.script("KEY-again", [{"text": "still pro"}])
    await _run(stack, token, task, "KEY-again 继续")
    assert _models(stack, "KEY-again") == ["fake-pro"]


async def test_an_unusable_profile_is_not_switched_to_and_the_user_is_told(bare_stack: Stack) -> None:
    stack = await _stack(bare_stack, key_env="ZCBOT_TEST_UNSET_PRO_KEY")  # the pro variant's key is not set
    stack.fake.script("KEY-nokey", [LOAD, {"text": "still on fake"}])
    token = await stack.login("ann")
    task = await stack.create_task(token, "Grant")
    events = await _run(stack, token, task, "KEY-nokey 写一份申报书")
    assert not _of(events, "model_switch")
    (warn,) = _of(events, "warn")
    assert "技能建议使用模型 `deepseek_v4.pro`" in warn["msg"] and "ZCBOT_TEST_UNSET_PRO_KEY" in warn["msg"], warn
    assert "继续使用当前模型 `fake`" in warn["msg"]
    assert _models(stack, "KEY-nokey") == ["fake-model", "fake-model"]
    assert await _task_profile(stack, task["task_id"]) in (None, "fake")
    # an English user is told in English
    stack.fake.script("KEY-nokey-en", [LOAD, {"text": "ok"}])
    events = await _run(stack, token, task, "KEY-nokey-en please draft the proposal")
    (warn,) = _of(events, "warn")
    assert warn["msg"].startswith("the skill prefers model `deepseek_v4.pro` but it cannot be used"), warn


async def test_a_failing_switched_model_falls_back_to_the_original(bare_stack: Stack) -> None:
    stack = await _stack(bare_stack)
    # The call after the switch gets a 401 once (the pro request); the same step retried on the
    # original model is then answered.
    stack.fake.script("KEY-fail", [LOAD, {"error": {"status": 401, "message": "invalid api key for pro"},
                                          "fail_first": 1, "text": "answered by the original model"}])
    token = await stack.login("lee")
    task = await stack.create_task(token, "Grant")
    events = await _run(stack, token, task, "KEY-fail 写一份开题报告")
    switches = [(m["from_profile"], m["to_profile"], m["reason"]) for m in _of(events, "model_switch")]
    assert switches == [("fake", "deepseek_v4.pro", "skill"), ("deepseek_v4.pro", "fake", "fallback")]
    warns = [w["msg"] for w in _of(events, "warn")]
    assert any("切换到的模型 `deepseek_v4.pro` 调用失败" in w and "已改回原来的模型 `fake`" in w for w in warns), warns
    assert _models(stack, "KEY-fail") == ["fake-model", "fake-pro", "fake-model"]
    assert await _task_profile(stack, task["task_id"]) == "fake"  # the fallback is persisted too
    assert events[-1]["data"]["status"] == "ok"
    streamed = "".join(d.get("delta") or "" for d in _of(events, "text"))
    assert "answered by the original model" in streamed, streamed
