"""Run grants (bus/grants.py): what the executor accepts and refuses, case by case."""

from __future__ import annotations

import pytest

from zcbot_core.bus import grants

KEY = "k" * 64
GOOD = grants.issue(KEY, "r1", "alice", "t1", now=1000.0, ttl=60)


@pytest.mark.parametrize("case, key, grant, run_id, user_id, task_id, now, reason", [
    ("own run", KEY, GOOD, "r1", "alice", "t1", 1010.0, None),
    ("no grant", KEY, "", "r1", "alice", "t1", 1010.0, "no valid run grant"),
    ("garbage", KEY, "g1.x.y", "r1", "alice", "t1", 1010.0, "no valid run grant"),
    ("another user", KEY, GOOD, "r1", "mallory", "t1", 1010.0, "does not match"),
    ("another run", KEY, GOOD, "r2", "alice", "t1", 1010.0, "does not match"),
    ("another task", KEY, GOOD, "r1", "alice", "t2", 1010.0, "does not match"),
    ("another key", "other" * 10, GOOD, "r1", "alice", "t1", 1010.0, "does not match"),
    ("expired", KEY, GOOD, "r1", "alice", "t1", 1061.0, "expired"),
    ("expiry edited", KEY, GOOD.replace("g1.1060.", "g1.9999999999."), "r1", "alice", "t1", 1010.0, "does not match"),
])
def test_refusal(case: str, key: str, grant: str, run_id: str, user_id: str, task_id: str, now: float,
                 reason: str | None) -> None:
    got = grants.refusal(key, grant, run_id, user_id, task_id, now=now)
    assert (got is None) if reason is None else (got is not None and reason in got), (case, got)


def test_no_key_makes_no_grant() -> None:
    assert grants.issue(None, "r1", "alice", "t1") == "" and grants.issue("", "r1", "alice", "t1") == ""
