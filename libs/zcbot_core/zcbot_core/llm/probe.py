"""`zcbot probe`: reconcile a model profile's claims with real calls (seed 003 §3.3).

Profiles are written by hand; the probe checks what they claim against the live endpoint, through
the same `llm.client.stream_chat` the runner uses (so the profile's features are switched on the
same way), and prints a table:

    claim | profile says | observed | verdict (OK / MISMATCH / ERROR / SKIPPED)

- `basic_chat`: a one-line answer comes back.
- `tool_round_trip`: call -> result -> answer, the way a run does it (the request built by the same
  `agent.context.prepare_messages`, reasoning passed back as the runner passes it): the model must
  call `get_weather`, and its answer after the tool result must quote the result's code. A provider
  that refuses the second request (DeepSeek's thinking-mode `reasoning_content` rule) is an ERROR
  here rather than in every real run.
- `parallel_tools`: the model is asked for two independent tool calls in one turn; a profile with
  `parallel_tools: true` must get both in one reply, one with `false` should get one (two is a
  mismatch too: the profile could switch the feature on). The calls must be the two asked for:
  `get_weather` with a city naming Paris and `get_local_time` with timezone Asia/Tokyo, arguments
  valid JSON (two merged or garbled calls are not parallel tool support).
- `thinking`: `reasoning_content` is (or is not) present in a reply to a small reasoning question.
- `long_context` (only with `--long-context`; it costs ~`reliable_context` input tokens): a needle
  in the middle of a prompt filled to ~90% of `reliable_context` must be found. A context-length
  refusal (OpenAI's "maximum context length", vLLM's "longer than the maximum model length",
  DeepSeek's) is a MISMATCH: the profile claims more than the endpoint takes.

Exit status (`zcbot probe`):
  0  every checked claim is OK (SKIPPED claims were not checked);
  1  a claim is a MISMATCH, or could not be checked (ERROR) — an unverified claim is not a pass;
  2  configuration error before any call: unknown or invalid profile (file:line: key), missing API key.
Explicit only: nothing on the start-up path calls this module.

Each prompt carries a `[probe:<claim>]` key so the fake LLM can script the replies in tests.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sys
from dataclasses import dataclass, field
from typing import Any

from zcbot_core.agent.context import prepare_messages
from zcbot_core.llm.client import LlmCallError, LlmResult, stream_chat
from zcbot_core.llm.profiles import Profile

OK, MISMATCH, ERROR, SKIPPED = "OK", "MISMATCH", "ERROR", "SKIPPED"
LONG_CONTEXT_FILL = 0.9
# How providers say a prompt is over the model's limit: OpenAI and DeepSeek ("This model's maximum
# context length is N tokens", code context_length_exceeded), vLLM ("... is longer than the maximum
# model length of N"), Anthropic ("prompt is too long"), others ("too many tokens", "context window").
CONTEXT_LENGTH_ERRORS = ("context length", "context_length", "too long", "maximum context", "too many tokens",
                         "maximum model length", "max_model_len", "context window", "reduce the length")

PROBE_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_local_time", "description": "Current local time in an IANA time zone.",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}},
]

BASIC_PROMPT = "[probe:basic_chat] Reply with the single word PONG and nothing else."
PARALLEL_PROMPT = ("[probe:parallel_tools] I need two independent facts: the current weather in Paris (get_weather) "
                   "and the current local time in Asia/Tokyo (get_local_time). Neither depends on the other, so "
                   "call both tools now, together in this one reply, before saying anything.")
ROUND_TRIP_PROMPT = ("[probe:tool_round_trip] What is the weather in Paris right now? Use get_weather, then "
                     "answer in one sentence and quote the report code it returns.")
ROUND_TRIP_RESULT = "Paris: 17 °C, light rain. Report code {code}."
ROUND_TRIP_CODE = "WX-58213"  # only in the tool result: an answer quoting it has read the result
THINKING_PROMPT = ("[probe:thinking] A bat and a ball cost 1.10 dollars in total. The bat costs 1.00 dollar more "
                   "than the ball. How much does the ball cost? Think it through, then answer with the amount only.")
LONG_PROMPT = ("[probe:long_context] Somewhere in the archive above there is a line with the vault passcode. "
               "What is the vault passcode? Answer with the digits only.")
FILLER_LINE = ("Line {n}: the harbour office archive lists shipments, invoices, crew rotations and routine "
               "maintenance notes for the week; nothing in this entry is unusual.\n")


@dataclass
class ProbeRow:
    claim: str
    says: str
    observed: str
    verdict: str
    detail: str = ""


@dataclass
class ProbeReport:
    profile: str
    model: str
    rows: list[ProbeRow] = field(default_factory=list)
    cost_usd: float = 0.0

    @property
    def exit_code(self) -> int:
        return 0 if all(r.verdict in (OK, SKIPPED) for r in self.rows) else 1


async def _ignore(_: str) -> None:
    return None


async def _call(profile: Profile, prompt: str | list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                report: ProbeReport, timeout: float) -> LlmResult:
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    # shaped as the runner shapes a run's history (reasoning kept, or filled in, where it must be)
    result = await asyncio.wait_for(stream_chat(profile, prepare_messages(messages, profile), tools, _ignore, _ignore,
                                                timeout=timeout), timeout)
    report.cost_usd += result.cost_usd
    return result


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _error_row(claim: str, says: str, exc: BaseException) -> ProbeRow:
    text = f"{exc.__class__.__name__}: {exc}" if not isinstance(exc, LlmCallError) else str(exc)
    return ProbeRow(claim, says, "call failed", ERROR, text[:300])


async def probe_basic_chat(profile: Profile, report: ProbeReport, timeout: float) -> ProbeRow:
    try:
        result = await _call(profile, BASIC_PROMPT, None, report, timeout)
    except (LlmCallError, TimeoutError) as exc:
        return _error_row("basic_chat", "yes", exc)
    text = str(result.message.get("content") or "").strip()
    if "PONG" in text.upper():
        return ProbeRow("basic_chat", "yes", f"replied {text[:40]!r}", OK)
    if text:
        return ProbeRow("basic_chat", "yes", f"replied {text[:40]!r}", MISMATCH, "the reply ignored the instruction")
    return ProbeRow("basic_chat", "yes", "empty reply", MISMATCH)


async def probe_parallel_tools(profile: Profile, report: ProbeReport, timeout: float) -> ProbeRow:
    says = _yes(profile.parallel_tools)
    try:
        result = await _call(profile, PARALLEL_PROMPT, PROBE_TOOLS, report, timeout)
    except (LlmCallError, TimeoutError) as exc:
        return _error_row("parallel_tools", says, exc)
    calls = result.message.get("tool_calls") or []
    names = ", ".join(c["function"]["name"] for c in calls)
    observed = f"{len(calls)} tool call{'s' if len(calls) != 1 else ''} in one turn" + (f" ({names})" if names else "")
    if not calls and not profile.parallel_tools:
        # The profile claims no parallel calls and none were made: nothing contradicts the claim (whether
        # tools work at all is tool_round_trip's verdict), so this claim was not checked rather than failed.
        return ProbeRow("parallel_tools", says, observed, SKIPPED, "no tool call: see tool_round_trip")
    if not calls:
        return ProbeRow("parallel_tools", says, observed, MISMATCH, "no tool call at all: tools may be unsupported")
    wrong = _wrong_calls(calls)
    if wrong:
        return ProbeRow("parallel_tools", says, observed, MISMATCH, wrong)
    parallel = len(calls) >= 2
    if parallel == profile.parallel_tools:
        return ProbeRow("parallel_tools", says, observed, OK)
    detail = ("the model made one call where two were independent: set parallel_tools: false"
              if profile.parallel_tools else "the model made parallel calls: parallel_tools: true would fit")
    return ProbeRow("parallel_tools", says, observed, MISMATCH, detail)


EXPECTED_ARGS = {"get_weather": ("city", lambda v: "paris" in v.lower()),
                 "get_local_time": ("timezone", lambda v: v.strip() == "Asia/Tokyo")}


def _wrong_calls(calls: list[dict[str, Any]]) -> str:
    """Why the calls are not the ones asked for ("" when they are)."""
    problems = []
    for call in calls:
        name, raw = call["function"]["name"], call["function"].get("arguments") or ""
        if name not in EXPECTED_ARGS:
            problems.append(f"unexpected tool {name!r}")
            continue
        try:
            args = json.loads(raw)
        except ValueError:
            problems.append(f"{name}: arguments are not valid JSON ({raw[:60]!r})")
            continue
        key, fits = EXPECTED_ARGS[name]
        value = args.get(key) if isinstance(args, dict) else None
        if not isinstance(value, str) or not fits(value):
            problems.append(f"{name}: {key} is {value!r}")
    seen = [c["function"]["name"] for c in calls]
    if len(calls) >= 2 and sorted(seen) != sorted(EXPECTED_ARGS):
        problems.append(f"expected one call of each tool, got {', '.join(seen)}")
    return "; ".join(problems)


async def probe_tool_round_trip(profile: Profile, report: ProbeReport, timeout: float,
                                code: str | None = None) -> ProbeRow:
    says = "yes"
    code = code or ROUND_TRIP_CODE
    history: list[dict[str, Any]] = [{"role": "user", "content": ROUND_TRIP_PROMPT}]
    try:
        first = await _call(profile, history, PROBE_TOOLS[:1], report, timeout)
    except (LlmCallError, TimeoutError) as exc:
        return _error_row("tool_round_trip", says, exc)
    calls = first.message.get("tool_calls") or []
    if not calls:
        return ProbeRow("tool_round_trip", says, "answered without calling the tool", MISMATCH,
                        "the model did not call get_weather: tools may be unsupported")
    history.append(first.message)
    history += [{"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                 "content": ROUND_TRIP_RESULT.format(code=code)} for c in calls]
    try:
        second = await _call(profile, history, PROBE_TOOLS[:1], report, timeout)
    except (LlmCallError, TimeoutError) as exc:
        row = _error_row("tool_round_trip", says, exc)
        row.observed = "the request after the tool result failed"
        return row
    answer = str(second.message.get("content") or "")
    if code in answer:
        return ProbeRow("tool_round_trip", says, "call -> result -> answer quoting the result", OK)
    if second.message.get("tool_calls"):
        return ProbeRow("tool_round_trip", says, "called a tool again instead of answering", MISMATCH)
    return ProbeRow("tool_round_trip", says, "the answer ignored the tool result", MISMATCH,
                    f"answer: {answer.strip()[:80]!r}")


async def probe_thinking(profile: Profile, report: ProbeReport, timeout: float) -> ProbeRow:
    says = _yes(profile.thinking) + (f" (effort {profile.reasoning_effort})" if profile.reasoning_effort else "")
    try:
        result = await _call(profile, THINKING_PROMPT, None, report, timeout)
    except (LlmCallError, TimeoutError) as exc:
        return _error_row("thinking", says, exc)
    reasoning = str(result.message.get("reasoning_content") or "")
    observed = f"reasoning_content: {len(reasoning)} chars" if reasoning else "no reasoning_content"
    if bool(reasoning) == profile.thinking:
        return ProbeRow("thinking", says, observed, OK)
    detail = ("the profile says thinking but none came back (is it enabled for this model/endpoint?)"
              if profile.thinking else "the model returns reasoning: thinking: true would fit")
    return ProbeRow("thinking", says, observed, MISMATCH, detail)


def long_context_prompt(target_tokens: int, needle: str) -> str:
    """Filler of about `target_tokens` tokens with the needle line in the middle."""
    line_tokens = max(len(FILLER_LINE) / 4.2, 1.0)  # English prose: ~4.2 chars per token
    lines = [FILLER_LINE.format(n=n) for n in range(1, max(int(target_tokens / line_tokens), 2) + 1)]
    lines.insert(len(lines) // 2, f"Line 0: NOTE — the vault passcode is {needle}. Keep it safe.\n")
    return "".join(lines) + "\n" + LONG_PROMPT


async def probe_long_context(profile: Profile, report: ProbeReport, timeout: float, needle: str | None = None) -> ProbeRow:
    target = int(profile.reliable_context * LONG_CONTEXT_FILL)
    says = f"reliable {profile.reliable_context} tokens"
    needle = needle or str(100000 + secrets.randbelow(900000))
    try:
        result = await _call(profile, long_context_prompt(target, needle), None, report, timeout * 3)
    except (LlmCallError, TimeoutError) as exc:
        text = str(exc).lower()
        if any(k in text for k in CONTEXT_LENGTH_ERRORS):
            return ProbeRow("long_context", says, f"~{target} tokens rejected", MISMATCH, str(exc)[:300])
        return _error_row("long_context", says, exc)
    answer = str(result.message.get("content") or "")
    sent = result.usage.prompt_tokens or target
    if needle in answer:
        return ProbeRow("long_context", says, f"needle found at {sent} prompt tokens", OK)
    return ProbeRow("long_context", says, f"needle missed at {sent} prompt tokens", MISMATCH,
                    f"answer: {answer.strip()[:80]!r}")


async def run_probe(profile: Profile, *, long_context: bool = False, timeout: float = 120.0,
                    needle: str | None = None, round_trip_code: str | None = None) -> ProbeReport:
    """Check every claim of `profile` (sequentially: a rate-limited key should not fail the probe)."""
    report = ProbeReport(profile=profile.name, model=profile.model)
    report.rows.append(await probe_basic_chat(profile, report, timeout))
    report.rows.append(await probe_tool_round_trip(profile, report, timeout, round_trip_code))
    report.rows.append(await probe_parallel_tools(profile, report, timeout))
    report.rows.append(await probe_thinking(profile, report, timeout))
    if long_context:
        report.rows.append(await probe_long_context(profile, report, timeout, needle))
    else:
        report.rows.append(ProbeRow("long_context", f"reliable {profile.reliable_context} tokens",
                                    "not run (use --long-context)", SKIPPED))
    return report


def format_table(report: ProbeReport) -> str:
    header = ("claim", "profile says", "observed", "verdict")
    rows = [(r.claim, r.says, r.observed, r.verdict) for r in report.rows]
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(4)]

    def line(cells: tuple[str, ...]) -> str:
        return " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    out = [f"profile {report.profile} ({report.model})", line(header), "-+-".join("-" * w for w in widths)]
    out += [line(row) for row in rows]
    notes = [f"  {r.claim}: {r.detail}" for r in report.rows if r.detail]
    if notes:
        out += ["", "notes:", *notes]
    out.append(f"\nprobe cost: ${report.cost_usd:.6f}")
    return "\n".join(out)


def run_probe_cli(profile: str | None, long_context: bool) -> int:
    """`zcbot probe [--profile P] [--long-context]`: print the table, return the exit status."""
    from zcbot_core.llm.profiles import get_profile
    from zcbot_core.platform.config import get_settings

    settings = get_settings()  # a CLI entry point (`zcbot probe`): this process's own settings
    chosen = get_profile(settings, profile)  # ConfigError (exit 2) for an unknown profile
    chosen.api_key()  # MissingApiKey (a ConfigError) names the variable before any call
    report = asyncio.run(run_probe(chosen, long_context=long_context))
    print(format_table(report))
    sys.stdout.flush()
    return report.exit_code
