"""The ReAct loop (seed 003 §3.1): LLM -> tool calls -> results -> LLM, until the model answers
without tool calls, is cancelled, errors, or stops for lack of progress.

It knows nothing of NATS or PostgreSQL: events go to an `EventSink`, completed steps to a
`StepStore`, tool calls to a `ToolBox`. The runner wires those to the bus and the database; the
benchmark drives the same loop in-process.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from zcbot_core.accounts.budgets import BudgetExceeded
from zcbot_core.agent.cancel import CancelToken, RunCancelled
from zcbot_core.agent.guards import MUTATING_TOOLS, RepeatGuard, StallGuard
from zcbot_core.agent.lang import Lang, cancel_notice, say, stop_text, user_language
from zcbot_core.agent.tool_args import parse_args
from zcbot_core.bus import events as ev
from zcbot_core.llm.client import LlmCallError, LlmResult, Usage, stream_chat
from zcbot_core.llm.profiles import MissingApiKey, Profile
from zcbot_core.llm.retry import RetryPolicy
from zcbot_core.tools.results import ToolOutcome, preview_args

log = logging.getLogger(__name__)

CANCELLED_RESULT = "[cancelled by user]"
RESTARTED_RESULT = ("[the runner executing this call restarted before its result was recorded; "
                    "the call may or may not have run — check its effects before repeating it]")
TRUNCATED_CALL_RESULT = ("[not run: your reply hit the output limit ({limit} tokens) before the arguments of this "
                         "call were complete, so they are cut off. Split the work into smaller calls (for example "
                         "write a large file in several parts, or append to it) and try again.]")
FILTERED_CALL_RESULT = "[not run: the provider's content filter stopped this reply]"
MAX_TRUNCATED_STEPS = 3
"""Consecutive replies cut off inside tool-call arguments before the run stops."""


class EventSink(Protocol):
    async def emit(self, event: ev.RunEvent) -> None: ...


class StepStore(Protocol):
    async def append(self, payload: dict[str, Any], *, kind: str = "chat", tokens_in: int | None = None,
                     tokens_out: int | None = None) -> None: ...

    async def append_llm_step(self, message: dict[str, Any], usage: Usage, cost_usd: float, profile: str,
                              last: bool = False) -> None:
        """The assistant message of one LLM call and the call's usage, stored together. `last`: the run
        ends with this step (no tool calls); a store may then keep it to write with the run's end."""


class CallBudget(Protocol):
    """The user's cost budget around each LLM call (zcbot_core.accounts.budgets): `reserve` before the call
    (raises BudgetExceeded over a limit), `release` once the call's usage is stored."""

    async def reserve(self, profile: Profile, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                      lang: Lang) -> Any: ...

    async def release(self, token: Any) -> None: ...


class ToolBox(Protocol):
    def schemas(self) -> list[dict[str, Any]]: ...

    async def execute(self, name: str, args: dict[str, Any], call_id: str) -> ToolOutcome: ...


@dataclass
class LoopResult:
    status: str  # ok | cancelled | error | stopped
    error: str | None = None
    final_text: str = ""
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class LoopState:
    """Per-run counters (kept outside the loop object so they read as the run's timings)."""

    started: float = field(default_factory=time.monotonic)
    first_token: float | None = None
    llm_seconds: float = 0.0
    tool_seconds: float = 0.0
    llm_calls: int = 0
    tool_calls: int = 0
    # Text streamed by the model call in progress (not stored yet): kept when the run is cancelled.
    partial: list[str] = field(default_factory=list)

    def timings(self) -> dict[str, float]:
        return {
            "ttft": round(self.first_token - self.started, 4) if self.first_token else None,  # null: no token came
            "llm": round(self.llm_seconds, 4),
            "tools": round(self.tool_seconds, 4),
            "llm_calls": float(self.llm_calls),
            "tool_calls": float(self.tool_calls),
        }


