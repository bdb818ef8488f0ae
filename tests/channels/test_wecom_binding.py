"""WeCom binding with proof of ownership (issue 22): a one-time code goes to the WeCom member
through the app (the fake WeCom records it), and only the account that types it back is bound.
The real gateway and channels service over HTTP, on the e2e stack's NATS and PostgreSQL."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.channels.conftest import ChannelStack, assert_no_secrets, bind_wecom, sent_code
from tests.helpers.db import db_exec, db_rows
from zcbot_core.channels.wecom_binding import MAX_ATTEMPTS, BindingRefused, confirm_binding


async def test_an_unproven_claim_receives_nothing_and_blocks_no_one(chan: ChannelStack,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    fake = chan.wecom
    await chan.start_channels()
    mallory = await chan.user_headers("mallory")
    async with chan.client(mallory) as c:
        r = await c.put("/v1/channels/wecom", json={"userid": "alice_w"})  # alice's WeCom, not hers
        assert r.status_code == 202, r.text
        assert r.json() == {"channel": "wecom", "status": "code_sent", "userid": "alice_w", "expires_in": 600}
        code = sent_code(fake, "alice_w")  # delivered to alice's WeCom: mallory never sees it
        assert code not in r.text
        [view] = (await c.get("/v1/channels")).json()["items"]
        assert view["status"] == "pending" and view["code_pending"] is True and "userid" not in view
        assert "digest" not in str(view) and "salt" not in str(view)
        # A message from alice's WeCom while only mallory's claim exists: no run, no reply.
        query, body = fake.text_callback("alice_w", "what is on my calendar?", 7001)
        assert (await c.post("/v1/channels/wecom/callback", params=query, content=body)).status_code == 200
        await fake.wait_sent(lambda: len(fake.texts_to("alice_w")) == 2)  # the message was handled: answered
        assert db_rows(chan.settings.zcbot_db_url, "select count(*) from tasks where channel='wecom'") == [(0,)]
        notice = fake.texts_to("alice_w")[1]  # the code, then the "not linked yet" notice, nothing else
        assert "not linked to zcbot yet" in notice and "/v1/channels/wecom/verify" in notice
        # Guessing: each wrong code counts; after MAX_ATTEMPTS the code is gone, the right one too.
        wrong = f"{(int(code) + 1) % 1_000_000:06d}"
        for left in range(MAX_ATTEMPTS - 1, 0, -1):
            r = await c.post("/v1/channels/wecom/verify", json={"code": wrong})
            assert r.status_code == 400 and f"{left} tries left" in r.json()["detail"], r.text
        r = await c.post("/v1/channels/wecom/verify", json={"code": wrong})
        assert r.status_code == 400 and "request a new one" in r.json()["detail"]
        r = await c.post("/v1/channels/wecom/verify", json={"code": code})
        assert r.status_code == 400 and "no binding code is pending" in r.json()["detail"]
        # A new code within a minute of the last is refused (the member is not flooded).
        again = await c.put("/v1/channels/wecom", json={"userid": "alice_w"})
        assert again.status_code == 429 and 1 <= int(again.headers["retry-after"]) <= 60
        assert len(fake.texts_to("alice_w")) == 2

    # Mallory's pending claim does not stop alice, who proves it; then mallory cannot claim it.
    alice = await chan.user_headers("alice")
    async with chan.client(alice) as c:
        linked = await bind_wecom(c, fake, "alice_w")
        assert linked["status"] == "active" and linked["userid"] == "alice_w" and linked["code_pending"] is False
        query, body = fake.text_callback("alice_w", "hello", 7002)
        assert (await c.post("/v1/channels/wecom/callback", params=query, content=body)).status_code == 200
    async with chan.client(mallory) as c:
        r = await c.put("/v1/channels/wecom", json={"userid": "alice_w"})
        assert r.status_code == 409
    deadline = time.monotonic() + 20
    while not db_rows(chan.settings.zcbot_db_url, "select 1 from tasks where user_id='alice' and channel='wecom'"):
        assert time.monotonic() < deadline, "alice's proven binding did not take her message"
        await asyncio.sleep(0.1)
    assert not db_rows(chan.settings.zcbot_db_url, "select 1 from tasks where user_id='mallory'")
    assert not fake.violations
    assert_no_secrets(caplog, [fake.secret, fake.token, fake.aes_key, *fake.issued])


async def test_codes_expire_unknown_members_are_refused_and_a_proven_binding_survives_a_new_claim(
        chan: ChannelStack) -> None:
    fake = chan.wecom
    fake.members.update({"dora_w", "dora_new"})
    headers = await chan.user_headers("dora")
    async with chan.client(headers) as c:
        r = await c.put("/v1/channels/wecom", json={"userid": "nobody_w"})
        assert r.status_code == 400 and "no member" in r.json()["detail"]
        assert (await c.post("/v1/channels/wecom/verify", json={"code": "123456"})).status_code == 400
        for bad in ({"code": ""}, {"code": "1" * 17}, {}):
            assert (await c.post("/v1/channels/wecom/verify", json=bad)).status_code == 422
        await bind_wecom(c, fake, "dora_w")
        # A minute later (the last code's time moved back), switching to another member: until the
        # new code is typed back, the proven binding stays.
        db_exec(chan.settings.zcbot_db_url, "update channel_bindings set config = config || "
                "jsonb_build_object('code_sent_at', 0) where user_id = 'dora'")
        r = await c.put("/v1/channels/wecom", json={"userid": "dora_new"})
        assert r.status_code == 202
        [view] = (await c.get("/v1/channels")).json()["items"]
        assert view["userid"] == "dora_w" and view["status"] == "active" and view["code_pending"] is True
        code = sent_code(fake, "dora_new")
    # Ten minutes later the code is refused (the clock is the only thing moved).
    sessions = await chan.sessions()
    async with sessions() as session:
        with pytest.raises(BindingRefused, match="expired"):
            await confirm_binding(session, "dora", code, now=time.time() + 601)
    async with chan.client(headers) as c:
        [view] = (await c.get("/v1/channels")).json()["items"]
        assert view["userid"] == "dora_w" and view["status"] == "active" and view["code_pending"] is False
        assert (await c.post("/v1/channels/wecom/verify", json={"code": code})).status_code == 400


async def test_binding_by_scanning_the_wecom_qr(chan: ChannelStack) -> None:
    """Seed 003 §8.7 (issue 40): the wwlogin QR scan proves the member without typing a code. The
    redirect WeCom makes (`?code&state&appid`) is replayed against the real gateway; the fake WeCom
    answers `auth/getuserinfo` in its documented shapes (member, non-member, used code)."""
    from urllib.parse import parse_qs, urlsplit

    fake = chan.wecom
    fake.members.update({"erin_w"})
    erin = await chan.user_headers("erin")
    async with chan.client(erin) as c:
        r = await c.post("/v1/channels/wecom/oauth")
        assert r.status_code == 200, r.text
        url = urlsplit(r.json()["url"])
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        assert url.path.endswith("/wwlogin/sso/login") and r.json()["expires_in"] == 600
        assert query["appid"] == fake.corp_id and query["agentid"] == str(fake.agent_id)
        assert query["login_type"] == "CorpApp" and query["redirect_uri"].endswith("/v1/channels/wecom/oauth/callback")
        state = query["state"]

        # someone outside the enterprise scans: refused, and the state is used up
        back = await c.get("/v1/channels/wecom/oauth/callback",
                           params={"code": fake.scan(None), "state": state, "appid": fake.corp_id})
        assert back.status_code == 303 and back.headers["location"] == "/?wecom_binding=wecom_binding_refused"
        back = await c.get("/v1/channels/wecom/oauth/callback",
                           params={"code": fake.scan("erin_w"), "state": state, "appid": fake.corp_id})
        assert back.headers["location"] == "/?wecom_binding=wecom_binding_refused"  # a used state
        [view] = (await c.get("/v1/channels")).json()["items"]
        assert view["status"] != "active"

        # a fresh link, scanned by the member: bound, no code typed, no bearer on the redirect
        state = parse_qs(urlsplit((await c.post("/v1/channels/wecom/oauth")).json()["url"]).query)["state"][0]
    async with chan.client() as anonymous:
        back = await anonymous.get("/v1/channels/wecom/oauth/callback",
                                   params={"code": fake.scan("erin_w"), "state": state, "appid": fake.corp_id})
        assert back.status_code == 303 and back.headers["location"] == "/?wecom_binding=ok", back.text
    async with chan.client(erin) as c:
        [view] = (await c.get("/v1/channels")).json()["items"]
        assert view["status"] == "active" and view["userid"] == "erin_w" and view["method"] == "oauth"
        assert "oauth" not in view and state not in str(view)

    # another account scanning with erin's WeCom cannot take it; a forged state binds nobody
    frank = await chan.user_headers("frank")
    async with chan.client(frank) as c:
        state = parse_qs(urlsplit((await c.post("/v1/channels/wecom/oauth")).json()["url"]).query)["state"][0]
        back = await c.get("/v1/channels/wecom/oauth/callback", params={"code": fake.scan("erin_w"), "state": state})
        assert back.headers["location"] == "/?wecom_binding=wecom_user_taken"
        back = await c.get("/v1/channels/wecom/oauth/callback", params={"code": fake.scan("erin_w"), "state": "forged"})
        assert back.headers["location"] == "/?wecom_binding=wecom_binding_refused"
        assert all(v["status"] != "active" for v in (await c.get("/v1/channels")).json()["items"])
    assert not fake.violations
