"""Gateway configuration: `GatewaySettings`, the core `Settings` plus the knobs only the gateway
reads (tokens, sign-in throttle, CORS, SSE, uploads, previews), validated at start-up (`main.py` loads it
once; `create_app` extends a shared `Settings` given to it). The README's table is generated from
it (`python -m zcbot_core.platform.settings_doc`).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from zcbot_core.platform.config import Settings


class GatewaySettings(Settings):
    """The gateway's environment; an empty variable means "the default"."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False, env_ignore_empty=True)

    jwt_ttl_seconds: int = Field(default=7 * 24 * 3600, alias="ZCBOT_JWT_TTL_SECONDS", description="token lifetime (7 days)")
    zcbot_login_failures_per_minute: int = Field(default=10, ge=0, alias="ZCBOT_LOGIN_FAILURES_PER_MINUTE", description=(
        "failed sign-ins per account and per client address in a minute before 429 (0: off)"))
    zcbot_cors_origins: str = Field(default="", alias="ZCBOT_CORS_ORIGINS", description=(
        "comma-separated origins (`https://ui.example.com`) allowed to call `/v1` from a browser "
        "(production: only these; local: any when unset)"))
    zcbot_sse_heartbeat_seconds: float = Field(default=15.0, alias="ZCBOT_SSE_HEARTBEAT_SECONDS",
                                               description="SSE keep-alive comment interval")
    zcbot_upload_max_bytes: int = Field(default=50 * 1024 * 1024, alias="ZCBOT_UPLOAD_MAX_BYTES",
                                        description="file upload limit (50 MiB)")
    zcbot_soffice: str | None = Field(default=None, alias="ZCBOT_SOFFICE", description=(
        "LibreOffice `soffice` of the file previews (default: found on PATH; `zcbot up`'s check and the "
        "rendering package in a sandbox read it from their environment)"))
    zcbot_preview_uid: int = Field(default=10002, ge=1, alias="ZCBOT_PREVIEW_UID", description=(
        "host uid the preview converter (LibreOffice, in bubblewrap) runs as when the gateway runs as root; never 0 "
        "(a gateway that is not root converts as its own uid)"))
    zcbot_preview_cache_mb: int = Field(default=512, ge=0, alias="ZCBOT_PREVIEW_CACHE_MB", description=(
        "total size of the converted-PDF preview cache (the gateway's temp folder); least recently used "
        "out first (0: nothing kept)"))

    @field_validator("zcbot_cors_origins")
    @classmethod
    def _origins_only(cls, value: str) -> str:
        """Each entry an origin: scheme and host (and port), no path, no wildcard."""
        for origin in _split_origins(value):
            if not _ORIGIN.fullmatch(origin):
                raise ValueError(f"{origin!r} is not an origin such as https://ui.example.com")
        return value

    @property
    def cors_origins(self) -> list[str]:
        """The browser origins allowed to call the API (`ZCBOT_CORS_ORIGINS`)."""
        return _split_origins(self.zcbot_cors_origins)


_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?")


def _split_origins(value: str) -> list[str]:
    return [part.strip().rstrip("/") for part in value.split(",") if part.strip()]
