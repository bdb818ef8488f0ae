"""What the model sees of a task's history (seed 003 §8.2, §8.8).

The stored history is never rewritten; these functions shape a copy for one request. Everything
here is a pure function of its input: the same history gives the same bytes on every call, which is
what keeps the provider's prefix cache warm (DeepSeek reports 92-94% hits on agent loops).

Two layers, orthogonal to each other and to the fold in `agent.fold`:

- **Reasoning.** Chain-of-thought of earlier turns is dropped, except that profiles with
  `thinking: true` keep it on assistant messages of turns that called tools: DeepSeek's thinking
  mode requires that reasoning to be passed back in every later request (it ignores the reasoning
  of turns without tool calls, so that is dropped).
  Such a message that has no reasoning to pass back — the model called a tool with an empty
  `reasoning_content` (seen from DeepSeek V4 flash), or the message came from another provider or
  a profile with thinking off — gets `REASONING_PLACEHOLDER`: DeepSeek rejects the request
  ("The `reasoning_content` in the thinking mode must be passed back to the API.") otherwise.
- **Compression above a pressure threshold.** While the window is below `PRESSURE_RATIO` (50%) of
  the profile's `reliable_context`, nothing else changes. Above it, the bodies of old tool results
  (and old `load_skill` texts) are shrunk to a head preview plus a pointer to where the full text
  lives. "Old" means before the newest `KEEP_TURNS` user turns: the last user message and
  everything after it are always sent intact. Only the `content` of `role: tool` messages changes:
  `role`, `tool_call_id`, `name` stay, assistant messages (and their tool-call arguments) are never
  rewritten — a compression marker inside tool-call arguments gets imitated by the model as real
  arguments (seed §8.2, lesson of 2026-06-12) — and user messages are never touched.

  Stability: whether a message is compressed depends only on its position relative to the newest
  user turns and on the size of the stored window, which only grows during a run; so once on,
  compression stays on and an already-compressed message compresses to the same bytes on the next
  call. The threshold is checked on the stored messages (not on the compressed result), so it does
  not flip back and forth.

Token counts are estimated by `agent.tokens` (no tokenizer; microseconds per message).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from zcbot_core.agent.tokens import estimate_tokens, message_tokens, reliable_context

SUMMARY_PREFIX = "[Summary of the earlier conversation, for context]\n"

PRESSURE_RATIO = 0.50
"""Compression starts when the estimated window reaches this share of `reliable_context`."""
KEEP_TURNS = 2
"""The newest user turns (a user message and everything after it) that are never compressed."""
MIN_COMPRESS_CHARS = 1200
"""Tool results shorter than this are left alone: the pointer would save little."""
PREVIEW_CHARS = 400
"""Head of a compressed tool result kept verbatim."""
COMPRESSED_TAG = "[compressed:"
SAVED_OUTPUT = re.compile(r"saved in the task folder as `(\.zcbot/outputs/[^`\s]+)`")  # tools/results.py's notice


class IndexedMessage(dict):  # type: ignore[type-arg]
    """A history payload that remembers its `messages.idx` (so a compression pointer can name it).

    It is an ordinary dict to every consumer; `prepare_messages` returns plain dicts.
    """

    __slots__ = ("idx",)

    def __init__(self, payload: dict[str, Any], idx: int | None) -> None:
        super().__init__(payload)
        self.idx = idx


def message_idx(message: dict[str, Any]) -> int | None:
    return getattr(message, "idx", None)


# A message replaced by an edit-and-resend or a regenerate (`POST …/messages/{idx}/resend`): it stays
# in the stored history, its original kind after the prefix (the page shows it folded away, marked as
# replaced), and never reaches the model again.
SUPERSEDED = "superseded:"


def is_superseded(kind: str | None) -> bool:
    return bool(kind) and str(kind).startswith(SUPERSEDED)


def window(messages: Iterable[tuple[int, str, dict[str, Any]]], base_idx: int, summary: str | None) -> list[dict[str, Any]]:
    """Messages from `context_base_idx` on, with the fold summary first.

    Push records (kind `push`: what a channel delivered on its own, e.g. a scheduled brief) are part
    of the window, so the agent remembers what it pushed and can answer follow-ups (seed §8.7). A
    push is written whenever it is delivered, possibly while a run of the task is between a tool
    call and its result: such a push waits in the window until that step's results are complete
    (a tool result must follow its call), and is left out while the step is still open.

    The summary is injected in memory only, as a user message (it is never stored in the message
    stream, so it cannot disturb tool-call pairing).
    """
    body: list[dict[str, Any]] = []
    pushes: set[int] = set()  # ids of the push messages in `body`
    open_calls: set[str] = set()
    held: list[dict[str, Any]] = []
    for idx, kind, payload in messages:
        if idx < base_idx or is_superseded(kind):
            continue
        if "client_key" in payload:  # the sender's Idempotency-Key (runstate.submit): the server's, not the model's
            payload = {k: v for k, v in payload.items() if k != "client_key"}
        message = IndexedMessage(payload, idx)
        if kind == "push":
            pushes.add(id(message))
            if open_calls:
                held.append(message)
                continue
        role = payload.get("role")
        if role == "user" and held:  # the step was broken before the push (no results): do not wait for them
            body.extend(held)
            held, open_calls = [], set()
        body.append(message)
        if role == "assistant" and kind != "push":
            open_calls = {str(c.get("id")) for c in payload.get("tool_calls") or [] if isinstance(c, dict)}
        elif role == "tool":
            open_calls.discard(str(payload.get("tool_call_id")))
        elif role == "user":
            open_calls = set()
        if not open_calls and held:
            body.extend(held)
            held = []
    body = _pending_turn_last(body, pushes)
    if summary:
        body.insert(0, {"role": "user", "content": SUMMARY_PREFIX + summary})
    return body


def _pending_turn_last(body: list[dict[str, Any]], pushes: set[int]) -> list[dict[str, Any]]:
    """Pushes delivered after the user's pending turn go before it: the window must end with the
    turn the run answers (a final assistant message there would read as a finished run)."""
    end = len(body)
    while end and id(body[end - 1]) in pushes:
        end -= 1
    if end == len(body) or not end or body[end - 1].get("role") != "user":
        return body
    start = end
    while start and body[start - 1].get("role") == "user" and id(body[start - 1]) not in pushes:
        start -= 1
    return body[:start] + body[end:] + body[start:end]


# ---- pressure ------------------------------------------------------------------------------

def under_pressure(messages: Sequence[dict[str, Any]], profile: Any, ratio: float = PRESSURE_RATIO,
                   tokens: Callable[[dict[str, Any]], float] = message_tokens) -> bool:
    limit = reliable_context(profile)
    return limit > 0 and estimate_tokens(messages, tokens) >= ratio * limit


# ---- reasoning -----------------------------------------------------------------------------

def _last_user(messages: Sequence[dict[str, Any]]) -> int:
    return max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)


def _tool_turns(messages: Sequence[dict[str, Any]]) -> set[int]:
    """Positions of assistant messages in user turns that contain at least one tool call."""
    keep: set[int] = set()
    turn: list[int] = []
    used_tools = False
    for i, msg in enumerate([*messages, {"role": "user"}]):
        role = msg.get("role")
        if role == "user":
            if used_tools:
                keep.update(turn)
            turn, used_tools = [], False
        elif role == "assistant":
            turn.append(i)
            used_tools = used_tools or bool(msg.get("tool_calls"))
    return keep


REASONING_PLACEHOLDER = " "
"""What an assistant message of a tool turn carries when it has no reasoning of its own: one space,
the smallest value DeepSeek accepts (LiteLLM's DeepSeek transformation injects the same)."""


def without_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k not in ("reasoning_content", "thinking_blocks")}


