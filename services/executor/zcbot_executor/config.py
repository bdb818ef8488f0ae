"""Executor configuration: `ExecutorSettings` (the core `Settings` plus the executor-only knobs,
validated at start-up) and `ExecutorConfig`, the frozen view the executor's parts are built from.

Every variable, its default and its meaning are in `ExecutorSettings` (the README's table is
generated from it: `python -m zcbot_core.platform.settings_doc`).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from zcbot_core.platform.config import Settings
from zcbot_core.tools.sandbox_schemas import MAX_BACKGROUND_LIMIT
from zcbot_core.workspace.skills import SkillPaths
from zcbot_executor.egress.allowlist import parse_entry

# The sandboxes' default egress allowlist (seed 003 §7.5 #2: "pypi/github/npm + mirrors"), one host
# per line with what it is for. Names only: ports 443 and 80, the name itself (no subdomains).
DEFAULT_EGRESS_HOSTS: tuple[tuple[str, str], ...] = (
    ("pypi.org", "pip: the package index"),
    ("files.pythonhosted.org", "pip: the package files the index points to"),
    ("registry.npmjs.org", "npm: the registry (metadata and tarballs)"),
    ("github.com", "git clone/fetch over https, release and archive URLs (they redirect below)"),
    ("codeload.github.com", "archive downloads (github.com/<o>/<r>/archive/... redirects here)"),
    ("objects.githubusercontent.com", "release assets and LFS objects (github.com/.../releases/download redirects here)"),
    ("release-assets.githubusercontent.com", "release assets (GitHub's newer download host for the same URLs)"),
    ("raw.githubusercontent.com", "raw files (install scripts, single files of a repository)"),
    ("pypi.tuna.tsinghua.edu.cn", "PyPI mirror in China (Tsinghua TUNA): ZCBOT_EGRESS_PIP_INDEX_URL"),
    ("mirrors.aliyun.com", "PyPI and npm mirrors in China (Alibaba Cloud)"),
    ("mirrors.cloud.tencent.com", "PyPI and npm mirrors in China (Tencent Cloud)"),
    ("registry.npmmirror.com", "npm mirror in China (npmmirror, formerly the Taobao registry)"),
    ("cdn.npmmirror.com", "npmmirror's tarball host (its registry answers point here)"),
)
DEFAULT_EGRESS_ALLOW = ",".join(host for host, _why in DEFAULT_EGRESS_HOSTS)


def sanitize_host(name: str) -> str:
    """A host id usable as a subject token; never `any` (that token is the unassigned subject)."""
    token = re.sub(r"[^A-Za-z0-9_-]", "-", name).strip("-")[:64] or "executor"
    return "any-host" if token == "any" else token


class ExecutorSettings(Settings):
    """The executor's environment: the shared `Settings` plus the knobs only the executor reads.

    An empty variable means "the default"; an explicit 0 is taken as given (or refused where it
    makes no sense), never silently replaced by the default."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False, env_ignore_empty=True)

    zcbot_sandbox: Literal["bwrap", "docker", "unsafe"] = Field(default="bwrap", alias="ZCBOT_SANDBOX",
        description='sandbox backend: `bwrap`, `docker`, or `unsafe` (logs a warning; no isolation)')
    zcbot_executor_host: str | None = Field(default=None, alias="ZCBOT_EXECUTOR_HOST",
        description="this executor's id (sandbox affinity; default: the hostname)")
    zcbot_sandbox_idle_seconds: float = Field(default=300.0, alias="ZCBOT_SANDBOX_IDLE_SECONDS",
        description='idle sandboxes are reaped after this')
    zcbot_docker_runtime: str = Field(default="runc", alias="ZCBOT_DOCKER_RUNTIME",
        description='Docker backend: the container runtime')
    zcbot_docker_image: str = Field(default="zcbot-sandbox:latest", alias="ZCBOT_DOCKER_IMAGE",
        description='Docker backend: the sandbox image')
    zcbot_max_bg_procs: int = Field(default=3, alias="ZCBOT_MAX_BG_PROCS",
        description='running background processes per user')
    zcbot_sandbox_uid: int = Field(default=10001, ge=0, alias="ZCBOT_SANDBOX_UID", description=(
        "host uid sandboxes run as when the executor is root (user roots are chowned to it)"))
    zcbot_sandbox_gid: int | None = Field(default=None, ge=0, alias="ZCBOT_SANDBOX_GID", description=(
        "host gid of sandboxes (default: the uid)"))
    zcbot_sandbox_memory_mb: int = Field(default=2048, gt=0, alias="ZCBOT_SANDBOX_MEMORY_MB", description=(
        "RLIMIT_DATA per sandbox process (docker: the container's memory limit)"))
    zcbot_sandbox_address_space_mb: int = Field(default=16384, gt=0, alias="ZCBOT_SANDBOX_ADDRESS_SPACE_MB",
                                                description="RLIMIT_AS per sandbox process, a backstop only")
    zcbot_docker_cpus: float = Field(default=1.0, gt=0, alias="ZCBOT_DOCKER_CPUS",
                                     description="CPUs per sandbox container (docker backend)")
    zcbot_sandbox_max_procs: int = Field(default=256, gt=0, alias="ZCBOT_SANDBOX_MAX_PROCS",
                                         description="RLIMIT_NPROC per sandbox")
    zcbot_sandbox_max_file_mb: int = Field(default=1024, gt=0, alias="ZCBOT_SANDBOX_MAX_FILE_MB",
                                           description="RLIMIT_FSIZE: the largest file a sandbox process may write")
    zcbot_sandbox_tmp_mb: int = Field(default=512, gt=0, alias="ZCBOT_SANDBOX_TMP_MB",
                                      description="size of the sandbox's tmpfs /tmp")
    zcbot_sandbox_python: str | None = Field(default=None, alias="ZCBOT_SANDBOX_PYTHON", description=(
        "interpreter inside the sandbox (default: the executor's own)"))
    zcbot_sandbox_env_passthrough: str = Field(default="", alias="ZCBOT_SANDBOX_ENV_PASSTHROUGH", description=(
        "comma-separated extra env names copied into sandboxes (secret-looking names are dropped anyway)"))
    zcbot_sandbox_lease_refresh_seconds: float | None = Field(
        default=None, gt=0, alias="ZCBOT_SANDBOX_LEASE_REFRESH_SECONDS",
        description="sandbox lease refresh period (default: the lease bucket's TTL / 3)")
    zcbot_executor_drain_grace_seconds: float = Field(
        default=25.0, ge=0, alias="ZCBOT_EXECUTOR_DRAIN_GRACE_SECONDS",
        description="how long in-flight calls may finish on SIGTERM (0: none)")
    zcbot_executor_max_concurrency: int = Field(default=256, ge=1, alias="ZCBOT_EXECUTOR_MAX_CONCURRENCY",
                                                description="concurrent tool calls per executor")
    zcbot_bg_time_limit_seconds: float = Field(default=7200.0, gt=0, le=86400.0, alias="ZCBOT_BG_TIME_LIMIT_SECONDS",
                                               description="default time limit of a background process (at most 86400)")
    zcbot_bg_log_cap_mb: int = Field(default=10, gt=0, alias="ZCBOT_BG_LOG_CAP_MB",
                                     description="cap of a background process's output.log")
    zcbot_bg_stop_with_executor: bool = Field(default=False, alias="ZCBOT_BG_STOP_WITH_EXECUTOR", description=(
        "a stopping executor kills its background processes, recorded as stopped by shutdown (`zcbot up` sets it; "
        "default: they outlive it and the next executor start on this host adopts them)"))
    zcbot_proc_retention_days: float = Field(default=7.0, ge=0, alias="ZCBOT_PROC_RETENTION_DAYS", description=(
        "finished background-process folders are kept this long (0: removed at the next sweep)"))
    zcbot_user_memory_mb: int = Field(default=4096, gt=0, alias="ZCBOT_USER_MEMORY_MB", description=(
        "memory of ALL of a user's sandbox processes on a host (per-user cgroup, sandbox/cgroups.py)"))
    zcbot_user_max_procs: int = Field(default=1024, gt=0, alias="ZCBOT_USER_MAX_PROCS",
                                      description="process count of all of a user's sandboxes on a host")
    zcbot_user_cpu_weight: int = Field(default=100, ge=1, le=10000, alias="ZCBOT_USER_CPU_WEIGHT", description=(
        "CPU share of each user's sandboxes on a host, relative to the other users' (cgroup v2 `cpu.weight`, "
        "v1 `cpu.shares` = weight × 1024 / 100): a busy user gets no more than an equal part when others need it"))
    zcbot_user_cpu_cores: float = Field(default=2.0, ge=0, alias="ZCBOT_USER_CPU_CORES", description=(
        "hard cap on the CPU of all of a user's sandbox processes on a host, in cores (v2 `cpu.max`, "
        "v1 `cpu.cfs_quota_us`; 0: no cap, the weight only)"))
    zcbot_user_max_concurrent_calls: int = Field(default=8, ge=1, alias="ZCBOT_USER_MAX_CONCURRENT_CALLS", description=(
        "tool calls of one user an executor runs at once; more wait for a slot of their own user, so one user's "
        "flood never holds ZCBOT_EXECUTOR_MAX_CONCURRENCY's slots"))
    zcbot_sandbox_cgroup: Literal["auto", "v1", "v2", "required", "off"] = Field(
        default="auto", alias="ZCBOT_SANDBOX_CGROUP",
        description="auto (v2, else v1, else warn) | v1 | v2 | required (refuse to start without) | off")
    zcbot_egress: bool = Field(default=True, alias="ZCBOT_EGRESS", description=(
        "package-install egress for sandboxes (bwrap, docker): a host proxy reached through a per-user unix socket"))
    zcbot_egress_allow: str = Field(default=DEFAULT_EGRESS_ALLOW, alias="ZCBOT_EGRESS_ALLOW", description=(
        "comma-separated hosts sandboxes may reach through the egress proxy: name, *.domain, IP, each optionally :port "
        "(default ports 443, 80)"))
    zcbot_egress_audit_log: Path | None = Field(default=None, alias="ZCBOT_EGRESS_AUDIT_LOG", description=(
        "JSON-lines audit log of egress connections (default: $ZCBOT_HOME/executor/egress-audit.jsonl)"))
    zcbot_egress_pip_index_url: str | None = Field(default=None, alias="ZCBOT_EGRESS_PIP_INDEX_URL", description=(
        "PIP_INDEX_URL inside sandboxes (a mirror; its host must be on ZCBOT_EGRESS_ALLOW)"))
    zcbot_user_egress_mb_per_day: int = Field(default=2048, ge=0, alias="ZCBOT_USER_EGRESS_MB_PER_DAY", description=(
        "egress cap per user: MB both ways through the egress proxy in the last 24 hours, on every executor host "
        "(counted in PostgreSQL through a runner; each host's own count when none answers); at the cap new "
        "connections get 403 and open ones are closed (0: no cap)"))
    zcbot_sandbox_user_venv: bool = Field(default=True, alias="ZCBOT_SANDBOX_USER_VENV", description=(
        "give each user a venv at <user_root>/.venv (created on first use, first on the sandbox PATH)"))

    @field_validator("zcbot_egress_allow")
    @classmethod
    def _check_allow(cls, value: str) -> str:
        for entry in value.split(","):
            if entry.strip():
                parse_entry(entry)
        return value


