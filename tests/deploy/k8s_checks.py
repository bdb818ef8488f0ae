"""Rendering and validating deploy/k8s for the tests.
Over 400 lines on purpose: the renderer and the checks that read its output, one concept (not a test module).

- `render(directory)`: `kubectl kustomize` or `kustomize build` when installed, else
  `kustomize_lite.build` (which test_manifests.py checks against the real tool where it exists).
- `schema_errors(doc, version)`: the official Kubernetes OpenAPI schemas of a given release, in
  their strict form (unknown fields fail), as packaged by `kubernetes-validate`.
- `model_errors(doc)`: the typed models of the `kubernetes` client (its OpenAPI models): unknown
  JSON keys, missing required fields and wrong scalar types fail.
- `crd_errors(doc)`: hand-written JSON schemas for the custom resources we ship (KEDA
  ScaledObject, prometheus-operator PodMonitor and PrometheusRule), limited to the fields we use
  and the fields their CRDs define around them; unknown fields fail.
- `traffic_allowed(...)`: NetworkPolicy semantics for pods of one namespace plus outside peers.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

import kustomize_lite
from cnpg_schemas import CNPG_SCHEMAS

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}


# ---- rendering ------------------------------------------------------------------------------
def kustomize_command() -> list[str] | None:
    """The real kustomize, if this machine has one."""
    if shutil.which("kubectl"):
        probe = subprocess.run(["kubectl", "kustomize", "--help"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return None


def render_with_tool(directory: Path, command: list[str]) -> list[dict[str, Any]]:
    out = subprocess.run([*command, str(directory)], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} {directory} failed:\n{out.stderr}")
    return [doc for doc in yaml.load_all(out.stdout, Loader=kustomize_lite.Loader) if doc]


def render(directory: Path) -> tuple[list[dict[str, Any]], str]:
    command = kustomize_command()
    if command:
        return render_with_tool(directory, command), " ".join(command)
    return kustomize_lite.build(directory), "kustomize_lite"


def ident(doc: dict[str, Any]) -> tuple[str, str, str, str | None]:
    return doc["apiVersion"], doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace")


def by_kind(docs: Iterable[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def pod_labels(doc: dict[str, Any]) -> dict[str, str]:
    return doc["spec"]["template"]["metadata"].get("labels") or {}


# ---- Kubernetes OpenAPI schemas (kubernetes-validate) ----------------------------------------
def schema_versions() -> list[str]:
    """Kubernetes releases whose schemas the installed kubernetes-validate ships."""
    import kubernetes_validate.utils as kvu

    return kvu.all_versions()


@functools.lru_cache(maxsize=8)
def _registry(schema_dir: str):  # noqa: ANN202 - referencing types are optional imports
    from referencing import Registry, Resource

    root = importlib_resources.files("kubernetes_validate") / "kubernetes-json-schema" / schema_dir
    defs = json.loads((root / "_definitions.json").read_text())
    return root, Resource.from_contents(defs) @ Registry()


def schema_errors(doc: dict[str, Any], version: str) -> list[str]:
    """Errors of `doc` against the strict schema of Kubernetes `version` (e.g. "1.30")."""
    import kubernetes_validate.utils as kvu
    from referencing import Resource

    available = [v for v in kvu.all_versions() if kvu.major_minor(v) <= version]
    if not available:
        raise ValueError(f"no schemas for Kubernetes {version}")
    schema_dir = f"v{available[-1]}-local-strict"
    root, registry = _registry(schema_dir)
    api_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", doc["apiVersion"])
    path = root / f"{doc['kind'].lower()}-{api_version}.json"
    if not path.is_file():
        raise LookupError(f"no schema for {doc['apiVersion']} {doc['kind']} in Kubernetes {version}")
    schema = json.loads(path.read_text())
    validator = jsonschema.Draft202012Validator(schema, registry=Resource.from_contents(schema) @ registry)
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(doc)]


# ---- typed models of the kubernetes client ---------------------------------------------------
def model_class(api_version: str, kind: str) -> Any:
    import kubernetes.client as kc

    version = api_version.split("/")[-1]
    return getattr(kc, version[:1].upper() + version[1:] + kind, None)


_LIST = re.compile(r"^(?:list|List)\[(.+)\]$")
_DICT = re.compile(r"^(?:dict\(str, (.+)\)|Dict\[str, (.+)\])$")


def _walk(value: Any, type_name: str, path: str, errors: list[str]) -> None:
    """Key names and scalar types against the client's `openapi_types`/`attribute_map`."""
    import kubernetes.client as kc

    if value is None:
        return
    if m := _LIST.match(type_name):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list")
            return
        for i, item in enumerate(value):
            _walk(item, m.group(1), f"{path}[{i}]", errors)
        return
    if m := _DICT.match(type_name):
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map")
            return
        for key, item in value.items():
            _walk(item, m.group(1) or m.group(2), f"{path}.{key}", errors)
        return
    scalar = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "datetime": (str,), "date": (str,)}
    if type_name in scalar:
        if not isinstance(value, scalar[type_name]) or (type_name in ("int", "float") and isinstance(value, bool)):
            errors.append(f"{path}: expected {type_name}, got {type(value).__name__}")
        return
    if type_name == "object":
        return
    cls = getattr(kc, type_name, None)
    if cls is None:
        return  # a type this client release does not know; the JSON schemas cover it
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object ({type_name})")
        return
    by_json = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    for key, item in value.items():
        if key not in by_json:
            errors.append(f"{path}.{key}: unknown field of {type_name}")
            continue
        _walk(item, cls.openapi_types[by_json[key]], f"{path}.{key}", errors)