def with_reasoning_placeholder(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "reasoning_content": REASONING_PLACEHOLDER}


def _has_reasoning(message: dict[str, Any]) -> bool:
    reasoning = message.get("reasoning_content")
    return isinstance(reasoning, str) and bool(reasoning)


def strip_old_reasoning(messages: list[dict[str, Any]], keep_tool_turns: bool = False,
                        strip: Callable[[dict[str, Any]], dict[str, Any]] = without_reasoning,
                        fill: Callable[[dict[str, Any]], dict[str, Any]] = with_reasoning_placeholder,
                        ) -> list[dict[str, Any]]:
    """Reasoning text of earlier turns is not sent back (providers reject or ignore it).

    With `keep_tool_turns` (thinking profiles), reasoning on assistant messages of turns that called
    tools is kept, and filled in (`fill`) where there is none: DeepSeek's thinking mode requires it
    in every later request.
    """
    last_user = _last_user(messages)
    keep = _tool_turns(messages) if keep_tool_turns else set()
    out = []
    for i, msg in enumerate(messages):
        if i in keep:
            if not _has_reasoning(msg):
                msg = fill(msg)
        elif i < last_user and msg.get("role") == "assistant" and ("reasoning_content" in msg or "thinking_blocks" in msg):
            msg = strip(msg)
        out.append(msg)
    return out


