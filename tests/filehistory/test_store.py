"""The version store on its own: dedup, restore, retention oldest first, and where it lives."""

from __future__ import annotations

import os
from pathlib import Path

from zcbot_core import filehistory, safe_fs
from zcbot_core.safe_fs import paths


def _setup(tmp_path: Path, budget: int = 0, age: int = 0) -> tuple[Path, filehistory.VersionStore]:
    root = paths.user_root(tmp_path, "alice")
    root.mkdir(parents=True)
    return root, filehistory.VersionStore(tmp_path, "alice", max_age_days=age, budget_bytes=budget)


def test_keep_dedup_and_restore(tmp_path: Path) -> None:
    root, store = _setup(tmp_path)
    (root / "a.txt").write_bytes(b"one")
    (root / "b.txt").write_bytes(b"one")
    with safe_fs.Root.open(root) as r:
        ka = store.keep(r, "a.txt")
        kb = store.keep(r, "b.txt")
        assert ka is not None and ka == kb and ka.size == 3
        assert store.keep(r, "missing.txt") is None
        assert len(store.objects()) == 1  # the same bytes are one object
        (root / "a.txt").write_bytes(b"two")
        change = filehistory.restore(store, r, "a.txt", ka.digest)
    assert (root / "a.txt").read_bytes() == b"one"
    assert change.kind == "restore" and change.prev_hash is not None and store.has(change.prev_hash)
    # outside the user root, and no hard link into it: a later in-place write leaves the version alone
    assert store.path == tmp_path / ".versions" / "alice"
    assert not str(store.path).startswith(str(root) + os.sep)
    with open(root / "b.txt", "r+b") as fh:
        fh.write(b"XYZ")
    with store.open(ka.digest) as fh:
        assert fh.read() == b"one"


def test_retention_oldest_first(tmp_path: Path) -> None:
    """The byte budget holds at every keep (the oldest go first, before the copy is made); the age
    limit is applied by `prune`."""
    root, store = _setup(tmp_path, budget=25)
    digests = []
    with safe_fs.Root.open(root) as r:
        for i in range(4):
            (root / "f.txt").write_bytes(bytes([65 + i]) * 10)
            kept = store.keep(r, "f.txt")
            assert kept is not None
            obj = store.path / kept.digest[:2] / kept.digest
            os.utime(obj, (1000 + i, 1000 + i))  # keep order: 0 oldest
            digests.append(kept.digest)
            assert store.used_bytes() <= 25, "the budget is held when a copy is kept, not later"
        (root / "big.txt").write_bytes(b"x" * 26)
        assert store.keep(r, "big.txt") is None  # larger than the whole budget: not kept
    assert [d for d, _s, _m in store.objects()] == digests[2:]  # 40 bytes over a 25-byte budget: the two oldest went
    assert store.prune(now=2000) == []
    aged = filehistory.VersionStore(tmp_path, "alice", max_age_days=1, budget_bytes=0)
    assert aged.prune(now=1002 + 86400 + 0.5) == [digests[2]]  # older than a day; the newest stays
    assert [d for d, _s, _m in aged.objects()] == [digests[3]]


def test_the_budget_holds_at_every_point_while_files_are_rewritten(tmp_path: Path) -> None:
    """Many rewrites of large files: the store (temp copies included) never holds more than the
    budget, measured from another thread while keeps run, and the newest versions are the ones kept."""
    import threading

    budget = 1_000_000
    root, store = _setup(tmp_path, budget=budget)
    peak, stop = [0], threading.Event()

    def watch() -> None:
        while not stop.is_set():  # by inode: a temp copy renamed into its shard mid-walk is one file
            sizes: dict[int, int] = {}
            for dirpath, _dirs, files in os.walk(store.path):
                for name in files:
                    if name != ".usage":
                        try:
                            st = os.lstat(os.path.join(dirpath, name))
                        except FileNotFoundError:
                            continue
                        sizes[st.st_ino] = st.st_size
            peak[0] = max(peak[0], sum(sizes.values()))

    watcher = threading.Thread(target=watch)
    watcher.start()
    last = []
    try:
        with safe_fs.Root.open(root) as r:
            for call in range(20):
                for i in range(6):
                    (root / f"f{i}").write_bytes(os.urandom(150_000))
                    kept = store.keep(r, f"f{i}")
                    assert kept is not None
                    if call == 19:
                        last.append(kept.digest)
    finally:
        stop.set()
        watcher.join()
    assert 0 < peak[0] <= budget, f"the store held {peak[0]} bytes over a {budget}-byte budget"
    assert store.used_bytes() <= budget and all(store.has(d) for d in last)


def test_bad_digest_is_not_found(tmp_path: Path) -> None:
    _root, store = _setup(tmp_path)
    assert not store.has("../../etc/passwd")
    try:
        store.open("../x")
    except safe_fs.NotFound:
        pass
    else:
        raise AssertionError("a bad digest must be refused")
