"""Long-conversation governance at run start (seed 003 §8.8): soft reset and threshold fold.

Mindset: boundaries, not deletion. No message is ever deleted or rewritten; only the start of the
window fed to the model (`tasks.context_base_idx`) moves, and a summary of what lies before it is
kept in `tasks.context_summary` (injected in memory by `context.window` as a user message). The web
UI still pages through the full history.

**Soft reset** (`plan_reset`, applied by the runner's claim on the window it loads)
- *Gap*: when the new user message comes more than `gap_hours` (6) after the previous message of
  the conversation (push records excluded: they are not in the window), the window restarts at the
  previous turn's user message — not an amnesia wall: the last exchange stays as the anchor for
  "as I said…". The summary is kept.
- *New topic*: a user message that is exactly `/new` or `新话题` (after stripping whitespace) moves the
  base to that message's own idx — which is the task's message count at the moment the user asked
  for the reset — and clears the summary. The marker itself stays the window's first message so the
  run it starts has a user turn to answer, and the window always begins with a user message. (The
  gateway or channels may also intercept the marker; this keeps it correct either way.)

**Fold** (`maybe_fold`)
At run start, when the window reaches `FOLD_RATIO` (85%) of the profile's `reliable_context`, the
oldest part of the window is summarised into a fixed template and the base advances to a user
message (the cut never splits a tool pair, and the window keeps starting with a user message). The
summary call reuses the exact prefix the chat request sends (`prepare_messages` over the same
system prompt and window, cut at that user message) plus one appended instruction, so the provider's
prefix cache hits; the previous summary is part of that prefix and the instruction asks to merge it.
The kept tail aims at `TAIL_RATIO` (30%) of `reliable_context`, so after a fold the window is back
under the 50% compression threshold and stays byte-stable until the next fold. A failed fold is
never fatal: a `warn` event, and the run continues with the full window. The call's usage is
recorded like any other (`usage_events.kind = "fold"`).

Why at run start and not between steps: a run start is a natural seam in a turn-based chat (no tool
pair can be in flight), the window loaded for the run stays consistent, and the cost is a few
seconds before the first token once per fold.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core.accounts.usage import record_usage
from zcbot_core.agent.context import check_protocol, message_idx, prepare_messages, window
from zcbot_core.agent.lang import say, user_language
from zcbot_core.agent.tokens import estimate_tokens, message_tokens, reliable_context
from zcbot_core.bus import events as ev
from zcbot_core.db.models import Message, Task
from zcbot_core.errors import ZcbotError

log = logging.getLogger(__name__)

GAP_HOURS = 6.0
NEW_TOPIC_COMMANDS = frozenset({"/new", "新话题"})
FOLD_RATIO = 0.85
TAIL_RATIO = 0.30
FOLD_MARKER = "[zcbot:context-fold]"
"""Starts the fold instruction; tests script the fake LLM's summary reply by this key."""
SUMMARY_HEADINGS = ("Goal", "Constraints & decisions", "Progress", "Open items", "Verbatim facts")
FOLD_INSTRUCTION = f"""{FOLD_MARKER} Context maintenance — do not continue the task and do not call any tool.

Everything above this message is about to be replaced in your context by a summary that you write now.
If the conversation above starts with an earlier summary, merge it in: nothing it records may be lost.
Write the summary with exactly these five headings, in this order:

## Goal
What the user wants overall and what the current request is.
## Constraints & decisions
Requirements, preferences, specifications and conclusions the user confirmed or that were decided.
## Progress
What has been done: files created or changed, commands run, results obtained.
## Open items
What is unfinished, pending, or was promised next.
## Verbatim facts
File paths, IDs, URLs, names, numbers, dates, versions, error messages and commands, copied character
for character (a bullet each). Never round, paraphrase or omit an exact value.

Write in the language the user writes in (keep the headings as they are). Be dense; at most about
{{words}} words. Reply with the summary only."""

Emit = Callable[[ev.RunEvent], Awaitable[None]]


# ---- soft reset ------------------------------------------------------------------------------