# Fixed here, not settings (no variable): the per-process open-file limit, the ceiling of a background
# process's time limit, and how often ended background processes are swept (tests shorten it).
MAX_OPEN_FILES = 1024
SWEEP_INTERVAL_SECONDS = 3600.0


@dataclass(frozen=True)
class Limits:
    memory_mb: int  # per process (RLIMIT_DATA); docker: the container's memory limit
    address_space_mb: int  # per process (RLIMIT_AS), a backstop only (see inside/sandbox_init.py)
    max_procs: int
    max_file_mb: int
    max_open_files: int
    tmp_mb: int

    def runner_limits(self) -> dict[str, int]:
        return {"data_mb": self.memory_mb, "address_space_mb": max(self.address_space_mb, self.memory_mb),
                "max_procs": self.max_procs, "max_file_mb": self.max_file_mb, "max_open_files": self.max_open_files}


@dataclass(frozen=True)
class ExecutorConfig:
    host: str
    storage_root: Path
    state_dir: Path
    backend: str
    idle_seconds: float
    max_bg_procs: int
    docker_runtime: str
    docker_image: str
    docker_cpus: float
    sandbox_uid: int
    sandbox_gid: int
    limits: Limits
    python: str
    env_passthrough: tuple[str, ...]
    lease_refresh_seconds: float | None
    drain_grace_seconds: float
    max_concurrency: int
    bg_time_limit: float
    bg_time_limit_max: float
    bg_log_cap_mb: int
    proc_retention_days: float
    bg_stop_with_executor: bool
    sweep_interval_seconds: float
    user_memory_mb: int
    user_max_procs: int
    user_cpu_weight: int
    user_cpu_cores: float  # 0: no hard cap
    user_max_calls: int
    cgroup_mode: str
    egress: bool
    egress_allow: tuple[str, ...]
    egress_audit_log: Path | None  # None: state_dir / egress-audit.jsonl
    pip_index_url: str | None
    user_egress_mb_per_day: int  # 0: no cap (egress/cap.py)
    user_venv: bool
    skill_paths: SkillPaths  # the built-in skills' mounts

    @classmethod
    def defaults(cls, **overrides: Any) -> "ExecutorConfig":
        """The declared defaults (the pydantic fields; no environment read), with `overrides`: for
        tests and tools that need a config without a process environment."""
        return cls.from_settings(ExecutorSettings.model_construct(), **overrides)

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> "ExecutorConfig":
        knobs = ExecutorSettings.extend(settings)
        host = sanitize_host(knobs.zcbot_executor_host or socket.gethostname())
        limits = Limits(
            memory_mb=knobs.zcbot_sandbox_memory_mb,
            address_space_mb=knobs.zcbot_sandbox_address_space_mb,
            max_procs=knobs.zcbot_sandbox_max_procs,
            max_file_mb=knobs.zcbot_sandbox_max_file_mb,
            tmp_mb=knobs.zcbot_sandbox_tmp_mb,
            max_open_files=MAX_OPEN_FILES,
        )
        passthrough = tuple(n.strip() for n in knobs.zcbot_sandbox_env_passthrough.split(",") if n.strip())
        config = cls(
            host=host,
            storage_root=knobs.storage_root,
            state_dir=knobs.home / "executor",
            backend=knobs.zcbot_sandbox,
            idle_seconds=knobs.zcbot_sandbox_idle_seconds,
            max_bg_procs=knobs.zcbot_max_bg_procs,
            docker_runtime=knobs.zcbot_docker_runtime,
            docker_image=knobs.zcbot_docker_image,
            docker_cpus=knobs.zcbot_docker_cpus,
            sandbox_uid=knobs.zcbot_sandbox_uid,
            sandbox_gid=knobs.zcbot_sandbox_uid if knobs.zcbot_sandbox_gid is None else knobs.zcbot_sandbox_gid,
            limits=limits,
            python=knobs.zcbot_sandbox_python or sys.executable,
            env_passthrough=passthrough,
            lease_refresh_seconds=knobs.zcbot_sandbox_lease_refresh_seconds,
            drain_grace_seconds=knobs.zcbot_executor_drain_grace_seconds,
            max_concurrency=knobs.zcbot_executor_max_concurrency,
            bg_time_limit=knobs.zcbot_bg_time_limit_seconds,
            bg_time_limit_max=MAX_BACKGROUND_LIMIT,
            sweep_interval_seconds=SWEEP_INTERVAL_SECONDS,
            bg_log_cap_mb=knobs.zcbot_bg_log_cap_mb,
            proc_retention_days=knobs.zcbot_proc_retention_days,
            bg_stop_with_executor=knobs.zcbot_bg_stop_with_executor,
            user_memory_mb=knobs.zcbot_user_memory_mb,
            user_max_procs=knobs.zcbot_user_max_procs,
            user_cpu_weight=knobs.zcbot_user_cpu_weight,
            user_cpu_cores=knobs.zcbot_user_cpu_cores,
            user_max_calls=knobs.zcbot_user_max_concurrent_calls,
            cgroup_mode=knobs.zcbot_sandbox_cgroup,
            egress=knobs.zcbot_egress,
            egress_allow=tuple(e.strip() for e in knobs.zcbot_egress_allow.split(",") if e.strip()),
            egress_audit_log=knobs.zcbot_egress_audit_log,
            pip_index_url=knobs.zcbot_egress_pip_index_url,
            user_egress_mb_per_day=knobs.zcbot_user_egress_mb_per_day,
            user_venv=knobs.zcbot_sandbox_user_venv,
            skill_paths=SkillPaths.from_settings(knobs),
        )
        return replace(config, **overrides) if overrides else config

    @property
    def audit_log_path(self) -> Path:
        return self.egress_audit_log or self.state_dir / "egress-audit.jsonl"

    @property
    def drops_privileges(self) -> bool:
        """Root executors run sandboxes as `sandbox_uid` (see inside/sandbox_init.py for why)."""
        return os.geteuid() == 0

    @property
    def owner(self) -> tuple[int, int] | None:
        """Who must own user roots so sandboxes can write them (None: the executor's own uid)."""
        if self.backend == "unsafe" or not self.drops_privileges:
            return None
        return (self.sandbox_uid, self.sandbox_gid)
