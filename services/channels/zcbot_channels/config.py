"""Channels-service configuration: `ChannelsServiceSettings`, the core `Settings` plus the channel
adapters' `ChannelSettings` (WeCom, iLink, e-mail), one object validated at start-up (`main.py`
loads it; `ChannelsService.start` extends a shared `Settings` given to it). The gateway reads the
same `ChannelSettings` fields, from the same environment through the same `load_settings`, on its
first channel request (`routes/channels.py`). The README's table is generated from the classes
(`python -m zcbot_core.platform.settings_doc`).
"""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from zcbot_core.channels.settings import ChannelSettings
from zcbot_core.platform.config import Settings


class ChannelsServiceSettings(Settings, ChannelSettings):
    """The channels service's environment; an empty variable means "the default". Not frozen, unlike
    a bare `ChannelSettings`: it is the service's `Settings` (tests copy it with a changed knob)."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", case_sensitive=False, env_ignore_empty=True,
                                      frozen=False, populate_by_name=True)
