"""deploy/k8s for more than one machine (issue 23): NATS as a 3-node JetStream cluster, the bus names
following ZCBOT_BUS_PREFIX (KEDA), PostgreSQL with CloudNativePG and PgBouncer, connection counts
that fit `max_connections`, and the alerts on JetStream and PostgreSQL.

The NATS configuration is read by the real nats-server (`-t`); the alerts by promtool where it exists.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import k8s_checks as kc
import kustomize_lite
from deploy_paths import K8S, REPO, variant_dir
from test_manifests import CORE_GROUPS, container, workloads
from zcbot_core.bus.access import IDENTITIES, password_env
from zcbot_core.bus.deploy_names import BUS_NAMES, bus_names
from zcbot_core.bus.deploy_names import main as write_bus_names
from zcbot_devstack.embedded import nats_server_binary

HERE = Path(__file__).resolve().parent
NATS_CONF = K8S / "base" / "nats-server.conf"
DB_CLIENTS = ("gateway", "runner", "scheduler", "channels", "migrate")
SUPERUSER_RESERVED = 3  # PostgreSQL's default superuser_reserved_connections


@pytest.fixture(scope="module")
def cnpg(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The example overlay with components/cloudnative-pg, rendered."""
    return kc.render(variant_dir(tmp_path_factory.mktemp("cnpg"), components=["components/cloudnative-pg"]))[0]


def nats_addresses(docs: list[dict[str, Any]], port_name: str) -> list[str]:
    """Each NATS pod's stable address on a named port (pod.headless-service:port)."""
    sts = kc.by_kind(docs, "StatefulSet")["nats"]
    port = next(p["containerPort"] for p in container(sts)["ports"] if p["name"] == port_name)
    return [f"nats://{sts['metadata']['name']}-{i}.{sts['spec']['serviceName']}:{port}"
            for i in range(sts["spec"]["replicas"])]


def conf_value(text: str, key: str) -> str:
    m = re.search(rf"^\s*{key}:\s*\"?([^\"\n]+)\"?\s*$", text, re.M)
    assert m, key
    return m.group(1).strip()


# ---- NATS ------------------------------------------------------------------------------------
def test_nats_is_a_three_node_cluster_spread_over_hosts(docs: list[dict[str, Any]]) -> None:
    sts = kc.by_kind(docs, "StatefulSet")["nats"]
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["podManagementPolicy"] == "Parallel"  # a node waits for its peers' quorum
    labels = kc.pod_labels(sts)
    (term,) = kc.pod_spec(sts)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname" and kc.selector_matches(term["labelSelector"], labels)
    pdb = kc.by_kind(docs, "PodDisruptionBudget")["nats"]
    assert pdb["spec"]["maxUnavailable"] == 1 and kc.selector_matches(pdb["spec"]["selector"], labels)
    others = [c for c, d in workloads(docs).items() if c != "nats" and kc.selector_matches(pdb["spec"]["selector"], kc.pod_labels(d))]
    assert not others
    c = container(sts)
    assert c["args"] == ["-c", "/etc/nats/nats-server.conf"]
    assert c["lifecycle"]["preStop"]["exec"]["command"] == ["nats-server", "--signal", "ldm=/var/run/nats/nats.pid"]
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # server_name: $POD_NAME
    volume = next(v for v in kc.pod_spec(sts)["volumes"] if v["name"] == "config")
    files = kc.by_kind(docs, "ConfigMap")[volume["configMap"]["name"]]["data"]
    assert set(files) == {"nats-server.conf", "nats-auth.conf"}
    assert files["nats-server.conf"] == NATS_CONF.read_text()
    assert sts["spec"]["serviceName"] == "nats-headless"
    assert kc.by_kind(docs, "Service")["nats-headless"]["spec"]["publishNotReadyAddresses"] is True