def repair_interrupted(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results for calls of the last assistant step that have none (the runner died mid-step)."""
    last_assistant = None
    for i in range(len(history) - 1, -1, -1):
        if history[i].get("role") == "assistant":
            last_assistant = i
            break
        if history[i].get("role") == "user":
            return []
    if last_assistant is None:
        return []
    answered = {m.get("tool_call_id") for m in history[last_assistant + 1:] if m.get("role") == "tool"}
    return [
        {"role": "tool", "tool_call_id": tc["id"], "name": tc["function"]["name"], "content": RESTARTED_RESULT}
        for tc in history[last_assistant].get("tool_calls") or []
        if tc["id"] not in answered
    ]


def needs_llm(history: list[dict[str, Any]]) -> bool:
    """False when the run already finished (last message is a final assistant answer)."""
    if not history:
        return False
    last = history[-1]
    return not (last.get("role") == "assistant" and not last.get("tool_calls"))


class AgentLoop:
    def __init__(
        self,
        *,
        run_id: str,
        profile: Profile,
        system_prompt: str,
        tools: ToolBox,
        sink: EventSink,
        store: StepStore,
        cancel: CancelToken,
        prepare: Any = None,
        retry: RetryPolicy | None = None,
        budget: CallBudget | None = None,
    ) -> None:
        self.run_id = run_id
        self.profile = profile
        self.system_prompt = system_prompt
        self.tools = tools
        self.sink = sink
        self.store = store
        self.cancel = cancel
        # Context preparation (compression) is pluggable: a callable(messages, profile) -> messages.
        self.prepare = prepare
        self.state = LoopState()
        # Transient provider failures (429, 503, a dropped connection before any output) are tried again.
        self.retry = retry if retry is not None else RetryPolicy()
        self.budget = budget
        self.truncated_steps = 0
        self.repeat = RepeatGuard()
        self.stall = StallGuard()
        self.lang: Lang = "zh"  # set from the window at the start of each run
        # Armed by a skill's model switch until the new model first answers: called with the error
        # of a failed call, True when it switched back (the step is then tried again once).
        self.switch_back: Callable[[BaseException], Awaitable[bool]] | None = None

    async def emit(self, event: ev.RunEvent) -> None:
        await self.sink.emit(event)

    async def run(self, history: list[dict[str, Any]]) -> LoopResult:
        """`history` is the task's window as stored (LiteLLM messages), ending in the user turn."""
        messages = list(history)
        self.lang = self.repeat.lang = self.stall.lang = user_language(messages)
        try:
            for repaired in repair_interrupted(messages):
                await self.store.append(repaired)
                messages.append(repaired)
                await self.emit(ev.ToolResultEvent(run_id=self.run_id, call_id=repaired["tool_call_id"],
                                                   name=repaired["name"], preview=repaired["content"][:400],
                                                   truncated=False, ok=False))
            if not needs_llm(messages):
                if self.cancel.cancelled:  # cancelled, and an earlier attempt stored its cancelled answer
                    await self.emit(ev.Cancelled(run_id=self.run_id, reason=self.cancel.reason))
                    return self._result("cancelled", error=None)
                return self._result("ok", final_text=str(messages[-1].get("content") or ""))
            for step in range(1, self.profile.max_iterations + 1):
                self.cancel.check()
                result = await self._llm_step(messages, step)
                assistant = result.message
                messages.append(assistant)
                tool_calls = assistant.get("tool_calls") or []
                unfinished = await self._unfinished(messages, result.finish_reason, tool_calls)
                if unfinished is not None:
                    return unfinished if isinstance(unfinished, LoopResult) else await self._stop(unfinished)
                if result.finish_reason == "length" and tool_calls:
                    continue  # the model was told its calls were cut off; it tries again, smaller
                if not tool_calls:
                    return self._result("ok", final_text=assistant.get("content") or "")
                stop = await self._tool_step(messages, tool_calls)
                if stop:
                    return await self._stop(stop)
            return await self._stop(stop_text("max_steps_stop", self.lang, steps=self.profile.max_iterations))
        except RunCancelled as exc:
            await self._store_cancelled(exc.reason)
            await self.emit(ev.Cancelled(run_id=self.run_id, reason=exc.reason))
            return self._result("cancelled", error=None)
        except MissingApiKey as exc:
            await self.emit(ev.ErrorEvent(run_id=self.run_id, msg=str(exc), code="missing_api_key"))
            return self._result("error", error=str(exc))
        except BudgetExceeded as exc:  # before a call: nothing of it was sent or spent
            await self.emit(ev.ErrorEvent(run_id=self.run_id, msg=str(exc), code=exc.code))
            return self._result("error", error=str(exc))
        except LlmCallError as exc:
            await self.emit(ev.ErrorEvent(run_id=self.run_id, msg=str(exc), code="llm_error"))
            return self._result("error", error=str(exc))

    async def _store_cancelled(self, reason: str) -> None:
        """History tells the truth: the partial answer streamed so far and a notice are stored as
        one assistant message of kind "cancelled" (a reload shows both; the next run's model sees
        that it was interrupted). Not for "shutdown": that run is handed back and resumed; nor for
        "superseded": another runner took the run over and writes its history."""
        if reason in ("shutdown", "superseded"):
            return
        partial = "".join(self.state.partial).strip()
        notice = cancel_notice(reason, self.lang)
        content = f"{partial}\n\n{notice}" if partial else notice
        await self.store.append({"role": "assistant", "content": content}, kind="cancelled")

    def _result(self, status: str, error: str | None = None, final_text: str = "") -> LoopResult:
        return LoopResult(status=status, error=error, final_text=final_text, timings=self.state.timings())

    async def _stop(self, reason: str) -> LoopResult:
        await self.emit(ev.Warn(run_id=self.run_id, msg=reason))
        await self.store.append({"role": "assistant", "content": reason}, kind="guard")
        return self._result("stopped", final_text=reason)

    async def _unfinished(self, messages: list[dict[str, Any]], finish: str,
                          tool_calls: list[dict[str, Any]]) -> LoopResult | str | None:
        """What a reply that did not finish normally becomes: its tool calls are never run (cut-off
        arguments may parse and still be wrong: a file written half); a text answer ends the run with
        a warning saying so. None: the reply finished, or the loop goes on (`length` in tool calls)."""
        if finish == "length":
            limit = self.profile.max_output
            if tool_calls:
                self.truncated_steps += 1
                for call in tool_calls:
                    await self._record_tool(messages, call, TRUNCATED_CALL_RESULT.format(limit=limit), ok=False)
                if self.truncated_steps >= MAX_TRUNCATED_STEPS:
                    return stop_text("truncated_stop", self.lang, count=self.truncated_steps, limit=limit)
                await self.emit(ev.Warn(run_id=self.run_id, msg=say("call_truncated_warn", self.lang, limit=limit)))
                return None
            text = str(messages[-1].get("content") or "")
            await self.emit(ev.Warn(run_id=self.run_id, msg=say("answer_truncated_warn", self.lang, limit=limit)))
            return self._result("ok", final_text=text)
        self.truncated_steps = 0
        if finish == "content_filter":
            for call in tool_calls:
                await self._record_tool(messages, call, FILTERED_CALL_RESULT, ok=False)
            if tool_calls:
                return say("filtered_stop", self.lang)
            await self.emit(ev.Warn(run_id=self.run_id, msg=say("filtered_warn", self.lang)))
            return self._result("ok", final_text=str(messages[-1].get("content") or ""))
        return None

    def _outgoing(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        body = [{"role": "system", "content": self.system_prompt}, *messages]
        if self.prepare is not None:
            body = self.prepare(body, self.profile)
        return body

    async def _llm_step(self, messages: list[dict[str, Any]], step: int) -> LlmResult:
        try:
            result = await self._llm_step_once(messages, step)
        except (LlmCallError, MissingApiKey) as exc:
            back, self.switch_back = self.switch_back, None
            if back is None or not await back(exc):
                raise
            result = await self._llm_step_once(messages, step)
        self.switch_back = None  # the model answered: the switch held
        return result

    async def _llm_step_once(self, messages: list[dict[str, Any]], step: int) -> LlmResult:
        outgoing, schemas = self._outgoing(messages), self.tools.schemas() or None
        held = None if self.budget is None else await self.budget.reserve(self.profile, outgoing, schemas, self.lang)
        try:
            return await self._call(outgoing, schemas, step)
        finally:  # the call's usage is stored (or it failed and cost nothing recorded): reconcile
            if self.budget is not None:
                await self.budget.release(held)

    async def _call(self, outgoing: list[dict[str, Any]], schemas: list[dict[str, Any]] | None,
                    step: int) -> LlmResult:
        await self.emit(ev.LlmStart(run_id=self.run_id, step=step, model=self.profile.name))
        state = self.state

        async def on_text(delta: str) -> None:
            state.first_token = state.first_token or time.monotonic()
            state.partial.append(delta)
            await self.emit(ev.TextDelta(run_id=self.run_id, delta=delta))

        async def on_reasoning(delta: str) -> None:
            state.first_token = state.first_token or time.monotonic()
            await self.emit(ev.ReasoningDelta(run_id=self.run_id, delta=delta))

        async def on_retry(why: str, wait: float, attempt: int) -> None:
            await self.emit(ev.Warn(run_id=self.run_id, msg=say("retry_warn", self.lang, why=why, wait=wait,
                                                               attempt=attempt + 1, attempts=self.retry.retries + 1)))

        started = time.monotonic()
        state.partial.clear()
        try:
            result = await self.cancel.race(
                stream_chat(self.profile, outgoing, schemas, on_text, on_reasoning,
                            retry=self.retry, on_retry=on_retry)
            )
        finally:
            state.llm_seconds += time.monotonic() - started
            state.llm_calls += 1
        if result.first_token_at and not state.first_token:
            state.first_token = result.first_token_at
        state.partial.clear()  # stored below with the step
        await self.store.append_llm_step(result.message, result.usage, result.cost_usd, self.profile.name,
                                         last=not result.message.get("tool_calls"))
        await self.emit(
            ev.LlmEnd(
                run_id=self.run_id,
                prompt_tokens=result.usage.prompt_tokens,
                completion_tokens=result.usage.completion_tokens,
                cached_tokens=result.usage.cached_tokens,
                cost_usd=result.cost_usd,
            )
        )
        return result

    async def _tool_step(self, messages: list[dict[str, Any]], tool_calls: list[dict[str, Any]]) -> str | None:
        net_output = False
        for position, call in enumerate(tool_calls):
            if self.cancel.cancelled:
                for rest in tool_calls[position:]:
                    await self._record_tool(messages, rest, CANCELLED_RESULT)
                self.cancel.check()
            name = call["function"]["name"]
            call_id = call.get("id") or uuid.uuid4().hex
            args, arg_error = parse_args(call["function"].get("arguments") or "{}")
            await self.emit(ev.ToolCallEvent(run_id=self.run_id, call_id=call_id, name=name, args=args or {},
                                             args_preview=preview_args(args if args is not None else call["function"].get("arguments"))))
            stop = self.repeat.before(name, args) if args is not None else None
            if stop:
                for rest in tool_calls[position:]:
                    await self._record_tool(messages, rest, f"[not run: {stop}]")
                return stop
            started = time.monotonic()
            if arg_error is not None:
                outcome = ToolOutcome.failure(arg_error)
            else:
                try:
                    outcome = await self.cancel.race(self.tools.execute(name, args or {}, call_id))
                except RunCancelled:
                    self.state.tool_seconds += time.monotonic() - started
                    for rest in tool_calls[position:]:
                        await self._record_tool(messages, rest, CANCELLED_RESULT)
                    raise
            self.state.tool_seconds += time.monotonic() - started
            self.state.tool_calls += 1
            new, warning = self.repeat.after(name, args, outcome.output, outcome.ok)
            content = outcome.output if warning is None else f"{outcome.output}\n\n{warning}"
            if warning:
                await self.emit(ev.Warn(run_id=self.run_id, msg=warning.strip("[]")))
            net_output = net_output or (outcome.ok and (new or name in MUTATING_TOOLS))
            await self.emit(ev.ToolResultEvent(run_id=self.run_id, call_id=call_id, name=name,
                                               preview=outcome.preview, truncated=outcome.truncated, ok=outcome.ok))
            await self._record_tool(messages, call, content)
        return self.stall.step(net_output)

    async def _record_tool(self, messages: list[dict[str, Any]], call: dict[str, Any], content: str,
                           ok: bool | None = None) -> None:
        """Store a tool result; `ok` given: also tell the client (for a call the loop refused to run)."""
        payload = {"role": "tool", "tool_call_id": call.get("id"), "name": call["function"]["name"], "content": content}
        await self.store.append(payload)
        messages.append(payload)
        if ok is not None:
            await self.emit(ev.ToolResultEvent(run_id=self.run_id, call_id=call.get("id") or "", name=call["function"]["name"],
                                               preview=content[:400], truncated=False, ok=ok))
