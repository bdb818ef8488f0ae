"""Scheduled incremental backups of the storage root with restic (issue 29; seed 003 §7.9).

    python -m zcbot_core.filehistory.backup run              # backup, then forget/prune by the keep-* policy
    python -m zcbot_core.filehistory.backup restore <dir> [--snapshot latest] [--include <path>]

Run by the `zcbot-backup` Kubernetes CronJob (deploy/k8s/backup/cronjob.yaml; its `schedule` is the cron line).
restic is Debian's package (`apt-get install restic`). The repository's password is read from a
file (never an argument or a log line). The whole storage root is backed up: the user roots, the
version store (`.versions/`) and the quota ledgers; the restore drill is in docs/operations.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from zcbot_core.errors import ZcbotError


class BackupSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False, env_ignore_empty=True,
                                      frozen=True, populate_by_name=True)

    storage_root: Path = Field(default=Path("./data/users"), alias="ZCBOT_STORAGE_ROOT",
        description="the folder backed up (every user root, the version store, the quota ledgers)")
    repository: str | None = Field(default=None, alias="ZCBOT_BACKUP_REPOSITORY",
        description="restic repository (`/backups/zcbot`, `s3:https://...`, `sftp:...`); unset: no backups")
    password_file: Path | None = Field(default=None, alias="ZCBOT_BACKUP_PASSWORD_FILE",
        description="file holding the restic repository password (a mounted Secret)")
    keep_daily: int = Field(default=7, ge=0, alias="ZCBOT_BACKUP_KEEP_DAILY", description="daily snapshots kept")
    keep_weekly: int = Field(default=5, ge=0, alias="ZCBOT_BACKUP_KEEP_WEEKLY", description="weekly snapshots kept")
    keep_monthly: int = Field(default=12, ge=0, alias="ZCBOT_BACKUP_KEEP_MONTHLY", description="monthly snapshots kept")
    restic: str = Field(default="restic", alias="ZCBOT_RESTIC", description="the restic binary")
    extra_env: Path | None = Field(default=None, alias="ZCBOT_BACKUP_ENV_FILE",
        description="optional file of KEY=VALUE lines for the repository backend (e.g. AWS_ACCESS_KEY_ID)")


class BackupError(ZcbotError):
    code = "backup_failed"
    http_status = 500


class Restic:
    def __init__(self, settings: BackupSettings) -> None:
        if not settings.repository or settings.password_file is None:
            raise BackupError("backups need ZCBOT_BACKUP_REPOSITORY and ZCBOT_BACKUP_PASSWORD_FILE")
        binary = shutil.which(settings.restic)
        if binary is None:
            raise BackupError(f"restic not found ({settings.restic!r}); install it: apt-get install -y restic")
        self.s, self.binary = settings, binary

    def _env(self) -> dict[str, str]:
        # restic's environment: the process's (PATH, HOME, proxies) less every RESTIC_/ZCBOT_ variable; the
        # repository and password come from the settings
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RESTIC_", "ZCBOT_"))}
        env.update(RESTIC_REPOSITORY=str(self.s.repository), RESTIC_PASSWORD_FILE=str(self.s.password_file))
        if self.s.extra_env is not None:
            for line in self.s.extra_env.read_text().splitlines():
                key, sep, value = line.strip().partition("=")
                if sep and key and not key.startswith("#"):
                    env[key] = value
        return env

    def _run(self, *args: str, timeout: float = 6 * 3600) -> str:
        done = subprocess.run([self.binary, *args], env=self._env(), capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise BackupError(f"restic {args[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return done.stdout

    def ensure_repo(self) -> None:
        try:
            self._run("cat", "config", timeout=300)
        except BackupError:
            self._run("init", timeout=300)

    def backup(self) -> dict:
        self.ensure_repo()
        root = str(Path(self.s.storage_root).resolve())
        out = self._run("backup", "--json", "--one-file-system", "--exclude", "*/.zcbot_tmp", "--tag", "zcbot", root)
        summary = [json.loads(line) for line in out.splitlines() if '"summary"' in line]
        return summary[-1] if summary else {}

    def forget(self) -> None:
        self._run("forget", "--tag", "zcbot", "--prune", "--keep-daily", str(self.s.keep_daily),
                  "--keep-weekly", str(self.s.keep_weekly), "--keep-monthly", str(self.s.keep_monthly))

    def restore(self, target: Path, snapshot: str = "latest", include: str | None = None) -> None:
        args = ["restore", snapshot, "--target", str(target)]
        if include:
            args += ["--include", include]
        self._run(*args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zcbot_core.filehistory.backup")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run")
    rp = sub.add_parser("restore")
    rp.add_argument("target", type=Path)
    rp.add_argument("--snapshot", default="latest")
    rp.add_argument("--include")
    ns = parser.parse_args(argv)
    try:
        restic = Restic(BackupSettings())
        if ns.cmd == "run":
            summary = restic.backup()
            restic.forget()
            print(json.dumps({"ok": True, "snapshot": summary.get("snapshot_id"), "files_new": summary.get("files_new"),
                              "bytes_added": summary.get("data_added")}))
        else:
            restic.restore(ns.target, ns.snapshot, ns.include)
            print(json.dumps({"ok": True, "restored_to": str(ns.target)}))
    except (BackupError, OSError, subprocess.TimeoutExpired) as exc:
        print(json.dumps({"ok": False, "error": str(exc)}), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
