"""The iLink client against the fake iLink server: how a reply is cut into messages."""

from __future__ import annotations

import pytest

from tests.channels.fakes import FakeILink
from zcbot_core.channels.ilink_api import TEXT_MAX_CHARS, ILinkClient
from zcbot_core.channels.settings import ChannelSettings


@pytest.mark.parametrize(("text", "states"), [
    ("short answer", [2]),
    ("长" * TEXT_MAX_CHARS, [2]),
    ("这是一个很长的回答。" * 500, [1, 1, 2]),  # 5000 characters: pieces of <= 2000
])
async def test_a_long_text_is_sent_as_generating_pieces_ending_with_one_finished(
        fake_ilink: FakeILink, text: str, states: list[int]) -> None:
    bot = fake_ilink.add_bot("wx_user")
    bot.context_token = "ctx-1"
    client = ILinkClient(ChannelSettings(ZCBOT_ILINK_BASE_URL=fake_ilink.base_url))
    try:
        ids = await client.send_text(bot.user_id, text, token=bot.token, context_token="ctx-1")
        await client.send_text(bot.user_id, "next reply", token=bot.token, context_token="ctx-1")
    finally:
        await client.aclose()
    sent = bot.sent[:len(states)]
    assert [m["message_state"] for m in sent] == states and len(ids) == len(states)
    assert "".join(m["item_list"][0]["text_item"]["text"] for m in sent) == text
    assert len({m["client_id"] for m in bot.sent}) == len(bot.sent)  # one client_id per piece
    assert bot.sent[-1]["message_state"] == 2 and not bot.generating and not fake_ilink.violations
