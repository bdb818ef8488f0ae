"""NATS over TLS (issue 22): a CA made here, a server that requires TLS, services that verify it with
`ZCBOT_NATS_CA`; clients that do not trust the CA or do not speak TLS are refused."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from nats.errors import Error as NatsError

from tests.helpers.bus_setup import declare_topology
from tests.helpers.executor_stack import ExecutorProcess
from tests.helpers.tls import make_ca_and_server_cert
from zcbot_core.bus import Topology
from zcbot_core.bus.topology import connect
from zcbot_core.tools.executor_client import probe_host
from zcbot_devstack.embedded import EmbeddedNats
from zcbot_devstack.embedded.nats_auth import NatsCredentials


@dataclass
class TlsNats:
    url: str
    ca: Path
    topo: Topology
    creds: NatsCredentials
    root: Path


@pytest.fixture(scope="module")
def tls_nats() -> Iterator[TlsNats]:
    root = Path(tempfile.mkdtemp(prefix="zcbot-test-natstls-"))
    ca, cert, key = make_ca_and_server_cert(root)
    topo = Topology(f"s{secrets.token_hex(3)}")
    creds = NatsCredentials.generate()
    config = creds.write_server_config(root / "auth.conf", topo, tls=(cert, key))
    server = EmbeddedNats(root / "nats", extra_args=["-c", str(config)]).start()
    try:
        declare_topology(server.url.replace("nats://", "tls://"), topo.prefix, creds, ca=ca)
        yield TlsNats(server.url.replace("nats://", "tls://"), ca, topo, creds, root)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


async def test_a_service_identity_connects_over_tls_with_the_ca(tls_nats: TlsNats) -> None:
    env = tls_nats.creds.service_env("gateway")
    nc = await connect(tls_nats.url, "tls-test", user=env["ZCBOT_NATS_USER"], password=env["ZCBOT_NATS_PASSWORD"],
                       ca_file=str(tls_nats.ca))
    try:
        assert nc.is_connected and nc.connected_url is not None
        await nc.publish(tls_nats.topo.run_subject("t1"), b"x")
        await nc.flush(timeout=5)
    finally:
        await nc.close()


async def test_clients_that_do_not_trust_the_ca_or_skip_tls_are_refused(tls_nats: TlsNats) -> None:
    env = tls_nats.creds.service_env("gateway")
    opts = {"user": env["ZCBOT_NATS_USER"], "password": env["ZCBOT_NATS_PASSWORD"], "connect_timeout": 3,
            "max_reconnect_attempts": 0, "allow_reconnect": False}
    other_ca, _, _ = make_ca_and_server_cert(tls_nats.root, common="another CA")
    for ctx in (ssl.create_default_context(cafile=str(other_ca)), ssl.create_default_context()):
        with pytest.raises((NatsError, ssl.SSLError, OSError)):
            await nats.connect(tls_nats.url, tls=ctx, **opts)
    # Plain text (nats-py would upgrade on its own, so speak the protocol by hand): the server says
    # TLS is required and answers a plain CONNECT with an error, never with PONG.
    host, port = tls_nats.url.removeprefix("tls://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        info = await asyncio.wait_for(reader.readline(), 5)
        assert b'"tls_required":true' in info.replace(b" ", b"")
        connect_line = json.dumps({"user": opts["user"], "pass": opts["password"], "verbose": False})
        writer.write(f"CONNECT {connect_line}\r\nPING\r\n".encode())
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(4096), 5)
        assert b"PONG" not in answer, answer
    finally:
        writer.close()


async def test_a_real_service_runs_over_tls(tls_nats: TlsNats) -> None:
    host = f"h{secrets.token_hex(3)}"
    executor = ExecutorProcess(tls_nats.url, tls_nats.topo, tls_nats.root, host,
                               {**tls_nats.creds.service_env("executor"), "ZCBOT_NATS_CA": str(tls_nats.ca)})
    env = tls_nats.creds.service_env("runner")
    nc = await connect(tls_nats.url, "tls-runner", user=env["ZCBOT_NATS_USER"],
                       password=env["ZCBOT_NATS_PASSWORD"], ca_file=str(tls_nats.ca))
    try:
        await executor.wait_ready(nc, timeout=60)  # the executor answers its probe: it connected over TLS
        assert await probe_host(nc, tls_nats.topo, host)
    finally:
        executor.terminate()
        await nc.close()