# ---- compression ---------------------------------------------------------------------------

def protected_from(messages: Sequence[dict[str, Any]], keep_turns: int = KEEP_TURNS) -> int:
    """Position of the first message of the newest `keep_turns` user turns (everything from it on
    is sent intact). With fewer user turns than that, everything is protected."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if len(users) < keep_turns or keep_turns <= 0:
        return 0 if users else len(messages)
    return users[-keep_turns]


def _calls_by_id(messages: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    calls: dict[str, dict[str, Any]] = {}
    for msg in messages:
        if msg.get("role") == "assistant":
            for call in msg.get("tool_calls") or ():
                if isinstance(call, dict) and call.get("id"):
                    calls[call["id"]] = call
    return calls


def _skill_label(call: dict[str, Any] | None) -> str:
    if not call:
        return ""
    raw = (call.get("function") or {}).get("arguments") or ""
    try:
        args = json.loads(raw)
    except (TypeError, ValueError):
        return ""
    if isinstance(args, dict):
        name = args.get("name") or args.get("skill")
        if isinstance(name, str) and name:
            return f" `{name[:80]}`"
    return ""


def compressed_text(content: str, *, tool: str, idx: int | None, call: dict[str, Any] | None = None,
                    preview_chars: int = PREVIEW_CHARS) -> str:
    """The head of `content` plus a pointer to where the full text lives (deterministic)."""
    head = content[:preview_chars].rstrip()
    where = f"message idx {idx}" if idx is not None else f"tool_call_id {call.get('id')}" if call else "an earlier message"
    omitted = len(content) - len(head)
    if tool == "load_skill":
        pointer = (f"{COMPRESSED_TAG} {omitted} more characters of this skill text; the full text is stored in this "
                   f"task's history ({where}); call load_skill{_skill_label(call)} again if you need it]")
    elif saved := SAVED_OUTPUT.search(content):  # a long shell/run_python output kept in the task folder
        pointer = (f"{COMPRESSED_TAG} {omitted} more characters; the command's full output is saved in the task "
                   f"folder as `{saved.group(1)}`: read it with `read` (offset/limit) rather than re-running]")
    else:
        pointer = (f"{COMPRESSED_TAG} {omitted} more characters; full result stored in this task's history ({where}); "
                   "re-run the tool or read the file to see it again]")
    return f"{head}\n…\n{pointer}"


def shrunk_result(message: dict[str, Any], call: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of a tool result message with its content compressed (`compressed_text`)."""
    tool = str(message.get("name") or ((call or {}).get("function") or {}).get("name") or "")
    shrunk = dict(message)
    shrunk["content"] = compressed_text(message["content"], tool=tool, idx=message_idx(message), call=call)
    return shrunk


def compress_old_results(messages: list[dict[str, Any]], keep_turns: int = KEEP_TURNS,
                         min_chars: int = MIN_COMPRESS_CHARS,
                         shrink: Callable[[dict[str, Any], dict[str, Any] | None], dict[str, Any]] = shrunk_result,
                         ) -> list[dict[str, Any]]:
    """Shrink tool results (and `load_skill` texts) that lie before the newest `keep_turns` turns.

    Only `content` of `role: tool` messages with string content of at least `min_chars` changes;
    every other message (and every other field) is passed through unchanged.
    """
    start = protected_from(messages, keep_turns)
    if start <= 0:
        return list(messages)
    calls = _calls_by_id(messages[:start])
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        content = msg.get("content")
        if i < start and msg.get("role") == "tool" and isinstance(content, str) and len(content) >= min_chars:
            out.append(shrink(msg, calls.get(msg.get("tool_call_id") or "")))
        else:
            out.append(msg)
    return out