def test_nats_server_conf_routes_to_every_pod_and_syncs_before_the_ack(docs: list[dict[str, Any]]) -> None:
    text = NATS_CONF.read_text()
    assert re.search(r"^include \./nats-auth\.conf$", text, re.M)
    routes = re.search(r"routes:\s*\[(.*?)\]", text, re.S)
    assert routes and re.findall(r'"([^"]+)"', routes.group(1)) == nats_addresses(docs, "cluster")
    assert conf_value(text, "listen").endswith(":6222")
    assert conf_value(text, "server_name") == "$POD_NAME"
    assert conf_value(text, "sync_interval") == "always"  # docs/decisions.md (issue 23)
    sts = kc.by_kind(docs, "StatefulSet")["nats"]
    assert {"name": "data", "mountPath": conf_value(text, "store_dir")} in container(sts)["volumeMounts"]
    assert conf_value(text, "pid_file").startswith("/var/run/nats/")
    assert {"name": "run", "mountPath": "/var/run/nats"} in container(sts)["volumeMounts"]
    # JetStream stops at max_file_store, before the volume is full
    claim = sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    max_file_store = int(conf_value(text, "max_file_store").rstrip("G"))
    assert max_file_store < int(claim.rstrip("Gi"))
    # the streams' own byte limits fit in it (events + the two work queues), so JetStream's limit is never hit
    config = kc.by_kind(docs, "ConfigMap")["zcbot-config"]["data"]
    streams = int(config["ZCBOT_EVENTS_MAX_BYTES"]) + 2 * int(config["ZCBOT_QUEUES_MAX_BYTES"])
    assert 0 < streams < max_file_store * 10**9
    monitor = next(p["containerPort"] for p in container(sts)["ports"] if p["name"] == "monitor")
    assert int(conf_value(text, "http_port")) == monitor


