"""Bench harness plumbing: the real stack as child processes, an HTTP/SSE client, statistics.

By default the stack has production durability (issue 23): PostgreSQL with fsync, synchronous
commit and full-page writes on, as `zcbot up` and deploy/ run it, and NATS as deploy/k8s runs it — a
3-node JetStream cluster (`tests/helpers/cluster.py`) with `sync_interval: always` and every stream
replicated 3 times. `fast=True` (`--fast`) is the old, labelled extra: one NATS server without the
sync policy, replicas 1, and PostgreSQL without fsync.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from zcbot_core.bus.subjects import Topology
from zcbot_core.db.migrate import upgrade
from zcbot_devstack.embedded import EmbeddedNats, EmbeddedPostgres, free_port
from zcbot_devstack.embedded.nats_auth import NatsCredentials
from zcbot_devstack.services import SERVICE_PORT_ENV

FAKE_KEY_ENV = "ZCBOT_FAKE_LLM_API_KEY"


def summarize(samples: list[float]) -> dict[str, float]:
    """p50/p99/max in milliseconds."""
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]
    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered) * 1000, 3),
            "p99_ms": round(p99 * 1000, 3), "max_ms": round(ordered[-1] * 1000, 3)}


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def machine_info() -> dict[str, Any]:
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "machine": platform.machine()}


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    port: int | None = None

    def kill9(self) -> None:
        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()


@dataclass
class BenchStack:
    """Embedded (or given) NATS/PostgreSQL, fake LLM and zcbot services as real processes."""

    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    servers: list[Any] = field(default_factory=list)
    base_url: str = ""
    fake_url: str = ""
    nats_creds: NatsCredentials | None = None
    admin_nats_url: str = ""  # for the bench's own client (the services connect with their identity)
    fast: bool = False  # durability off (see the module docstring)
    cluster: Any = None  # the NatsCluster of a durable run (tests/helpers/cluster.py)

    @classmethod
    def create(cls, fast: bool = False) -> "BenchStack":
        return cls(workdir=Path(tempfile.mkdtemp(prefix="zcbot-bench-")), fast=fast)

    def durability(self) -> dict[str, Any]:
        """What the figures were measured with (in every report)."""
        if self.fast:
            return {"mode": "fast (not production)", "postgres": "fsync, synchronous_commit, full_page_writes off",
                    "nats": "1 server, replicas 1, default sync (every 2 min)"}
        return {"mode": "durable (production)", "postgres": "fsync, synchronous_commit, full_page_writes on",
                "nats": "3-node cluster, replicas 3, sync_interval always"}

    def _start_nats(self, prefix: str) -> str:
        """The stack's NATS (see the module docstring); the services' ZCBOT_NATS_URL."""
        self.nats_creds = NatsCredentials.generate()
        topo = Topology(prefix)
        if self.fast:
            conf = self.nats_creds.write_server_config(self.workdir / "nats-auth.conf", topo)
            nats = EmbeddedNats(self.workdir / "nats", extra_args=["-c", str(conf)]).start()
            self.servers.append(nats)
            self.admin_nats_url = self.nats_creds.admin_url(nats.url)
            return nats.url
        from tests.helpers.cluster import NatsCluster

        self.cluster = NatsCluster(self.workdir / "nats", self.nats_creds, topo).start()
        self.servers.append(self.cluster)
        self.admin_nats_url = ",".join(self.cluster.admin_urls)
        return self.cluster.server_list

    def start_infra(self) -> None:
        nats_url = os.environ.get("ZCBOT_NATS_URL")
        db_url = os.environ.get("ZCBOT_DB_URL")
        prefix = f"b{secrets.token_hex(3)}"
        self.admin_nats_url = nats_url or ""
        if not nats_url:
            # As `zcbot up`: one identity per service, anonymous clients refused (issue 22).
            nats_url = self._start_nats(prefix)
        if not db_url:
            pg = EmbeddedPostgres(self.workdir / "pg", fast=self.fast, options={"max_connections": "400"}).start()
            self.servers.append(pg)
            admin = pg.url
            name = f"bench_{secrets.token_hex(4)}"
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            db_url = pg.url_for(name)
        upgrade(db_url)
        fake_port = free_port()
        models = self.workdir / "models"
        models.mkdir(parents=True, exist_ok=True)
        self.fake_url = f"http://127.0.0.1:{fake_port}/v1"
        (models / "fake.yaml").write_text(
            f"model: openai/fake-model\napi_base: {self.fake_url}\napi_key_env: {FAKE_KEY_ENV}\n"
            "max_context: 64000\nreliable_context: 32000\nmax_output: 2048\nmax_iterations: 30\n"
            "pricing: {input_per_mtok: 1.0, output_per_mtok: 2.0}\n" + os.environ.get("ZCBOT_BENCH_PROFILE_EXTRA", ""))
        self.env = {
            **os.environ, "ZCBOT_NATS_URL": nats_url, "ZCBOT_DB_URL": db_url, "ZCBOT_BUS_PREFIX": prefix,
            "ZCBOT_HOME": str(self.workdir / "home"), "ZCBOT_STORAGE_ROOT": str(self.workdir / "users"),
            "JWT_SECRET": secrets.token_hex(32), "PLATFORM_KEY": secrets.token_hex(32),
            "ZCBOT_CHANNEL_SECRET_KEY": secrets.token_hex(32), "ZCBOT_RUN_GRANT_KEY": secrets.token_hex(32),
            "ZCBOT_MODELS_DIR": str(models),
            "ZCBOT_DEFAULT_MODEL": "fake", FAKE_KEY_ENV: "sk-fake", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "ZCBOT_MAX_RUNS_PER_USER": "1000", "ZCBOT_MAX_QUEUED_RUNS": "100000", "ZCBOT_ACK_WAIT_SECONDS": "4",
            "ZCBOT_RUNNER_CONCURRENCY": "2000", "ZCBOT_LOG_LEVEL": "WARNING", "ZCBOT_EXECUTOR_HOST": "bench1",
            "ZCBOT_JS_REPLICAS": "1" if self.fast or self.cluster is None else "3",
            "PYTHONUNBUFFERED": "1",
        }
        self.spawn("fake_llm", [sys.executable, "-m", "zcbot_fakellm", "--port", str(fake_port),
                                "--default-chunks", "1"], port=None)
        for _ in range(200):
            try:
                urllib.request.urlopen(self.fake_url.replace("/v1", "/_health"), timeout=0.5)
                break
            except OSError:
                time.sleep(0.05)

    def spawn(self, name: str, cmd: list[str], port: int | None, extra_env: dict[str, str] | None = None) -> Proc:
        log = open(self.workdir / f"{name}-{len(self.procs)}.log", "ab")
        popen = subprocess.Popen(cmd, env={**self.env, **(extra_env or {})}, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        proc = Proc(name, popen, port)
        self.procs.append(proc)
        if port is not None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=0.5)
                    break
                except OSError:
                    if popen.poll() is not None:
                        raise RuntimeError(f"{name} exited; see {log.name}") from None
                    time.sleep(0.1)
        return proc

    def service(self, name: str) -> Proc:
        port = free_port()
        identity = self.nats_creds.service_env(name) if self.nats_creds is not None else {}
        proc = self.spawn(name, [sys.executable, "-m", "zcbot_devstack.cli", name], port,
                          {SERVICE_PORT_ENV[name]: str(port), **identity})
        if name == "gateway":
            self.base_url = f"http://127.0.0.1:{port}"
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        for server in reversed(self.servers):
            server.stop()
        if os.environ.get("ZCBOT_BENCH_KEEP"):  # the services' logs, to read after a surprising figure
            print(f"bench workdir kept: {self.workdir}", file=sys.stderr)
            return
        shutil.rmtree(self.workdir, ignore_errors=True)


class Client:
    def __init__(self, base_url: str, platform_key: str) -> None:
        # Expire idle connections before uvicorn does (5 s), or a reused one can be closed mid-request.
        limits = httpx.Limits(max_connections=3000, max_keepalive_connections=3000, keepalive_expiry=2.0)
        self.http = httpx.AsyncClient(base_url=base_url, timeout=120, limits=limits)
        self.base_url = base_url
        self.platform_key = platform_key

    async def login(self, user_id: str) -> dict[str, str]:
        r = await self.http.post("/v1/auth/login", json={"user_id": user_id, "platform_key": self.platform_key})
        r.raise_for_status()
        return {"Authorization": f"Bearer {r.json()['token']}"}

    async def task(self, headers: dict[str, str], name: str) -> str:
        r = await self.http.post("/v1/tasks", json={"name": name}, headers=headers)
        r.raise_for_status()
        return r.json()["task_id"]

    async def post(self, headers: dict[str, str], task_id: str, content: str) -> dict[str, Any]:
        r = await self.http.post(f"/v1/tasks/{task_id}/messages", json={"content": content}, headers=headers)
        r.raise_for_status()
        return r.json()

    async def sse(self, headers: dict[str, str], url: str, on_event: Any = None) -> list[tuple[float, dict[str, Any]]]:
        """(receive time, event) pairs until the stream ends."""
        out: list[tuple[float, dict[str, Any]]] = []
        async with self.http.stream("GET", url, headers=headers) as r:
            event: dict[str, Any] = {}
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    event["event"] = line[7:]
                elif line.startswith("data: "):
                    event["data"] = json.loads(line[6:])
                elif line == "" and "event" in event:
                    item = (time.perf_counter(), event)
                    out.append(item)
                    if on_event is not None:
                        on_event(item)
                    event = {}
        return out

    async def events(self, headers: dict[str, str], url: str) -> list[tuple[float, dict[str, Any]]]:
        """(perf_counter receive time, event) pairs until `done`, read with the lean raw-socket client
        (httpx's SSE parsing cost more CPU than the gateway's side of a run)."""
        out: list[tuple[float, dict[str, Any]]] = []
        host, port = self.base_url.split("//", 1)[1].split(":")

        def on_event(received: float, name: str, data: bytes | None) -> None:
            out.append((received, {"event": name, "data": json.loads(data) if data else {}}))

        await raw_sse(host, int(port), url, headers["Authorization"].split()[1], on_event, clock=time.perf_counter)
        return out

    async def post_events(self, headers: dict[str, str], task_id: str, content: str) -> list[tuple[float, dict[str, Any]]]:
        """POST a message asking for its run's event stream (one request): (receive time, event) pairs."""
        out: list[tuple[float, dict[str, Any]]] = []
        host, port = self.base_url.split("//", 1)[1].split(":")

        def on_event(received: float, name: str, data: bytes | None) -> None:
            out.append((received, {"event": name, "data": json.loads(data) if data else {}}))

        await raw_sse(host, int(port), f"/v1/tasks/{task_id}/messages", headers["Authorization"].split()[1], on_event,
                      clock=time.perf_counter, json_body={"content": content})
        return out

    async def close(self) -> None:
        await self.http.aclose()


