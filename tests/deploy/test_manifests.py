"""deploy/k8s: renders, validates against the Kubernetes schemas, and says what it promises.
Over 400 lines on purpose: one promise per test, all about the same rendered deploy/k8s set.

Rendering uses the real kustomize (`kubectl kustomize`) where installed, else `kustomize_lite`;
where both exist they must agree exactly. Every core object is checked against the strict
OpenAPI schemas of the oldest and newest supported Kubernetes release and against the typed models
of the `kubernetes` client; the custom resources (KEDA, prometheus-operator) against hand-written
schemas. The rest are the operational promises of docs/operations.md.
"""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import pytest

import k8s_checks as kc
import kustomize_lite
from deploy_paths import K8S, NAMESPACE, OVERLAY

MIN_K8S = "1.30"  # appArmorProfile (executor) is a field from 1.30 on
ZCBOT_SERVICES = {"gateway": 8765, "runner": 8766, "executor": 8767, "scheduler": 8768, "channels": 8769}
DB_CLIENTS = {"gateway", "runner", "scheduler", "channels", "migrate"}
CORE_GROUPS = {"v1", "apps/v1", "batch/v1", "autoscaling/v2", "policy/v1", "networking.k8s.io/v1"}


def workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {kc.pod_labels(d)["app.kubernetes.io/component"]: d for d in docs if d["kind"] in kc.WORKLOAD_KINDS}


def container(doc: dict[str, Any]) -> dict[str, Any]:
    """The pod's one container; NATS also has its exporter sidecar `metrics`, and then the main one."""
    containers = kc.pod_spec(doc)["containers"]
    main = [c for c in containers if c["name"] != "metrics"] if doc["metadata"]["name"] == "nats" else containers
    assert len(main) == 1, doc["metadata"]["name"]
    return main[0]


def env_names(doc: dict[str, Any]) -> set[str]:
    return {e["name"] for e in container(doc).get("env") or []}


# ---- rendering ------------------------------------------------------------------------------
def test_overlay_renders_every_piece(rendered: tuple[list[dict[str, Any]], str]) -> None:
    docs, renderer = rendered
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    expected = {
        ("Namespace", "zcbot"), ("ConfigMap", "zcbot-config"), ("Secret", "zcbot-secrets"),
        ("Secret", "zcbot-model-keys"), ("Secret", "zcbot-postgres"), ("ServiceAccount", "zcbot"),
        ("StatefulSet", "nats"), ("Service", "nats"), ("Service", "nats-headless"),
        ("StatefulSet", "postgres"), ("Service", "postgres"), ("Job", "zcbot-migrate"), ("Job", "zcbot-bus-setup"),
        ("Deployment", "zcbot-gateway"), ("Service", "zcbot-gateway"), ("Deployment", "zcbot-runner"),
        ("DaemonSet", "zcbot-executor"), ("Deployment", "zcbot-scheduler"), ("Deployment", "zcbot-channels"),
        ("Ingress", "zcbot"), ("HorizontalPodAutoscaler", "zcbot-gateway"), ("ScaledObject", "zcbot-runner"),
        ("PodDisruptionBudget", "zcbot-gateway"), ("PodDisruptionBudget", "zcbot-runner"),
        ("NetworkPolicy", "zcbot-executor"), ("NetworkPolicy", "zcbot-postgres"), ("NetworkPolicy", "zcbot-nats"),
        ("PersistentVolumeClaim", "zcbot-users"), ("PodMonitor", "zcbot"), ("PrometheusRule", "zcbot"),
        ("Secret", "zcbot-nats"), ("ConfigMap", "nats-config"), ("PodDisruptionBudget", "nats"),
        ("PodMonitor", "nats"), ("PrometheusRule", "zcbot-nats"),
    }
    assert kinds == expected, f"rendered by {renderer}"
    assert len(docs) == len(kinds), "duplicate objects"
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, kc.ident(doc)
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "example", kc.ident(doc)


