"""The checker of the fault suite (issue 42): invariants over a recorded history, Jepsen style.

It reads the load's history (`load.Load.runs`: what each client sent and saw), the stored stream of
each acknowledged run (replayed through a gateway) and PostgreSQL, and returns a `Verdict`: every
violation found (not just the first), with counts, so a failing seed reports the whole picture.

Invariants:
- lost: every acknowledged run request ends: its client saw `done`; a `done` that is not `ok` or
  `cancelled` follows an `error` event that says why (a stated error), never a silent end.
- sse: each client's events (those with ids) are strictly increasing, each once, and equal to the
  stored stream's first events (a prefix; all of it, as the client saw `done`). The only events without
  an id are the gateway's reconnect hints.
- complete: a run ending `done: ok` streamed its whole answer and stored it as its last assistant message.
- stuck: no task is left `waiting`/`queued`/`running`/`cancelling` nor with queued inputs; the
  conversation invariants of `tests.helpers.db.assert_consistent` hold.
- usage: a run's usage rows are at least its stored assistant messages (every kept LLM call billed; a
  cancelled call's partial answer, kind `cancelled`, has no usage: the model never reported it) and
  at most the LLM calls the model served for it (nothing billed twice; a call whose answer was
  superseded by a takeover was made and is billed, by design: zcbot_runner/store.py).
- http: no client got a 5xx other than 503, or an error without a JSON body.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.faults.load import Load, RunRecord
from tests.helpers.db import assert_consistent, db_rows
from zcbot_fakellm import get_requests

ACTIVE = ("waiting", "queued", "running", "cancelling", "pending")


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not self.violations

    def fail(self, invariant: str, what: str) -> None:
        self.violations.append(f"[{invariant}] {what}")

    def summary(self) -> str:
        head = "VALID" if self.ok else f"INVALID ({len(self.violations)} violations)"
        lines = [f"{head}: " + ", ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))]
        return "\n".join(lines + self.violations[:40])


def _client_events(rec: RunRecord) -> list[dict[str, Any]]:
    assert rec.follower is not None
    return [e for e in rec.follower.events if "id" in e]


def _check_run(verdict: Verdict, rec: RunRecord, stored: list[dict[str, Any]] | None, db_url: str) -> None:
    name = f"run {rec.index} ({rec.user}, {rec.run_id}, task {rec.task_id})"
    follower = rec.follower
    assert follower is not None
    done = follower.done
    if done is None:
        verdict.fail("lost", f"{name}: acknowledged, the client saw no done ({rec.client_error}); "
                             f"task row {db_rows(db_url, 'select run_status, run_id, run_error from tasks where task_id=:t', t=rec.task_id)}")
        return
    status = done["data"].get("status")
    verdict.counts[f"done_{status}"] += 1
    names = follower.names()
    errors = [e for e in follower.events if e["event"] == "error" and "id" in e]
    if status == "error" and errors:
        verdict.counts[f"error_{errors[-1]['data'].get('code') or 'uncoded'}"] += 1
    if status not in ("ok", "cancelled") and "error" not in names:
        verdict.fail("lost", f"{name}: done {status} without an error event saying why: {names[-5:]}")
    if status == "cancelled" and rec.cancel_after is None:
        verdict.fail("lost", f"{name}: cancelled although nobody cancelled it")
    hints = [e for e in follower.events if "id" not in e]
    if not all(e["event"] == "error" and e.get("data", {}).get("reconnect") for e in hints):
        verdict.fail("sse", f"{name}: events without an id that are not reconnect hints: {hints[:3]}")
    events = _client_events(rec)
    ids = [e["id"] for e in events]
    if ids != sorted(set(ids)):
        dup = [i for i, n in Counter(ids).items() if n > 1]
        verdict.fail("sse", f"{name}: ids repeated or out of order (repeated {dup[:5]})")
    if stored is None:
        verdict.fail("sse", f"{name}: its stored stream could not be replayed")
    else:
        mine = [(e["id"], e["event"], e["data"]) for e in events]
        # A replay cut by the fault ends in a reconnect hint (no id): the stored stream is what has ids.
        theirs = [(e["id"], e["event"], e["data"]) for e in stored if "id" in e]
        if mine != theirs[:len(mine)]:
            at = next((k for k, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            verdict.fail("sse", f"{name}: client stream differs from the stored one at event {at}: "
                                f"{mine[at:at + 2]} vs {theirs[at:at + 2]}")
        elif len(mine) != len(theirs):
            verdict.fail("sse", f"{name}: client saw done after {len(mine)} of {len(theirs)} stored events")
    if status == "ok":
        text = "".join(e["data"].get("delta", "") for e in events if e["event"] == "text")
        if not text.endswith("".join(rec.answer)):
            verdict.fail("complete", f"{name}: done ok but the streamed text is incomplete: {_shape(events)}")
        last = db_rows(db_url, "select payload->>'content' from messages where task_id=:t and "
                               "payload->>'role'='assistant' order by idx desc limit 1", t=rec.task_id)
        if not last or last[0][0] != "".join(rec.answer):
            verdict.fail("complete", f"{name}: done ok but the stored answer is {last[:1]}")


def _shape(events: list[dict[str, Any]]) -> str:
    """A run's events in short: `id:name` (text as its delta; run_start with its attempt)."""
    out = []
    for e in events:
        data = e.get("data") or {}
        if e["event"] == "text":
            out.append(f"{e['id']}:{data.get('delta', '').strip()!r}")
        elif e["event"] == "run_start":
            out.append(f"{e['id']}:run_start#{data.get('attempt')}")
        else:
            out.append(f"{e['id']}:{e['event']}")
    return " ".join(out)