def model_errors(doc: dict[str, Any]) -> list[str]:
    """Errors of `doc` against the kubernetes client's typed model of its kind."""
    cls = model_class(doc["apiVersion"], doc["kind"])
    if cls is None:
        raise LookupError(f"the kubernetes client has no model for {doc['apiVersion']} {doc['kind']}")
    errors: list[str] = []
    _walk(doc, cls.__name__, doc["kind"], errors)
    try:
        if hasattr(cls, "model_validate"):  # client >= 35: pydantic models (strict, extra=forbid)
            cls.model_validate(doc)
        else:  # classic generated models: required fields are checked by the setters
            from kubernetes.client import ApiClient

            class _Response:
                data = json.dumps(doc)

            ApiClient().deserialize(_Response(), cls.__name__)
    except (ValueError, TypeError) as exc:
        errors.append(f"{doc['kind']}: {exc}")
    return errors


# ---- custom resources ------------------------------------------------------------------------
_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_META = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": _STR_MAP, "annotations": _STR_MAP},
    "additionalProperties": False,
}
_LABEL_SELECTOR = {
    "type": "object",
    "properties": {
        "matchLabels": _STR_MAP,
        "matchExpressions": {"type": "array", "items": {
            "type": "object", "required": ["key", "operator"], "additionalProperties": False,
            "properties": {"key": {"type": "string"}, "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                           "values": {"type": "array", "items": {"type": "string"}}}}},
    },
    "additionalProperties": False,
}
_INT = {"type": "integer", "minimum": 0}

# keda.sh/v1alpha1 ScaledObject (KEDA 2.x CRD), trigger metadata of the nats-jetstream scaler.
SCALED_OBJECT = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": _META,
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object", "required": ["name"], "additionalProperties": False,
                    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "name": {"type": "string"},
                                   "envSourceContainerName": {"type": "string"}},
                },
                "pollingInterval": _INT, "cooldownPeriod": _INT, "initialCooldownPeriod": _INT,
                "idleReplicaCount": _INT, "minReplicaCount": _INT, "maxReplicaCount": {"type": "integer", "minimum": 1},
                "fallback": {
                    "type": "object", "required": ["failureThreshold", "replicas"], "additionalProperties": False,
                    "properties": {"failureThreshold": _INT, "replicas": _INT,
                                   "behavior": {"enum": ["static", "currentReplicas", "currentReplicasIfHigher",
                                                         "currentReplicasIfLower"]}},
                },
                "advanced": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object", "additionalProperties": False,
                            # behavior: checked against the autoscaling/v2 model separately
                            "properties": {"name": {"type": "string"}, "behavior": {"type": "object"}},
                        },
                        "scalingModifiers": {"type": "object"},
                    },
                },
                "triggers": {
                    "type": "array", "minItems": 1,
                    "items": {
                        "type": "object", "required": ["type", "metadata"], "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string"}, "name": {"type": "string"}, "useCachedMetrics": {"type": "boolean"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "metadata": _STR_MAP,
                            "authenticationRef": {"type": "object", "required": ["name"], "additionalProperties": False,
                                                  "properties": {"name": {"type": "string"},
                                                                 "kind": {"enum": ["TriggerAuthentication",
                                                                                   "ClusterTriggerAuthentication"]}}},
                        },
                        "if": {"properties": {"type": {"const": "nats-jetstream"}}},
                        "then": {"properties": {"metadata": {
                            "required": ["natsServerMonitoringEndpoint", "account", "stream", "consumer"],
                            "additionalProperties": False,
                            "properties": {k: {"type": "string"} for k in (
                                "natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold",
                                "activationLagThreshold", "useHttps")},
                        }}},
                    },
                },
            },
        },
    },
}

