"""What the channels service's parts share (the iLink loops, push delivery, WeCom conversations):
built once by `ChannelsService.start`, so those parts never import the service that runs them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from zcbot_core.channels.conversation import ConversationDeps
from zcbot_core.channels.email_api import EmailClient
from zcbot_core.channels.ilink_api import ILinkClient
from zcbot_core.channels.settings import ChannelSettings
from zcbot_core.channels.wecom_api import WeComClient
from zcbot_core.platform.config import Settings


@dataclass
class ChannelsContext:
    settings: Settings
    sessions: async_sessionmaker[AsyncSession]
    cs: ChannelSettings
    key: bytes | None  # the channel secret key; None: iLink is disabled on this server
    wecom: WeComClient
    ilink: ILinkClient
    email: EmailClient  # the fallback of a push no WeChat channel can deliver
    conversation_deps: ConversationDeps
    # Run a coroutine in the service's background group (drained on stop).
    spawn: Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]