def test_lite_renderer_matches_kustomize(rendered: tuple[list[dict[str, Any]], str], variant: Path) -> None:
    command = kc.kustomize_command()
    if command is None:
        pytest.skip("no kubectl/kustomize on this machine: kustomize_lite is the only renderer")
    for directory in (K8S / "base", OVERLAY, variant):
        docs = rendered[0] if directory == OVERLAY and rendered[1] == " ".join(command) else None
        real = {kc.ident(d): d for d in docs or kc.render_with_tool(directory, command)}
        lite = {kc.ident(d): d for d in kustomize_lite.build(directory)}
        assert set(real) == set(lite), directory
        for key, doc in real.items():
            assert lite[key] == doc, f"{directory}: {key} differs between {' '.join(command)} and kustomize_lite"


def test_lite_renderer_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonAnnotations: {a: b}\n")
    with pytest.raises(kustomize_lite.Unsupported):
        kustomize_lite.build(tmp_path)


def test_external_postgres_component_and_gvisor_patch(variant: Path) -> None:
    docs, _ = kc.render(variant)
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("StatefulSet", "postgres") not in names
    assert ("Service", "postgres") not in names
    assert ("NetworkPolicy", "zcbot-postgres") not in names
    assert ("Deployment", "zcbot-gateway") in names
    executor = kc.by_kind(docs, "DaemonSet")["zcbot-executor"]
    assert kc.pod_spec(executor)["runtimeClassName"] == "gvisor"
    for doc in docs:
        if doc["kind"] in kc.WORKLOAD_KINDS or doc["apiVersion"] in CORE_GROUPS:
            assert not kc.schema_errors(doc, kc.schema_versions()[-1]), kc.ident(doc)


# ---- schemas --------------------------------------------------------------------------------
def core_docs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["apiVersion"] in CORE_GROUPS]


@pytest.mark.parametrize("version", [MIN_K8S, "latest"])
def test_core_objects_match_kubernetes_openapi_schema(docs: list[dict[str, Any]], version: str) -> None:
    version = kc.schema_versions()[-1] if version == "latest" else version
    failures = {kc.ident(d): errs for d in core_docs(docs) if (errs := kc.schema_errors(d, version))}
    assert not failures, f"Kubernetes {version}: {failures}"
    assert {d["apiVersion"] for d in docs} - CORE_GROUPS == {"keda.sh/v1alpha1", "monitoring.coreos.com/v1"}


def test_core_objects_match_kubernetes_client_models(docs: list[dict[str, Any]]) -> None:
    failures = {kc.ident(d): errs for d in core_docs(docs) if (errs := kc.model_errors(d))}
    assert not failures


def test_custom_resources_match_their_crd_schemas(docs: list[dict[str, Any]]) -> None:
    custom = [d for d in docs if d["apiVersion"] not in CORE_GROUPS]
    assert {d["kind"] for d in custom} == {"ScaledObject", "PodMonitor", "PrometheusRule"}
    failures = {kc.ident(d): errs for d in custom if (errs := kc.crd_errors(d))}
    assert not failures
    for doc in custom:  # metadata of custom resources is ordinary ObjectMeta
        meta = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}
        assert not kc.model_errors(meta), kc.ident(doc)


