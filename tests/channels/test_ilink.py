"""iLink end to end: QR login, one poll loop across replicas, runs, replies (text + file via the
CDN), dedupe, session-expiry pause/recovery, and pushes to both channels."""

from __future__ import annotations

import asyncio

import pytest

from tests.channels.conftest import ChannelStack, assert_no_secrets, bind_wecom
from tests.helpers.db import db_exec, db_rows
from tests.helpers.wait import wait_for
from zcbot_core.bus import Topology
from zcbot_core.channels.push import send_to_user

REPORT = "name,value\nwidgets,42\n" * 20


async def login(chan: ChannelStack, user_id: str, wechat_user: str) -> tuple[dict[str, str], object]:
    headers = await chan.user_headers(user_id)
    fake = chan.ilink
    async with chan.client(headers) as c:
        r = await c.post("/v1/channels/ilink/login")
        assert r.status_code == 200, r.text
        assert r.json()["qrcode_img_content"].endswith(fake.last_qrcode)
        qrcode = fake.last_qrcode
        assert (await c.get("/v1/channels/ilink/login", params={"wait": 1})).json()["status"] == "wait"
        fake.scan(qrcode)
        assert (await c.get("/v1/channels/ilink/login", params={"wait": 1})).json()["status"] == "scaned"
        bot = fake.confirm(qrcode, wechat_user)
        r = await c.get("/v1/channels/ilink/login", params={"wait": 1})
        assert r.status_code == 200 and r.json()["status"] == "confirmed", r.text
        assert bot.token not in r.text
        listed = (await c.get("/v1/channels")).json()["items"]
    assert [b["channel"] for b in listed] == ["ilink"] and listed[0]["status"] == "active"
    assert listed[0]["ilink_bot_id"] == bot.bot_id and bot.token not in str(listed)
    return headers, bot


async def test_ilink_login_poll_reply_dedupe_and_failover(chan: ChannelStack, caplog: pytest.LogCaptureFixture) -> None:
    fake = chan.ilink
    chan.stack.fake.script("KEY-ilink-report", [
        {"tool_calls": [{"name": "make_file", "arguments": {"name": "data.csv", "content": REPORT}}]},
        {"text": "Done: data.csv is attached."},
    ])
    _, bot = await login(chan, "bob", "wx_bob@im.wechat")
    # The bot token is stored sealed, never in the clear.
    cfg = db_rows(chan.settings.zcbot_db_url, "select config::text from channel_bindings where user_id='bob'")[0][0]
    assert bot.token not in cfg and '"bot_token": "v1.' in cfg

    fake.fail_uploads = 1  # the CDN answers 502 once: the upload is retried
    first, second = await chan.start_channels(), await chan.start_channels()
    await wait_for(lambda: len(first.pollers) + len(second.pollers) == 1, what="one poll loop")
    holder, other = (first, second) if first.pollers else (second, first)

    msg = fake.user_sends(bot, "KEY-ilink-report make the csv")
    await fake.wait_sent(lambda: bot.files)
    assert fake.texts_to(bot) == ["Done: data.csv is attached."]
    assert bot.files == [("data.csv", REPORT.encode())]
    assert len(bot.client_ids) == 2  # every message had its own client_id

    # At-least-once delivery: the same message_id again is ignored.
    fake.redeliver(bot, msg)
    await wait_for(lambda: any(p[1] == "ok:1" for p in bot.polls[-3:]), what="redelivery polled")
    await asyncio.sleep(0.5)
    url = chan.settings.zcbot_db_url
    [(task_id, working_dir)] = db_rows(url, "select task_id, working_dir from tasks where user_id='bob' and channel='ilink'")
    assert working_dir == "wechat"
    users = db_rows(url, "select count(*) from messages where task_id=:t and payload->>'role'='user'", t=task_id)
    assert users[0][0] == 1

    # Failover mid-run: the holder drains while a run is in progress (releasing its lease); the
    # other replica takes over from the persisted cursor and delivers the pending reply.
    chan.stack.fake.script("KEY-ilink-second", [{"text": "Hello again, bob.", "first_delay": 1.0}])
    fake.user_sends(bot, "KEY-ilink-second hello again")
    await wait_for(lambda: db_rows(url, "select 1 from channel_bindings where user_id='bob' and "
                                        "config->'pending_replies' <> '{}'::jsonb"), what="pending reply")
    await chan.stop_channels(holder)
    await wait_for(lambda: len(other.pollers) == 1, what="takeover")
    await fake.wait_sent(lambda: "Hello again, bob." in fake.texts_to(bot))
    assert fake.texts_to(bot).count("Hello again, bob.") == 1
    await wait_for(lambda: db_rows(url, "select config->'pending_replies' from channel_bindings "
                                        "where user_id='bob'")[0][0] == {}, what="pending reply cleared")
    assert bot.max_active_polls == 1
    users = db_rows(url, "select count(*) from messages where task_id=:t and payload->>'role'='user'", t=task_id)
    assert users[0][0] == 2
    assert not fake.violations
    assert_no_secrets(caplog, [bot.token, *(m["context_token"] for m in bot.msgs)])


