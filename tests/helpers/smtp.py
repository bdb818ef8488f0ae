"""A local SMTP server (aiosmtpd) that keeps what it receives: the e-mail channel's tests."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller

from zcbot_devstack.embedded.process import free_port


@dataclass
class Inbox:
    messages: list[EmailMessage] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 (aiosmtpd's name)
        msg = message_from_bytes(envelope.original_content or envelope.content, policy=policy.default)
        assert isinstance(msg, EmailMessage)
        msg["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
        self.messages.append(msg)
        return "250 OK"

    async def wait(self, count: int = 1, timeout: float = 10.0) -> list[EmailMessage]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count:
            assert time.monotonic() < deadline, f"{len(self.messages)} of {count} e-mails arrived"
            await asyncio.sleep(0.05)
        return self.messages


class SmtpServer:
    def __init__(self) -> None:
        self.inbox = Inbox()
        self.port = free_port()
        self.controller = Controller(self.inbox, hostname="127.0.0.1", port=self.port)

    def env(self) -> dict[str, str]:
        """The channels service's variables for this server (plain SMTP: a local relay)."""
        return {"ZCBOT_SMTP_HOST": "127.0.0.1", "ZCBOT_SMTP_PORT": str(self.port), "ZCBOT_SMTP_TLS": "none",
                "ZCBOT_SMTP_FROM": "zcbot@example.test"}
