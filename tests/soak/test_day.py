"""A day in the life through the real `zcbot up` (issue 34): several users, several tasks each, uploads,
writes in every task, slow runs, cancels, interrupts, enqueues, background jobs, the runner killed and
restarted, and Ctrl-C at the end. `bench.soak` drives and checks it (its docstring lists the checks);
this is a small day of it, bounded to a few minutes, in CI's heavy step. `python -m bench.soak` runs a
longer one."""

from __future__ import annotations

import json

import pytest

from bench.soak import SoakConfig, run

pytestmark = pytest.mark.heavy


@pytest.mark.timeout(600)
def test_a_day_of_several_users_leaves_every_run_answered_and_nothing_behind() -> None:
    result = run(SoakConfig(users=3, tasks=3, rounds=3, seed=7, max_runs_per_user=2, kill_runner_after_round=1))
    assert result["runs"] >= 3 * (1 + 3 * 3), result  # the warm-up, three rounds per task, the last writes
    assert "runner killed" in result["actions"], result
    assert result["violations"] == [], json.dumps(result, ensure_ascii=False, indent=1)[:8000]
