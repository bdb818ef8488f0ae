"""The client load of the fault suite (issue 42), recorded as a history for `checker.py`.

A few users, each running one run after another (a new task each, its own fake-LLM script: sometimes a
tool call first, then a slowly streamed answer). Every choice (tool call or not, cancel or not and
when, after how many events the client drops its SSE connection) is drawn from the seed. Clients act
like a browser: a POST answered 503 is sent again (to the other gateway) until it is accepted or the
client gives up; an SSE stream is followed with EventSource's rules (reconnect with Last-Event-ID,
each time to the next gateway), and is also dropped on purpose after a few events, to resume.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.helpers.cluster import ClusterStack
from tests.helpers.sse import SseFollower, sse_events
from zcbot_fakellm import push_script

CHUNKS = 16
CHUNK_DELAY = 0.15  # ~2.4 s of streaming a run
POST_PATIENCE = 20.0  # a client sends a refused POST again for this long, then gives up (not acknowledged)
FOLLOW_TIMEOUT = 75.0  # an acknowledged run the client has not seen end by then counts as lost


@dataclass
class ResumingFollower(SseFollower):
    """`SseFollower` that also drops its connection after a random number of events, and resumes."""

    rng: random.Random = field(default_factory=random.Random)
    drops: int = 0

    async def _read(self, url: str, headers: dict[str, str], base_url: str) -> None:
        budget = self.rng.randint(4, 20)
        async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(30, connect=2)) as client:
            async with client.stream("GET", url, headers=headers) as resp:
                resp.raise_for_status()
                self.connections += 1
                seen = 0
                async for event in sse_events(resp):
                    self.events.append(event)
                    if event["event"] == "done":
                        return
                    seen += 1
                    if seen >= budget:
                        self.drops += 1
                        return


@dataclass
class RunRecord:
    """One run a client asked for, and everything it saw."""

    user: str
    index: int
    key: str
    answer: list[str]
    tool: bool
    task_id: str = ""
    posts: list[tuple[float, int]] = field(default_factory=list)  # (t, HTTP status; -1: no answer)
    run_id: str = ""  # set when a POST was acknowledged (202)
    cancel_after: float | None = None
    cancel_status: int | None = None
    follower: ResumingFollower | None = None
    client_error: str = ""  # the follower gave up (timeout) or failed
    ended_at: float | None = None

    @property
    def acknowledged(self) -> bool:
        return bool(self.run_id)


@dataclass
class Load:
    stack: ClusterStack
    seed: int
    users: int = 4
    t0: float = field(default_factory=time.monotonic)
    runs: list[RunRecord] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)  # answers no client should get (a 500, a cut body)
    tokens: dict[str, str] = field(default_factory=dict)

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    async def login(self) -> None:
        urls = self.stack.gateway_urls
        for u in range(self.users):
            user = f"f{self.seed}u{u}"
            async with httpx.AsyncClient(base_url=urls[u % len(urls)], timeout=30) as c:
                r = await c.post("/v1/auth/login", json={"user_id": user, "platform_key": self.stack.platform_key})
                r.raise_for_status()
                self.tokens[user] = r.json()["token"]

    async def run(self, duration: float) -> None:
        """Every user starts runs for `duration` seconds, then waits for its last one to end."""
        if not self.tokens:
            await self.login()
        await asyncio.gather(*(self._user(u, user, duration) for u, user in enumerate(self.tokens)))

    async def _user(self, u: int, user: str, duration: float) -> None:
        rng = random.Random(f"{self.seed}:{u}")
        i = 0
        while time.monotonic() - self.t0 < duration:
            rec = RunRecord(user, len(self.runs), f"KEY-F{self.seed}-{u}-{i}",
                            [f"s{self.seed}u{u}r{i}.{k} " for k in range(CHUNKS)], tool=rng.random() < 0.3)
            rec.cancel_after = round(rng.uniform(0.5, 3.0), 2) if rng.random() < 0.2 else None
            self.runs.append(rec)
            i += 1
            await self._one(u, user, rec, rng)

    async def _client(self, k: int, user: str) -> httpx.AsyncClient:
        urls = self.stack.gateway_urls
        return httpx.AsyncClient(base_url=urls[k % len(urls)], timeout=20,
                                 headers={"Authorization": f"Bearer {self.tokens[user]}"})

    async def _call(self, user: str, method: str, path: str, body: dict[str, Any] | None, ok: int,
                    rec: RunRecord | None = None) -> httpx.Response | None:
        """A request sent again on 503 or no answer (each time to the next gateway) until `ok` or
        POST_PATIENCE runs out. A message sent again says so ("(again N)"), as the cluster test's
        clients do: a message answered 503 is saved, and the same text sent again is stored a second
        time (docs/reliability.md, issue 42 findings)."""
        deadline = time.monotonic() + POST_PATIENCE
        attempt = 0
        while time.monotonic() < deadline:
            payload = body
            if rec is not None and attempt and body is not None:
                payload = {**body, "content": f"{body['content']} (again {attempt})"}
            async with await self._client(attempt, user) as c:
                try:
                    r = await c.request(method, path, json=payload)
                    status = r.status_code
                except httpx.TransportError:
                    r, status = None, -1
            if rec is not None:
                rec.posts.append((self.now(), status))
            if r is not None and status == ok:
                return r
            if r is not None and status not in (503, 429):
                self.unexpected.append(f"{method} {path}: {status} {r.text[:200]}")
                return None
            if r is not None and "json" not in r.headers.get("content-type", ""):
                self.unexpected.append(f"{method} {path}: {status} without a JSON body")
            attempt += 1
            await asyncio.sleep(0.5)
        return None

    async def _one(self, u: int, user: str, rec: RunRecord, rng: random.Random) -> None:
        turns: list[dict[str, Any]] = []
        if rec.tool:
            turns.append({"text": "writing. ", "tool_calls": [
                {"name": "write", "arguments": {"path": f"r{rec.index}.txt", "content": rec.key}}]})
        turns.append({"chunks": rec.answer, "chunk_delay": CHUNK_DELAY})
        await push_script(self.stack.fake_url, rec.key, turns)
        made = await self._call(user, "POST", "/v1/tasks", {"name": rec.key}, 201)
        if made is None:
            return
        rec.task_id = made.json()["task_id"]
        posted = await self._call(user, "POST", f"/v1/tasks/{rec.task_id}/messages",
                                  {"content": f"{rec.key} go"}, 202, rec)
        if posted is None:
            return
        rec.run_id = posted.json()["run_id"]
        urls = self.stack.gateway_urls
        first = urls[u % len(urls)]
        rec.follower = ResumingFollower(first, self.tokens[user], rec.task_id, rec.run_id, reconnect_delay=0.3,
                                        other_urls=[x for x in urls if x != first], rng=random.Random(rng.random()))
        follow = asyncio.create_task(rec.follower.run(timeout=FOLLOW_TIMEOUT))
        if rec.cancel_after is not None:
            await asyncio.sleep(rec.cancel_after)
            if not follow.done():
                async with await self._client(u, user) as c:
                    try:
                        rec.cancel_status = (await c.post(f"/v1/tasks/{rec.task_id}/cancel")).status_code
                    except httpx.TransportError:
                        rec.cancel_status = -1
        try:
            await follow
        except TimeoutError:
            rec.client_error = f"no done within {FOLLOW_TIMEOUT:g} s"
        except Exception as exc:  # the history records it; the checker judges
            rec.client_error = repr(exc)
        rec.ended_at = self.now()

    async def replay(self, rec: RunRecord) -> list[dict[str, Any]]:
        """The run's whole stored stream, read through a gateway (`?run_id=`, no Last-Event-ID)."""
        out: list[dict[str, Any]] = []
        async with await self._client(0, rec.user) as c:
            async with c.stream("GET", f"/v1/tasks/{rec.task_id}/events?run_id={rec.run_id}") as resp:
                if resp.status_code != 200:
                    raise AssertionError(f"replay of {rec.run_id}: {resp.status_code}")
                async for event in sse_events(resp):
                    out.append(event)
                    if event["event"] == "done":
                        break
        return out
