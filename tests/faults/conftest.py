"""Fixtures of the fault suite (issue 42): one 3-node NATS cluster (each node under a group id of its own,
for the nemesis' nftables rules), zcbot's services as processes on it, and a PostgreSQL of the
module's own (a scenario stops it), all shared by the module's scenarios; a `nemesis` per test that
undoes any fault still in force at teardown and checks its nftables table is gone."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from tests.faults.disk import SmallDisk
from tests.faults.nemesis import Nemesis
from tests.helpers.cluster import ClusterStack, NatsCluster, stream_leader
from zcbot_core.bus.subjects import Topology
from zcbot_devstack.embedded import EmbeddedPostgres, free_port
from zcbot_devstack.embedded.nats_auth import NatsCredentials


@dataclass
class FaultEnv:
    stack: ClusterStack
    pg: EmbeddedPostgres
    db_url: str
    disks: dict[str, SmallDisk] = field(default_factory=dict)  # "nats": node n2's store, "pg": the data dir

    @property
    def cluster(self) -> NatsCluster:
        return self.stack.cluster


def _nft_tables() -> set[str]:
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, timeout=10, check=True).stdout.decode()
    return {line.strip() for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def fault_env() -> Iterator[FaultEnv]:
    with fault_environment() as env:
        yield env


# The small disks of `fault_environment(small_disks=True)`: node n2's JetStream store (the node starts
# with it, so JetStream sizes its limits on it) and PostgreSQL's data dir (initdb, a WAL segment or two).
NATS_DISK_MB = 64
PG_DISK_MB = 192
FULL_DISK_NODE = "n2"


@contextmanager
def fault_environment(small_disks: bool = False) -> Iterator[FaultEnv]:
    """The module's cluster, services and PostgreSQL; `small_disks`: with the two disks above mounted
    first (unmounted after everything stopped, also after a failure)."""
    if os.geteuid() != 0 or shutil.which("nft") is None:
        pytest.fail("the fault suite needs root and nftables (nft) for its partitions")
    root = Path(tempfile.mkdtemp(prefix="zcbot-faults-"))  # outside pytest's 0700 tree: PostgreSQL's own user reads it
    disks: dict[str, SmallDisk] = {}
    cluster: NatsCluster | None = None
    stack: ClusterStack | None = None
    pg: EmbeddedPostgres | None = None
    try:
        pg_dir = root / "pg"
        if small_disks:
            disks["pg"] = SmallDisk(root / "images" / "pg.img", root / "pgdisk", PG_DISK_MB).mount()
            pg_dir = root / "pgdisk" / "data"  # not the mount's root: it holds lost+found
        pg = EmbeddedPostgres(pg_dir, port=free_port(), fast=True).start()
        from zcbot_core.db.migrate import upgrade

        name = f"zcbot_faults_{secrets.token_hex(3)}"
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        db_url = pg.url_for(name)
        upgrade(db_url)
        cluster = NatsCluster(root / "nats", NatsCredentials.generate(), Topology(f"f{secrets.token_hex(3)}"),
                              own_groups=True)
        if small_disks:
            store = cluster.node(FULL_DISK_NODE).data_dir / "nats"  # EmbeddedNats' store dir (-sd)
            disks["nats"] = SmallDisk(root / "images" / "nats.img", store, NATS_DISK_MB).mount()
        cluster.start()
        stack = ClusterStack(root / "stack", cluster, db_url)
        stack.start(gateways=2, runners=2)
        yield FaultEnv(stack, pg, db_url, disks)
    finally:
        if stack is not None:
            stack.stop()
        if cluster is not None:
            cluster.stop()
        if pg is not None:
            pg.stop()
        for disk in disks.values():
            disk.close()
        left = [str(d.mountpoint) for d in disks.values() if d.is_mounted()]
        if os.environ.get("ZCBOT_TEST_KEEP"):
            print(f"fault suite directory kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
        assert not left, f"small disks left mounted: {left}"


@pytest.fixture
async def nemesis(fault_env: FaultEnv, request: pytest.FixtureRequest) -> AsyncIterator[Nemesis]:
    """The test's nemesis on a healthy cluster; whatever fault it left in force is undone afterwards."""
    before = _nft_tables()
    if not fault_env.pg.running:
        fault_env.pg.start()
    for node in fault_env.cluster.nodes:
        if not node.running:
            fault_env.cluster.restart(node.name)
    await _wait_leaders(fault_env.cluster)
    nem = Nemesis(fault_env.cluster, request.node.name.split("[")[0].removeprefix("test_"))
    try:
        yield nem
    finally:
        nem.close()
        left = {t for t in _nft_tables() - before if " zcf_" in t}  # ours only: other tests may add theirs
        assert not left, f"nftables tables left behind: {left}"


async def _wait_leaders(cluster: NatsCluster, timeout: float = 30.0) -> None:
    """Every stream of the topology has a leader (a previous scenario's election is over)."""
    nc = await cluster.admin()
    try:
        js = nc.jetstream()
        async with asyncio.timeout(timeout):
            for stream in (cluster.topo.runs_stream, cluster.topo.events_stream):
                while not await stream_leader(js, stream):
                    await asyncio.sleep(0.2)
    finally:
        await nc.close()
