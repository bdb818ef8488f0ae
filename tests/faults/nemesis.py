"""The nemesis of the fault suite (issue 42): faults on a loopback NATS cluster, scheduled from a seed.

Operations on one node of a `NatsCluster` made with `own_groups=True`:
- `pause`: SIGSTOP for longer than the route heartbeat, then SIGCONT (a stalled VM: sockets stay open,
  nothing answers; the classic stale leader).
- `partition`: the node cut from the other two by an nftables table of the nemesis' own (`inet`,
  one `output` chain): packets to or from the node's route port, and packets the node's own process
  (its group id, `meta skgid`) sends to the others' route ports, are dropped. Client connections are
  left alone, so a service connected to the node stays on the minority side. Every node shares
  127.0.0.1, so only the group id tells the node's outgoing route connections from the others'.
- `kill`: SIGKILL, then a restart on the same ports and store.
- `bridge`: the two nodes other than the target cut from each other; the target still sees both. A
  route between two nodes is one TCP connection (or a pool) opened by one side, so the first packet a
  node's process sends to the other's route port marks its connection (conntrack) and every packet of
  a marked connection is dropped, the other side's replies included.

The table is named per test and removed by `heal()`; `Nemesis.close()` (called by the fixtures'
teardown, also after a failure) resumes a paused node, deletes the table and restarts a killed node.
No other nftables rule is read or touched.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import secrets
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from tests.helpers.cluster import NatsCluster, stream_leader

KINDS = ("pause", "partition", "kill", "bridge")
SILENT_PEER_NS = 2_500_000_000  # a replica the leader has not heard from for this long is cut off


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: `kind` on the node `target` names (resolved when it starts), `at` seconds
    after the load started, lasting `duration` seconds."""

    kind: str
    target: str  # "runs-leader", "events-leader", a node name, or "node-of:<pid>" (the node a process uses)
    at: float
    duration: float


def schedule(seed: int, kinds: tuple[str, ...], targets: tuple[str, ...], *, count: int, window: float,
             duration: tuple[float, float]) -> list[Fault]:
    """`count` faults of the given kinds and targets inside `window` seconds, never overlapping (each
    starts after the previous one healed plus a quiet second), all drawn from `seed`."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = rng.uniform(1.0, 3.0)
    for _ in range(count):
        length = round(rng.uniform(*duration), 2)
        if t + length > window:
            break
        faults.append(Fault(rng.choice(kinds), rng.choice(targets), round(t, 2), length))
        t += length + rng.uniform(1.0, 4.0)
    return faults


class NftPartition:
    """An nftables table of our own that cuts one node's routes; `heal()` deletes it (idempotent)."""

    def __init__(self, name: str) -> None:
        safe = re.sub(r"[^a-z0-9_]", "_", name.lower())[:20]
        self.table = f"zcf_{safe}_{secrets.token_hex(3)}"
        self.active = False

    def cut(self, cluster: NatsCluster, name: str) -> None:
        node = cluster.node(name)
        assert node.gid is not None, "the cluster was not made with own_groups=True"
        others = ", ".join(str(n.cluster_port) for n in cluster.nodes if n.name != name)
        script = f"""
table inet {self.table} {{
  chain out {{
    type filter hook output priority 0; policy accept;
    tcp dport {node.cluster_port} drop
    tcp sport {node.cluster_port} drop
    meta skgid {node.gid} tcp dport {{ {others} }} drop
  }}
}}
"""
        self.active = True  # before the call: a half-made table is deleted too
        subprocess.run(["nft", "-f", "-"], input=script.encode(), check=True, capture_output=True, timeout=10)

    def bridge(self, cluster: NatsCluster, name: str) -> None:
        """The two nodes other than `name` lose each other; `name` keeps both (a bridge)."""
        a, b = [n for n in cluster.nodes if n.name != name]
        assert a.gid is not None and b.gid is not None, "the cluster was not made with own_groups=True"
        script = f"""
table inet {self.table} {{
  chain out {{
    type filter hook output priority 0; policy accept;
    ct mark 0x2a counter drop
    meta skgid {a.gid} tcp dport {b.cluster_port} ct mark set 0x2a counter drop
    meta skgid {b.gid} tcp dport {a.cluster_port} ct mark set 0x2a counter drop
  }}
}}
"""
        self.active = True
        subprocess.run(["nft", "-f", "-"], input=script.encode(), check=True, capture_output=True, timeout=10)

    def dropped(self) -> list[int]:
        """Packets each counted rule of the table dropped so far."""
        out = subprocess.run(["nft", "list", "table", "inet", self.table], capture_output=True, timeout=10).stdout.decode()
        return [int(n) for n in re.findall(r"counter packets (\d+)", out)]

    def heal(self) -> None:
        if not self.active:
            return
        result = subprocess.run(["nft", "delete", "table", "inet", self.table], capture_output=True, timeout=10)
        if result.returncode != 0 and self.exists():
            raise RuntimeError(f"nft could not delete {self.table}: {result.stderr.decode()}")
        self.active = False

    def exists(self) -> bool:
        out = subprocess.run(["nft", "list", "tables"], capture_output=True, timeout=10, check=True).stdout.decode()
        return f"inet {self.table}" in out.split("\n") or f"table inet {self.table}" in out


