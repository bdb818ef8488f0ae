"""zcbot_core/quota/kernel.py on a real loop-mounted btrfs (root + btrfs-progs; skipped otherwise).

The executor-level probes are in tests/security/test_kernel_disk_quota.py; here the pieces: a user
root made a subvolume with its limit, a plain one migrated with its files (hidden, nested and
deep ones too), the qgroup usage read from sysfs, `select` choosing and refusing with reasons, and
the laptop image mounted over a storage root that already held files.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import btrfs
from zcbot_core.quota import MB, kernel

SKIP = btrfs.unavailable()
pytestmark = pytest.mark.skipif(SKIP is not None, reason=f"needs a loop btrfs: {SKIP}")


def test_user_roots_become_limited_subvolumes_and_plain_ones_migrate(tmp_path: Path) -> None:
    with btrfs.loop_btrfs(tmp_path / "fs", size_mb=512) as mnt:
        storage = mnt / "users"
        storage.mkdir()
        plain = storage / "old"
        (plain / ".hidden" / "deep").mkdir(parents=True)
        (plain / ".hidden" / "deep" / "f").write_bytes(b"f" * 5000)
        os.chown(plain, 1234, 1234)
        quota = kernel.select("btrfs", storage, 20 * MB, (1234, 1234), "bwrap")
        assert isinstance(quota, kernel.BtrfsQuota)
        quota.ensure("new", storage / "new")
        quota.ensure("old", plain)
        for name in ("new", "old"):
            assert kernel.is_subvolume(storage / name)
            assert os.stat(storage / name).st_uid == 1234
        assert (plain / ".hidden" / "deep" / "f").read_bytes() == b"f" * 5000
        assert sorted(os.listdir(storage)) == ["new", "old"]  # the staging subvolume and old folder are gone
        refused = subprocess.run(["fallocate", "-l", "30M", str(storage / "new" / "big")], capture_output=True, text=True)
        assert refused.returncode != 0 and "quota" in refused.stderr.lower()
        (storage / "new" / "ten").write_bytes(b"t" * 10 * MB)
        subprocess.run(["btrfs", "filesystem", "sync", str(storage)], check=True, capture_output=True)
        used = quota.usage("new")
        assert used is not None and 10 * MB <= used < 11 * MB
        assert quota.usage("nobody") is None


def test_select_names_why_the_kernel_quota_is_not_used(tmp_path: Path) -> None:
    plain = tmp_path / "users"
    plain.mkdir()
    assert kernel.select("auto", plain, 10 * MB, None, "bwrap") is None  # not btrfs: the meter
    assert kernel.select("meter", plain, 10 * MB, None, "bwrap") is None
    with pytest.raises(kernel.KernelQuotaUnavailable, match="not on btrfs"):
        kernel.select("btrfs", plain, 10 * MB, None, "bwrap")
    with btrfs.loop_btrfs(tmp_path / "fs", size_mb=256) as mnt:
        with pytest.raises(kernel.KernelQuotaUnavailable, match="seccomp"):
            kernel.select("btrfs", mnt, 10 * MB, None, "unsafe")
        assert kernel.select("auto", mnt, 10 * MB, None, "unsafe") is None
        if kernel.landlock_available():  # docker sandboxes keep nested subvolumes out with it (confine.py)
            assert isinstance(kernel.select("btrfs", mnt, 10 * MB, None, "docker"), kernel.BtrfsQuota)
        else:
            with pytest.raises(kernel.KernelQuotaUnavailable, match="Landlock"):
                kernel.select("btrfs", mnt, 10 * MB, None, "docker")
        assert kernel.select("auto", mnt, 0, None, "bwrap") is None  # no quota at all


def test_the_laptop_image_is_mounted_over_a_storage_root_that_held_files(tmp_path: Path) -> None:
    storage = tmp_path / "home" / "users"
    (storage / "alice").mkdir(parents=True)
    (storage / "alice" / "a.txt").write_text("kept")
    image = tmp_path / "home" / "storage.btrfs"
    try:
        assert kernel.mount_image(storage, image, 256)
        assert kernel.is_btrfs(storage) and (storage / "alice" / "a.txt").read_text() == "kept"
        assert (tmp_path / "home" / "users.pre-btrfs" / "alice" / "a.txt").exists()
        assert os.stat(image).st_blocks * 512 < 64 * MB  # sparse
        assert kernel.mount_image(storage, image, 256)  # already btrfs: nothing more
    finally:
        subprocess.run(["umount", str(storage)], capture_output=True)
        image.unlink(missing_ok=True)
