"""NATS identities in deploy/ (issue 22): the generated server configuration, each service's own user
and password Secret in the manifests and in docker-compose.yml, the run-grant key everywhere but in
the runner, and the configuration as the real nats-server reads it."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import Error as NatsError

import compose_checks as cc
import k8s_checks as kc
from test_compose import ENV as COMPOSE_ENV
from test_manifests import container, workloads
from zcbot_core.bus.access import DEPLOY_CONFIG, IDENTITIES, SERVICES, deploy_config, password_env
from zcbot_devstack.embedded import free_port, nats_server_binary


def test_committed_config_is_the_generated_one(repo: Path) -> None:
    assert (repo / DEPLOY_CONFIG).read_text(encoding="utf-8") == deploy_config(), \
        "deploy/k8s/base/nats-auth.conf is stale: run `python -m zcbot_core.bus.access`"


def _secret_ref(env: dict[str, Any]) -> tuple[str, str] | None:
    ref = (env.get("valueFrom") or {}).get("secretKeyRef")
    return (ref["name"], ref["key"]) if ref else None


def test_manifests_give_each_service_its_own_identity(docs: list[dict[str, Any]]) -> None:
    pods = workloads(docs)
    for component in SERVICES:
        env = {e["name"]: e for e in container(pods[component]).get("env") or []}
        assert env["ZCBOT_NATS_USER"]["value"] == component, component
        assert _secret_ref(env["ZCBOT_NATS_PASSWORD"]) == ("zcbot-nats", component), component
        grant = env.get("ZCBOT_RUN_GRANT_KEY")
        if component == "runner":
            assert grant is None  # the runner only copies grants
        else:
            assert grant is not None and _secret_ref(grant) == ("zcbot-secrets", "ZCBOT_RUN_GRANT_KEY"), component
    nats_pod = kc.by_kind(docs, "StatefulSet")["nats"]
    env = {e["name"]: e for e in container(nats_pod)["env"]}
    for service in IDENTITIES:
        assert _secret_ref(env[password_env(service)]) == ("zcbot-nats", service)
    assert {"name": "config", "mountPath": "/etc/nats", "readOnly": True} in container(nats_pod)["volumeMounts"]
    volume = next(v for v in nats_pod["spec"]["template"]["spec"]["volumes"] if v["name"] == "config")
    config = kc.by_kind(docs, "ConfigMap")[volume["configMap"]["name"]]
    assert config["data"]["nats-auth.conf"] == deploy_config()
    assert set(kc.by_kind(docs, "Secret")["zcbot-nats"]["data"]) == set(IDENTITIES)


def test_compose_gives_each_service_its_own_identity(repo: Path) -> None:
    services = cc.load(repo / "docker-compose.yml", COMPOSE_ENV)["services"]
    for service in SERVICES:
        env = cc.environment(services[service])
        assert env["ZCBOT_NATS_USER"] == service
        assert env["ZCBOT_NATS_PASSWORD"] == COMPOSE_ENV[f"ZCBOT_NATS_PASSWORD_{service.upper()}"]
        assert ("ZCBOT_RUN_GRANT_KEY" in env) == (service != "runner"), service
    nats_env = cc.environment(services["nats"])
    for service in IDENTITIES:
        assert nats_env[password_env(service)] == COMPOSE_ENV[f"ZCBOT_NATS_PASSWORD_{service.upper()}"]
    assert services["nats"]["command"][:2] == ["-c", "/etc/nats/nats-auth.conf"]
    assert f"./{DEPLOY_CONFIG}:/etc/nats/nats-auth.conf:ro" in services["nats"]["volumes"]


@pytest.fixture(scope="module")
def deploy_nats(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real nats-server with deploy/'s configuration and passwords in its environment."""
    passwords = {s: secrets.token_hex(16) for s in IDENTITIES}
    data = tmp_path_factory.mktemp("deploy-nats")
    port = free_port()
    env = {password_env(s): p for s, p in passwords.items()}
    log = (data / "nats.log").open("wb")
    proc = subprocess.Popen([str(nats_server_binary()), "-c", str(repo / DEPLOY_CONFIG), "-a", "127.0.0.1",
                             "-p", str(port), "-js", "-sd", str(data / "js")], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    while "Server is ready" not in (data / "nats.log").read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, (data / "nats.log").read_text()
        time.sleep(0.05)
    yield f"nats://127.0.0.1:{port}", passwords
    proc.terminate()
    proc.wait(10)
    log.close()
    shutil.rmtree(data, ignore_errors=True)


async def test_the_server_reads_the_deploy_config(deploy_nats: Any) -> None:
    url, passwords = deploy_nats
    opts = {"connect_timeout": 3, "max_reconnect_attempts": 0, "allow_reconnect": False}
    with pytest.raises(NatsError):
        await nats.connect(url, **opts)  # anonymous
    with pytest.raises(NatsError):
        await nats.connect(url, user="gateway", password=passwords["runner"], **opts)
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    nc = await nats.connect(url, user="gateway", password=passwords["gateway"], error_cb=on_error,
                            inbox_prefix="_INBOX_gateway", **opts)
    try:
        await nc.publish("zcbot.exec.any.call", b"x")  # not the gateway's to call
        await nc.publish("zcbot.runs.t1", b"x")  # the gateway's
        await nc.flush()
        for _ in range(50):
            if errors:
                break
            await asyncio.sleep(0.02)
        assert len(errors) == 1 and "zcbot.exec.any.call" in errors[0], errors
    finally:
        await nc.close()
