"""The runner's LiteLLM warm-up: what the first call in a process would pay, paid before readiness.

LiteLLM's first `acompletion` in a process took ~200 ms here against ~8 ms for the next (issue 28,
docs/decisions.md): pydantic builds the schemas of LiteLLM's request and response types on first
use (`ModelResponse`, `ModelResponseStream`, `GenericLiteLLMParams`, … are deferred), the first call
imports modules (anyio's asyncio backend, the proxy types LiteLLM's parameter check reads, its
logging callback manager), and LiteLLM loads its cost map. `warm_up` loads the cost map and the
profile's model info (`client.register_model_info`), then makes one call through `litellm.acompletion`
with LiteLLM's documented `mock_response`: the same entry point, parameters and stream wrapper as a
real call, answered by LiteLLM itself — no HTTP request, so no model server and no API key are
needed, and nothing is priced or recorded by us. The real call's HTTP path imports LiteLLM's service
logger (~10 ms on the first message's first model call): imported here too. What stays cold is the
rest of that path (it needs a request).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging

import litellm

from zcbot_core.llm.client import call_kwargs, register_model_info
from zcbot_core.llm.profiles import Profile

log = logging.getLogger(__name__)

WARM_UP_TEXT = "warm up"


# Imported by LiteLLM's HTTP handlers on their first request (not by the mocked call).
FIRST_REQUEST_IMPORTS = ("litellm._service_logger",)


def _load_tables(profile: Profile) -> None:
    for name in FIRST_REQUEST_IMPORTS:
        importlib.import_module(name)
    register_model_info(profile)
    litellm.cost_per_token(model=profile.model, prompt_tokens=1, completion_tokens=1)


async def warm_up(profile: Profile) -> None:
    """The cost map (in a thread: file reads), then one mocked streamed call with the profile's own
    parameters (`client.call_kwargs`) on the caller's event loop, read to its end. Never raises: a
    failure only means the first real call pays what it would have paid anyway."""
    try:
        await asyncio.to_thread(_load_tables, profile)
    except Exception:
        log.debug("LiteLLM cost map warm-up failed", exc_info=True)
    keyless = dataclasses.replace(profile, api_key_env=None)  # no request is made: the key may be unset
    kwargs = call_kwargs(keyless, [{"role": "user", "content": WARM_UP_TEXT}], None)
    try:
        response = await litellm.acompletion(mock_response=WARM_UP_TEXT, **kwargs)
        async for _ in response:
            pass
    except Exception:
        log.debug("LiteLLM warm-up call failed", exc_info=True)