class MessageMeta(NamedTuple):
    """What the soft reset needs of a stored message (content only for short user messages)."""

    idx: int
    role: str | None
    created_at: datetime
    content: str | None = None
    kind: str = "chat"


@dataclass(frozen=True)
class ResetDecision:
    base_idx: int
    clear_summary: bool
    reason: str  # "new_topic" | "gap"


def _is_user(meta: MessageMeta) -> bool:
    return meta.role == "user" and meta.kind == "chat"


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def plan_reset(messages_meta: Sequence[MessageMeta | tuple[Any, ...]], now: datetime, *, base_idx: int = 0,
               gap_hours: float = GAP_HOURS) -> ResetDecision | None:
    """The soft-reset decision for a window (see the module docstring), or None to leave it."""
    metas = sorted((m if isinstance(m, MessageMeta) else MessageMeta(*m) for m in messages_meta), key=lambda m: m.idx)
    # Push records (proactive messages, e.g. a scheduled brief) stay in the window (`context.window`)
    # but are not the user's conversation: they neither count as activity nor serve as anchors.
    metas = [m for m in metas if m.idx >= base_idx and m.kind != "push"]
    if not metas:
        return None
    new_base, clear, reason = base_idx, False, ""
    markers = [m for m in metas if _is_user(m) and isinstance(m.content, str) and m.content.strip() in NEW_TOPIC_COMMANDS]
    if markers and markers[-1].idx > base_idx:
        new_base, clear, reason = markers[-1].idx, True, "new_topic"
    # The gap: between the pending user message and the activity before it; with no pending user
    # message (a resumed run, or a call before the message is stored), between the last activity and now.
    last = metas[-1]
    if _is_user(last):
        before = [m for m in metas if m.idx < last.idx]
        gap = (_aware(last.created_at) - _aware(before[-1].created_at)) if before else timedelta(0)
        anchors = [m for m in before if _is_user(m)]
    else:
        gap = _aware(now) - _aware(last.created_at)
        anchors = [m for m in metas if _is_user(m)]
    if gap >= timedelta(hours=gap_hours) and anchors and anchors[-1].idx > new_base:
        new_base, reason = anchors[-1].idx, "gap"
    if new_base <= base_idx:
        return None
    return ResetDecision(base_idx=new_base, clear_summary=clear, reason=reason)


def soft_reset_base(messages_meta: Sequence[MessageMeta | tuple[Any, ...]], now: datetime, gap_hours: float = GAP_HOURS,
                    *, base_idx: int = 0) -> int | None:
    """The new `context_base_idx`, or None when the window stays where it is.

    `messages_meta`: `MessageMeta(idx, role, created_at, content, kind)` (or tuples in that order)
    of the task's messages from the current base on; `content` is only needed for user messages.
    """
    decision = plan_reset(messages_meta, now, base_idx=base_idx, gap_hours=gap_hours)
    return decision.base_idx if decision else None


def meta_of(idx: int, kind: str, payload: dict[str, Any], created_at: datetime) -> MessageMeta:
    """`MessageMeta` of a stored message (a list content is never a command)."""
    role = payload.get("role")
    content = payload.get("content")
    head = content if role == "user" and isinstance(content, str) and len(content) <= 32 else None
    return MessageMeta(idx=idx, role=role, created_at=created_at, content=head, kind=kind)


# ---- fold ------------------------------------------------------------------------------------

async def load_window(sessions: async_sessionmaker[AsyncSession], task_id: str) -> list[dict[str, Any]]:
    """The task's window as the runner loads it: messages from `context_base_idx`, summary first."""
    async with sessions() as session:
        task, rows = await _load_rows(session, task_id)
    if task is None:
        return []
    return window(rows, int(task.context_base_idx or 0), task.context_summary)


