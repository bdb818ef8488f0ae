"""The fake LLM keeps every request of a reused (keep-alive) connection intact.

Its client-left watcher once read one byte from the connection while a response was finishing; when
the client's next request arrived in that window the byte was lost and the request line read
``OST /v1/chat/completions`` (404 "no route OST"), a timing race any test could meet. Thousands of
back-to-back streaming requests over a few reused connections, with the server in its own process
(as the runner meets it; client and server really run side by side), make that window likely: the
old watcher lost about one request in a thousand here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

import zcbot_fakellm
from tests.helpers.wait import wait_for
from zcbot_fakellm import FakeLLM, get_requests

REQUESTS = 6000  # ~5-15 s on 2 busy cores; the old watcher failed this in 5 runs of 5
CONNECTIONS = 8


@pytest.fixture
async def fake_process_url() -> AsyncIterator[str]:
    """The root URL of a standalone fake (``python -m zcbot_fakellm``) in its own process."""
    pkg_parent = str(Path(zcbot_fakellm.__file__).resolve().parent.parent)
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "zcbot_fakellm", "--port", "0", "--host", "127.0.0.1",
        stdout=asyncio.subprocess.PIPE, env=env,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode()
        assert line.startswith("READY "), f"the fake did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


def sse_text(body: bytes) -> tuple[str, bool]:
    """The streamed reply's text and whether the stream ended with ``[DONE]``."""
    text, done = [], False
    for line in body.decode().splitlines():
        if not line.startswith("data: "):
            continue
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            done = True
            continue
        for choice in json.loads(data)["choices"]:
            text.append(choice["delta"].get("content") or "")
    return "".join(text), done


async def test_thousands_of_streams_over_reused_connections_are_all_answered(fake_process_url: str) -> None:
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    ports: set[int] = set()
    failures: list[str] = []

    async def one(client: httpx.AsyncClient, i: int) -> None:
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": f"req {i}"}]}
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            raw = await resp.aread()
            ports.add(resp.extensions["network_stream"].get_extra_info("client_addr")[1])
        if resp.status_code != 200:
            failures.append(f"#{i}: {resp.status_code} {raw[:200]!r}")
            return
        text, done = sse_text(raw)
        if text != f"ok: req {i}" or not done:
            failures.append(f"#{i}: incomplete stream {text!r} done={done}")

    async with httpx.AsyncClient(base_url=fake_process_url, limits=limits, timeout=10) as client:
        # CONNECTIONS workers, each sending its share back to back, so every connection is reused
        # hundreds of times with the next request sent the moment the previous response ends.
        async def worker(w: int) -> None:
            for i in range(w, REQUESTS, CONNECTIONS):
                try:
                    await one(client, i)
                except httpx.HTTPError as exc:
                    failures.append(f"#{i}: {type(exc).__name__}: {exc!r}")

        await asyncio.gather(*(worker(w) for w in range(CONNECTIONS)))

    assert not failures, f"{len(failures)} of {REQUESTS} requests failed, first: {failures[:5]}"
    assert len(ports) <= CONNECTIONS, f"connections were not reused: {len(ports)} client ports"
    assert len(await get_requests(f"{fake_process_url}/v1")) == REQUESTS


def chat_request(content: str, *, stream: bool = False) -> bytes:
    body = json.dumps({"model": "m", "stream": stream, "messages": [{"role": "user", "content": content}]}).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: fake\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


async def test_pipelined_requests_are_answered_in_order_and_a_leaving_client_ends_a_hang() -> None:
    async with FakeLLM() as fake:
        # Two requests in one write: both answered, in order, on the one connection.
        reader, writer = await asyncio.open_connection(fake.host, fake.port)
        writer.write(chat_request("first") + chat_request("second"))
        await writer.drain()
        answers = []
        for _ in range(2):
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            answers.append(json.loads(await reader.readexactly(length))["choices"][0]["message"]["content"])
        assert answers == ["ok: first", "ok: second"]
        writer.close()

        # A hanging stream with a request pipelined behind it still ends when the client leaves.
        fake.script("KEY-hang", [{"text": "partial", "hang": True}])
        reader, writer = await asyncio.open_connection(fake.host, fake.port)
        writer.write(chat_request("KEY-hang", stream=True) + chat_request("behind"))
        await writer.drain()
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 200")
        await wait_for(lambda: fake.active_responses == 1, 5, 0.02, "the hanging response to start")
        writer.close()
        await wait_for(lambda: fake.active_responses == 0, 5, 0.02, "the hang to end once its client left")
