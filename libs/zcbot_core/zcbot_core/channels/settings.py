"""Channel configuration from the environment (kept out of `zcbot_core.config` on purpose: the
channel adapters own these knobs; `ChannelSettings.from_env()` is read once per process start).

WeCom (企业微信 self-built app; secrets live only in the environment, never in the database):
  ZCBOT_WECOM_CORP_ID, ZCBOT_WECOM_AGENT_ID, ZCBOT_WECOM_SECRET (corp secret of the app),
  ZCBOT_WECOM_TOKEN + ZCBOT_WECOM_AES_KEY (callback "Token" and "EncodingAESKey"),
  ZCBOT_WECOM_BASE_URL (default https://qyapi.weixin.qq.com).
iLink (personal WeChat ClawBot):
  ZCBOT_ILINK_BASE_URL (default https://ilinkai.weixin.qq.com),
  ZCBOT_ILINK_CDN_BASE_URL (default https://novac2c.cdn.weixin.qq.com/c2c),
  ZCBOT_ILINK_POLL_TIMEOUT_SECONDS (client-side long-poll timeout, default 38),
  ZCBOT_ILINK_SESSION_PAUSE_SECONDS (pause after errcode -14, default 3600),
  ZCBOT_ILINK_CONTEXT_MAX_AGE_SECONDS (a context_token older than this is not used for a
  proactive push, default 23 h: the server keeps it ~24 h),
  ZCBOT_ILINK_APP_ID (header iLink-App-Id, default "bot").
Channels service:
  ZCBOT_CHANNELS_SCAN_SECONDS (how often bindings are scanned for loops to start, default 5),
  ZCBOT_CHANNELS_REPLY_TIMEOUT_SECONDS (longest wait for a run's answer, default: run wall clock + 60).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_WECOM_BASE_URL = "https://qyapi.weixin.qq.com"
DEFAULT_ILINK_BASE_URL = "https://ilinkai.weixin.qq.com"
DEFAULT_ILINK_CDN_BASE_URL = "https://novac2c.cdn.weixin.qq.com/c2c"


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return float(raw)
    except ValueError:
        from zcbot_core.config import ConfigError

        raise ConfigError(f"{name} must be a number of seconds") from None


@dataclass(frozen=True)
class ChannelSettings:
    wecom_corp_id: str | None = None
    wecom_agent_id: int | None = None
    wecom_secret: str | None = None
    wecom_token: str | None = None
    wecom_aes_key: str | None = None
    wecom_base_url: str = DEFAULT_WECOM_BASE_URL
    ilink_base_url: str = DEFAULT_ILINK_BASE_URL
    ilink_cdn_base_url: str = DEFAULT_ILINK_CDN_BASE_URL
    ilink_app_id: str = "bot"
    ilink_poll_timeout: float = 38.0
    ilink_session_pause: float = 3600.0
    ilink_context_max_age: float = 23 * 3600.0
    scan_interval: float = 5.0
    reply_timeout: float | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ChannelSettings":
        env = os.environ if env is None else env
        agent = (env.get("ZCBOT_WECOM_AGENT_ID") or "").strip()
        if agent and not agent.lstrip("-").isdigit():
            from zcbot_core.config import ConfigError

            raise ConfigError("ZCBOT_WECOM_AGENT_ID must be the app's numeric AgentId")
        reply = _float(env, "ZCBOT_CHANNELS_REPLY_TIMEOUT_SECONDS", -1.0)
        return cls(
            wecom_corp_id=(env.get("ZCBOT_WECOM_CORP_ID") or "").strip() or None,
            wecom_agent_id=int(agent) if agent else None,
            wecom_secret=env.get("ZCBOT_WECOM_SECRET") or None,
            wecom_token=env.get("ZCBOT_WECOM_TOKEN") or None,
            wecom_aes_key=env.get("ZCBOT_WECOM_AES_KEY") or None,
            wecom_base_url=(env.get("ZCBOT_WECOM_BASE_URL") or DEFAULT_WECOM_BASE_URL).rstrip("/"),
            ilink_base_url=(env.get("ZCBOT_ILINK_BASE_URL") or DEFAULT_ILINK_BASE_URL).rstrip("/"),
            ilink_cdn_base_url=(env.get("ZCBOT_ILINK_CDN_BASE_URL") or DEFAULT_ILINK_CDN_BASE_URL).rstrip("/"),
            ilink_app_id=env.get("ZCBOT_ILINK_APP_ID") or "bot",
            ilink_poll_timeout=_float(env, "ZCBOT_ILINK_POLL_TIMEOUT_SECONDS", 38.0),
            ilink_session_pause=_float(env, "ZCBOT_ILINK_SESSION_PAUSE_SECONDS", 3600.0),
            ilink_context_max_age=_float(env, "ZCBOT_ILINK_CONTEXT_MAX_AGE_SECONDS", 23 * 3600.0),
            scan_interval=_float(env, "ZCBOT_CHANNELS_SCAN_SECONDS", 5.0),
            reply_timeout=reply if reply > 0 else None,
        )

    @property
    def wecom_send_enabled(self) -> bool:
        """Outbound (message/send, media/upload) needs the corp id, agent id and app secret."""
        return bool(self.wecom_corp_id and self.wecom_agent_id is not None and self.wecom_secret)

    @property
    def wecom_callback_enabled(self) -> bool:
        """Inbound callbacks also need the callback Token and EncodingAESKey."""
        return bool(self.wecom_send_enabled and self.wecom_token and self.wecom_aes_key)

    def secret_values(self) -> list[str]:
        """Every configured secret (for tests and redaction)."""
        return [v for v in (self.wecom_secret, self.wecom_token, self.wecom_aes_key) if v]
