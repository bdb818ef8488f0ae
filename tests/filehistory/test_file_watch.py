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


def test_folders_moves_and_absorbed_changes(tmp_path: Path) -> None:
    """The scan lists folders made/removed and a moved file as one rename; a background scan kept
    as JSON takes another call's reported changes in, so its own report does not repeat them."""
    from zcbot_core import safe_fs
    from zcbot_executor.file_watch import Before, absorb

    root = tmp_path / "u2"
    (root / "T" / "old" / "sub").mkdir(parents=True)
    (root / "T" / "a.txt").write_bytes(b"a")
    (root / "T" / "old" / "sub" / "x.txt").write_bytes(b"x")
    watch = FileWatch(SimpleNamespace(zcbot_versions_max_age_days=0, zcbot_versions_budget_mb=0), tmp_path)
    bg = Before.from_json(watch.before("u2", root, "T", "shell", {"command": "x", "background": True}).to_json())
    fg = watch.before("u2", root, "T", "shell", {"command": "y"})
    assert bg.dirs == {"T/old", "T/old/sub"}
    (root / "T" / "a.txt").rename(root / "T" / "b.txt")  # the foreground call's move
    fg_changes = watch.after("u2", fg, True)
    assert [(c["path"], c["kind"], c.get("old_path")) for c in fg_changes] == [("T/b.txt", "rename", "T/a.txt")]
    with safe_fs.Root.open(root) as r:
        assert absorb(bg, r, fg_changes)
    (root / "T" / "old" / "sub" / "x.txt").unlink()  # the background process's changes
    (root / "T" / "old" / "sub").rmdir()
    (root / "T" / "old").rmdir()
    (root / "T" / "new" / "deep").mkdir(parents=True)
    got = [(c["path"], c["kind"]) for c in watch.after("u2", bg, True)]
    assert got == [("T/new", "mkdir"), ("T/new/deep", "mkdir"), ("T/old/sub/x.txt", "delete"),
                   ("T/old/sub", "rmdir"), ("T/old", "rmdir")]
