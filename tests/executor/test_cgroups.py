"""sandbox/cgroups.py: the per-user cgroup protocol of both versions.

cgroup v1 is exercised for real by tests/security/test_sandbox_limits.py (this machine mounts
memory and pids as v1). cgroup v2: the real unified hierarchy here has no memory/pids controllers
(they are bound to v1), so joining, listing and `cgroup.kill` (which needs none) run on the real v2
hierarchy, and the limit files (memory.max, memory.swap.max, pids.max, subtree_control,
memory.events) on a v2-shaped tmpdir.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from zcbot_executor.sandbox import cgroups

UNIFIED = Path("/sys/fs/cgroup/unified")


def _fake_v2(root: Path, own: str) -> None:
    (root / own.strip("/")).mkdir(parents=True, exist_ok=True)
    for folder in (root, root / own.strip("/")):
        (folder / "cgroup.controllers").write_text("cpu memory pids\n")


def test_v2_limit_files_on_a_v2_shaped_tree(tmp_path: Path) -> None:
    _fake_v2(tmp_path, "/kubepods/pod1/c1")
    found = cgroups.detect(Path("/srv/users"), 3000, 77, mode="v2", root=tmp_path, proc_cgroup="0::/kubepods/pod1/c1\n")
    assert found is not None and found.version == "v2"
    own = tmp_path / "kubepods/pod1/c1"
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (own / "zcbot/cgroup.subtree_control").read_text() == "+memory +pids"
    procs = found.prepare("u1", cgroups.RUNNER_LEAF)
    user_dir = found.user_dirs("u1")[0]
    assert user_dir.parent == own / "zcbot" and user_dir.name.startswith("u1.")
    assert procs == [str(user_dir / "runner" / "cgroup.procs")]
    assert (user_dir / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (user_dir / "memory.max").read_text() == str(3000 * 1024 * 1024)
    assert (user_dir / "memory.swap.max").read_text() == "0"
    assert (user_dir / "pids.max").read_text() == "77"
    assert found.memory_mb() == 3000
    (user_dir / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n")
    (user_dir / "runner" / "memory.events").write_text("oom_kill 1\n")
    assert found.oom_kills("u1") == 3
    # another deployment (storage root) with the same user id gets its own group
    other = cgroups.UserCgroups(found.trees, Path("/srv/other"))
    assert other.user_dirs("u1") != found.user_dirs("u1")


def test_v2_cpu_weight_and_cap_when_the_controller_is_delegated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36: the user folder's `cpu.weight` and `cpu.max`; without a delegated cpu controller the
    memory and pids limits still apply, and a warning says the CPU is not weighted."""
    _fake_v2(tmp_path, "/kubepods/pod1/c1")
    found = cgroups.detect(Path("/srv/users"), 3000, 77, mode="v2", root=tmp_path, proc_cgroup="0::/kubepods/pod1/c1\n",
                           cpu=cgroups.CpuLimits(weight=200, cores=1.5))
    assert found is not None and found.cpu_limited
    own = tmp_path / "kubepods/pod1/c1"
    assert (own / "zcbot/cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    found.prepare("u1", cgroups.RUNNER_LEAF)
    user_dir = found.user_dirs("u1")[0]
    assert (user_dir / "cgroup.subtree_control").read_text() == "+cpu +memory +pids"
    assert (user_dir / "cpu.weight").read_text() == "200"
    assert (user_dir / "cpu.max").read_text() == "150000 100000"
    assert cgroups.CpuLimits(weight=100, cores=0).v2_files() == (("cpu.weight", "100"), ("cpu.max", "max 100000"))
    assert cgroups.CpuLimits(weight=100, cores=0).v1_files()[2] == ("cpu.cfs_quota_us", "-1")
    bare = tmp_path / "bare"
    _fake_v2(bare, "/c2")
    for folder in (bare, bare / "c2"):
        (folder / "cgroup.controllers").write_text("memory pids\n")
    with caplog.at_level(logging.WARNING):
        found = cgroups.detect(Path("/srv/users"), 3000, 77, mode="v2", root=bare, proc_cgroup="0::/c2\n",
                               cpu=cgroups.CpuLimits())
    assert found is not None and not found.cpu_limited
    assert (bare / "c2/zcbot/cgroup.subtree_control").read_text() == "+memory +pids"
    assert any("cpu controller is not delegated" in r.getMessage() for r in caplog.records)


def test_v1_needs_memory_and_pids_and_nothing_usable_is_loud(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert cgroups.detect(tmp_path, 100, 10, mode="off") is None
    with caplog.at_level(logging.WARNING):
        assert cgroups.detect(tmp_path, 100, 10, mode="auto", root=tmp_path, proc_cgroup="0::/\n") is None
    assert any(cgroups.WARNING in r.getMessage() for r in caplog.records)
    with pytest.raises(cgroups.CgroupError, match="no usable cgroup"):
        cgroups.detect(tmp_path, 100, 10, mode="required", root=tmp_path, proc_cgroup="0::/\n")
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "cgroup.procs").write_text("")  # v1 memory alone: no pids, no total process cap
    with pytest.raises(cgroups.CgroupError, match="pids not mounted"):
        cgroups.detect(tmp_path, 100, 10, mode="v1", root=tmp_path, proc_cgroup="4:memory:/\n8:pids:/\n")
    _fake_v2(tmp_path, "/")
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")  # memory and pids held by v1
    with pytest.raises(cgroups.CgroupError, match="memory/pids not available"):
        cgroups.detect(tmp_path, 100, 10, mode="v2", root=tmp_path, proc_cgroup="0::/\n")


def test_this_hosts_cgroups_are_v1_with_both_controllers(tmp_path: Path) -> None:
    found = cgroups.detect(tmp_path, 512, 64)
    assert found is not None and found.version == "v1"
    assert [t.base.parts[4] for t in found.trees] == ["memory", "pids"]
    try:
        found.prepare("u1", "runner")
        mem_dir, pids_dir = found.user_dirs("u1")
        assert (mem_dir / "memory.limit_in_bytes").read_text().strip() == str(512 * 1024 * 1024)
        assert (pids_dir / "pids.max").read_text().strip() == "64"
    finally:
        found.close()
    assert not found.user_dirs("u1")[0].exists()


@pytest.mark.skipif(not (UNIFIED / "cgroup.procs").exists() or os.geteuid() != 0, reason="needs a writable cgroup v2")
def test_v2_join_and_kill_a_stopped_process_on_the_real_hierarchy(tmp_path: Path) -> None:
    base = UNIFIED / f"zcbot-test-{secrets.token_hex(4)}"
    base.mkdir()
    tree = cgroups._Tree(base, (), "memory.events", True)  # no limits: no controller is needed
    found = cgroups.UserCgroups([tree], tmp_path)
    child = None
    try:
        child = subprocess.Popen(cgroups.join_argv(found.prepare("u1", "p1"), ["/bin/sleep", "4260"]))
        deadline = time.monotonic() + 5
        while not Path(f"/proc/{child.pid}/cmdline").read_text().startswith("/bin/sleep"):  # exec'd: joined
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert found.pids("u1", "p1") == {child.pid}
        os.kill(child.pid, signal.SIGSTOP)  # stopped: it can react to nothing
        assert found.kill("u1", "p1") is True
        assert child.wait(5) == -signal.SIGKILL
        assert found.pids("u1") == set()
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait(5)
        found.close()
        base.rmdir()
    assert not any(p.info["cmdline"] == ["/bin/sleep", "4260"] for p in psutil.process_iter(["cmdline"]))
