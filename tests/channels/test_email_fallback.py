"""The e-mail fallback of a push (seed §8.7 "超期退邮件兜底"), against a local SMTP server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.channels.conftest import ChannelStack, assert_no_secrets
from tests.channels.test_ilink import login
from tests.helpers.db import db_exec
from tests.helpers.smtp import SmtpServer
from zcbot_core.channels.push import send_to_user


@pytest.fixture
async def smtp() -> AsyncIterator[SmtpServer]:
    server = SmtpServer()
    server.controller.start()
    yield server
    server.controller.stop()


async def test_a_push_no_wechat_channel_can_deliver_goes_by_e_mail_with_the_file(
        chan: ChannelStack, smtp: SmtpServer, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    for key, value in smtp.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ZCBOT_SMTP_PASSWORD", "smtp-secret-never-logged")
    headers, bot = await login(chan, "erin", "wx_erin@im.wechat")  # linked, but erin never wrote: no context token
    db_exec(chan.settings.zcbot_db_url, "update users set email='erin@example.test' where user_id='erin'")
    report = chan.settings.storage_root / "erin" / "wechat" / "brief.docx"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_bytes(b"PK\x03\x04 brief")
    await chan.start_channels()
    rt = chan.stack.runners[0][1]

    reply = await send_to_user(rt.nc, rt.topo, "erin", "早报：一切正常。\n详见附件。", file_path="wechat/brief.docx",
                               origin="scheduler")
    assert reply.delivered == ["email"] and "24 h" in reply.errors["ilink"], reply
    [mail] = await smtp.inbox.wait(1)
    assert mail["To"] == "erin@example.test" and mail["From"] == "zcbot@example.test"
    assert mail["Subject"] == "zcbot：早报：一切正常。"
    body = mail.get_body(("plain",))
    assert body is not None and "详见附件" in body.get_content()
    [attachment] = list(mail.iter_attachments())
    assert attachment.get_filename() == "brief.docx" and attachment.get_content() == b"PK\x03\x04 brief"

    # A scheduled job's notify falls back whatever channel it names; the agent's named channel does not.
    reply = await send_to_user(rt.nc, rt.topo, "erin", "Job done.", channel="wecom", origin="scheduler")
    assert reply.delivered == ["email"] and "not linked" in reply.errors["wecom"], reply
    assert (await smtp.inbox.wait(2))[1].get_body(("plain",)).get_content().strip() == "Job done."
    reply = await send_to_user(rt.nc, rt.topo, "erin", "Only WeChat.", channel="ilink")
    assert reply.delivered == [] and "email" not in reply.errors
    # A user without an address gets no e-mail, and is told so.
    db_exec(chan.settings.zcbot_db_url, "update users set email=null where user_id='erin'")
    reply = await send_to_user(rt.nc, rt.topo, "erin", "Anyone?")
    assert reply.delivered == [] and "no e-mail address" in reply.errors["email"]
    assert len(smtp.inbox.messages) == 2 and not chan.ilink.violations
    assert_no_secrets(caplog, ["smtp-secret-never-logged", bot.token])  # type: ignore[attr-defined]
