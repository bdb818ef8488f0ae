"""zcbot_core.safe_fs: every operation, both resolvers (openat2 and the O_NOFOLLOW walk), each
refusing symlinks anywhere on the way and never touching anything outside the root."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from zcbot_core import safe_fs
from zcbot_core.safe_fs import resolve
from zcbot_core.safe_fs.paths import PathRejected


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "openat2":
        if not resolve.USE_OPENAT2:
            pytest.fail("this kernel is expected to have openat2 (Linux >= 5.6)")
    else:
        monkeypatch.setattr(resolve, "USE_OPENAT2", False)
    return str(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(user root, outside folder with a secret); the root holds links pointing outside."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "f.txt").write_text("hello")
    outside.mkdir()
    (outside / "secret").write_text("SECRET")
    (root / "link_dir").symlink_to(outside)
    (root / "link_file").symlink_to(outside / "secret")
    (root / "a" / "inner_link").symlink_to(root / "a" / "b")  # even links inside are not followed
    os.mkfifo(root / "fifo")
    yield root, outside


def _outside_unchanged(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "SECRET"


def test_openat2_available_here(tmp_path: Path) -> None:
    assert resolve.SYS_OPENAT2 == 437 and resolve.USE_OPENAT2
    (tmp_path / "l").symlink_to(tmp_path)
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel, code in (("/etc", errno.EXDEV), ("l", errno.ELOOP), ("nope", errno.ENOENT)):
            with pytest.raises(OSError) as info:
                resolve.openat2(fd, rel, os.O_RDONLY)
            assert info.value.errno == code, rel
    finally:
        os.close(fd)


def test_fallback_is_forced_by_the_environment() -> None:
    code = "from zcbot_core.safe_fs import resolve; print(resolve.USE_OPENAT2)"
    for value, expected in (("1", "False"), ("", "True")):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ZCBOT_SAFE_FS_FALLBACK": value},
                             capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout.strip() == expected


READ_REFUSALS = [
    ("link_file", safe_fs.SymlinkRefused),
    ("link_dir/secret", safe_fs.SymlinkRefused),
    ("a/inner_link/x", safe_fs.SymlinkRefused),
    ("fifo", safe_fs.NotRegular),
    ("a", safe_fs.Conflict),
    ("missing", safe_fs.NotFound),
    ("a/f.txt/x", safe_fs.Conflict),
    ("../outside/secret", safe_fs.SafeFsError),
    ("/etc/passwd", safe_fs.SafeFsError),
]


@pytest.mark.parametrize(("rel", "error"), READ_REFUSALS)
def test_read_refusals(resolver: str, tree: tuple[Path, Path], rel: str, error: type[Exception]) -> None:
    root, outside = tree
    with safe_fs.Root.open(root) as r, pytest.raises(error) as info:
        r.read_bytes(rel)
    assert isinstance(info.value, PathRejected) and str(info.value)
    assert str(outside) not in str(info.value)  # messages name the user's path, never a host path
    _outside_unchanged(outside)


def test_read_and_limits(resolver: str, tree: tuple[Path, Path]) -> None:
    root, _ = tree
    with safe_fs.Root.open(root) as r:
        assert r.read_text("a/f.txt") == "hello"
        assert r.read_bytes("a/f.txt", 3) == b"hel"
        with pytest.raises(safe_fs.TooLarge):
            r.read_bytes("a/f.txt", 3, strict=True)
        assert r.tail("a/f.txt", 2) == b"lo"


WRITE_REFUSALS = [
    ("link_dir/new", safe_fs.SymlinkRefused),
    ("a/inner_link/new", safe_fs.SymlinkRefused),
    ("a", safe_fs.Conflict),
    ("a/f.txt/new", safe_fs.Conflict),
]


@pytest.mark.parametrize(("rel", "error"), WRITE_REFUSALS)
def test_write_refusals(resolver: str, tree: tuple[Path, Path], rel: str, error: type[Exception]) -> None:
    root, outside = tree
    with safe_fs.Root.open(root) as r, pytest.raises(error):
        r.write_bytes(rel, b"x", mkdirs=True)
    _outside_unchanged(outside)
    assert not [p for p in (root / "a").iterdir() if p.name.startswith(".zcbot-")]  # no temp left


def test_write_replaces_a_symlink_not_its_target(resolver: str, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    with safe_fs.Root.open(root) as r:
        r.write_bytes("link_file", b"mine")
        r.write_bytes("x/y/z.txt", "deep", mkdirs=True, durable=True, mode=0o640)
    assert not (root / "link_file").is_symlink() and (root / "link_file").read_bytes() == b"mine"
    assert (root / "x/y/z.txt").read_text() == "deep"
    assert stat.S_IMODE((root / "x/y/z.txt").stat().st_mode) == 0o640
    _outside_unchanged(outside)


def test_owner_is_set_by_fd(resolver: str, tree: tuple[Path, Path]) -> None:
    if os.geteuid() != 0:
        pytest.fail("the security suite runs as root (chown is what it checks)")
    root, outside = tree
    owner = (1234, 1235)
    with safe_fs.Root.open(root) as r:
        r.makedirs("n1/n2", owner=owner)
        r.write_bytes("n1/n2/f", b"x", owner=owner)
        r.mkdir("n1/m", owner=owner)
    for rel in ("n1", "n1/n2", "n1/n2/f", "n1/m"):
        st = (root / rel).stat()
        assert (st.st_uid, st.st_gid) == owner
    assert (root / "a").stat().st_uid == 0  # existing levels keep their owner


def test_new_entries_belong_to_the_roots_owner(resolver: str, tree: tuple[Path, Path]) -> None:
    """A root process creating in a tree owned by the sandbox uid (a user root) creates for that uid,
    with no owner named: task folders, uploads, restored files, skill folders (issue 34)."""
    if os.geteuid() != 0:
        pytest.fail("the security suite runs as root (chown is what it checks)")
    root, outside = tree
    owner = (1234, 1235)
    os.chown(root, *owner)
    with safe_fs.Root.open(root, create=True) as r:
        assert r.owner == owner
        r.makedirs("t2/sub")
        r.write_bytes("t2/f.md", b"x")
        r.mkdir("t3")
        with r.temp_file("t3") as tmp:
            tmp.write(b"upload")
            tmp.commit("up.bin")
        with r.sub("t4/deep", create=True) as sub:
            assert sub.owner == owner
            sub.write_bytes("g", b"y", mkdirs=True)
        r.write_bytes("t5/other", b"z", owner=(4321, 4321), mkdirs=True)  # a named owner wins
    for rel in ("t2", "t2/sub", "t2/f.md", "t3", "t3/up.bin", "t4", "t4/deep", "t4/deep/g"):
        st = (root / rel).lstat()
        assert (st.st_uid, st.st_gid) == owner, rel
    assert (root / "t5/other").stat().st_uid == 4321 and (root / "t5").stat().st_uid == 4321
    _outside_unchanged(outside)


def test_a_root_owned_tree_creates_as_root_and_a_non_root_process_as_itself(
        resolver: str, tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = tree
    with safe_fs.Root.open(root) as r:
        assert r.owner is None  # root's own tree: nothing to give away
        r.write_bytes("mine", b"x")
    assert (root / "mine").stat().st_uid == os.geteuid()
    os.chown(root, 1234, 1235)
    monkeypatch.setattr(os, "geteuid", lambda: 1234)  # a service running as the sandbox uid itself
    with safe_fs.Root.open(root) as r:
        assert r.owner is None


def test_makedirs_gives_levels_found_owned_by_root_to_the_owner(resolver: str, tree: tuple[Path, Path]) -> None:
    """A task folder an earlier version made as root is repaired when a path through it is made;
    files in it and folders beside the path keep their owner; a symlink on the path is still refused."""
    if os.geteuid() != 0:
        pytest.fail("the security suite runs as root (chown is what it checks)")
    root, outside = tree
    owner = (1234, 1235)
    os.chown(root, *owner)
    (root / "side").mkdir()
    with safe_fs.Root.open(root) as r:
        r.makedirs("a/b/c")
        with pytest.raises(safe_fs.SymlinkRefused):
            r.makedirs("link_dir/x")
    for rel in ("a", "a/b", "a/b/c"):
        assert ((root / rel).stat().st_uid, (root / rel).stat().st_gid) == owner, rel
    assert (root / "a/f.txt").stat().st_uid == 0 and (root / "side").stat().st_uid == 0
    _outside_unchanged(outside)
    assert outside.stat().st_uid == 0


def test_chown_walk_skips_links_fifos_and_hard_links(resolver: str, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    os.link(root / "a" / "f.txt", root / "a" / "hard")
    with safe_fs.Root.open(root) as r:
        r.chown("", (4321, 4321), recursive=True)
        with pytest.raises(safe_fs.SymlinkRefused):
            r.chown("link_dir", (4321, 4321), recursive=True)
    assert (root / "a" / "b").stat().st_uid == 4321
    assert (root / "a" / "f.txt").stat().st_uid == 0  # nlink 2: could be a host file's inode
    assert (root / "fifo").lstat().st_uid == 0
    assert (outside / "secret").stat().st_uid == 0 and outside.stat().st_uid == 0


def test_makedirs_conflicts(resolver: str, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    with safe_fs.Root.open(root) as r:
        with pytest.raises(safe_fs.Conflict) as info:
            r.makedirs("a/f.txt/sub")
        assert info.value.status == 409
        with pytest.raises(safe_fs.SymlinkRefused):
            r.makedirs("link_dir/sub")
        with pytest.raises(safe_fs.Conflict):
            r.mkdir("a")
        r.makedirs("a/b")  # existing: fine
    assert not (outside / "sub").exists()


def test_listdir_stat_and_predicates(resolver: str, tree: tuple[Path, Path]) -> None:
    root, _ = tree
    with safe_fs.Root.open(root) as r:
        names = {name: st for name, st in r.listdir("")}
        assert set(names) == {"a", "link_dir", "link_file", "fifo"}
        assert stat.S_ISLNK(names["link_dir"].st_mode)
        assert r.is_dir("a") and not r.is_dir("link_dir") and r.is_file("a/f.txt") and not r.is_file("link_file")
        assert r.lstat("missing/deeper") is None and r.lstat("a/f.txt/x") is None
        assert r.exists("link_file") and not r.exists("nope")
        with pytest.raises(safe_fs.SymlinkRefused):
            r.listdir("link_dir")
        with pytest.raises(safe_fs.SymlinkRefused):
            r.lstat("link_dir/secret")
        assert len(r.listdir("", limit=2)) == 2


def test_unlink_rmdir_rmtree(resolver: str, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "a" / "b" / "c").mkdir()
    (root / "a" / "b" / "c" / "out").symlink_to(outside)
    with safe_fs.Root.open(root) as r:
        r.unlink("link_file")  # the link, not its target
        r.unlink("nope", missing_ok=True)
        with pytest.raises(safe_fs.NotFound):
            r.unlink("nope")
        with pytest.raises(safe_fs.Conflict):
            r.unlink("a")
        with pytest.raises(safe_fs.SafeFsError, match="not empty"):
            r.rmdir("a")
        with pytest.raises(safe_fs.SymlinkRefused):
            r.rmtree("link_dir/secret")
        r.rmtree("link_dir")  # removes the symlink itself
        r.rmtree("a")
        r.rmtree("a", missing_ok=True)
        with pytest.raises(safe_fs.NotFound):
            r.rmtree("a", missing_ok=False)
    assert sorted(p.name for p in root.iterdir()) == ["fifo"]
    _outside_unchanged(outside)


def test_rename(resolver: str, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "g.txt").write_text("g")
    with safe_fs.Root.open(root) as r:
        with pytest.raises(safe_fs.Conflict):
            r.rename("g.txt", "a/f.txt")
        r.rename("g.txt", "a/f.txt", replace=True)
        r.rename("a", "renamed")
        with pytest.raises(safe_fs.SymlinkRefused):
            r.rename("renamed/f.txt", "link_dir/stolen")
        with pytest.raises(safe_fs.NotFound):
            r.rename("nope", "x")
    assert (root / "renamed" / "f.txt").read_text() == "g"
    _outside_unchanged(outside)


def test_sub_roots_and_temp_files(resolver: str, tree: tuple[Path, Path]) -> None:
    root, _ = tree
    with safe_fs.Root.open(root) as r:
        with r.sub("s/t", create=True) as sub:
            sub.write_bytes("f", b"1")
        with pytest.raises(safe_fs.SymlinkRefused):
            r.sub("link_dir")
        with r.temp_file("a") as tmp:
            tmp.write(b"upload")
            tmp.commit("up.bin")
        with r.temp_file("a") as tmp:
            tmp.write(b"discarded")
        with r.temp_file("") as tmp, pytest.raises(safe_fs.Conflict):
            tmp.commit("a")
    assert (root / "s/t/f").read_bytes() == b"1" and (root / "a/up.bin").read_bytes() == b"upload"
    assert not [p for p in root.rglob(".zcbot-*")]


def test_root_open_creates_and_refuses_a_symlinked_root(tmp_path: Path) -> None:
    with safe_fs.Root.open(tmp_path / "new" / "user", create=True, owner=(1500, 1500)) as r:
        assert r.listdir() == []
    assert (tmp_path / "new" / "user").stat().st_uid == 1500
    (tmp_path / "evil").symlink_to(tmp_path / "new")
    with pytest.raises(safe_fs.SymlinkRefused):
        safe_fs.Root.open(tmp_path / "evil")


def test_renameat2_exchange(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("/")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        safe_fs.renameat2(fd, "d", fd, "l", safe_fs.RENAME_EXCHANGE)
    finally:
        os.close(fd)
    assert (tmp_path / "d").is_symlink() and (tmp_path / "l").is_dir()


def test_walk_files_and_user_file(resolver: str, tree: tuple[Path, Path]) -> None:
    root, outside = tree
    (root / "a" / "b" / "deep.txt").write_text("deep")
    (root / "a" / ".hidden").write_text("h")
    with safe_fs.Root.open(root) as r:
        assert [rel for rel, _ in r.walk_files("")] == ["a/b/deep.txt", "a/f.txt"]  # links, FIFOs, dotfiles out
        assert [rel for rel, _ in r.walk_files("a", skip=lambda n: n == "b")] == ["a/f.txt"]
        with pytest.raises(safe_fs.SymlinkRefused):
            r.walk_files("link_dir")
    f = safe_fs.UserFile.regular(root, "a/f.txt")
    assert f.name == "f.txt" and f.relative_to("a") == "f.txt" and f.read_bytes() == b"hello"
    assert f.stat().st_size == 5 and f.open().read() == b"hello"
    assert not hasattr(f, "__fspath__")
    for rel in ("link_file", "fifo", "a", "missing"):
        with pytest.raises(safe_fs.SafeFsError):
            safe_fs.UserFile.regular(root, rel)
    os.unlink(root / "a" / "f.txt")
    (root / "a" / "f.txt").symlink_to(outside / "secret")  # swapped after the check: still refused
    with pytest.raises(safe_fs.SymlinkRefused):
        f.read_bytes()


def test_a_link_swapped_back_is_still_reported_as_a_link(tmp_path: Path) -> None:
    """The message after a refusal: ENOTDIR came from a folder that was a link when it was opened and
    is a folder again by the time the message is made (a swapping sandbox). The file at the end is
    the target, not "a file on the way"."""
    from zcbot_core.safe_fs import resolve

    (tmp_path / "skills" / "mine").mkdir(parents=True)
    (tmp_path / "skills" / "mine" / "SKILL.md").write_text("x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        refused = NotADirectoryError(20, "Not a directory")
        swapped_back = resolve.classify(fd, "skills/mine", refused, "skills/mine/SKILL.md")
        assert swapped_back.errno == errno.ELOOP and swapped_back.filename == "skills/mine/SKILL.md"
        (tmp_path / "plain").write_text("a file")
        on_the_way = resolve.classify(fd, "plain", refused, "plain/x")
        assert on_the_way is refused  # a real file where a folder must be
    finally:
        os.close(fd)
