"""WeCom end to end: callback -> run -> reply (text + file) via the fake WeCom API."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.channels.conftest import ChannelStack, assert_no_secrets, bind_wecom
from tests.helpers.db import db_rows
from zcbot_core.channels.push import send_to_user


async def wait_until_run_active(url: str, user_id: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not db_rows(url, "select 1 from tasks where user_id=:u and channel='wecom' "
                           "and run_status in ('queued', 'running')", u=user_id):
        assert time.monotonic() < deadline, "the run did not start"
        await asyncio.sleep(0.05)


REPORT = "Quarterly numbers: 42 widgets.\n" * 3
LONG_ANSWER = "这是一个很长的回答。" * 260  # ~7.8 KB of UTF-8: four messages of <= 2048 bytes


async def test_wecom_message_runs_and_replies_with_text_and_file(chan: ChannelStack,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    fake = chan.wecom
    chan.stack.fake.script("KEY-wecom-report", [
        {"tool_calls": [{"name": "make_file", "arguments": {"name": "report.txt", "content": REPORT}}]},
        {"text": "Here is your report."},
    ])
    chan.stack.fake.script("KEY-wecom-slow", [{"text": LONG_ANSWER, "first_delay": 1.5}])
    headers = await chan.user_headers("alice")
    await chan.start_channels()  # it handles the callbacks the gateway queues
    async with chan.client(headers) as c:
        linked = await bind_wecom(c, fake, "alice_w")  # proof of ownership: tests/channels/test_wecom_binding.py
        assert linked["userid"] == "alice_w" and linked["status"] == "active"
        # Another zcbot user cannot claim the same WeCom member.
        other = await chan.user_headers("mallory")
        r = await c.put("/v1/channels/wecom", json={"userid": "alice_w"}, headers=other)
        assert r.status_code == 409

        # URL verification (GET): the decrypted echostr, as is.
        query, plain = fake.verify_query()
        r = await c.get("/v1/channels/wecom/callback", params=query)
        assert r.status_code == 200 and r.text == plain
        bad = {**query, "msg_signature": "0" * 40}
        assert (await c.get("/v1/channels/wecom/callback", params=bad)).status_code == 403

        # A message: answered at once with an empty 200, replied to later.
        query, body = fake.text_callback("alice_w", "KEY-wecom-report please write the report", 1001)
        started = time.monotonic()
        r = await c.post("/v1/channels/wecom/callback", params=query, content=body)
        assert r.status_code == 200 and r.content == b""
        assert time.monotonic() - started < 1.0
        # WeCom retries (same MsgId): dropped.
        r = await c.post("/v1/channels/wecom/callback", params=query, content=body)
        assert r.status_code == 200 and r.content == b""
        # A forged body is refused.
        r = await c.post("/v1/channels/wecom/callback", params={**query, "nonce": "1"}, content=body)
        assert r.status_code == 403

        await fake.wait_sent(lambda: fake.files_to("alice_w"))
        assert fake.texts_to("alice_w")[1:] == ["Here is your report."]  # after the binding code
        [sent_file] = fake.files_to("alice_w")
        assert sent_file.filename == "report.txt" and sent_file.data == REPORT.encode()

        # Busy: a message while a run is active gets the short "still working" reply.
        q1, b1 = fake.text_callback("alice_w", "KEY-wecom-slow tell me everything", 1002)
        assert (await c.post("/v1/channels/wecom/callback", params=q1, content=b1)).status_code == 200
        await wait_until_run_active(chan.settings.zcbot_db_url, "alice")
        q2, b2 = fake.text_callback("alice_w", "and another thing", 1003)
        assert (await c.post("/v1/channels/wecom/callback", params=q2, content=b2)).status_code == 200
        await fake.wait_sent(lambda: any("still working" in t for t in fake.texts_to("alice_w")))
        await fake.wait_sent(lambda: "".join(fake.texts_to("alice_w")).count("这是一个很长的回答。") == 260)
        long_parts = [t for t in fake.texts_to("alice_w") if "很长的回答" in t]
        assert len(long_parts) == 4 and all(len(t.encode()) <= 2048 for t in long_parts)
        assert "".join(long_parts) == LONG_ANSWER

    url = chan.settings.zcbot_db_url
    tasks = db_rows(url, "select task_id, working_dir, name from tasks where user_id='alice' and channel='wecom'")
    assert len(tasks) == 1 and tasks[0][1] == "wecom"
    users = db_rows(url, "select payload->>'content' from messages where task_id=:t and payload->>'role'='user' "
                         "order by idx", t=tasks[0][0])
    assert [u[0] for u in users] == ["KEY-wecom-report please write the report", "KEY-wecom-slow tell me everything"]

    # Push (the scheduler's notify path), then token refresh: an expired token (42001) is refetched
    # and the call retried once.
    rt = chan.stack.runners[0][1]
    reply = await send_to_user(rt.nc, rt.topo, "alice", "Your nightly brief is ready.", origin="scheduler")
    assert reply.delivered == ["wecom"] and not reply.errors
    assert fake.texts_to("alice_w")[-1] == "Your nightly brief is ready."
    fake.expire_tokens()
    calls = fake.gettoken_calls
    reply = await send_to_user(rt.nc, rt.topo, "alice", "Second brief.", channel="wecom")
    assert reply.delivered == ["wecom"] and not reply.errors
    assert fake.gettoken_calls == calls + 1 and 42001 in fake.errors
    assert fake.texts_to("alice_w")[-1] == "Second brief."

    # The pushes are in the channel task's window (seed §8.7): a follow-up reaches a model that saw them.
    chan.stack.fake.script("KEY-wecom-followup", [{"text": "Point 2 means…"}])
    async with chan.client(headers) as c:
        query, body = fake.text_callback("alice_w", "KEY-wecom-followup expand point 2 of the brief", 1004)
        assert (await c.post("/v1/channels/wecom/callback", params=query, content=body)).status_code == 200
    await fake.wait_sent(lambda: fake.texts_to("alice_w")[-1] == "Point 2 means…")
    [request] = [r for r in chan.stack.fake.requests if "KEY-wecom-followup" in json.dumps(r["messages"])]
    seen = [m["content"] for m in request["messages"] if m["role"] == "assistant"]
    assert "[pushed to the user] Your nightly brief is ready." in seen and "[pushed to the user] Second brief." in seen
    assert request["messages"][-1]["role"] == "user"
    assert not fake.violations
    assert_no_secrets(caplog, [fake.secret, fake.token, fake.aes_key, *fake.issued])


async def test_wecom_reply_survives_a_channels_replica_stopping_mid_run(chan: ChannelStack) -> None:
    """The callback is queued in JetStream; a replica drained while the run streams hands the message
    back, and the next replica resumes that run's reply (no second run, exactly one answer)."""
    fake = chan.wecom
    fake.members.add("bea_w")
    chan.stack.fake.script("KEY-wecom-handover", [{"chunks": ["slow "] * 20, "chunk_delay": 0.1}])
    headers = await chan.user_headers("bea")
    first = await chan.start_channels()
    async with chan.client(headers) as c:
        await bind_wecom(c, fake, "bea_w")
        query, body = fake.text_callback("bea_w", "KEY-wecom-handover take your time", 2001)
        assert (await c.post("/v1/channels/wecom/callback", params=query, content=body)).status_code == 200
    await wait_until_run_active(chan.settings.zcbot_db_url, "bea")
    await chan.stop_channels(first)  # drains: the in-flight handler is cancelled and its message nak'ed
    await chan.start_channels()
    await fake.wait_sent(lambda: any("slow" in t for t in fake.texts_to("bea_w")))
    await asyncio.sleep(1.0)  # nothing else may follow
    answers = [t for t in fake.texts_to("bea_w") if "slow" in t]
    assert answers == ["slow " * 20] or answers == [("slow " * 20).strip()]
    url = chan.settings.zcbot_db_url
    users = db_rows(url, "select count(*) from messages m join tasks t on t.task_id=m.task_id "
                         "where t.user_id='bea' and m.payload->>'role'='user'")
    assert users[0][0] == 1  # one run, resumed, not repeated
    pending = db_rows(url, "select config->'inbound_runs' from channel_bindings where user_id='bea'")
    assert pending[0][0] in (None, {})