def test_the_real_nats_server_reads_the_cluster_config(tmp_path: Path) -> None:
    for name in ("nats-server.conf", "nats-auth.conf"):
        shutil.copy(K8S / "base" / name, tmp_path / name)
    env = {"POD_NAME": "nats-0", **{password_env(s): "pw-" + s for s in IDENTITIES}}
    ok = subprocess.run([str(nats_server_binary()), "-c", str(tmp_path / "nats-server.conf"), "-t"],
                        env=env, capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    del env[password_env("runner")]  # a password the Secret does not give: the server refuses to start
    bad = subprocess.run([str(nats_server_binary()), "-c", str(tmp_path / "nats-server.conf"), "-t"],
                         env=env, capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0 and password_env("runner") in bad.stdout + bad.stderr


def test_services_get_every_node_and_three_replicas(docs: list[dict[str, Any]]) -> None:
    from zcbot_core.platform.config import Settings

    config = kc.by_kind(docs, "ConfigMap")["zcbot-config"]["data"]
    clients = nats_addresses(docs, "client")
    assert config["ZCBOT_NATS_URL"] == ",".join(clients)
    settings = Settings(ZCBOT_NATS_URL=config["ZCBOT_NATS_URL"], ZCBOT_JS_REPLICAS=config["ZCBOT_JS_REPLICAS"])
    assert settings.zcbot_js_replicas == kc.by_kind(docs, "StatefulSet")["nats"]["spec"]["replicas"] == 3
    # the exporter sidecar and its scrape
    sts = kc.by_kind(docs, "StatefulSet")["nats"]
    (sidecar,) = [c for c in kc.pod_spec(sts)["containers"] if c["name"] == "metrics"]
    assert "-jsz=all" in sidecar["args"] and sidecar["args"][-1] == "http://localhost:8222"
    monitor = kc.by_kind(docs, "PodMonitor")["nats"]
    assert kc.selector_matches(monitor["spec"]["selector"], kc.pod_labels(sts))
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in {p["name"] for p in sidecar["ports"]}


# ---- the bus prefix ------------------------------------------------------------------------------
def test_committed_bus_names_are_the_generated_ones() -> None:
    assert (REPO / BUS_NAMES).read_text() == bus_names(), \
        "deploy/k8s/base/bus.env is stale: run `python -m zcbot_core.bus.deploy_names`"


def test_keda_and_the_services_follow_the_bus_prefix(tmp_path: Path) -> None:
    shutil.copytree(REPO / "deploy", tmp_path / "deploy")
    write_bus_names(["--prefix", "acme", "--root", str(tmp_path)])
    overlay = tmp_path / "deploy" / "k8s" / "overlays" / "example"
    renders = [kustomize_lite.build(overlay)]
    command = kc.kustomize_command()
    if command is not None:
        renders.append(kc.render_with_tool(overlay, command))
    for docs in renders:
        assert kc.by_kind(docs, "ConfigMap")["zcbot-config"]["data"]["ZCBOT_BUS_PREFIX"] == "acme"
        meta = kc.by_kind(docs, "ScaledObject")["zcbot-runner"]["spec"]["triggers"][0]["metadata"]
        assert (meta["stream"], meta["consumer"]) == ("ACME_RUNS", "runners")
        assert '"acme.runs.*"' in kc.by_kind(docs, "ConfigMap")["nats-config"]["data"]["nats-auth.conf"]
        assert "zcbot-bus" not in kc.by_kind(docs, "ConfigMap")  # local to the build


# ---- PostgreSQL --------------------------------------------------------------------------------
def test_cloudnative_pg_component(cnpg: list[dict[str, Any]]) -> None:
    names = {(d["kind"], d["metadata"]["name"]) for d in cnpg}
    assert ("StatefulSet", "postgres") not in names and ("Service", "postgres") not in names
    cluster = kc.by_kind(cnpg, "Cluster")["zcbot-pg"]
    pooler = kc.by_kind(cnpg, "Pooler")["zcbot-pg-pooler-rw"]
    for doc in (cluster, pooler, kc.by_kind(cnpg, "PrometheusRule")["zcbot-postgres"]):
        assert not kc.crd_errors(doc), kc.ident(doc)
    assert cluster["spec"]["instances"] == 3 and cluster["spec"]["minSyncReplicas"] >= 1
    assert cluster["spec"]["affinity"]["podAntiAffinityType"] == "required"
    assert pooler["spec"]["cluster"]["name"] == "zcbot-pg" and pooler["spec"]["type"] == "rw"
    # transaction pooling is safe for zcbot: only transaction-scoped advisory locks, and PgBouncer keeps
    # psycopg's prepared statements
    assert pooler["spec"]["pgbouncer"]["poolMode"] == "transaction"
    assert int(pooler["spec"]["pgbouncer"]["parameters"]["max_prepared_statements"]) > 0
    sources = "\n".join(p.read_text() for root in ("services", "libs") for p in (REPO / root).rglob("*.py"))
    assert "pg_advisory_lock(" not in sources and "LISTEN " not in sources
    for doc in cnpg:
        if doc["apiVersion"] in CORE_GROUPS:
            assert not kc.schema_errors(doc, kc.schema_versions()[-1]), kc.ident(doc)
    broken = yaml.safe_load(yaml.safe_dump(cluster))
    broken["spec"]["instances"] = "3"
    assert kc.crd_errors(broken)


def _max_processes(docs: list[dict[str, Any]]) -> dict[str, int]:
    """Each database client's most pods at once: its autoscaler's maximum (else replicas) + one surge."""
    loads = workloads(docs)
    scalers = {d["spec"]["scaleTargetRef"]["name"]: d["spec"].get("maxReplicas") or d["spec"]["maxReplicaCount"]
               for d in docs if d["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")}
    out: dict[str, int] = {}
    for component in DB_CLIENTS:
        doc = loads[component]
        if doc["kind"] == "Job":
            out[component] = doc["spec"].get("parallelism", 1)
            continue
        most = scalers.get(doc["metadata"]["name"], doc["spec"].get("replicas", 1))
        surge = doc["spec"]["strategy"]["rollingUpdate"]["maxSurge"]
        out[component] = most + (math.ceil(most * int(surge[:-1]) / 100) if isinstance(surge, str) else surge)
    return out


def _per_process(docs: list[dict[str, Any]]) -> int:
    config = kc.by_kind(docs, "ConfigMap")["zcbot-config"]["data"]
    return int(config["ZCBOT_DB_POOL_SIZE"]) + int(config["ZCBOT_DB_MAX_OVERFLOW"])


def test_connections_fit_max_connections(docs: list[dict[str, Any]], cnpg: list[dict[str, Any]]) -> None:
    base_docs = kustomize_lite.build(K8S / "base")  # the autoscalers' maxima before the overlay lowers them
    for rendered in (base_docs, docs):
        loads = workloads(rendered)
        for component in DB_CLIENTS:  # no workload overrides the pool settings of the ConfigMap
            assert not {"ZCBOT_DB_POOL_SIZE", "ZCBOT_DB_MAX_OVERFLOW"} & {e["name"] for e in container(loads[component]).get("env") or []}
        clients = sum(_max_processes(rendered).values()) * _per_process(rendered)
        args = container(loads["postgres"])["args"]
        max_connections = int(next(a.split("=", 1)[1] for a in args if a.startswith("max_connections=")))
        assert clients + SUPERUSER_RESERVED <= max_connections, (clients, max_connections)
    # With the pooler: every client fits one pooler instance; the server side fits max_connections.
    pooler = kc.by_kind(cnpg, "Pooler")["zcbot-pg-pooler-rw"]["spec"]
    params = pooler["pgbouncer"]["parameters"]
    clients = sum(_max_processes(cnpg).values()) * _per_process(cnpg)
    assert clients <= int(params["max_client_conn"]), clients
    server = pooler["instances"] * int(params["default_pool_size"])
    operator_reserve = 20  # instance manager, metrics exporter, psql
    max_connections = int(kc.by_kind(cnpg, "Cluster")["zcbot-pg"]["spec"]["postgresql"]["parameters"]["max_connections"])
    assert server + SUPERUSER_RESERVED + operator_reserve <= max_connections, (server, max_connections)


# ---- alerts ------------------------------------------------------------------------------------
RULE_FILES = (K8S / "base" / "prometheus-rules-nats.yaml", K8S / "components" / "cloudnative-pg" / "prometheus-rules.yaml")


def _rules() -> list[dict[str, Any]]:
    return [r for f in RULE_FILES for g in yaml.safe_load(f.read_text())["spec"]["groups"] for r in g["rules"]]


def test_infrastructure_alerts_are_labelled_annotated_and_documented() -> None:
    docs = (REPO / "docs" / "operations.md").read_text()
    names = [r["alert"] for r in _rules()]
    assert len(names) == len(set(names)) and {"ZcbotJetStreamStreamLeaderless", "ZcbotJetStreamStorageHigh",
                                              "ZcbotRunQueueLagHigh", "ZcbotPostgresDown"} <= set(names)
    for rule in _rules():
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert re.search(rf"^#+ .*`?{rule['alert']}`?", docs, re.M), f"{rule['alert']} has no section in docs/operations.md"


def test_infrastructure_alerts_with_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus); the static checks above still ran")
    files = []
    for i, path in enumerate(RULE_FILES):
        out = tmp_path / f"rules-{i}.yaml"
        out.write_text(yaml.safe_dump({"groups": yaml.safe_load(path.read_text())["spec"]["groups"]}, sort_keys=False))
        files.append(str(out))
    checked = subprocess.run([promtool, "check", "rules", *files], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    spec = yaml.safe_load((HERE / "prometheus-rules-infra.test.yaml").read_text())
    spec["rule_files"] = files
    alerts = {r["alert"] for r in _rules()}
    fired = {c["alertname"] for t in spec["tests"] for c in t["alert_rule_test"] if c["exp_alerts"]}
    quiet = {c["alertname"] for c in spec["tests"][0]["alert_rule_test"] if not c["exp_alerts"]}
    assert fired == alerts and quiet == alerts, "each alert fires in a case and stays quiet on the healthy one"
    test_file = tmp_path / "infra.test.yaml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    tested = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