def nats_node_of(cluster: NatsCluster, pid: int) -> str | None:
    """The node most of the process group `pid`'s NATS connections go to (read from `ss`)."""
    out = subprocess.run(["ss", "-Htnp", "state", "established"], capture_output=True, timeout=10).stdout.decode()
    by_port = {n.port: n.name for n in cluster.nodes}
    counts: dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        peer_port = int(parts[3].rsplit(":", 1)[1])
        if peer_port not in by_port:
            continue
        for found in re.findall(r"pid=(\d+)", line):
            try:
                if int(found) == pid or _pgid(int(found)) == pid:
                    counts[by_port[peer_port]] = counts.get(by_port[peer_port], 0) + 1
            except ProcessLookupError:
                continue
    return max(counts, key=lambda k: counts[k]) if counts else None


def _pgid(pid: int) -> int:
    return os.getpgid(pid)


@dataclass
class Nemesis:
    """Applies `Fault`s to a cluster and records each start and heal in `history`."""

    cluster: NatsCluster
    test_name: str
    t0: float = field(default_factory=time.monotonic)
    history: list[dict[str, Any]] = field(default_factory=list)
    paused: set[str] = field(default_factory=set)
    killed: set[str] = field(default_factory=set)
    partition: NftPartition | None = None

    def record(self, what: str, **detail: Any) -> None:
        self.history.append({"t": round(time.monotonic() - self.t0, 2), "op": what, **detail})
        print(f"[nemesis {time.monotonic() - self.t0:6.1f} s] {what} {detail}", flush=True)

    async def resolve(self, target: str) -> str:
        if target in {n.name for n in self.cluster.nodes}:
            return target
        if target.startswith("node-of:"):
            node = nats_node_of(self.cluster, int(target.split(":", 1)[1]))
            assert node is not None, f"no NATS connection found for {target}"
            return node
        nc = await self.cluster.admin()
        try:
            stream = {"runs-leader": self.cluster.topo.runs_stream, "events-leader": self.cluster.topo.events_stream}[target]
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                leader = await stream_leader(nc.jetstream(), stream)
                if leader:
                    return leader
                await asyncio.sleep(0.2)
            raise AssertionError(f"{stream} has no leader to fault")
        finally:
            await nc.close()

    async def majority_sees_cut(self, node: str, timeout: float) -> bool:
        """Whether the other nodes, asked directly, lose `node` on the events stream: a leader other than
        it, which has not heard from its replica for longer than two Raft heartbeats (1 s each), or sees
        it offline, or reports it not current for longer than that. A moment not current is no cut: a busy
        follower is often briefly behind without any fault."""
        import nats

        from zcbot_devstack.embedded.nats_auth import ADMIN_USER

        creds = self.cluster.creds
        others = [n.url for n in self.cluster.nodes if n.name != node]
        nc = await nats.connect(servers=others, user=ADMIN_USER, password=creds.passwords[ADMIN_USER],
                                connect_timeout=2, dont_randomize=True)
        try:
            js = nc.jetstream()
            deadline = time.monotonic() + timeout
            behind_since: float | None = None  # since when the leader has reported the replica not current
            while time.monotonic() < deadline:
                try:
                    info = await asyncio.wait_for(js.stream_info(self.cluster.topo.events_stream), 1.0)
                except Exception:  # an election among the majority: ask again
                    info = None
                if info is not None and info.cluster is not None and info.cluster.leader not in (None, node):
                    peer = next((p for p in info.cluster.replicas or [] if p.name == node), None)
                    if peer is None or peer.offline or (peer.active or 0) > SILENT_PEER_NS:
                        return True
                    # A leader elected after the cut may never have heard from the replica: it reports it
                    # not current with `active` 0 (no time since a contact it never had) and a growing lag.
                    if peer.current is False:
                        behind_since = behind_since if behind_since is not None else time.monotonic()
                        if time.monotonic() - behind_since > SILENT_PEER_NS / 1e9:
                            return True
                    else:
                        behind_since = None
                await asyncio.sleep(0.25)
            return False
        finally:
            await nc.close()

    async def apply(self, fault: Fault) -> None:
        node = await self.resolve(fault.target)
        self.record(f"{fault.kind} start", node=node, target=fault.target, duration=fault.duration)
        if fault.kind == "pause":
            self.cluster.pause(node)
            self.paused.add(node)
            await asyncio.sleep(fault.duration)
            self.cluster.resume(node)
            self.paused.discard(node)
        elif fault.kind == "partition":
            self.partition = NftPartition(self.test_name)
            self.partition.cut(self.cluster, node)
            cut_at = time.monotonic()
            seen = await self.majority_sees_cut(node, timeout=fault.duration)
            self.record("cut seen by the majority" if seen else "cut NOT seen by the majority", node=node,
                        after=round(time.monotonic() - cut_at, 2))
            await asyncio.sleep(max(0.0, fault.duration - (time.monotonic() - cut_at)))
            self.partition.heal()
            self.partition = None
        elif fault.kind == "bridge":
            self.partition = NftPartition(self.test_name)
            self.partition.bridge(self.cluster, node)
            await asyncio.sleep(fault.duration)
            self.record("bridge dropped", packets=self.partition.dropped())  # each way between the two others
            self.partition.heal()
            self.partition = None
        elif fault.kind == "kill":
            self.cluster.kill9(node)
            self.killed.add(node)
            await asyncio.sleep(fault.duration)
            await asyncio.to_thread(self.cluster.restart, node)
            self.killed.discard(node)
        else:
            raise ValueError(fault.kind)
        self.record(f"{fault.kind} healed", node=node)

    async def run(self, faults: list[Fault]) -> None:
        for fault in faults:
            delay = fault.at - (time.monotonic() - self.t0)
            if delay > 0:
                await asyncio.sleep(delay)
            await self.apply(fault)

    def close(self) -> None:
        """Undo whatever fault is still in force (a failed or cancelled test): never leaves a node
        stopped, a table behind or a node dead."""
        for node in list(self.paused):
            try:
                self.cluster.resume(node)
            except (ProcessLookupError, AssertionError):
                pass
            self.paused.discard(node)
        if self.partition is not None:
            self.partition.heal()
            self.partition = None
        for node in list(self.killed):
            self.cluster.restart(node)
            self.killed.discard(node)
