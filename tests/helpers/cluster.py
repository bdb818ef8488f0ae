"""A 3-node NATS JetStream cluster and zcbot's services on it, all as real processes (issue 23).

Used by `tests/cluster/`, the fault suite (`tests/faults/`) and the bench's cluster figures
(`bench/cluster.py`), so all start the cluster the same way:

- `NatsCluster`: `size` `nats-server -js` processes (`EmbeddedNats`), each with its own client port,
  route port and store dir, routes to the others, and the configuration `zcbot up` writes
  (`NatsCredentials.write_server_config`: one user per service with its subject permissions, an
  admin, no anonymous clients) plus the cluster block and JetStream's sync policy. A node can be
  killed with SIGKILL and restarted on the same ports and store, or paused (SIGSTOP/SIGCONT); with
  `own_groups` each node runs under a group id of its own, for the fault suite's nftables rules.
- `ClusterStack`: the services (`python -m zcbot_devstack.cli NAME`, `helpers.procs.ServiceProcess`)
  given the server list in `ZCBOT_NATS_URL`, `ZCBOT_JS_REPLICAS`, their own NATS identity and the
  environment `zcbot up` gives each (`bootstrap.service_env`: the executor without secrets, the
  runner without the grant key), and the fake LLM as its own process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import secrets
import signal
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from tests.helpers.bus_setup import declare_topology
from tests.helpers.procs import ServiceProcess
from tests.helpers.stack import FAKE_KEY_ENV, write_fake_profile
from zcbot_core.bus.subjects import Topology
from zcbot_devstack.bootstrap import service_env
from zcbot_devstack.embedded import EmbeddedNats, free_port
from zcbot_devstack.embedded.nats_auth import ADMIN_USER, NatsCredentials
from zcbot_devstack.services import SERVICE_PORT_ENV

# JetStream's sync policy of every node (docs/decisions.md, issue 23): fsync after every write, so a
# message JetStream acknowledged is on the disk of the nodes that stored it. The default (a sync every
# 2 minutes) acknowledges before the disk has it: a power cut of a quorum loses acknowledged messages.
SYNC_INTERVAL = "always"


@dataclass
class NatsNode:
    name: str
    port: int
    cluster_port: int
    config: Path
    data_dir: Path
    gid: int | None = None  # the node's own group id, when the cluster is made for fault tests
    server: EmbeddedNats | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.server is not None and self.server.process is not None and self.server.process.poll() is None


class NatsCluster:
    """`size` clustered nats-server processes under `root` (one directory per node)."""

    def __init__(self, root: Path, creds: NatsCredentials, topo: Topology, size: int = 3,
                 sync_interval: str = SYNC_INTERVAL, cluster_name: str = "zcbot", own_groups: bool = False) -> None:
        """`own_groups`: each node runs under a group id of its own (root only), so nftables rules can
        tell its packets from the other nodes' (`tests/faults/nemesis.py`)."""
        self.root = Path(root)
        self.creds = creds
        self.topo = topo
        self.nodes: list[NatsNode] = []
        ports = [(free_port(), free_port()) for _ in range(size)]
        gid_base = 61000 + 4 * secrets.randbelow(1000)  # unlikely to meet another test's cluster
        for i, (port, cluster_port) in enumerate(ports):
            name = f"n{i}"
            data_dir = self.root / name
            data_dir.mkdir(parents=True, exist_ok=True)
            config = creds.write_server_config(self.root / f"{name}.conf", topo)
            conf = json.loads(config.read_text())
            conf["server_name"] = name  # JetStream's peers are named; the leader is reported by name
            conf["jetstream"] = {"sync_interval": sync_interval}  # store dir: EmbeddedNats' -sd
            conf["cluster"] = {
                "name": cluster_name,
                "listen": f"127.0.0.1:{cluster_port}",
                "routes": [f"nats://127.0.0.1:{c}" for j, (_, c) in enumerate(ports) if j != i],
            }
            config.write_text(json.dumps(conf, indent=2))
            self.nodes.append(NatsNode(name, port, cluster_port, config, data_dir,
                                       gid_base + i if own_groups else None))

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> Self:
        for node in self.nodes:
            self._start(node)
        # On a thread of its own: start() may be called from a fixture while an event loop runs.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, self.wait_formed()).result()
        return self

    async def wait_formed(self, timeout: float = 60.0) -> None:
        """Until JetStream places a stream on every node: a stream declared before the nodes have
        found each other fails with "no suitable peers for placement" (a loaded machine)."""
        from nats.js.api import StorageType

        nc = await self.admin()
        try:
            js = nc.jetstream()
            name = f"PROBE_{secrets.token_hex(3)}"
            deadline = time.monotonic() + timeout
            while True:
                try:
                    await js.add_stream(name=name, subjects=[f"_probe.{name}"], num_replicas=len(self.nodes),
                                        storage=StorageType.MEMORY)
                    await js.delete_stream(name)
                    return
                except Exception:  # not formed yet: no meta leader, too few peers, a timeout
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.5)
        finally:
            await nc.close()

    def _start(self, node: NatsNode) -> None:
        node.server = EmbeddedNats(node.data_dir, port=node.port, extra_args=["-c", str(node.config)],
                                   group=node.gid).start()

    def node(self, name: str) -> NatsNode:
        return next(n for n in self.nodes if n.name == name)

    def kill9(self, name: str) -> None:
        """SIGKILL one node (a crash: no flush, no leadership hand-over)."""
        node = self.node(name)
        assert node.server is not None and node.server.process is not None, f"{name} is not running"
        node.server.process.kill()
        node.server.process.wait()
        node.server = None

    def pid(self, name: str) -> int:
        node = self.node(name)
        assert node.server is not None and node.server.process is not None, f"{name} is not running"
        return node.server.process.pid

    def pause(self, name: str) -> None:
        """SIGSTOP one node: its sockets stay open, it answers nothing (a stalled VM, a long GC)."""
        os.kill(self.pid(name), signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.kill(self.pid(name), signal.SIGCONT)

    def restart(self, name: str) -> None:
        """Start a killed node again on its ports and store (it catches up from the others)."""
        self._start(self.node(name))

    def stop(self) -> None:
        for node in self.nodes:
            if node.running:  # a paused node would ignore the SIGTERM of its stop
                self.resume(node.name)
            if node.server is not None:
                node.server.stop()
                node.server = None

    # ---- addresses -----------------------------------------------------------------------
    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def server_list(self) -> str:
        """`ZCBOT_NATS_URL` for the services: every node, comma-separated."""
        return ",".join(self.urls)

    @property
    def admin_urls(self) -> list[str]:
        return [self.creds.admin_url(u) for u in self.urls]

    async def admin(self) -> Any:
        """An admin connection to the whole cluster (for leader look-ups and checks)."""
        import nats

        # The credentials as options, not in the URLs: the servers the cluster announces are reconnected
        # to with them too.
        return await nats.connect(servers=self.urls, user=ADMIN_USER, password=self.creds.passwords[ADMIN_USER],
                                  connect_timeout=2, max_reconnect_attempts=-1, reconnect_time_wait=0.2)


async def stream_leader(js: Any, stream: str, timeout: float = 1.0) -> str | None:
    """The name of the node leading `stream`, or None while there is none (or it cannot be asked)."""
    try:
        info = await asyncio.wait_for(js.stream_info(stream), timeout)
    except Exception:  # an election, a lost connection, the stream not made yet: no leader known
        return None
    return info.cluster.leader if info.cluster is not None else None


async def stream_replicas(js: Any, stream: str) -> int:
    info = await js.stream_info(stream)
    return int(info.config.num_replicas or 1)


async def wait_leader(js: Any, stream: str, *, other_than: str | None = None, timeout: float = 30.0) -> str:
    """Wait until `stream` has a leader (other than `other_than`, when given); its name."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leader = await stream_leader(js, stream)
        if leader and leader != other_than:
            return leader
        await asyncio.sleep(0.05)
    raise AssertionError(f"stream {stream} has no leader after {timeout:g} s")


@dataclass
class ClusterStack:
    """zcbot's services as processes on a `NatsCluster` and one PostgreSQL database."""

    workdir: Path
    cluster: NatsCluster
    db_url: str
    replicas: int = 3
    extra_env: Mapping[str, str] = field(default_factory=dict)
    procs: list[ServiceProcess] = field(default_factory=list)
    fake: ServiceProcess | None = None
    fake_url: str = ""
    base_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        fake_port = free_port()
        self.fake_url = f"http://127.0.0.1:{fake_port}/v1"
        models = self.workdir / "models"
        write_fake_profile(models, self.fake_url)
        self.base_env = {
            **os.environ,
            "ZCBOT_NATS_URL": self.cluster.server_list, "ZCBOT_JS_REPLICAS": str(self.replicas),
            "ZCBOT_DB_URL": self.db_url, "ZCBOT_BUS_PREFIX": self.cluster.topo.prefix,
            "ZCBOT_HOME": str(self.workdir / "home"), "ZCBOT_STORAGE_ROOT": str(self.workdir / "users"),
            "JWT_SECRET": secrets.token_hex(32), "PLATFORM_KEY": secrets.token_hex(32),
            "ZCBOT_CHANNEL_SECRET_KEY": secrets.token_hex(32), "ZCBOT_RUN_GRANT_KEY": secrets.token_hex(32),
            "ZCBOT_MODELS_DIR": str(models), "ZCBOT_DEFAULT_MODEL": "fake", FAKE_KEY_ENV: "sk-fake",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "ZCBOT_LOG_LEVEL": "INFO",
            "ZCBOT_EXECUTOR_HOST": f"h{secrets.token_hex(4)}",
            # Shorter than an election (5-9 s here): a runner whose in-progress acks went to a dead leader
            # has its run redelivered to the other runner, whose claim takes it over and stops the first
            # (zcbot_runner/takeover.py); the test's one-copy-of-each-event checks cover that.
            "ZCBOT_ACK_WAIT_SECONDS": "3",
            "ZCBOT_SSE_HEARTBEAT_SECONDS": "1", "ZCBOT_MAX_RUNS_PER_USER": "100",
            **self.extra_env,
        }
        self.fake = ServiceProcess("fake_llm", self.base_env, self.workdir / "logs" / "fake_llm.log",
                                   cmd=[sys.executable, "-m", "zcbot_fakellm", "--port", str(fake_port)])

    @property
    def platform_key(self) -> str:
        return self.base_env["PLATFORM_KEY"]

    def gateways(self) -> list[ServiceProcess]:
        return [p for p in self.procs if p.name == "gateway" and p.alive]

    @property
    def gateway_urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p.port}" for p in self.procs if p.name == "gateway"]

    def service(self, name: str, **env: str) -> ServiceProcess:
        """Start one service (not waiting for health) with its own identity and health port."""
        full = service_env(name, {**self.base_env, **self.cluster.creds.service_env(name),
                                  SERVICE_PORT_ENV[name]: str(free_port()), **env})
        svc = ServiceProcess(name, full, self.workdir / "logs" / f"{name}-{len(self.procs)}.log").start()
        self.procs.append(svc)
        return svc

    def start(self, gateways: int = 2, runners: int = 2, scheduler: bool = True, timeout: float = 180.0) -> Self:
        """The fake LLM, then every service at once (they start in parallel), then their health."""
        assert self.fake is not None
        self.fake.start()
        names = ["executor", *["gateway"] * gateways, *["runner"] * runners, *(["scheduler"] if scheduler else [])]
        # The setup step first (issue 36): the services' identities may only check the topology.
        declare_topology(self.cluster.server_list, self.cluster.topo.prefix, self.cluster.creds,
                         services_env=self.base_env)
        started = [self.service(name) for name in names]
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(self.fake_url.replace("/v1", "/_health"), timeout=0.5)
                break
            except OSError:
                if time.monotonic() > deadline or not self.fake.alive:
                    raise AssertionError(f"fake LLM did not start:\n{self.fake.log_tail()}") from None
                time.sleep(0.05)
        for svc in started:
            svc.wait_healthy(timeout=max(1.0, deadline - time.monotonic()))
        return self

    def stop(self) -> None:
        import signal

        for svc in self.procs:  # all drain in parallel
            if svc.alive:
                svc._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + 20.0
        for svc in reversed(self.procs):
            svc.terminate(timeout=max(0.1, deadline - time.monotonic()))
        if self.fake is not None:
            self.fake.terminate(timeout=5)

    def logs(self, chars: int = 3000) -> str:
        """Every service's log tail, for a failing assertion."""
        return "\n".join(f"--- {p.name} ({p.log_path.name}, rc={p.returncode})\n{p.log_tail(chars)}" for p in self.procs)
