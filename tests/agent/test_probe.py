"""`zcbot probe` against the fake LLM: claims reconciled with observed behaviour (seed 003 §3.3)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.helpers.stack import FAKE_KEY_ENV, write_fake_profile
from zcbot_core.llm.probe import ERROR, MISMATCH, OK, ROUND_TRIP_CODE, SKIPPED, format_table, run_probe, run_probe_cli
from zcbot_core.llm.profiles import Pricing, Profile
from zcbot_core.platform.config import get_settings
from zcbot_fakellm import FakeLLM

ONE_CALL = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}]
ROUND_TRIP = [{"reasoning": "I should look it up", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
              {"text": f"It is 17 °C with light rain in Paris (report {ROUND_TRIP_CODE})."}]
TWO_CALLS = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                             {"name": "get_local_time", "arguments": {"timezone": "Asia/Tokyo"}}]}]


def profile(fake: FakeLLM, **kw: object) -> Profile:
    base = dict(name="fakeprobe", model="openai/fake-model", api_base=fake.base_url, api_key_env=FAKE_KEY_ENV,
                reliable_context=3000, max_context=8000, parallel_tools=True, thinking=True,
                pricing=Pricing(1.0, 2.0, 0.5))
    base.update(kw)
    return Profile(**base)  # type: ignore[arg-type]


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> FakeLLM:
    monkeypatch.setenv(FAKE_KEY_ENV, "sk-fake")
    llm = FakeLLM(strict=True)
    await llm.start()
    llm.script("[probe:basic_chat]", [{"text": "PONG"}])
    llm.script("[probe:thinking]", [{"reasoning": "ball + (ball + 1) = 1.10", "text": "0.05"}])
    llm.script("[probe:tool_round_trip]", ROUND_TRIP)
    yield llm
    await llm.stop()


async def test_a_model_without_parallel_tools_is_a_mismatch(fake: FakeLLM) -> None:
    fake.script("[probe:parallel_tools]", ONE_CALL)
    report = await run_probe(profile(fake))
    verdicts = {r.claim: r.verdict for r in report.rows}
    assert verdicts == {"basic_chat": OK, "tool_round_trip": OK, "parallel_tools": MISMATCH, "thinking": OK,
                        "long_context": SKIPPED}
    table = format_table(report)
    line = next(row for row in table.splitlines() if row.startswith("parallel_tools"))
    assert "| yes" in line and "1 tool call in one turn (get_weather)" in line and line.endswith("MISMATCH")
    assert report.exit_code == 1 and report.cost_usd > 0
    # two tool calls asked for in one turn, with both tools offered
    body = next(r for r in fake.requests if "[probe:parallel_tools]" in r["messages"][-1]["content"])
    assert {t["function"]["name"] for t in body["tools"]} == {"get_weather", "get_local_time"}
    assert body["parallel_tool_calls"] is True


async def test_claims_that_hold_pass_and_long_context_finds_the_needle(fake: FakeLLM) -> None:
    fake.script("[probe:parallel_tools]", TWO_CALLS)
    fake.script("[probe:long_context]", [{"text": "The passcode is 314159."}])
    report = await run_probe(profile(fake), long_context=True, needle="314159")
    assert [(r.claim, r.verdict) for r in report.rows] == [
        ("basic_chat", OK), ("tool_round_trip", OK), ("parallel_tools", OK), ("thinking", OK), ("long_context", OK)]
    long_body = next(r for r in fake.requests if "[probe:long_context]" in r["messages"][-1]["content"])
    prompt = long_body["messages"][-1]["content"]
    assert "vault passcode is 314159" in prompt and 2000 < len(prompt) / 4 < 4000  # ~90% of 3000 tokens


async def test_thinking_claimed_but_absent_and_single_call_profile(fake: FakeLLM) -> None:
    fake.script("[probe:thinking]", [{"text": "0.05"}])
    fake.script("[probe:parallel_tools]", ONE_CALL)
    report = await run_probe(profile(fake, parallel_tools=False))
    verdicts = {r.claim: r.verdict for r in report.rows}
    assert verdicts["thinking"] == MISMATCH and verdicts["parallel_tools"] == OK


async def test_no_call_under_a_no_parallel_profile_is_not_a_mismatch(fake: FakeLLM) -> None:
    fake.script("[probe:parallel_tools]", [{"text": "I cannot call tools in parallel."}])
    report = await run_probe(profile(fake, parallel_tools=False, thinking=True))
    verdicts = {r.claim: r.verdict for r in report.rows}
    assert verdicts["parallel_tools"] == SKIPPED and report.exit_code == 0
    # ... while a profile claiming parallel calls that got none is still a mismatch
    report = await run_probe(profile(fake, parallel_tools=True))
    assert {r.claim: r.verdict for r in report.rows}["parallel_tools"] == MISMATCH and report.exit_code == 1


async def test_provider_errors_are_reported_not_raised(fake: FakeLLM) -> None:
    fake.script("[probe:basic_chat]", [{"error": {"status": 400, "message": "bad model"}}])
    fake.script("[probe:parallel_tools]", TWO_CALLS)
    report = await run_probe(profile(fake))
    assert report.rows[0].verdict == "ERROR" and "bad model" in report.rows[0].detail
    assert report.exit_code == 1


async def test_cli_prints_the_table_and_exits_1_on_mismatch(fake: FakeLLM, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    models = tmp_path / "models"
    write_fake_profile(models, fake.base_url, name="fakecli", thinking=True)
    monkeypatch.setenv("ZCBOT_MODELS_DIR", str(models))
    get_settings.cache_clear()
    try:
        fake.script("[probe:parallel_tools]", ONE_CALL)
        code = await asyncio.to_thread(run_probe_cli, "fakecli", False)
        assert code == 1
        fake.script("[probe:parallel_tools]", TWO_CALLS)
        assert await asyncio.to_thread(run_probe_cli, "fakecli", False) == 0
    finally:
        get_settings.cache_clear()
    out = capsys.readouterr().out
    assert "claim" in out and "profile says" in out and "observed" in out and "verdict" in out
    assert "parallel_tools" in out and "MISMATCH" in out


BAD_PARALLEL = [
    ("merged", [{"tool_calls": [{"name": "get_weather", "arguments": '{"city": "Paris"}{"timezone": "Asia/Tokyo"}'},
                                {"name": "get_local_time", "arguments": {"timezone": "Asia/Tokyo"}}]}], "not valid JSON"),
    ("same_tool_twice", [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}},
                                         {"name": "get_weather", "arguments": {"city": "Paris"}}]}], "one call of each"),
    ("wrong_argument", [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Berlin"}},
                                        {"name": "get_local_time", "arguments": {"timezone": "Asia/Tokyo"}}]}],
     "city is 'Berlin'"),
]


@pytest.mark.parametrize(("turns", "detail"), [(b[1], b[2]) for b in BAD_PARALLEL], ids=[b[0] for b in BAD_PARALLEL])
async def test_parallel_calls_are_checked_by_name_and_arguments(fake: FakeLLM, turns: list[dict[str, object]],
                                                                detail: str) -> None:
    fake.script("[probe:parallel_tools]", turns)
    report = await run_probe(profile(fake))
    row = next(r for r in report.rows if r.claim == "parallel_tools")
    assert row.verdict == MISMATCH and detail in row.detail, row


async def test_tool_round_trip_failures(fake: FakeLLM) -> None:
    """The round trip catches what the other claims cannot: the provider refusing the request after a
    tool result (DeepSeek's reasoning rule), a model that ignores the result, or one that calls no tool."""
    fake.script("[probe:parallel_tools]", TWO_CALLS)
    fake.script("[probe:tool_round_trip]", [ROUND_TRIP[0], {"error": {
        "status": 400, "message": "The `reasoning_content` in the thinking mode must be passed back to the API."}}])
    row = next(r for r in (await run_probe(profile(fake))).rows if r.claim == "tool_round_trip")
    assert row.verdict == ERROR and "reasoning_content" in row.detail and "after the tool result" in row.observed
    fake.script("[probe:tool_round_trip]", [ROUND_TRIP[0], {"text": "It is sunny."}])
    row = next(r for r in (await run_probe(profile(fake))).rows if r.claim == "tool_round_trip")
    assert row.verdict == MISMATCH and "ignored the tool result" in row.observed
    fake.script("[probe:tool_round_trip]", [{"text": "I think it is sunny."}])
    row = next(r for r in (await run_probe(profile(fake))).rows if r.claim == "tool_round_trip")
    assert row.verdict == MISMATCH


async def test_a_deepseek_thinking_profile_passes_the_round_trip_on_the_strict_fake(fake: FakeLLM) -> None:
    """With an empty-reasoning tool call (issue 20.1) the second request still satisfies DeepSeek's rule."""
    fake.script("[probe:parallel_tools]", TWO_CALLS)
    fake.script("[probe:tool_round_trip]", [{"reasoning": "", "tool_calls": ROUND_TRIP[0]["tool_calls"]}, ROUND_TRIP[1]])
    report = await run_probe(profile(fake, model="deepseek/deepseek-v4-flash", thinking=True))
    assert next(r for r in report.rows if r.claim == "tool_round_trip").verdict == OK
    assert fake.rejected == []


@pytest.mark.parametrize("message", [
    "This model's maximum context length is 32768 tokens. However, you requested 40000 tokens.",
    "The decoder prompt (length 40000) is longer than the maximum model length of 32768.",
    "Invalid request: prompt is too long: 210000 tokens > 200000 maximum",
])
async def test_context_length_errors_are_a_mismatch(fake: FakeLLM, message: str) -> None:
    from zcbot_core.llm.probe import ProbeReport, probe_long_context

    fake.script("[probe:long_context]", [{"error": {"status": 400, "message": message}}])
    row = await probe_long_context(profile(fake), ProbeReport("p", "m"), 30.0)
    assert row.verdict == MISMATCH and "rejected" in row.observed
