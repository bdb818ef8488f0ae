"""The single path validator: traversal, absolute paths, NUL and symlink escapes are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zcbot_core.safe_fs.paths import (
    PathRejected,
    is_prefix_nested,
    normalize_rel,
    resolve_user_path,
    to_db_path,
    validate_task_name,
)


@pytest.mark.parametrize("name", ["", "   ", "a/b", "a\\b", "x\x00y", ".hidden", "..", "a" * 201, "tab\tname"])
def test_bad_task_names(name: str) -> None:
    with pytest.raises(PathRejected):
        validate_task_name(name)


@pytest.mark.parametrize("name", ["Deck", "申报书 2026", "a.b", "x-y_z"])
def test_good_task_names(name: str) -> None:
    assert validate_task_name(name) == name


@pytest.mark.parametrize(
    "raw,stored",
    [("proj", "proj"), ("proj/sub/", "proj/sub"), ("./proj//x", "proj/x")],
)
def test_db_paths_are_normalized(raw: str, stored: str) -> None:
    assert to_db_path(raw) == stored


@pytest.mark.parametrize("raw", ["", "/etc", "../x", "a/../../b", "a\\b", "C:/x", "a/.hidden", "x\x00"])
def test_db_paths_rejected(raw: str) -> None:
    with pytest.raises(PathRejected):
        to_db_path(raw)


def test_symlink_escape_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "u1"
    (root / "proj").mkdir(parents=True)
    outside = tmp_path / "secret.txt"
    outside.write_text("s")
    os.symlink(outside, root / "proj" / "link")
    os.symlink(tmp_path, root / "dirlink")
    with pytest.raises(PathRejected):
        resolve_user_path(root, "proj/link")
    with pytest.raises(PathRejected):
        resolve_user_path(root, "dirlink/secret.txt")
    (root / "proj" / "inner.txt").write_text("ok")
    os.symlink(root / "proj" / "inner.txt", root / "proj" / "ok-link")
    assert resolve_user_path(root, "proj/ok-link").name == "ok-link"


def test_nested_working_dirs() -> None:
    assert is_prefix_nested("a", "a/b") and is_prefix_nested("a/b", "a")
    assert not is_prefix_nested("a", "a") and not is_prefix_nested("ab", "a/b") and not is_prefix_nested("a", "ab")


@given(st.text(max_size=40))
def test_any_input_either_stays_inside_or_is_rejected(raw: str) -> None:
    root = Path("/srv/zcbot-users/u1")
    try:
        rel = normalize_rel(raw)
    except PathRejected:
        return
    assert not rel.startswith("/") and ".." not in rel.split("/") and "\x00" not in rel
    assert os.path.normpath(os.path.join(root, rel)).startswith(str(root))
