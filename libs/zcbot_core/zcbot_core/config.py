"""One settings object per process, read from the environment (values given there always win).

Secrets (`JWT_SECRET`, `PLATFORM_KEY`) have no defaults: a service started on its own fails fast
without them; `zcbot up` generates them once and persists them under `ZCBOT_HOME` (see
`ensure_local_secrets`).
"""

from __future__ import annotations

import os
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from zcbot_core.errors import RETRY_AFTER, ZcbotError

REPO_ROOT = Path(__file__).resolve().parents[3]


class ConfigError(ZcbotError, RuntimeError):
    """The operator's configuration is missing or invalid (message says what to set)."""

    code = "config_error"
    http_status = 503
    headers = RETRY_AFTER


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False)

    zcbot_home: Path = Field(default=Path("./.zcbot"), alias="ZCBOT_HOME")
    zcbot_db_url: str | None = Field(default=None, alias="ZCBOT_DB_URL")
    zcbot_nats_url: str | None = Field(default=None, alias="ZCBOT_NATS_URL")
    zcbot_storage_root: Path | None = Field(default=None, alias="ZCBOT_STORAGE_ROOT")
    zcbot_http_host: str = Field(default="127.0.0.1", alias="ZCBOT_HTTP_HOST")
    zcbot_http_port: int = Field(default=8765, alias="ZCBOT_HTTP_PORT")
    jwt_secret: str | None = Field(default=None, alias="JWT_SECRET")
    jwt_ttl_seconds: int = Field(default=7 * 24 * 3600, alias="ZCBOT_JWT_TTL_SECONDS")
    platform_key: str | None = Field(default=None, alias="PLATFORM_KEY")
    zcbot_default_model: str = Field(default="deepseek_v4.flash", alias="ZCBOT_DEFAULT_MODEL")
    zcbot_models_dir: Path | None = Field(default=None, alias="ZCBOT_MODELS_DIR")
    zcbot_sandbox: Literal["bwrap", "docker", "unsafe"] = Field(default="bwrap", alias="ZCBOT_SANDBOX")
    zcbot_env: Literal["local", "production"] = Field(default="local", alias="ZCBOT_ENV")
    # Bus naming: a prefix lets several stacks (or tests) share one NATS server.
    zcbot_bus_prefix: str = Field(default="zcbot", alias="ZCBOT_BUS_PREFIX")
    zcbot_events_max_age_hours: float = Field(default=24.0, alias="ZCBOT_EVENTS_MAX_AGE_HOURS")
    # Health/metrics ports of the non-HTTP services.
    zcbot_runner_port: int = Field(default=8766, alias="ZCBOT_RUNNER_PORT")
    zcbot_executor_port: int = Field(default=8767, alias="ZCBOT_EXECUTOR_PORT")
    zcbot_scheduler_port: int = Field(default=8768, alias="ZCBOT_SCHEDULER_PORT")
    zcbot_channels_port: int = Field(default=8769, alias="ZCBOT_CHANNELS_PORT")
    # Database connections per process: `pool_size` stay open (a run touches the database four times,
    # and a connection opened per touch costs more than the query); up to `max_overflow` more under bursts.
    zcbot_db_pool_size: int = Field(default=30, ge=1, alias="ZCBOT_DB_POOL_SIZE")
    zcbot_db_max_overflow: int = Field(default=20, ge=0, alias="ZCBOT_DB_MAX_OVERFLOW")
    # A pooled connection idle this long is pinged before use (0: always, as `pool_pre_ping`).
    zcbot_db_ping_idle_seconds: float = Field(default=1.0, ge=0, alias="ZCBOT_DB_PING_IDLE_SECONDS")
    # Runs.
    zcbot_runner_concurrency: int = Field(default=200, alias="ZCBOT_RUNNER_CONCURRENCY")
    zcbot_max_runs_per_user: int = Field(default=3, alias="ZCBOT_MAX_RUNS_PER_USER")
    zcbot_max_queued_runs: int = Field(default=1000, alias="ZCBOT_MAX_QUEUED_RUNS")
    zcbot_run_wall_clock_seconds: float = Field(default=3600.0, alias="ZCBOT_RUN_WALL_CLOCK_SECONDS")
    zcbot_ack_wait_seconds: float = Field(default=30.0, alias="ZCBOT_ACK_WAIT_SECONDS")
    zcbot_max_deliver: int = Field(default=5, alias="ZCBOT_MAX_DELIVER")
    zcbot_sse_heartbeat_seconds: float = Field(default=15.0, alias="ZCBOT_SSE_HEARTBEAT_SECONDS")
    # Executor.
    zcbot_executor_host: str | None = Field(default=None, alias="ZCBOT_EXECUTOR_HOST")
    zcbot_sandbox_idle_seconds: float = Field(default=300.0, alias="ZCBOT_SANDBOX_IDLE_SECONDS")
    zcbot_docker_runtime: str = Field(default="runc", alias="ZCBOT_DOCKER_RUNTIME")
    zcbot_docker_image: str = Field(default="zcbot-sandbox:latest", alias="ZCBOT_DOCKER_IMAGE")
    zcbot_max_bg_procs: int = Field(default=3, alias="ZCBOT_MAX_BG_PROCS")
    # Model calls that fail transiently (429, 5xx, a dropped connection before any output) are tried again
    # this many times, waiting base * 2^n seconds with jitter (or the provider's Retry-After), each wait at
    # most max seconds (llm/retry.py).
    zcbot_llm_retries: int = Field(default=4, ge=0, le=20, alias="ZCBOT_LLM_RETRIES")
    zcbot_llm_retry_base_seconds: float = Field(default=1.0, ge=0, alias="ZCBOT_LLM_RETRY_BASE_SECONDS")
    zcbot_llm_retry_max_seconds: float = Field(default=60.0, ge=0, alias="ZCBOT_LLM_RETRY_MAX_SECONDS")
    zcbot_upload_max_bytes: int = Field(default=50 * 1024 * 1024, alias="ZCBOT_UPLOAD_MAX_BYTES")
    # Disk space a user's files may take (all tasks, skills, memory, uploads, what commands write); 0: no
    # quota. Kept by zcbot_core/quota/ (a shared ledger plus the executor's inotify meter).
    zcbot_user_disk_quota_mb: int = Field(default=10240, ge=0, alias="ZCBOT_USER_DISK_QUOTA_MB")
    zcbot_log_level: str = Field(default="INFO", alias="ZCBOT_LOG_LEVEL")
    zcbot_channel_secret_key: str | None = Field(default=None, alias="ZCBOT_CHANNEL_SECRET_KEY")

    # ---- derived -------------------------------------------------------------------------
    @property
    def home(self) -> Path:
        return self.zcbot_home.expanduser().resolve()

    @property
    def storage_root(self) -> Path:
        root = self.zcbot_storage_root or (self.home / "users")
        return root.expanduser().resolve()

    @property
    def models_dirs(self) -> list[Path]:
        dirs = [REPO_ROOT / "config" / "models"]
        if self.zcbot_models_dir:
            dirs.append(self.zcbot_models_dir.expanduser().resolve())
        return dirs

    def require_secrets(self) -> None:
        """Fail fast, naming the variable, when a secret the process needs is unset."""
        missing = [name for name, value in (("JWT_SECRET", self.jwt_secret), ("PLATFORM_KEY", self.platform_key)) if not value]
        if missing:
            raise ConfigError(
                f"{', '.join(missing)} must be set in the environment when a zcbot service runs on its own "
                "(`zcbot up` generates and persists them under ZCBOT_HOME)."
            )
        if self.zcbot_env == "production" and self.jwt_secret and len(self.jwt_secret) < 32:
            raise ConfigError("JWT_SECRET must be at least 32 characters outside local dev.")

    def require_urls(self) -> tuple[str, str]:
        if not self.zcbot_db_url or not self.zcbot_nats_url:
            raise ConfigError("ZCBOT_DB_URL and ZCBOT_NATS_URL must be set when a service runs on its own (or use `zcbot up`).")
        return self.zcbot_db_url, self.zcbot_nats_url


SECRETS_FILE = "secrets.env"


def ensure_local_secrets(home: Path) -> dict[str, str]:
    """Generate JWT_SECRET/PLATFORM_KEY once under ZCBOT_HOME; env values always win."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / SECRETS_FILE
    stored: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                key, _, value = line.partition("=")
                stored[key.strip()] = value.strip()
    changed = False
    for name in ("JWT_SECRET", "PLATFORM_KEY", "ZCBOT_CHANNEL_SECRET_KEY"):
        if name not in stored:
            stored[name] = secrets.token_urlsafe(48) if name != "ZCBOT_CHANNEL_SECRET_KEY" else secrets.token_hex(32)
            changed = True
    if changed:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write("# generated by `zcbot up`; environment variables override these\n")
            fh.writelines(f"{k}={v}\n" for k, v in stored.items())
    return {k: os.environ.get(k) or v for k, v in stored.items()}


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