def _mutations(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    gateway = copy.deepcopy(kc.by_kind(docs, "Deployment")["zcbot-gateway"])
    unknown = copy.deepcopy(gateway)
    container(unknown)["livenessProbes"] = container(unknown).pop("livenessProbe")
    missing = copy.deepcopy(gateway)
    del container(missing)["name"]
    wrong_type = copy.deepcopy(gateway)
    container(wrong_type)["ports"][0]["containerPort"] = "8765"
    snake = copy.deepcopy(gateway)
    container(snake)["env_from"] = container(snake).pop("envFrom")
    return [("unknown field", unknown), ("missing required field", missing), ("wrong type", wrong_type),
            ("python attribute name instead of JSON key", snake)]


@pytest.mark.parametrize("check", ["schema", "model"])
def test_validators_reject_broken_objects(docs: list[dict[str, Any]], check: str) -> None:
    for what, doc in _mutations(docs):
        errors = kc.schema_errors(doc, MIN_K8S) if check == "schema" else kc.model_errors(doc)
        assert errors, f"{check} check accepted a Deployment with a {what}"


def test_crd_checks_reject_broken_objects(docs: list[dict[str, Any]]) -> None:
    scaled = copy.deepcopy(kc.by_kind(docs, "ScaledObject")["zcbot-runner"])
    del scaled["spec"]["triggers"][0]["metadata"]["consumer"]
    assert kc.crd_errors(scaled)
    scaled = copy.deepcopy(kc.by_kind(docs, "ScaledObject")["zcbot-runner"])
    scaled["spec"]["triggers"][0]["metadata"]["lagThreshold"] = 10  # KEDA metadata values are strings
    assert kc.crd_errors(scaled)
    scaled = copy.deepcopy(kc.by_kind(docs, "ScaledObject")["zcbot-runner"])
    scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["window"] = 1
    assert kc.crd_errors(scaled)
    rule = copy.deepcopy(kc.by_kind(docs, "PrometheusRule")["zcbot"])
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    assert kc.crd_errors(rule)
    rule = copy.deepcopy(kc.by_kind(docs, "PrometheusRule")["zcbot"])
    rule["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    assert kc.crd_errors(rule)
    monitor = copy.deepcopy(kc.by_kind(docs, "PodMonitor")["zcbot"])
    monitor["spec"]["podMetricsEndpoints"][0]["targetPort"] = 8765
    assert kc.crd_errors(monitor)


# ---- workloads ------------------------------------------------------------------------------
def test_deployments_have_probes_resources_and_run_as_non_root(docs: list[dict[str, Any]]) -> None:
    deployments = kc.by_kind(docs, "Deployment")
    assert set(deployments) == {"zcbot-gateway", "zcbot-runner", "zcbot-scheduler", "zcbot-channels"}
    for name, doc in deployments.items():
        spec, c = kc.pod_spec(doc), container(doc)
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", name
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", name
        assert c["livenessProbe"]["httpGet"]["port"] == c["readinessProbe"]["httpGet"]["port"] == "http", name
        for key in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c["resources"][key]), (name, key)
        pod_sc, c_sc = spec["securityContext"], c["securityContext"]
        assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] == 10001, name
        assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault", name
        assert c_sc["allowPrivilegeEscalation"] is False, name
        assert c_sc["readOnlyRootFilesystem"] is True, name
        assert c_sc["capabilities"]["drop"] == ["ALL"], name
        assert "runAsUser" not in c_sc or c_sc["runAsUser"] != 0, name
        assert spec["automountServiceAccountToken"] is False, name


def test_every_zcbot_service_listens_where_its_settings_say(docs: list[dict[str, Any]]) -> None:
    from zcbot_core.platform.config import Settings

    defaults = Settings.model_fields
    port_field = {"gateway": "zcbot_http_port", "runner": "zcbot_runner_port", "executor": "zcbot_executor_port",
                  "scheduler": "zcbot_scheduler_port", "channels": "zcbot_channels_port"}
    config = kc.by_kind(docs, "ConfigMap")["zcbot-config"]["data"]
    loads = workloads(docs)
    for service, port in ZCBOT_SERVICES.items():
        field = port_field[service]
        assert defaults[field].default == port
        assert config[defaults[field].alias] == str(port)
        c = container(loads[service])
        assert c["args"] == [service]
        assert c["ports"] == [{"name": "http", "containerPort": port}]
        assert c["startupProbe"]["httpGet"]["path"] == "/healthz"
        assert c["resources"]["limits"] and c["resources"]["requests"]
    assert config["ZCBOT_HTTP_HOST"] == "0.0.0.0"


def test_images_come_from_the_overlay(docs: list[dict[str, Any]]) -> None:
    for component, doc in workloads(docs).items():
        image = container(doc)["image"]
        if component in ("nats", "postgres"):
            assert image in ("nats:2.10-alpine", "postgres:16-alpine")
        else:
            assert image == "registry.example.com/zcbot:0.1.0", component


