"""Runner configuration: `RunnerSettings`, the core `Settings` plus the runner's own knobs and its
host tools' (`HostToolSettings`: web_search, web_fetch, look_at_image), validated at start-up in one
object (`main.py` loads it; `RunnerService.start` extends a shared `Settings` given to it). The
README's table is generated from it (`python -m zcbot_core.platform.settings_doc`).
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from zcbot_core.llm.retry import RetryPolicy
from zcbot_core.platform.config import Settings
from zcbot_core.schedules.rules import DEFAULT_TIMEZONE, ScheduleError, validate_timezone
from zcbot_core.web.settings import HostToolSettings


class RunnerSettings(Settings, HostToolSettings):
    """The runner's environment; an empty variable means "the default". Not frozen, unlike a bare
    `HostToolSettings`: it is the runner's `Settings` (tests copy it with a changed knob)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False, env_ignore_empty=True,
                                      frozen=False, populate_by_name=True)

    zcbot_runner_concurrency: int = Field(default=200, alias="ZCBOT_RUNNER_CONCURRENCY",
        description='runs one runner process drives at once')
    zcbot_event_publish_retry_seconds: float = Field(default=30.0, gt=0, alias="ZCBOT_EVENT_PUBLISH_RETRY_SECONDS",
        description='how long a runner retries storing a run event (a leader election, a NATS restart) before '
                    'the run ends with an error saying events were lost')
    # Model calls that fail transiently (429, 5xx, a dropped connection before any output) are tried again
    # this many times, waiting base * 2^n seconds with jitter (or the provider's Retry-After), each wait at
    # most max seconds (llm/retry.py). The runner alone calls models.
    zcbot_llm_retries: int = Field(default=4, ge=0, le=20, alias="ZCBOT_LLM_RETRIES",
        description='tries again of a model call that failed transiently (429, 5xx, dropped before output)')
    zcbot_llm_retry_base_seconds: float = Field(default=1.0, ge=0, alias="ZCBOT_LLM_RETRY_BASE_SECONDS",
        description="first retry wait (doubles each time, with jitter, or the provider's Retry-After)")
    zcbot_llm_retry_max_seconds: float = Field(default=60.0, ge=0, alias="ZCBOT_LLM_RETRY_MAX_SECONDS",
        description='longest single retry wait')
    zcbot_schedule_default_timezone: str = Field(default=DEFAULT_TIMEZONE, alias="ZCBOT_SCHEDULE_DEFAULT_TIMEZONE",
        description="timezone of scheduled jobs created without one (the schedule tools run in the runner)")

    def retry_policy(self) -> RetryPolicy:
        """How the runs' model calls are tried again (`ZCBOT_LLM_RETRY*`)."""
        return RetryPolicy(retries=self.zcbot_llm_retries, base_seconds=self.zcbot_llm_retry_base_seconds,
                           max_seconds=self.zcbot_llm_retry_max_seconds)

    @field_validator("zcbot_schedule_default_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        """An IANA name, checked now: a typo would otherwise fail every job created without one."""
        try:
            return validate_timezone(value.strip() or DEFAULT_TIMEZONE)
        except ScheduleError as exc:
            raise ValueError(str(exc)) from None
