"""The demo model of `zcbot up --demo`: a small OpenAI-compatible chat-completions server in the
stack's process (a thread of its own) that answers with `demo_script`, and the `demo` profile that
points LiteLLM at it. Runs go through the real path (LiteLLM, SSE parsing, tool calls, the sandbox):
only the model is scripted, so a newcomer sees a whole run without an API key.

Kept apart from the tests' fake model (`zcbot_fakellm`, the `test` extra): that one is a test double
scripted by each test; this one is part of the product install and has one fixed script.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from zcbot_devstack.demo_script import DemoTurn, demo_turn

PROFILE = "demo"
CHUNK_DELAY = 0.04  # seconds between streamed text pieces: slow enough to be seen streaming
_PROFILE_YAML = """\
# Written by `zcbot up --demo` at each start (the port changes): the scripted demo model.
model: openai/zcbot-demo
api_base: {api_base}
api_key_env: ZCBOT_DEMO_API_KEY
api_key_optional: true
max_context: 64000
reliable_context: 32000
max_output: 4096
parallel_tools: false
max_iterations: 10
pricing: {{input_per_mtok: 0.0, output_per_mtok: 0.0}}
"""


def write_profile(models_dir: Path, api_base: str) -> Path:
    models_dir.mkdir(parents=True, exist_ok=True)
    path = models_dir / f"{PROFILE}.yaml"
    path.write_text(_PROFILE_YAML.format(api_base=api_base))
    return path


def _usage(body: dict[str, Any], turn: DemoTurn) -> dict[str, int]:
    prompt = max(1, len(json.dumps(body.get("messages", []), ensure_ascii=False)) // 4)
    completion = max(1, (len(turn.text) + sum(len(json.dumps(a)) for _, a in turn.tool_calls)) // 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _pieces(text: str, size: int = 6) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def _calls(turn: DemoTurn) -> list[dict[str, Any]]:
    return [{"index": i, "id": f"call_{uuid.uuid4().hex[:20]}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
            for i, (name, args) in enumerate(turn.tool_calls)]


async def _stream(body: dict[str, Any], turn: DemoTurn) -> AsyncIterator[bytes]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body.get("model", "zcbot-demo")}

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"

    yield event({"role": "assistant", "content": ""})
    for piece in _pieces(turn.text):
        await asyncio.sleep(CHUNK_DELAY)
        yield event({"content": piece})
    calls = _calls(turn)
    if calls:
        yield event({"tool_calls": calls})
    yield event({}, "tool_calls" if calls else "stop", usage=_usage(body, turn))
    yield b"data: [DONE]\n\n"


def _complete(body: dict[str, Any], turn: DemoTurn) -> dict[str, Any]:
    calls = [{k: v for k, v in c.items() if k != "index"} for c in _calls(turn)]
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if calls:
        message["tool_calls"] = calls
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", "zcbot-demo"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": _usage(body, turn)}


def _app() -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        turn = demo_turn([m for m in body.get("messages", []) if isinstance(m, dict)])
        if body.get("stream"):
            return StreamingResponse(_stream(body, turn), media_type="text/event-stream")
        return JSONResponse(_complete(body, turn))

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "zcbot-demo", "object": "model", "owned_by": "zcbot"}]}

    return app


class DemoModel:
    """The server in a daemon thread of `zcbot up` (stopped with it); `start` returns once it listens."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        from zcbot_devstack.embedded import free_port

        self.host = host
        self.port = port or free_port()
        config = uvicorn.Config(_app(), host=host, port=self.port, log_level="warning", access_log=False,
                                lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="demo-model", daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 10.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the demo model could not listen on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=3.0)


def prepare_demo(environ: MutableMapping[str, str]) -> int:
    """`zcbot up --demo`, before the settings are read: the demo profile (with a free port for the
    server) in `ZCBOT_HOME/demo/models`, made the models folder and the default profile; returns
    the port the stack then serves the demo model on."""
    from zcbot_core.platform.config import Settings, load_settings
    from zcbot_devstack.embedded import free_port

    home = load_settings(Settings, environ).home
    port = free_port()
    models = home / "demo" / "models"
    write_profile(models, f"http://127.0.0.1:{port}/v1")
    environ["ZCBOT_MODELS_DIR"] = str(models)
    environ["ZCBOT_DEFAULT_MODEL"] = PROFILE
    return port


def forget_demo(home: Path) -> None:
    """After a refused start in a home that `prepare_demo` made: its profile, its folders and the
    home go again (each only if nothing else is in it), as a refused start without --demo leaves none."""
    models = home / "demo" / "models"
    with contextlib.suppress(FileNotFoundError):
        (models / f"{PROFILE}.yaml").unlink()
    for folder in (models, models.parent, home):
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (or gone): something else lives there