async def _load_rows(session: AsyncSession, task_id: str) -> tuple[Any, list[tuple[int, str, dict[str, Any]]]]:
    task = (await session.execute(
        select(Task.task_id, Task.user_id, Task.run_id, Task.context_base_idx, Task.context_summary)
        .where(Task.task_id == task_id)
    )).one_or_none()
    if task is None:
        return None, []
    rows = (await session.execute(
        select(Message.idx, Message.kind, Message.payload)
        .where(Message.task_id == task_id, Message.idx >= task.context_base_idx)
        .order_by(Message.idx)
    )).all()
    return task, [(r.idx, r.kind, r.payload) for r in rows]


def choose_cut(messages: Sequence[dict[str, Any]], tail_budget: float) -> int | None:
    """Position in `messages` (a window) of the user message the new window starts at, or None.

    The earliest user message (after the window's first stored message) whose tail fits `tail_budget` tokens, else
    the last user message: the most verbatim context that fits. Only stored user messages qualify
    (the injected summary has no idx), so the cut never splits a tool call from its results.
    """
    indexed = [(i, message_idx(m)) for i, m in enumerate(messages) if message_idx(m) is not None]
    if not indexed:
        return None
    first = indexed[0][1]  # the current base: cutting there would fold nothing
    candidates = [i for i, idx in indexed if idx is not None and idx > first and messages[i].get("role") == "user"]
    if not candidates:
        return None
    tail = 0.0
    fits: int | None = None
    position = len(messages)
    for i in reversed(candidates):
        tail += sum(message_tokens(m) for m in messages[i:position])
        position = i
        if tail > tail_budget:
            break
        fits = i
    return fits if fits is not None else candidates[-1]


_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*(.+?)\s*:?\s*$")


def normalize_summary(text: str) -> str:
    """Strip a code fence around the summary and make sure every template heading is present
    (a missing one is appended as "(none recorded)"), so the stored summary has the fixed shape."""
    body = text.strip()
    fence = re.match(r"^```[a-zA-Z]*\n(.*)\n```$", body, re.S)
    if fence:
        body = fence.group(1).strip()
    found = {m.group(1).strip().lower() for line in body.splitlines() if (m := _HEADING.match(line))}
    missing = [h for h in SUMMARY_HEADINGS if h.lower() not in found]
    for heading in missing:
        body += f"\n\n## {heading}\n(none recorded)"
    return body


class FoldError(ZcbotError):
    code = "fold_error"
    pass


def fold_request(system_prompt: str | None, history: list[dict[str, Any]], profile: Any, cut: int,
                 words: int) -> list[dict[str, Any]]:
    """The summary call's messages: the chat request's prefix up to the cut + the instruction."""
    body = [{"role": "system", "content": system_prompt}, *history] if system_prompt else list(history)
    offset = 1 if system_prompt else 0
    prepared = prepare_messages(body, profile)
    prefix = prepared[: cut + offset]
    problems = check_protocol(prefix)
    if problems:
        raise FoldError(f"the history before the cut is not a valid conversation ({problems[0]})")
    return [*prefix, {"role": "user", "content": FOLD_INSTRUCTION.format(words=words)}]


