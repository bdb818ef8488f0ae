"""Executor configuration: `Settings` plus executor-only knobs read from the environment.

Knobs that `zcbot_core.config.Settings` does not carry (all optional):
- ZCBOT_SANDBOX_UID / ZCBOT_SANDBOX_GID   host uid/gid sandboxes run as when the executor is root
                                          (default 10001; user roots are chowned to it)
- ZCBOT_SANDBOX_MEMORY_MB                 RLIMIT_DATA per sandbox process (default 2048)
- ZCBOT_SANDBOX_ADDRESS_SPACE_MB          RLIMIT_AS per sandbox process, a backstop (16384)
- ZCBOT_DOCKER_CPUS                       CPUs per sandbox container (default 1.0)
- ZCBOT_SANDBOX_MAX_PROCS                 RLIMIT_NPROC, per sandbox (default 256)
- ZCBOT_SANDBOX_MAX_FILE_MB               RLIMIT_FSIZE (default 1024)
- ZCBOT_SANDBOX_TMP_MB                    size of the sandbox's tmpfs /tmp (default 512)
- ZCBOT_SANDBOX_PYTHON                    interpreter inside the sandbox (default: this one)
- ZCBOT_SANDBOX_ENV_PASSTHROUGH           extra env names copied into sandboxes (secret-looking
                                          names are dropped anyway)
- ZCBOT_SANDBOX_LEASE_REFRESH_SECONDS     lease refresh period (default: bucket TTL / 3)
- ZCBOT_EXECUTOR_DRAIN_GRACE_SECONDS      how long in-flight calls may finish on SIGTERM (25)
- ZCBOT_EXECUTOR_MAX_CONCURRENCY          concurrent calls per executor (256)
- ZCBOT_BG_TIME_LIMIT_SECONDS             default background time limit (7200, cap 86400)
- ZCBOT_BG_LOG_CAP_MB                     background output.log cap (10)
- ZCBOT_PROC_RETENTION_DAYS               terminal proc folders kept this long (7)
- ZCBOT_USER_MEMORY_MB                    memory of ALL of a user's sandbox processes on a host
                                          (per-user cgroup, sandbox/cgroups.py; default 4096)
- ZCBOT_USER_MAX_PROCS                    process count of all of a user's sandboxes (1024)
- ZCBOT_SANDBOX_CGROUP                    auto (default: v2, else v1, else warn) | v1 | v2 |
                                          required (refuse to start without) | off
"""

from __future__ import annotations

import os
import re
import socket
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from zcbot_core.config import Settings


def sanitize_host(name: str) -> str:
    """A host id usable as a subject token; never `any` (that token is the unassigned subject)."""
    token = re.sub(r"[^A-Za-z0-9_-]", "-", name).strip("-")[:64] or "executor"
    return "any-host" if token == "any" else token


def _env_float(name: str, default: float | None) -> float | None:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 2048  # per process (RLIMIT_DATA); docker: the container's memory limit
    address_space_mb: int = 16384  # per process (RLIMIT_AS), a backstop only (see sandbox_init.py)
    max_procs: int = 256
    max_file_mb: int = 1024
    max_open_files: int = 1024
    tmp_mb: int = 512

    def runner_limits(self) -> dict[str, int]:
        return {"data_mb": self.memory_mb, "address_space_mb": max(self.address_space_mb, self.memory_mb),
                "max_procs": self.max_procs, "max_file_mb": self.max_file_mb, "max_open_files": self.max_open_files}


@dataclass(frozen=True)
class ExecutorConfig:
    host: str
    storage_root: Path
    state_dir: Path
    backend: str = "bwrap"
    idle_seconds: float = 300.0
    max_bg_procs: int = 3
    docker_runtime: str = "runc"
    docker_image: str = "zcbot-sandbox:latest"
    sandbox_uid: int = 10001
    sandbox_gid: int = 10001
    limits: Limits = field(default_factory=Limits)
    python: str = sys.executable
    env_passthrough: tuple[str, ...] = ()
    lease_refresh_seconds: float | None = None
    drain_grace_seconds: float = 25.0
    max_concurrency: int = 256
    bg_time_limit: float = 7200.0
    bg_time_limit_max: float = 86400.0
    bg_log_cap_mb: int = 10
    proc_retention_days: float = 7.0
    sweep_interval_seconds: float = 3600.0
    user_memory_mb: int = 4096
    user_max_procs: int = 1024
    cgroup_mode: str = "auto"

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> "ExecutorConfig":
        host = sanitize_host(settings.zcbot_executor_host or socket.gethostname())
        limits = Limits(
            memory_mb=_env_int("ZCBOT_SANDBOX_MEMORY_MB", 2048),
            address_space_mb=_env_int("ZCBOT_SANDBOX_ADDRESS_SPACE_MB", 16384),
            max_procs=_env_int("ZCBOT_SANDBOX_MAX_PROCS", 256),
            max_file_mb=_env_int("ZCBOT_SANDBOX_MAX_FILE_MB", 1024),
            tmp_mb=_env_int("ZCBOT_SANDBOX_TMP_MB", 512),
        )
        passthrough = tuple(n.strip() for n in os.environ.get("ZCBOT_SANDBOX_ENV_PASSTHROUGH", "").split(",") if n.strip())
        config = cls(
            host=host,
            storage_root=settings.storage_root,
            state_dir=settings.home / "executor",
            backend=settings.zcbot_sandbox,
            idle_seconds=settings.zcbot_sandbox_idle_seconds,
            max_bg_procs=settings.zcbot_max_bg_procs,
            docker_runtime=settings.zcbot_docker_runtime,
            docker_image=settings.zcbot_docker_image,
            sandbox_uid=_env_int("ZCBOT_SANDBOX_UID", 10001),
            sandbox_gid=_env_int("ZCBOT_SANDBOX_GID", _env_int("ZCBOT_SANDBOX_UID", 10001)),
            limits=limits,
            python=os.environ.get("ZCBOT_SANDBOX_PYTHON") or sys.executable,
            env_passthrough=passthrough,
            lease_refresh_seconds=_env_float("ZCBOT_SANDBOX_LEASE_REFRESH_SECONDS", None),
            drain_grace_seconds=_env_float("ZCBOT_EXECUTOR_DRAIN_GRACE_SECONDS", 25.0) or 25.0,
            max_concurrency=_env_int("ZCBOT_EXECUTOR_MAX_CONCURRENCY", 256),
            bg_time_limit=_env_float("ZCBOT_BG_TIME_LIMIT_SECONDS", 7200.0) or 7200.0,
            bg_log_cap_mb=_env_int("ZCBOT_BG_LOG_CAP_MB", 10),
            proc_retention_days=_env_float("ZCBOT_PROC_RETENTION_DAYS", 7.0) or 7.0,
            user_memory_mb=_env_int("ZCBOT_USER_MEMORY_MB", 4096),
            user_max_procs=_env_int("ZCBOT_USER_MAX_PROCS", 1024),
            cgroup_mode=os.environ.get("ZCBOT_SANDBOX_CGROUP") or "auto",
        )
        return replace(config, **overrides) if overrides else config

    @property
    def drops_privileges(self) -> bool:
        """Root executors run sandboxes as `sandbox_uid` (see sandbox_init.py for why)."""
        return os.geteuid() == 0

    @property
    def owner(self) -> tuple[int, int] | None:
        """Who must own user roots so sandboxes can write them (None: the executor's own uid)."""
        if self.backend == "unsafe" or not self.drops_privileges:
            return None
        return (self.sandbox_uid, self.sandbox_gid)