async def test_session_expiry_pause_recovery_and_push_to_both_channels(
        chan: ChannelStack, caplog: pytest.LogCaptureFixture) -> None:
    ilink, wecom = chan.ilink, chan.wecom
    headers, bot = await login(chan, "carol", "wx_carol@im.wechat")
    wecom.members.add("carol_w")
    async with chan.client(headers) as c:
        await bind_wecom(c, wecom, "carol_w")
    svc = await chan.start_channels()
    await wait_for(lambda: len(svc.pollers) == 1, what="poll loop")
    rt = chan.stack.runners[0][1]
    topo: Topology = rt.topo

    # No inbound message yet: personal WeChat cannot be pushed to; WeCom can. Refused clearly.
    reply = await send_to_user(rt.nc, topo, "carol", "Build finished.")
    assert reply.delivered == ["wecom"] and "24 h" in reply.errors["ilink"]

    # The session expires: the loop pauses (no getupdates for ZCBOT_ILINK_SESSION_PAUSE_SECONDS),
    # then notifystart + poll again, and messages flow once more.
    bot.session_expired = True
    await wait_for(lambda: any(p[1] == "expired" for p in bot.polls), what="-14")
    expired_at = next(t for t, outcome in bot.polls if outcome == "expired")
    await wait_for(lambda: bot.notifystarts, timeout=10, what="notifystart")
    assert not [t for t, _ in bot.polls if expired_at < t < expired_at + 1.3]  # paused ~1.5 s
    await wait_for(lambda: any(t > bot.notifystarts[0] and o.startswith("ok") for t, o in bot.polls), what="recovery")
    chan.stack.fake.script("KEY-after-pause", [{"text": "Back online."}])
    ilink.user_sends(bot, "KEY-after-pause are you there?")
    await ilink.wait_sent(lambda: "Back online." in ilink.texts_to(bot))
    binding = db_rows(chan.settings.zcbot_db_url,
                      "select config->>'session', config->>'paused_until' from channel_bindings "
                      "where user_id='carol' and channel='ilink'")[0]
    assert binding == ("ok", None)

    # A push now reaches both channels, with a file; it is recorded in each channel task (kind push).
    root = chan.settings.storage_root / "carol" / "wechat"
    (root / "brief.txt").write_text("Morning brief: all green.\n")
    reply = await send_to_user(rt.nc, topo, "carol", "Your morning brief.", file_path="wechat/brief.txt",
                               origin="scheduler")
    assert sorted(reply.delivered) == ["ilink", "wecom"] and not reply.errors
    assert ilink.texts_to(bot)[-1] == "Your morning brief." and bot.files[-1] == ("brief.txt", root.joinpath(
        "brief.txt").read_bytes())
    assert wecom.texts_to("carol_w")[-1] == "Your morning brief."
    assert wecom.files_to("carol_w")[-1].data == b"Morning brief: all green.\n"
    pushes = db_rows(chan.settings.zcbot_db_url,
                     "select t.channel, m.payload->>'content' from messages m join tasks t using (task_id) "
                     "where t.user_id='carol' and m.kind='push' order by m.id")
    assert sorted(p[0] for p in pushes) == ["ilink", "wecom", "wecom"]
    assert "Build finished." in pushes[0][1] and pushes[0][0] == "wecom"
    assert all("morning brief" in p[1].lower() and "[file: wechat/brief.txt]" in p[1] for p in pushes[1:])

    # The agent's `wechat_push` tool goes the same way (only to the channel it names).
    chan.stack.fake.script("KEY-push-tool", [
        {"tool_calls": [{"name": "wechat_push", "arguments": {"text": "Ping from the agent.", "channel": "ilink"}}]},
        {"text": "Pushed."},
    ])
    ilink.user_sends(bot, "KEY-push-tool ping me")
    await ilink.wait_sent(lambda: "Pushed." in ilink.texts_to(bot))
    assert "Ping from the agent." in ilink.texts_to(bot)
    assert "Ping from the agent." not in wecom.texts_to("carol_w")

    # A stale context token (> ~24 h) refuses the iLink push clearly; a named channel does not fall back.
    db_exec(chan.settings.zcbot_db_url,
            "update channel_bindings set config = jsonb_set(config, '{context_token_at}', to_jsonb(1.0)) "
            "where user_id='carol' and channel='ilink'")
    reply = await send_to_user(rt.nc, topo, "carol", "Too late?", channel="ilink")
    assert reply.delivered == [] and "24 h" in reply.errors["ilink"]
    assert "Too late?" not in wecom.texts_to("carol_w")
    assert not ilink.violations and not wecom.violations
    assert_no_secrets(caplog, [bot.token, wecom.secret, wecom.token, wecom.aes_key, *wecom.issued,
                               *(m["context_token"] for m in bot.msgs)])
