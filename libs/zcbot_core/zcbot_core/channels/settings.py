"""Channel configuration: `ChannelSettings`, the pydantic settings class of the channel adapters
(the WeCom callback in the gateway, the conversations and pushes in the channels service), read
once per process start (`ChannelSettings.from_env()`) and validated then: a bad value is a
`ConfigError` naming the variable. Secrets live only in the environment, never in the database.
Every variable and its meaning are in the fields below (README's table is generated from them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from zcbot_core.platform.config import ConfigError, load_settings

DEFAULT_WECOM_BASE_URL = "https://qyapi.weixin.qq.com"
DEFAULT_WECOM_LOGIN_URL = "https://login.work.weixin.qq.com/wwlogin/sso/login"  # the QR scan page (wwlogin)
DEFAULT_ILINK_BASE_URL = "https://ilinkai.weixin.qq.com"
DEFAULT_ILINK_CDN_BASE_URL = "https://novac2c.cdn.weixin.qq.com/c2c"


class ChannelSettings(BaseSettings):
    """WeCom (企业微信 self-built app) and iLink (personal WeChat ClawBot) settings; an empty variable
    means "not set" / "the default"."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False, env_ignore_empty=True,
                                      frozen=True, populate_by_name=True)

    wecom_corp_id: str | None = Field(default=None, alias="ZCBOT_WECOM_CORP_ID", description="WeCom corp id")
    wecom_agent_id: int | None = Field(default=None, alias="ZCBOT_WECOM_AGENT_ID",
                                       description="the WeCom app's numeric AgentId")
    wecom_secret: str | None = Field(default=None, alias="ZCBOT_WECOM_SECRET", description="the WeCom app's secret")
    wecom_token: str | None = Field(default=None, alias="ZCBOT_WECOM_TOKEN", description="WeCom callback Token")
    wecom_aes_key: str | None = Field(default=None, alias="ZCBOT_WECOM_AES_KEY",
                                      description="WeCom callback EncodingAESKey")
    wecom_base_url: str = Field(default=DEFAULT_WECOM_BASE_URL, alias="ZCBOT_WECOM_BASE_URL",
                                description="WeCom API base")
    wecom_login_url: str = Field(default=DEFAULT_WECOM_LOGIN_URL, alias="ZCBOT_WECOM_LOGIN_URL",
                                 description="WeCom's QR login page (wwlogin) of the scan-to-bind flow")
    wecom_oauth_redirect_url: str | None = Field(default=None, alias="ZCBOT_WECOM_OAUTH_REDIRECT_URL", description=(
        "where WeCom sends the scanner back: this gateway's https://<host>/v1/channels/wecom/oauth/callback on the "
        "app's trusted domain (default: built from the request's address)"))
    ilink_base_url: str = Field(default=DEFAULT_ILINK_BASE_URL, alias="ZCBOT_ILINK_BASE_URL",
                                description="iLink (personal WeChat ClawBot) API base")
    ilink_cdn_base_url: str = Field(default=DEFAULT_ILINK_CDN_BASE_URL, alias="ZCBOT_ILINK_CDN_BASE_URL",
                                    description="iLink media CDN base")
    ilink_app_id: str = Field(default="bot", alias="ZCBOT_ILINK_APP_ID", description="header iLink-App-Id")
    ilink_poll_timeout: float = Field(default=38.0, alias="ZCBOT_ILINK_POLL_TIMEOUT_SECONDS",
                                      description="client-side iLink long-poll timeout")
    ilink_session_pause: float = Field(default=3600.0, alias="ZCBOT_ILINK_SESSION_PAUSE_SECONDS",
                                       description="pause of an iLink loop after errcode -14 (session expired)")
    ilink_context_max_age: float = Field(default=23 * 3600.0, alias="ZCBOT_ILINK_CONTEXT_MAX_AGE_SECONDS", description=(
        "a context_token older than this is not used for a proactive push (the server keeps it ~24 h)"))
    scan_interval: float = Field(default=5.0, alias="ZCBOT_CHANNELS_SCAN_SECONDS",
                                 description="how often bindings are scanned for loops to start")
    reply_timeout: float | None = Field(default=None, alias="ZCBOT_CHANNELS_REPLY_TIMEOUT_SECONDS", description=(
        "longest wait for a run's answer (default, or <= 0: the run wall clock + 60 s)"))

    smtp_host: str | None = Field(default=None, alias="ZCBOT_SMTP_HOST", description=(
        "SMTP server of the e-mail fallback (a push no WeChat channel can deliver goes to the user's e-mail)"))
    smtp_port: int = Field(default=587, ge=1, le=65535, alias="ZCBOT_SMTP_PORT", description="SMTP port")
    smtp_tls: Literal["starttls", "ssl", "none"] = Field(default="starttls", alias="ZCBOT_SMTP_TLS",
                                                         description="starttls | ssl | none (a local relay only)")
    smtp_username: str | None = Field(default=None, alias="ZCBOT_SMTP_USERNAME", description="SMTP login (optional)")
    smtp_password: str | None = Field(default=None, alias="ZCBOT_SMTP_PASSWORD", description="SMTP password")
    smtp_from: str | None = Field(default=None, alias="ZCBOT_SMTP_FROM", description="the From address of the e-mails")
    email_attach_max_mb: float = Field(default=10.0, ge=0, alias="ZCBOT_EMAIL_ATTACH_MAX_MB", description=(
        "a larger pushed file is named in the e-mail (its path in the web app) instead of attached"))

    @field_validator("wecom_corp_id", mode="before")
    @classmethod
    def _strip(cls, value: object) -> object:
        return (value.strip() or None) if isinstance(value, str) else value

    @field_validator("wecom_agent_id", mode="before")
    @classmethod
    def _agent_id(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.strip()
            if not value:
                return None
            if not value.lstrip("-").isdigit():
                raise ValueError("ZCBOT_WECOM_AGENT_ID must be the app's numeric AgentId")
        return value

    @field_validator("wecom_base_url", "wecom_login_url", "ilink_base_url", "ilink_cdn_base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("reply_timeout")
    @classmethod
    def _positive_or_default(cls, value: float | None) -> float | None:
        return value if value is not None and value > 0 else None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ChannelSettings":
        """From the process environment, or from `env` alone (a bad value: `ConfigError`)."""
        if env is None:
            return load_settings(cls)
        known = {f.alias for f in cls.model_fields.values()}
        values = {k: v for k, v in env.items() if k in known and v not in (None, "")}
        try:
            return cls.model_validate(values)
        except ValueError as exc:
            raise ConfigError(f"invalid channel configuration: {exc}") from None

    @property
    def wecom_send_enabled(self) -> bool:
        """Outbound (message/send, media/upload) needs the corp id, agent id and app secret."""
        return bool(self.wecom_corp_id and self.wecom_agent_id is not None and self.wecom_secret)

    @property
    def wecom_callback_enabled(self) -> bool:
        """Inbound callbacks also need the callback Token and EncodingAESKey."""
        return bool(self.wecom_send_enabled and self.wecom_token and self.wecom_aes_key)

    @property
    def email_enabled(self) -> bool:
        return bool(self.smtp_host and self.smtp_from)

    def secret_values(self) -> list[str]:
        """Every configured secret (for tests and redaction)."""
        return [v for v in (self.wecom_secret, self.wecom_token, self.wecom_aes_key, self.smtp_password) if v]