async def maybe_fold(sessions: async_sessionmaker[AsyncSession], task_id: str, profile: Any, emit: Emit, *,
                     system_prompt: str | None = None, tools: list[dict[str, Any]] | None = None,
                     run_id: str | None = None, ratio: float = FOLD_RATIO, budget: Any = None) -> bool:
    """Fold the task's window when it reaches `ratio` of `profile.reliable_context` (see module doc).

    `system_prompt` and `tools` should be what the run's chat requests send, so the summary call
    hits the provider's prefix cache; both are optional. Returns whether a fold was stored.
    Never raises for a failed summary: it emits `context_fold{phase=failed}` and a `warn`.
    `budget` (the run's `agent.loop.CallBudget`): the summary call reserves like a chat call; refused
    over the user's budget, the fold fails as above and the run's first chat call ends the run.
    """
    from zcbot_core.llm.client import stream_chat  # late: keeps this module importable without litellm

    async with sessions() as session:
        task, rows = await _load_rows(session, task_id)
    if task is None:
        return False
    run_id = run_id or task.run_id or ""
    base = int(task.context_base_idx or 0)
    history = window(rows, base, task.context_summary)
    limit = reliable_context(profile)
    system_msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    size = estimate_tokens([*system_msgs, *history])
    if limit <= 0 or size < ratio * limit:
        return False
    cut = choose_cut(history, TAIL_RATIO * limit)
    if cut is None:
        await emit(ev.Warn(run_id=run_id, msg=say("fold_no_turn_warn", user_language(history), size=size,
                                                  percent=size * 100 // limit)))
        return False
    cut_idx = message_idx(history[cut])
    assert cut_idx is not None
    await emit(ev.ContextFold(run_id=run_id, phase="start", detail=(
        f"window ~{size} tokens ({size * 100 // limit}% of {limit}); summarising messages {base}..{cut_idx - 1}")))
    words = max(200, min(1500, int(limit * 0.05 / 1.5)))
    try:
        messages = fold_request(system_prompt, history, profile, cut, words)

        async def ignore(_: str) -> None:
            return None

        held = None if budget is None else await budget.reserve(profile, messages, tools or None,
                                                                 user_language(history))
        try:
            result = await stream_chat(profile, messages, tools or None, ignore, ignore)
            async with sessions() as session, session.begin():
                await record_usage(session, user_id=task.user_id, task_id=task_id, run_id=run_id or None,
                                   model_profile=getattr(profile, "name", None), kind="fold",
                                   prompt_tokens=result.usage.prompt_tokens,
                                   completion_tokens=result.usage.completion_tokens,
                                   cached_tokens=result.usage.cached_tokens, cost_usd=result.cost_usd)
        finally:
            if budget is not None:
                await budget.release(held)
        text = str(result.message.get("content") or "").strip()
        if result.message.get("tool_calls") and not text:
            raise FoldError("the model answered the summary request with a tool call")
        if not text:
            raise FoldError("the model returned an empty summary")
        summary = normalize_summary(text)
        async with sessions() as session, session.begin():
            stored = await session.execute(
                update(Task).where(Task.task_id == task_id, Task.context_base_idx == base)
                .values(context_summary=summary, context_base_idx=cut_idx)
            )
            if stored.rowcount != 1:
                raise FoldError("the task's window changed while it was being summarised")
    except Exception as exc:  # never fatal: the run goes on with the full window
        detail = f"{exc.__class__.__name__}: {str(exc)[:300]}"
        log.warning("context fold failed", extra={"task_id": task_id, "error": detail})
        await emit(ev.ContextFold(run_id=run_id, phase="failed", detail=detail))
        await emit(ev.Warn(run_id=run_id, msg=say("fold_failed_warn", user_language(history), detail=detail)))
        return False
    after = estimate_tokens([*system_msgs, {"role": "user", "content": summary}, *history[cut:]])
    await emit(ev.ContextFold(run_id=run_id, phase="done", detail=(
        f"messages {base}..{cut_idx - 1} summarised (~{estimate_tokens([{'content': summary}])} tokens); "
        f"window now starts at message {cut_idx}, ~{after} tokens")))
    log.info("context folded", extra={"task_id": task_id, "base_idx": cut_idx, "tokens_before": size, "tokens_after": after})
    return True


async def prepare_run_context(sessions: async_sessionmaker[AsyncSession], task_id: str, profile: Any, emit: Emit, *,
                              current: list[dict[str, Any]], system_prompt: str | None = None,
                              tools: list[dict[str, Any]] | None = None,
                              run_id: str | None = None, budget: Any = None) -> list[dict[str, Any]]:
    """Run start after the claim (which applied the soft reset to `current`): fold if needed, then
    the window for the loop. Clearly below the fold threshold, `current` is returned as is."""
    system_msgs = [{"role": "system", "content": system_prompt}] if system_prompt else []
    limit = reliable_context(profile)
    if limit > 0 and estimate_tokens([*system_msgs, *current]) < FOLD_RATIO * limit * 0.9:
        return current
    await maybe_fold(sessions, task_id, profile, emit, system_prompt=system_prompt, tools=tools, run_id=run_id,
                     budget=budget)
    return await load_window(sessions, task_id)
