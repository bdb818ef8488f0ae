"""The e-mail channel: the fallback of a push that no WeChat channel can deliver (seed §8.7:
"超期退邮件兜底" — after iLink's ~24 h context_token window, or with no channel linked at all).

SMTP settings come from the environment (`ChannelSettings.smtp_*`); the message goes to the
user's e-mail address, the pushed file attached (or, above `ZCBOT_EMAIL_ATTACH_MAX_MB`, named by
its path in the web app). smtplib runs in a thread: a push is rare and the call is short.
"""

from __future__ import annotations

import asyncio
import mimetypes
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import make_msgid

from zcbot_core import safe_fs
from zcbot_core.channels.settings import ChannelSettings

SUBJECT_CHARS = 60
TIMEOUT_SECONDS = 20.0


class EmailError(Exception):
    """The e-mail could not be sent (the message is safe to show: no secret in it)."""


def subject_of(text: str, file: safe_fs.UserFile | None) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not first:
        first = f"文件：{file.name}" if file is not None else "消息"
    return "zcbot：" + (first if len(first) <= SUBJECT_CHARS else first[:SUBJECT_CHARS - 1] + "…")


class EmailClient:
    def __init__(self, cs: ChannelSettings) -> None:
        self.cs = cs

    def build(self, to: str, text: str, file: safe_fs.UserFile | None) -> EmailMessage:
        msg = EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = str(self.cs.smtp_from), to, subject_of(text, file)
        msg["Message-ID"] = make_msgid(domain="zcbot")
        body = text.strip()
        attach: bytes | None = None
        if file is not None:
            limit = int(self.cs.email_attach_max_mb * 1024 * 1024)
            size = file.stat().st_size
            if size <= limit:
                attach = file.read_bytes(limit + 1)
            else:  # linked: the path the user opens in the web app's files
                body += f"\n\n文件 {file.rel}（{size / 1048576:.1f} MB）太大，未附上；请在 zcbot 的文件中打开。"
        msg.set_content(body or f"文件：{file.name if file else ''}")
        if attach is not None and file is not None:
            kind = (mimetypes.guess_type(file.name)[0] or "application/octet-stream").split("/", 1)
            msg.add_attachment(attach, maintype=kind[0], subtype=kind[1], filename=file.name)
        return msg

    def _send(self, msg: EmailMessage) -> None:
        cs = self.cs
        host, port = str(cs.smtp_host), cs.smtp_port
        try:
            if cs.smtp_tls == "ssl":
                smtp: smtplib.SMTP = smtplib.SMTP_SSL(host, port, timeout=TIMEOUT_SECONDS,
                                                      context=ssl.create_default_context())
            else:
                smtp = smtplib.SMTP(host, port, timeout=TIMEOUT_SECONDS)
            with smtp:
                if cs.smtp_tls == "starttls":
                    smtp.starttls(context=ssl.create_default_context())
                if cs.smtp_username:
                    smtp.login(cs.smtp_username, cs.smtp_password or "")
                smtp.send_message(msg)
        except (smtplib.SMTPException, OSError) as exc:
            # The class and the server's code only: an SMTP error text may echo what was sent.
            code = getattr(exc, "smtp_code", None)
            raise EmailError(f"the e-mail could not be sent ({exc.__class__.__name__}"
                             + (f" {code}" if code else "") + ")") from None

    async def send(self, to: str, text: str, file: safe_fs.UserFile | None) -> None:
        if not self.cs.email_enabled:
            raise EmailError("e-mail is not configured on this server (ZCBOT_SMTP_HOST, ZCBOT_SMTP_FROM)")
        msg = await asyncio.to_thread(self.build, to, text, file)
        await asyncio.to_thread(self._send, msg)
