"""restic backups with the real binary (Debian's package): back up a small storage root, delete
files, restore them. Without restic this test skips, saying so (CI installs it: .ci/run)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from zcbot_core.filehistory import backup

RESTIC = shutil.which("restic")


def _env(tmp_path: Path) -> dict[str, str]:
    pw = tmp_path / "pw"
    pw.write_text("correct horse battery staple\n")
    return {"ZCBOT_STORAGE_ROOT": str(tmp_path / "storage"), "ZCBOT_BACKUP_REPOSITORY": str(tmp_path / "repo"),
            "ZCBOT_BACKUP_PASSWORD_FILE": str(pw), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
            "RESTIC_CACHE_DIR": str(tmp_path / "cache")}


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zcbot_core.filehistory.backup", *args], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.skipif(RESTIC is None, reason="restic is not installed (apt-get install -y restic); the backup/restore part is skipped")
def test_backup_delete_restore(tmp_path: Path) -> None:
    env = _env(tmp_path)
    root = tmp_path / "storage"
    files = {"alice/Proposal/report.md": b"final proposal", "alice/notes.txt": b"n" * 5000,
             ".versions/alice/ab/abcd": b"a kept version", "bob/data.csv": b"1,2,3\n"}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    first = _cli(env, "run")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["ok"] is True
    (root / "alice" / "Proposal" / "report.md").unlink()
    shutil.rmtree(root / "bob")
    target = tmp_path / "restored"
    rest = _cli(env, "restore", str(target))
    assert rest.returncode == 0, rest.stderr
    back = target / str(root.resolve()).lstrip("/")
    for rel, data in files.items():
        assert (back / rel).read_bytes() == data, rel
    assert "correct horse" not in first.stdout + first.stderr + rest.stdout + rest.stderr


def test_unconfigured_is_a_clear_error(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = _cli(env, "run")
    assert out.returncode == 1 and "ZCBOT_BACKUP_REPOSITORY" in json.loads(out.stderr)["error"]
    with pytest.raises(backup.BackupError):
        backup.Restic(backup.BackupSettings(ZCBOT_BACKUP_REPOSITORY="/x", ZCBOT_BACKUP_PASSWORD_FILE="/p",
                                            ZCBOT_RESTIC="no-such-restic-binary"))
