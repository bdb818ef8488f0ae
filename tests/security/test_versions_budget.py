"""Issue 36: the version store's byte budget holds at every point, through the real services.

A run (gateway -> runner -> executor with bwrap -> fake model) rewrites six large files in each of
ten shell calls; every call keeps the files it may replace as versions (file_watch.py). With
ZCBOT_VERSIONS_BUDGET_MB=4 the store, sampled from another thread throughout the run (temp copies
included), never holds more than 4 MB — before, retention ran at most every 10 minutes and 20 such
calls kept 798 MB against a 100 MB budget — and the newest versions are the ones still kept.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.stack import Stack
from tests.security.conftest import scripted_run

BUDGET_MB = 4
CALLS = 10


@pytest.fixture
def settings_env(settings_env: dict[str, str]) -> dict[str, str]:
    return {**settings_env, "ZCBOT_VERSIONS_BUDGET_MB": str(BUDGET_MB), "ZCBOT_USER_DISK_QUOTA_MB": "1024"}


def _call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": tool, "arguments": json.dumps(args)}]}


def _store_bytes(store: Path) -> int:
    sizes: dict[int, int] = {}  # by inode: a temp copy renamed into its shard mid-walk is one file
    for dirpath, _dirs, files in os.walk(store):
        for name in files:
            if name == ".usage":
                continue
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            sizes[st.st_ino] = st.st_size
    return sum(sizes.values())


async def test_rewriting_large_files_keeps_the_version_store_within_its_budget(stack: Stack) -> None:
    rewrite = "for i in 1 2 3 4 5 6; do head -c 700000 /dev/urandom > f$i.bin; done; echo rewrote {}"
    store = stack.settings.storage_root / ".versions" / "vera"
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _store_bytes(store))
            stop.wait(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        _task, events = await scripted_run(stack, "vera", "KEY-versions-budget",
                                           [_call("shell", command=rewrite.format(n)) for n in range(CALLS)] + [{"text": "Done."}])
    finally:
        stop.set()
        sampler.join()
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == "ok", events[-3:]
    results = [e["data"] for e in events if e["event"] == "tool_result"]
    assert len(results) == CALLS and all(r["ok"] and "rewrote" in r["preview"] for r in results)
    budget = BUDGET_MB * 1024 * 1024
    kept = _store_bytes(store)
    assert peak[0] <= budget, f"the version store held {peak[0]} bytes over its {budget}-byte budget"
    # (CALLS - 1) calls each kept six 700 kB versions (42 MB in all): most were pruned, but the store
    # is in use, and what it holds is within the budget.
    assert 2_000_000 < kept <= budget, kept