# monitoring.coreos.com/v1 PrometheusRule
PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": _META,
        "spec": {
            "type": "object", "additionalProperties": False,
            "properties": {"groups": {"type": "array", "items": {
                "type": "object", "required": ["name", "rules"], "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "interval": {"type": "string", "pattern": _DURATION},
                    "query_offset": {"type": "string", "pattern": _DURATION},
                    "limit": _INT,
                    "labels": _STR_MAP,
                    "partial_response_strategy": {"type": "string"},
                    "rules": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "required": ["expr"], "additionalProperties": False,
                        "oneOf": [{"required": ["alert"], "not": {"required": ["record"]}},
                                  {"required": ["record"], "not": {"required": ["alert"]}}],
                        "properties": {
                            "alert": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                            "record": {"type": "string"},
                            "expr": {"type": ["string", "integer"]},
                            "for": {"type": "string", "pattern": _DURATION},
                            "keep_firing_for": {"type": "string", "pattern": _DURATION},
                            "labels": _STR_MAP,
                            "annotations": _STR_MAP,
                        },
                    }},
                },
            }}},
        },
    },
}

# monitoring.coreos.com/v1 PodMonitor
POD_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PodMonitor"},
        "metadata": _META,
        "spec": {
            "type": "object", "required": ["selector"], "additionalProperties": False,
            "properties": {
                "selector": _LABEL_SELECTOR,
                "namespaceSelector": {"type": "object", "additionalProperties": False,
                                      "properties": {"any": {"type": "boolean"},
                                                     "matchNames": {"type": "array", "items": {"type": "string"}}}},
                "jobLabel": {"type": "string"},
                "podTargetLabels": {"type": "array", "items": {"type": "string"}},
                "sampleLimit": _INT,
                "podMetricsEndpoints": {"type": "array", "items": {
                    "type": "object", "additionalProperties": False,
                    "properties": {
                        "port": {"type": "string"}, "portNumber": {"type": "integer", "minimum": 1, "maximum": 65535},
                        "path": {"type": "string"}, "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
                        "interval": {"type": "string", "pattern": _DURATION},
                        "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                        "honorLabels": {"type": "boolean"}, "honorTimestamps": {"type": "boolean"},
                        "relabelings": {"type": "array"}, "metricRelabelings": {"type": "array"},
                    },
                }},
            },
        },
    },
}

CRD_SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE,
    ("monitoring.coreos.com/v1", "PodMonitor"): POD_MONITOR,
    **CNPG_SCHEMAS,  # components/cloudnative-pg
}