async def raw_sse(host: str, port: int, path: str, token: str, on_event: Any, on_connected: Any = None,
                  clock: Any = time.time, json_body: Any = None) -> int:
    """A lean SSE reader on a raw socket (HTTP/1.1 chunked), so a benchmark of many subscribers
    measures the gateway rather than the client library. Calls on_event(clock(), name, data).
    With `json_body`, the request is a POST of it (a message asking for its run's event stream)."""
    reader, writer = await asyncio.open_connection(host, port)
    if json_body is None:
        head, payload = f"GET {path} HTTP/1.1\r\n", b""
    else:
        payload = json.dumps(json_body).encode()
        head = (f"POST {path} HTTP/1.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n")
    writer.write((f"{head}Host: {host}\r\nAuthorization: Bearer {token}\r\n"
                  "Accept: text/event-stream\r\n\r\n").encode() + payload)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head[:80])
    if on_connected is not None:
        on_connected(clock())
    raw = bytearray()  # the chunked body as read
    text = b""  # de-chunked, not yet a whole frame
    count = 0
    try:
        while True:
            block = await reader.read(1 << 18)  # big reads: one await for many frames
            if not block:
                return count
            raw += block
            pieces, pos, ended = [], 0, False
            while True:
                eol = raw.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = int(raw[pos:eol] or b"0", 16)
                if size == 0:
                    ended = True
                    break
                end = eol + 2 + size
                if len(raw) < end + 2:
                    break
                pieces.append(bytes(raw[eol + 2:end]))
                pos = end + 2
            del raw[:pos]
            frames = (text + b"".join(pieces)).split(b"\n\n")
            text = frames.pop()
            received = clock()
            for frame in frames:
                name = data = None
                for line in frame.split(b"\n"):
                    if line.startswith(b"event: "):
                        name = line[7:].decode()
                    elif line.startswith(b"data: "):
                        data = line[6:]
                if name is not None:
                    count += 1
                    on_event(received, name, data)
                    if name == "done":
                        return count
            if ended:
                return count
    finally:
        writer.close()