def test_env_vars_are_known_settings(docs: list[dict[str, Any]]) -> None:
    """Every ZCBOT_* name we set is read by zcbot (a typo would be silently ignored)."""
    from zcbot_core.platform.settings_doc import SETTINGS_CLASSES, load_class

    # every service's settings class (the shared fields and each service's own knobs)
    known = {f.alias for _, ref in SETTINGS_CLASSES for f in load_class(ref).model_fields.values() if f.alias}
    config = kc.by_kind(docs, "ConfigMap")["zcbot-config"]["data"]
    names = set(config) | {n for d in workloads(docs).values() for n in env_names(d)}
    unknown = {n for n in names if n.startswith("ZCBOT_") and n not in known}
    assert not unknown


def test_secret_and_config_references_resolve(docs: list[dict[str, Any]]) -> None:
    secrets = {name: set(doc.get("data") or {}) for name, doc in kc.by_kind(docs, "Secret").items()}
    configmaps = set(kc.by_kind(docs, "ConfigMap"))
    assert secrets["zcbot-secrets"] == {"JWT_SECRET", "PLATFORM_KEY", "ZCBOT_CHANNEL_SECRET_KEY", "ZCBOT_DB_URL",
                                        "ZCBOT_RUN_GRANT_KEY"}
    assert secrets["zcbot-postgres"] == {"POSTGRES_PASSWORD"}
    assert {"DEEPSEEK_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"} <= secrets["zcbot-model-keys"]
    for component, doc in workloads(docs).items():
        c = container(doc)
        for env in c.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                assert ref["key"] in secrets[ref["name"]], (component, env["name"])
        for source in c.get("envFrom") or []:
            if "configMapRef" in source:
                assert source["configMapRef"]["name"] in configmaps
            if "secretRef" in source:
                assert source["secretRef"]["name"] in secrets
    # least privilege: model keys reach runners only, the database URL never reaches executors
    for component, doc in workloads(docs).items():
        sources = [s.get("secretRef", {}).get("name") for s in container(doc).get("envFrom") or []]
        assert ("zcbot-model-keys" in sources) == (component == "runner"), component


def test_services_select_pods_and_name_their_ports(docs: list[dict[str, Any]]) -> None:
    loads = list(workloads(docs).values())
    for name, svc in kc.by_kind(docs, "Service").items():
        targets = [d for d in loads if kc.selector_matches({"matchLabels": svc["spec"]["selector"]}, kc.pod_labels(d))]
        assert len(targets) == 1, name
        port_names = {p["name"] for c in kc.pod_spec(targets[0])["containers"] for p in c["ports"]}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in port_names, (name, port)
    assert kc.by_kind(docs, "Service")["nats-headless"]["spec"]["clusterIP"] == "None"
    assert kc.by_kind(docs, "StatefulSet")["nats"]["spec"]["serviceName"] == "nats-headless"


