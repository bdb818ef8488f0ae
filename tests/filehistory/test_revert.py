"""Revert as plan -> check -> apply -> record (issue 34): a change that fails does not stop the
others, and every change made is in the result, even when a bug raises half-way."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from zcbot_core import filehistory, safe_fs
from zcbot_core.filehistory import revert as revert_mod
from zcbot_core.safe_fs import paths

FILES = ("a.txt", "sub/b.txt", "c.txt")


def _run(tmp_path: Path) -> tuple[Path, filehistory.VersionStore, revert_mod.Plan]:
    """A user tree whose three files a run rewrote (in FILES order), and the revert plan of that run."""
    root = paths.user_root(tmp_path, "ruth")
    store = filehistory.VersionStore(tmp_path, "ruth", max_age_days=30, budget_bytes=0)
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"user {rel}")
    events = []
    with safe_fs.Root.open(root) as r:
        for rel in FILES:
            prev = filehistory.keep_before(store, r, rel)
            r.write_bytes(rel, f"run {rel}")
            c = filehistory.written(r, rel, prev, True)
            events.append(SimpleNamespace(path=c.path, kind=c.kind, prev_hash=c.prev_hash,
                                          content_hash=c.content_hash, old_path=None))
    return root, store, revert_mod.plan(events)


def test_a_path_that_fails_while_applied_is_a_conflict_and_the_rest_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sub/ turns into a file after the checks passed (the sandbox racing the revert): that path is
    `not_applied`, the paths before and after it are reverted and listed."""
    root, store, plan = _run(tmp_path)
    real = revert_mod.restore

    def racing(store_: filehistory.VersionStore, r: safe_fs.Root, rel: str, digest: str | None, **kw: object):
        if rel == "sub/b.txt":
            shutil.rmtree(root / "sub")
            (root / "sub").write_text("raced in")
        return real(store_, r, rel, digest, **kw)

    monkeypatch.setattr(revert_mod, "restore", racing)
    with safe_fs.Root.open(root) as r:
        result = revert_mod.revert(store, r, plan)
    assert [c.path for c in result.reverted] == ["a.txt", "c.txt"]
    assert [(c["path"], c["code"]) for c in result.conflicts] == [("sub/b.txt", "not_applied")]
    assert "sub" in result.conflicts[0]["why"]
    assert (root / "a.txt").read_text() == "user a.txt" and (root / "c.txt").read_text() == "user c.txt"
    # what each applied change replaced (the run's content) is kept: the recorded rows reach it
    assert all(store.has(c.prev_hash) for c in result.reverted)


def test_a_bug_half_way_leaves_the_applied_changes_in_the_callers_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, store, plan = _run(tmp_path)
    real = revert_mod.restore

    def buggy(store_: filehistory.VersionStore, r: safe_fs.Root, rel: str, digest: str | None, **kw: object):
        if rel == "c.txt":
            raise RuntimeError("a bug")
        return real(store_, r, rel, digest, **kw)

    monkeypatch.setattr(revert_mod, "restore", buggy)
    result = revert_mod.RevertResult()
    with safe_fs.Root.open(root) as r, pytest.raises(RuntimeError):
        revert_mod.revert(store, r, plan, into=result)
    assert [(c.path, c.kind) for c in result.reverted] == [("a.txt", "restore"), ("sub/b.txt", "restore")]
    assert (root / "sub/b.txt").read_text() == "user sub/b.txt"


def test_every_path_is_checked_before_anything_changes(tmp_path: Path) -> None:
    """A link where a folder on a path must be, and a folder where a file was: conflicts found in
    the checks; the other paths are still reverted."""
    root, store, plan = _run(tmp_path)
    shutil.rmtree(root / "sub")
    (root / "sub").symlink_to(tmp_path)
    (root / "c.txt").unlink()
    (root / "c.txt").mkdir()
    with safe_fs.Root.open(root) as r:
        result = revert_mod.revert(store, r, plan, force=True)
    assert [c.path for c in result.reverted] == ["a.txt"]
    assert [(c["path"], c["code"]) for c in result.conflicts] == \
        [("sub/b.txt", "parent_not_folder"), ("c.txt", "folder_where_file_was")]
    assert (root / "sub").is_symlink() and (root / "c.txt").is_dir()
