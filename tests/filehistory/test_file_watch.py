"""The executor's file watch on a real tree (no sandbox needed): a write's version, a shell-style
change set from the before/after scan, and retention pruning the oldest versions over the budget."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from zcbot_executor.file_watch import FileWatch


def test_scan_and_prune(tmp_path: Path) -> None:
    root = tmp_path / "u1"
    (root / "T").mkdir(parents=True)
    (root / "T" / "a.txt").write_bytes(b"a" * 100)
    (root / "T" / "b.txt").write_bytes(b"b" * 100)
    watch = FileWatch(SimpleNamespace(zcbot_versions_max_age_days=0, zcbot_versions_budget_mb=0), tmp_path)
    before = watch.before("u1", root, "T", "shell", {"command": "x"})
    assert before is not None and set(before.kept) == {"T/a.txt", "T/b.txt"}
    (root / "T" / "a.txt").write_bytes(b"changed")
    (root / "T" / "b.txt").unlink()
    (root / "T" / "c.txt").write_bytes(b"new")
    changes = {c["path"]: c for c in watch.after("u1", before, True)}
    assert {p: c["kind"] for p, c in changes.items()} == {"T/a.txt": "modify", "T/b.txt": "delete", "T/c.txt": "create"}
    assert changes["T/b.txt"]["prev_hash"] == before.kept["T/b.txt"]

    w = watch.before("u1", root, "T", "write", {"path": "/workspace/T/a.txt", "content": "z"})
    assert w is not None and w.target == "T/a.txt" and w.prev is not None
    assert watch.before("u1", root, "T", "write", {"path": "/etc/passwd"}) is None

    store = watch.store("u1")
    objs = store.objects()
    assert len(objs) == 3
    for i, (digest, _size, _m) in enumerate(objs):
        os.utime(store.path / digest[:2] / digest, (1000 + i, 1000 + i))
    tight = FileWatch(SimpleNamespace(zcbot_versions_max_age_days=0, zcbot_versions_budget_mb=0), tmp_path)
    tight.store = lambda user: type(store)(tmp_path, user, max_age_days=0, budget_bytes=110)  # type: ignore[method-assign]
    tight.prune("u1")
    left = [d for d, _s, _m in store.objects()]
    total = sum(s for _d, s, _m in objs)
    dropped = 0
    expect = []
    for digest, size, _m in objs:  # oldest first until the rest fits
        if total - dropped > 110:
            dropped += size
        else:
            expect.append(digest)
    assert left == expect and len(left) < len(objs), "the oldest versions go first until under the budget"