def test_nats_runs_jetstream_on_a_persistent_volume(docs: list[dict[str, Any]]) -> None:
    nats = kc.by_kind(docs, "StatefulSet")["nats"]
    c = container(nats)
    # the cluster and JetStream (store /data); users and permissions included (test_nats_cluster.py)
    assert c["args"] == ["-c", "/etc/nats/nats-server.conf"]
    assert {"name": "data", "mountPath": "/data"} in c["volumeMounts"]
    claim = nats["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data" and claim["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_postgres_in_cluster_by_default(docs: list[dict[str, Any]]) -> None:
    pg = kc.by_kind(docs, "StatefulSet")["postgres"]
    c = container(pg)
    assert c["image"].startswith("postgres:16")
    assert c["readinessProbe"]["exec"]["command"][0] == "pg_isready"
    url = base64.b64decode(kc.by_kind(docs, "Secret")["zcbot-secrets"]["data"]["ZCBOT_DB_URL"]).decode()
    assert url.startswith("postgresql://zcbot:") and url.endswith("@postgres:5432/zcbot")


def test_migration_job_runs_db_upgrade(docs: list[dict[str, Any]]) -> None:
    job = kc.by_kind(docs, "Job")["zcbot-migrate"]
    c = container(job)
    assert c["args"] == ["db", "upgrade"]
    assert {e["name"] for e in c["env"]} >= {"ZCBOT_DB_URL"}
    assert kc.pod_spec(job)["restartPolicy"] == "Never"
    assert kc.pod_spec(job)["securityContext"]["runAsNonRoot"] is True


def test_bus_setup_job_declares_the_topology_with_the_setup_identity(docs: list[dict[str, Any]]) -> None:
    """Issue 36: the services' identities may not create or change a stream or bucket; this Job does."""
    job = kc.by_kind(docs, "Job")["zcbot-bus-setup"]
    c = container(job)
    assert c["args"] == ["bus", "setup"]
    env = {e["name"]: e for e in c["env"]}
    assert env["ZCBOT_NATS_USER"]["value"] == "setup"
    assert env["ZCBOT_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "zcbot-nats", "key": "setup"}
    refs = {(r["name"], r["key"]) for e in c["env"] if (r := (e.get("valueFrom") or {}).get("secretKeyRef"))}
    assert refs == {("zcbot-nats", "setup")}  # no other secret: it only talks to NATS
    assert kc.pod_spec(job)["restartPolicy"] == "Never"
    assert kc.pod_spec(job)["securityContext"]["runAsNonRoot"] is True


def test_executors_run_only_on_labelled_sandbox_nodes(docs: list[dict[str, Any]]) -> None:
    assert "zcbot-executor" not in kc.by_kind(docs, "Deployment")
    executor = kc.by_kind(docs, "DaemonSet")["zcbot-executor"]
    spec, c = kc.pod_spec(executor), container(executor)
    assert spec["nodeSelector"] == {"zcbot.io/sandbox": "true"}
    assert {"key": "zcbot.io/sandbox", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in spec["tolerations"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    host = next(e for e in c["env"] if e["name"] == "ZCBOT_EXECUTOR_HOST")
    assert host["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # the privileges bwrap needs, and nothing beyond them (docs/operations.md "Sandbox nodes")
    sc = c["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"]
    # measured (docs/security.md "Kubernetes executor"): without any one of these the bwrap tests fail
    assert set(sc["capabilities"]["add"]) == {"CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETUID", "SETGID",
                                              "SYS_ADMIN", "NET_ADMIN"}
    # no shared process namespace: tini (PID 1) reaps orphaned sandbox processes
    assert not spec.get("shareProcessNamespace") and c["command"][:2] == ["tini", "--"]
    # no secret at all: the executor never signs or checks a token nor opens the database
    # secrets: its own NATS password and the run-grant key it verifies calls with, nothing else
    refs = {(r["name"], r["key"]) for e in c["env"] if (r := (e.get("valueFrom") or {}).get("secretKeyRef"))}
    assert refs == {("zcbot-nats", "executor"), ("zcbot-secrets", "ZCBOT_RUN_GRANT_KEY")}
    assert not any("secretRef" in source for source in c.get("envFrom") or [])
    assert not {"JWT_SECRET", "PLATFORM_KEY", "ZCBOT_CHANNEL_SECRET_KEY"} & {e["name"] for e in c["env"]}
    assert "privileged" not in sc and not spec.get("hostNetwork") and not spec.get("hostPID")
    assert sc["readOnlyRootFilesystem"] is True
    assert not any(v.get("hostPath") for v in spec["volumes"])
    # no database credentials on sandbox hosts
    db = next(e for e in c["env"] if e["name"] == "ZCBOT_DB_URL")
    assert "valueFrom" not in db and ".invalid/" in db["value"]
    # other workloads stay off the sandbox nodes' taint
    for component, doc in workloads(docs).items():
        if component != "executor":
            assert not kc.pod_spec(doc).get("tolerations"), component


def test_user_roots_are_one_rwx_volume(docs: list[dict[str, Any]]) -> None:
    pvc = kc.by_kind(docs, "PersistentVolumeClaim")["zcbot-users"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"]
    config = kc.by_kind(docs, "ConfigMap")["zcbot-config"]["data"]
    assert config["ZCBOT_STORAGE_ROOT"] == "/data/users"
    mounted = set()
    for component, doc in workloads(docs).items():
        claims = {v["name"] for v in kc.pod_spec(doc).get("volumes") or []
                  if v.get("persistentVolumeClaim", {}).get("claimName") == "zcbot-users"}
        mounts = [m for m in container(doc).get("volumeMounts") or [] if m["name"] in claims]
        if mounts:
            assert [m["mountPath"] for m in mounts] == ["/data/users"], component
            mounted.add(component)
    assert mounted == {"gateway", "runner", "executor", "channels"}


def test_grace_periods_and_rollouts(docs: list[dict[str, Any]]) -> None:
    deployments = kc.by_kind(docs, "Deployment")
    assert kc.pod_spec(deployments["zcbot-runner"])["terminationGracePeriodSeconds"] == 60
    assert kc.pod_spec(deployments["zcbot-gateway"])["terminationGracePeriodSeconds"] == 30
    for name, doc in deployments.items():
        assert doc["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0, name
    # replicas of autoscaled Deployments belong to the autoscalers
    assert "replicas" not in deployments["zcbot-gateway"]["spec"]
    assert "replicas" not in deployments["zcbot-runner"]["spec"]


def test_pod_disruption_budgets(docs: list[dict[str, Any]]) -> None:
    pdbs = kc.by_kind(docs, "PodDisruptionBudget")
    loads = workloads(docs)
    for component in ("gateway", "runner"):
        pdb = pdbs[f"zcbot-{component}"]
        assert kc.selector_matches(pdb["spec"]["selector"], kc.pod_labels(loads[component]))
        others = [c for c, d in loads.items()
                  if c != component and kc.selector_matches(pdb["spec"]["selector"], kc.pod_labels(d))]
        assert not others
        assert pdb["spec"]["maxUnavailable"] == 1


def test_gateway_hpa_scales_on_cpu(docs: list[dict[str, Any]]) -> None:
    hpa = kc.by_kind(docs, "HorizontalPodAutoscaler")["zcbot-gateway"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "zcbot-gateway"}
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    assert hpa["spec"]["minReplicas"] >= 2


def test_keda_scales_runners_on_the_runs_consumer(docs: list[dict[str, Any]]) -> None:
    from zcbot_core.bus import Topology

    config = kc.by_kind(docs, "ConfigMap")["zcbot-config"]["data"]
    topo = Topology(config["ZCBOT_BUS_PREFIX"])
    scaled = kc.by_kind(docs, "ScaledObject")["zcbot-runner"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == "zcbot-runner"
    assert scaled["spec"]["minReplicaCount"] >= 2
    (trigger,) = scaled["spec"]["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "nats-jetstream"
    assert meta["stream"] == topo.runs_stream == "ZCBOT_RUNS"
    assert meta["consumer"] == topo.runners_consumer == "runners"
    assert meta["account"] == "$G"
    # KEDA's lag is pending + ack-pending runs; per runner it must stay within what a runner drives
    assert 0 < int(meta["lagThreshold"]) < int(config["ZCBOT_RUNNER_CONCURRENCY"])
    # clustered: KEDA asks the consumer's leader as <server_name>.<endpoint host>, so the endpoint is the
    # headless Service, whose pod names are the server names (test_nats_cluster.py)
    nats_service = kc.by_kind(docs, "Service")["nats-headless"]
    monitor = next(p["port"] for p in nats_service["spec"]["ports"] if p["name"] == "monitor")
    assert meta["natsServerMonitoringEndpoint"] == f"nats-headless.{NAMESPACE}.svc.cluster.local:{monitor}"


def test_ingress_is_sse_friendly_and_keeps_internals_private(docs: list[dict[str, Any]]) -> None:
    ingress = kc.by_kind(docs, "Ingress")["zcbot"]
    notes = ingress["metadata"]["annotations"]
    assert notes["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert int(notes["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600
    assert int(notes["nginx.ingress.kubernetes.io/proxy-send-timeout"]) >= 3600
    assert notes["nginx.ingress.kubernetes.io/proxy-http-version"] == "1.1"
    paths = {p["path"]: p for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]}
    assert paths["/v1"]["pathType"] == "Prefix"
    for path in paths.values():
        assert path["backend"]["service"] == {"name": "zcbot-gateway", "port": {"name": "http"}}
    exposed = [p for p, item in paths.items()
               if item["pathType"] == "Prefix" and ("/metrics".startswith(p) or "/readyz".startswith(p))]
    assert not exposed, "/metrics and /readyz must not be routed from outside"
    assert ingress["spec"]["tls"]


def test_network_policy_keeps_executors_away_from_postgres_and_the_api(docs: list[dict[str, Any]]) -> None:
    policies = list(kc.by_kind(docs, "NetworkPolicy").values())
    pods = kc.workload_peers(docs)
    executor, postgres, nats, gateway = pods["executor"], pods["postgres"], pods["nats"], pods["gateway"]
    dns = kc.Peer("kube-system", {"k8s-app": "kube-dns"})
    internet = kc.Peer("elsewhere", {})
    # executor egress: NATS and DNS only
    assert kc.traffic_allowed(policies, executor, nats, 4222)
    assert kc.traffic_allowed(policies, executor, dns, 53, "UDP")
    assert kc.traffic_allowed(policies, executor, dns, 53, "TCP")
    assert not kc.traffic_allowed(policies, executor, postgres, 5432)
    assert not kc.traffic_allowed(policies, executor, gateway, 8765)
    assert not kc.traffic_allowed(policies, executor, nats, 8222)
    assert not kc.traffic_allowed(policies, executor, internet, 443)
    for other in ("runner", "scheduler", "channels"):
        assert not kc.traffic_allowed(policies, executor, pods[other], ZCBOT_SERVICES[other])
    # postgres ingress: the services that use the database, and nobody else
    for component, peer in pods.items():
        if component == "postgres":
            continue
        assert kc.traffic_allowed(policies, peer, postgres, 5432) == (component in DB_CLIENTS), component
    assert not kc.traffic_allowed(policies, internet, postgres, 5432)
    # every zcbot service reaches NATS; KEDA reads its monitoring port
    for component in ZCBOT_SERVICES:
        assert kc.traffic_allowed(policies, pods[component], nats, 4222), component
    assert kc.traffic_allowed(policies, kc.Peer("keda", {"app": "keda-operator"}), nats, 8222)
    assert not kc.traffic_allowed(policies, internet, nats, 4222)
    # Prometheus may scrape the executor; nothing else may open it
    assert kc.traffic_allowed(policies, kc.Peer("monitoring", {"app": "prometheus"}), executor, 8767)
    assert not kc.traffic_allowed(policies, pods["runner"], executor, 8767)


def test_network_policy_evaluator_sees_a_hole(docs: list[dict[str, Any]]) -> None:
    """The evaluator is not vacuous: an egress rule without peers lets the executor reach PostgreSQL."""
    policies = copy.deepcopy(list(kc.by_kind(docs, "NetworkPolicy").values()))
    executor_policy = next(p for p in policies if p["metadata"]["name"] == "zcbot-executor")
    executor_policy["spec"]["egress"].append({"ports": [{"protocol": "TCP", "port": 5432}]})
    pods = kc.workload_peers(docs)
    assert kc.traffic_allowed(policies, pods["executor"], pods["postgres"], 5432) is False  # postgres ingress still denies
    postgres_policy = next(p for p in policies if p["metadata"]["name"] == "zcbot-postgres")
    postgres_policy["spec"]["ingress"].append({})
    assert kc.traffic_allowed(policies, pods["executor"], pods["postgres"], 5432) is True


def test_pod_monitor_scrapes_every_zcbot_service(docs: list[dict[str, Any]]) -> None:
    monitor = kc.by_kind(docs, "PodMonitor")["zcbot"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["path"] == "/metrics"
    scraped = {c for c, d in workloads(docs).items()
               if kc.selector_matches(monitor["spec"]["selector"], kc.pod_labels(d))
               and any(p.get("name") == endpoint["port"] for p in container(d).get("ports") or [])}
    assert scraped == set(ZCBOT_SERVICES)


def test_namespace_admits_the_executor(docs: list[dict[str, Any]]) -> None:
    namespace = kc.by_kind(docs, "Namespace")[NAMESPACE]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
