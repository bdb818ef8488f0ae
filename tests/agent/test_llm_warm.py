"""The runner's LiteLLM warm-up sends nothing, and a streamed call loads no tokenizer (issue 28).

`llm.warm.warm_up` goes through `litellm.acompletion` with `mock_response`: the fake LLM must see no
request, with or without the profile's API key. `llm.tokenizers` keeps LiteLLM's two tokenizers
unloaded (`disable_token_counter`, the lazy default encoding): checked in a fresh interpreter, where
nothing else has loaded them, through the real LiteLLM path for a DeepSeek and an OpenAI model, with
the provider's own usage still reported.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.stack import FAKE_KEY_ENV
from zcbot_core.llm import lean
from zcbot_core.llm.client import stream_chat
from zcbot_core.llm.profiles import Profile
from zcbot_core.llm.warm import warm_up
from zcbot_fakellm import FakeLLM

REPO = Path(__file__).resolve().parents[2]


async def _ignore(_: str) -> None:
    return None


def _callbacks() -> dict[str, list[Any]]:
    import litellm

    return {name: list(getattr(litellm, name, None) or []) for name in lean._CALLBACK_LISTS}


@pytest.fixture
async def fake() -> Any:
    llm = FakeLLM()
    await llm.start()
    yield llm
    await llm.stop()


@pytest.mark.parametrize("model", ["deepseek/deepseek-v4-flash", "openai/fake-model"])
async def test_warm_up_sends_no_request_even_without_a_key(fake: FakeLLM, model: str, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(FAKE_KEY_ENV, raising=False)
    profile = Profile(name="fake", model=model, api_base=fake.base_url, api_key_env=FAKE_KEY_ENV, thinking=True)
    # Compared with before, not with empty: in a full run an earlier test may have registered a
    # LiteLLM callback of its own (they are process-global); the warm-up must add none.
    before = _callbacks()
    with caplog.at_level(logging.DEBUG, logger="zcbot_core.llm.warm"):
        await warm_up(profile)
    assert [r.getMessage() for r in caplog.records if r.name == "zcbot_core.llm.warm"] == []  # the mocked call ran
    assert fake.requests == []
    assert _callbacks() == before  # the mocked call left no callback that would turn the lean path off
    monkeypatch.setenv(FAKE_KEY_ENV, "sk-fake")
    fake.script("KEY-after-warm", [{"text": "warm", "usage": {"prompt_tokens": 21, "completion_tokens": 3}}])
    result = await stream_chat(profile, [{"role": "user", "content": "KEY-after-warm"}], None, _ignore, _ignore)
    assert result.message["content"] == "warm" and (result.usage.prompt_tokens, result.usage.completion_tokens) == (21, 3)
    assert len(fake.requests) == 1


CHILD = textwrap.dedent("""
    import asyncio, json, os, sys
    import litellm.rust_bridge.tokenizer as factories
    loads = []
    def recording(name):
        original = getattr(factories, name)
        def load(*args, **kwargs):
            loads.append(name)
            return original(*args, **kwargs)
        setattr(factories, name, load)
    for name in ("get_encoding", "from_str", "from_pretrained", "anthropic"):
        recording(name)
    import litellm
    from zcbot_core.llm.client import stream_chat
    from zcbot_core.llm.profiles import Profile
    from zcbot_core.llm.warm import warm_up
    from zcbot_fakellm import FakeLLM

    async def ignore(_):
        pass

    async def main():
        out = {}
        async with FakeLLM() as fake:
            for model in ("deepseek/deepseek-v4-flash", "openai/gpt-4.1"):
                profile = Profile(name="p", model=model, api_base=fake.base_url, api_key_env="CHILD_KEY")
                await warm_up(profile)
                fake.script("KEY-" + model, [{"text": "an answer", "usage": {"prompt_tokens": 40, "completion_tokens": 7}}])
                result = await stream_chat(profile, [{"role": "user", "content": "KEY-" + model}], None, ignore, ignore)
                out[model] = [result.usage.prompt_tokens, result.usage.completion_tokens]
        out["loads"] = list(loads)
        encoding = litellm.encoding  # what LiteLLM hands its handlers: loaded once something uses it
        out["lazy_loaded_before_use"] = encoding.loaded
        out["encoded"] = encoding.encode("hello world")
        out["loads_after_use"] = list(loads)
        print(json.dumps(out))

    asyncio.run(main())
""")


def test_a_streamed_call_loads_no_tokenizer() -> None:
    env = {**os.environ, "CHILD_KEY": "sk-fake", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["deepseek/deepseek-v4-flash"] == [40, 7] and out["openai/gpt-4.1"] == [40, 7]  # the provider's usage
    assert out["loads"] == [] and out["lazy_loaded_before_use"] is False
    assert out["encoded"] == [15339, 1917]  # cl100k_base's tokens for "hello world", loaded on first use
    assert out["loads_after_use"] == ["get_encoding"]
