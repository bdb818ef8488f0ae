"""`HostToolSettings`: the runner's host-side tools that reach the network or a second model
(`web_search`, `web_fetch`, `look_at_image`, `generate_image`), read once when the runner starts
(`HostToolSettings.from_env()`); a bad value is a `ConfigError` naming the variable. A tool whose
configuration is missing is simply not registered (seed 003 §3.4)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from zcbot_core.platform.config import load_settings

SearchProvider = Literal["searxng", "tavily", "bocha"]
DEFAULT_TAVILY_URL = "https://api.tavily.com"
DEFAULT_BOCHA_URL = "https://api.bochaai.com"


class HostToolSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False, env_ignore_empty=True,
                                      frozen=True, populate_by_name=True)

    zcbot_env: Literal["local", "production"] = Field(default="local", alias="ZCBOT_ENV",
        description="`production` refuses the test-only fetch override below")
    search_provider: SearchProvider | None = Field(default=None, alias="ZCBOT_WEB_SEARCH_PROVIDER",
        description="`searxng`, `tavily` or `bocha`; unset = the first configured of these (none: no `web_search`)")
    searxng_url: str | None = Field(default=None, alias="ZCBOT_SEARXNG_URL",
        description="a SearXNG instance (JSON format enabled), e.g. `http://searxng:8080`")
    tavily_api_key: SecretStr | None = Field(default=None, alias="ZCBOT_TAVILY_API_KEY",
        description="Tavily API key (runner only; never reaches a sandbox, a log or an event)")
    tavily_url: str = Field(default=DEFAULT_TAVILY_URL, alias="ZCBOT_TAVILY_URL", description="Tavily API base")
    bocha_api_key: SecretStr | None = Field(default=None, alias="ZCBOT_BOCHA_API_KEY",
        description="Bocha (博查) web search API key (runner only)")
    bocha_url: str = Field(default=DEFAULT_BOCHA_URL, alias="ZCBOT_BOCHA_URL", description="Bocha API base")
    search_per_minute: int = Field(default=10, ge=0, alias="ZCBOT_WEB_SEARCH_PER_MINUTE",
        description="searches per user per minute, over all runners (0 = no limit)")
    search_max_results: int = Field(default=8, ge=1, le=20, alias="ZCBOT_WEB_SEARCH_MAX_RESULTS",
        description="results per search at most")
    search_cost_usd: float = Field(default=0.0, ge=0, alias="ZCBOT_WEB_SEARCH_COST_USD",
        description="what one search costs (a usage event of kind `web_search`; counts against budgets)")
    search_timeout_seconds: float = Field(default=15.0, gt=0, alias="ZCBOT_WEB_SEARCH_TIMEOUT_SECONDS",
        description="one search request's time limit")
    fetch_enabled: bool = Field(default=True, alias="ZCBOT_WEB_FETCH_ENABLED",
        description="register `web_fetch` (URL -> readable Markdown, SSRF-checked)")
    fetch_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1024, alias="ZCBOT_WEB_FETCH_MAX_BYTES",
        description="largest response body `web_fetch` reads")
    fetch_timeout_seconds: float = Field(default=20.0, gt=0, alias="ZCBOT_WEB_FETCH_TIMEOUT_SECONDS",
        description="one fetch's time limit, redirects included")
    fetch_max_redirects: int = Field(default=5, ge=0, le=20, alias="ZCBOT_WEB_FETCH_MAX_REDIRECTS",
        description="redirects followed (each one re-checked)")
    fetch_inline_chars: int = Field(default=6000, ge=500, alias="ZCBOT_WEB_FETCH_INLINE_CHARS",
        description="a longer page is saved to the task folder (`sources/`) and its path returned")
    fetch_deny: str = Field(default="", alias="ZCBOT_WEB_FETCH_DENY",
        description="comma list of the deployment's own addresses (CIDRs, IPs or host names) `web_fetch` refuses, "
                    "besides the always-refused private, loopback, link-local, CGNAT and metadata ranges")
    fetch_allow_loopback: bool = Field(default=False, alias="ZCBOT_WEB_FETCH_ALLOW_LOOPBACK_FOR_TESTS",
        description="TEST ONLY: let `web_fetch` reach 127.0.0.0/8 and ::1 (local fixtures); refused in production")
    vision_profile: str | None = Field(default=None, alias="ZCBOT_VISION_PROFILE",
        description="model profile of `look_at_image` (a cheap vision model); unset = no `look_at_image`")
    vision_max_side: int = Field(default=1024, ge=64, le=4096, alias="ZCBOT_VISION_MAX_SIDE",
        description="an image is downsized to at most this many pixels on its longer side before it is sent")
    image_profile: str | None = Field(default="seedream", alias="ZCBOT_IMAGE_PROFILE",
        description="model profile of `generate_image` (an images API: Seedream on Volcengine ARK by default, or any "
                    "OpenAI-compatible one); the tool is offered only while the profile's API key is set; empty = none")
    image_cost_usd: float = Field(default=0.03, ge=0, alias="ZCBOT_IMAGE_COST_USD",
        description="what one generated image costs (a usage event of kind `image`; counts against budgets; "
                    "Seedream 4.0 lists 0.2 CNY per image)")

    @model_validator(mode="after")
    def _no_test_override_in_production(self) -> "HostToolSettings":
        if self.fetch_allow_loopback and self.zcbot_env == "production":
            raise ValueError("ZCBOT_WEB_FETCH_ALLOW_LOOPBACK_FOR_TESTS is a test-only setting; "
                             "ZCBOT_ENV=production refuses it")
        if self.search_provider is not None and self.chosen_provider() is None:
            needs = {"searxng": "ZCBOT_SEARXNG_URL", "tavily": "ZCBOT_TAVILY_API_KEY", "bocha": "ZCBOT_BOCHA_API_KEY"}
            raise ValueError(f"ZCBOT_WEB_SEARCH_PROVIDER={self.search_provider} needs {needs[self.search_provider]}")
        return self

    @classmethod
    def from_env(cls) -> "HostToolSettings":
        return load_settings(cls)

    def chosen_provider(self) -> SearchProvider | None:
        """The provider `web_search` uses: the named one when it is configured, else the first that is."""
        configured: dict[SearchProvider, bool] = {"searxng": bool(self.searxng_url),
                                                  "tavily": bool(self.tavily_api_key),
                                                  "bocha": bool(self.bocha_api_key)}
        if self.search_provider is not None:
            return self.search_provider if configured[self.search_provider] else None
        return next((name for name, ok in configured.items() if ok), None)

    def key(self, provider: SearchProvider) -> str | None:
        """The provider's key, unwrapped only here (a `SecretStr` elsewhere: no repr shows it)."""
        secret = {"tavily": self.tavily_api_key, "bocha": self.bocha_api_key}.get(provider)
        return secret.get_secret_value() if secret is not None else None

    def deny_entries(self) -> list[str]:
        return [part.strip() for part in self.fetch_deny.split(",") if part.strip()]
