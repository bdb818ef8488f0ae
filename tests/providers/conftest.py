"""Recorded provider streams (`streams/*.sse`, each with its source in `*.source.md` beside it) and a
fake LLM to serve them byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers.stack import FAKE_KEY_ENV, bare_stack, fake_llm, module_stack, shared_stack, stack  # noqa: F401  (fixtures)
from tests.helpers.stack import strict_fake_llm as replay  # noqa: F401  (the strict fake LLM, as the fixture `replay`)

STREAMS = Path(__file__).parent / "streams"


def recorded(name: str) -> bytes:
    return (STREAMS / f"{name}.sse").read_bytes()


def add_profile(stack: Any, name: str, **keys: Any) -> None:
    """A model profile `name` served by the stack's fake LLM (`model`, `thinking`, … as given)."""
    data = {"model": "openai/fake-model", "api_base": stack.fake.base_url, "api_key_env": FAKE_KEY_ENV,
            "max_context": 64000, "reliable_context": 32000, "max_output": 2048, "max_iterations": 30,
            "pricing": {"input_per_mtok": 1.0, "output_per_mtok": 2.0, "cached_input_per_mtok": 0.1}, **keys}
    path = Path(stack.env["ZCBOT_MODELS_DIR"]) / f"{name}.yaml"
    path.write_text("".join(f"{key}: {json.dumps(value)}\n" for key, value in data.items()))


async def run_events(stack: Any, token: str, task_id: str, content: str, status: str = "ok") -> list[dict[str, Any]]:
    """Post `content` and read the run's events to `done`, which must have `status`."""
    r = await stack.post(token, task_id, content)
    assert r.status_code == 202, r.text
    events = await stack.events(token, r.json()["events_url"], timeout=60)
    assert events[-1]["event"] == "done" and events[-1]["data"]["status"] == status, events[-4:]
    return events


def of(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["event"] == name]