_KEY_ORDER = {key: i for i, key in enumerate(("role", "content", "reasoning_content", "thinking_blocks", "tool_calls",
                                               "tool_call_id", "name"))}


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def canonical_message(message: dict[str, Any]) -> dict[str, Any]:
    """A plain-dict copy with a fixed key order (nested dicts sorted).

    Needed for byte-stable requests: a message the loop built in memory and the same message read
    back from PostgreSQL (JSONB reorders keys) must serialise identically, or every new run would
    miss the provider's prefix cache from the first tool message on.
    """
    keys = sorted(message, key=lambda k: (_KEY_ORDER.get(k, len(_KEY_ORDER)), k))
    return {k: _canonical(message[k]) for k in keys}


def prepare_messages(messages: list[dict[str, Any]], profile: Any) -> list[dict[str, Any]]:
    """The request body for one LLM call: `[system, *history]` -> what is sent.

    Pure and deterministic. Returns new plain dicts in a canonical key order (the caller's list
    and dicts are not mutated).
    """
    return MessagePreparer()(messages, profile)


class MessagePreparer:
    """`prepare_messages` for the LLM calls of one run, computing each message's part once.

    From one call to the next a run's history is the same message objects plus the new ones (the
    loop appends; nothing edits a message once it is in the history), so a message's token
    estimate, its copy without reasoning, its compressed copy and its canonical form are
    remembered by object identity instead of recomputed for every message on every call (with a
    600-message history that was half of the runner's CPU). The memo holds each message it keys,
    so an identity is never reused while remembered; it lives as long as the run's loop. Each call
    still returns new dicts (`_fresh`), as `prepare_messages` always did.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[str, int], tuple[dict[str, Any], Any]] = {}

    def _once(self, kind: str, message: dict[str, Any], compute: Callable[..., Any], *args: Any) -> Any:
        hit = self._memo.get((kind, id(message)))
        if hit is not None and hit[0] is message:
            return hit[1]
        value = compute(message, *args)
        self._memo[(kind, id(message))] = (message, value)
        return value

    def __call__(self, messages: list[dict[str, Any]], profile: Any) -> list[dict[str, Any]]:
        thinking = bool(getattr(profile, "thinking", False))
        body = strip_old_reasoning(messages, keep_tool_turns=thinking,
                                   strip=lambda m: self._once("strip", m, without_reasoning),
                                   fill=lambda m: self._once("fill", m, with_reasoning_placeholder))
        if under_pressure(messages, profile, tokens=lambda m: self._once("tokens", m, message_tokens)):
            body = compress_old_results(body, shrink=lambda m, call: self._once("shrink", m, shrunk_result, call))
        # Fresh containers every call: whatever edits the request on its way (a LiteLLM hook, a
        # provider transformation) must not reach the memo. A copy keeps the canonical key order.
        return [_fresh(self._once("canonical", m, canonical_message)) for m in body]


def _fresh(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    return value


def check_protocol(messages: Sequence[dict[str, Any]]) -> list[str]:
    """Problems a provider would reject: a tool message not answering a pending call of the
    assistant message before it, or a call left without a result before the next non-tool message.
    Empty when the conversation is valid (used by tests and by `fold` before it sends a prefix)."""
    problems: list[str] = []
    pending: set[str] = set()
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id not in pending:
                problems.append(f"message {i}: tool result {call_id!r} answers no pending tool call")
            pending.discard(call_id)
            continue
        if pending:
            problems.append(f"message {i}: tool calls {sorted(pending)} have no result")
            pending = set()
        if role == "assistant":
            pending = {c.get("id") for c in msg.get("tool_calls") or () if isinstance(c, dict)}
    return problems