def crd_errors(doc: dict[str, Any]) -> list[str]:
    schema = CRD_SCHEMAS.get((doc["apiVersion"], doc["kind"]))
    if schema is None:
        raise LookupError(f"no schema for custom resource {doc['apiVersion']} {doc['kind']}")
    validator = jsonschema.Draft202012Validator(schema)
    errors = [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(doc)]
    if doc["kind"] == "ScaledObject":  # the HPA behavior KEDA passes through is autoscaling/v2's
        behavior = (doc["spec"].get("advanced", {}).get("horizontalPodAutoscalerConfig") or {}).get("behavior")
        if behavior is not None:
            errors += [f"spec.advanced.horizontalPodAutoscalerConfig.behavior: {e}" for e in _behavior_errors(behavior)]
    return errors


def _behavior_errors(behavior: dict[str, Any]) -> list[str]:
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "x"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 1, "behavior": behavior}}
    return model_errors(hpa)


# ---- NetworkPolicy semantics -----------------------------------------------------------------
def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector; an empty selector matches everything."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


class Peer:
    """A pod as NetworkPolicy sees it: its namespace's labels, its labels, its named ports."""

    def __init__(self, namespace: str, labels: dict[str, str], ports: dict[str, int] | None = None):
        self.namespace = namespace
        self.ns_labels = {"kubernetes.io/metadata.name": namespace}
        self.labels = labels
        self.ports = ports or {}


def _peer_matches(rule_peers: list[dict[str, Any]] | None, policy_ns: str, peer: Peer) -> bool:
    if not rule_peers:
        return True
    for item in rule_peers:
        if "ipBlock" in item:
            return True  # could be anything: treated as allowing every peer
        ns_sel, pod_sel = item.get("namespaceSelector"), item.get("podSelector")
        ns_ok = selector_matches(ns_sel, peer.ns_labels) if ns_sel is not None else peer.namespace == policy_ns
        pod_ok = selector_matches(pod_sel, peer.labels) if pod_sel is not None else True
        if ns_ok and pod_ok:
            return True
    return False


def _port_matches(rule_ports: list[dict[str, Any]] | None, port: int, protocol: str, target: Peer) -> bool:
    if not rule_ports:
        return True
    for item in rule_ports:
        if item.get("protocol", "TCP") != protocol:
            continue
        value = item.get("port")
        if value is None:
            return True
        if isinstance(value, str):
            value = target.ports.get(value)
        end = item.get("endPort", value)
        if value is not None and value <= port <= end:
            return True
    return False


def traffic_allowed(policies: list[dict[str, Any]], src: Peer, dst: Peer, port: int, protocol: str = "TCP") -> bool:
    """Whether NetworkPolicies let `src` open `port` on `dst`."""

    def applies(policy: dict[str, Any], pod: Peer, direction: str) -> bool:
        spec = policy["spec"]
        types = spec.get("policyTypes") or (["Ingress", "Egress"] if "egress" in spec else ["Ingress"])
        return (policy["metadata"].get("namespace") or pod.namespace) == pod.namespace and direction in types \
            and selector_matches(spec.get("podSelector"), pod.labels)

    egress = [p for p in policies if applies(p, src, "Egress")]
    if egress and not any(
        _peer_matches(rule.get("to"), p["metadata"].get("namespace") or src.namespace, dst)
        and _port_matches(rule.get("ports"), port, protocol, dst)
        for p in egress for rule in p["spec"].get("egress") or []
    ):
        return False
    ingress = [p for p in policies if applies(p, dst, "Ingress")]
    if ingress and not any(
        _peer_matches(rule.get("from"), p["metadata"].get("namespace") or dst.namespace, src)
        and _port_matches(rule.get("ports"), port, protocol, dst)
        for p in ingress for rule in p["spec"].get("ingress") or []
    ):
        return False
    return True


def workload_peers(docs: list[dict[str, Any]]) -> dict[str, Peer]:
    """One Peer per workload (keyed by its component label) with its container port names."""
    out: dict[str, Peer] = {}
    for doc in docs:
        if doc["kind"] not in WORKLOAD_KINDS:
            continue
        labels = pod_labels(doc)
        ports = {p["name"]: p["containerPort"] for c in pod_spec(doc)["containers"] for p in c.get("ports") or [] if "name" in p}
        out[labels["app.kubernetes.io/component"]] = Peer(doc["metadata"].get("namespace", "default"), labels, ports)
    return out


def yaml_dump(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)