def llm_calls(requests: list[dict[str, Any]], keys: list[str]) -> Counter[str]:
    """Chat-completion requests the fake model served per run key (found in the last user message)."""
    calls: Counter[str] = Counter()
    for body in requests:
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        content = users[-1].get("content") if users else ""
        text = content if isinstance(content, str) else json.dumps(content)
        for key in keys:
            if f"{key} go" in text:
                calls[key] += 1
    return calls


async def check(load: Load, db_url: str) -> Verdict:
    """Every invariant over the load's history; replays each acknowledged run's stored stream."""
    verdict = Verdict()
    verdict.counts["requested"] = len(load.runs)
    acked = [r for r in load.runs if r.acknowledged]
    verdict.counts["acknowledged"] = len(acked)
    verdict.counts["sse_reconnects"] = sum(r.follower.connections - 1 for r in acked if r.follower)
    verdict.counts["sse_drops"] = sum(r.follower.drops for r in acked if r.follower)
    verdict.counts["refused_posts"] = sum(1 for r in load.runs for _, s in r.posts if s != 202)
    for what in load.unexpected:
        verdict.fail("http", what)
    for rec in acked:
        try:
            async with asyncio.timeout(10):
                stored = await load.replay(rec)
        except (TimeoutError, AssertionError, OSError):
            stored = None
        _check_run(verdict, rec, stored, db_url)
    tasks = [r.task_id for r in load.runs if r.task_id]
    stuck = db_rows(db_url, "select task_id, run_status, run_id from tasks where task_id = any(:t) and "
                            "(run_status = any(:a) or pending_inputs <> '[]'::jsonb)", a=list(ACTIVE), t=tasks)
    for row in stuck:
        verdict.fail("stuck", f"task left active: {row}")
    try:
        assert_consistent(db_url, tasks)
    except AssertionError as exc:
        verdict.fail("stuck", f"conversation invariant: {exc}")
    run_ids = [r.run_id for r in acked]
    usage = dict(db_rows(db_url, "select run_id, count(*) from usage_events where run_id = any(:r) "
                                 "and kind='chat' group by run_id", r=run_ids))
    kept = dict(db_rows(db_url, "select run_id, count(*) from messages where run_id = any(:r) "
                                "and payload->>'role'='assistant' and kind <> 'cancelled' group by run_id", r=run_ids))
    served = llm_calls(await get_requests(load.stack.fake_url), [r.key for r in acked])
    for rec in acked:
        run_id = rec.run_id
        if not kept.get(run_id, 0) <= usage.get(run_id, 0) <= served[rec.key]:
            rows = db_rows(db_url, "select id, created_at, units::text from usage_events where run_id=:r", r=run_id)
            msgs = db_rows(db_url, "select idx, created_at, left(payload::text, 120) from messages where run_id=:r "
                                   "order by idx", r=run_id)
            verdict.fail("usage", f"run {run_id}: {usage.get(run_id, 0)} usage rows for {kept.get(run_id, 0)} "
                                  f"stored assistant messages and {served[rec.key]} LLM calls; usage {rows}; "
                                  f"messages {msgs}")
    verdict.counts["llm_calls"] = sum(served.values())
    verdict.counts["usage_rows"] = sum(usage.values())
    return verdict
