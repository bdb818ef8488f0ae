"""Hand-written JSON schemas of the CloudNativePG resources deploy/k8s/components/cloudnative-pg
ships (postgresql.cnpg.io/v1 Cluster and Pooler), limited to the fields the component uses and the
ones next to them in the CRDs (CloudNativePG 1.2x); unknown fields fail, as in `k8s_checks`."""

from __future__ import annotations

from typing import Any

_META: dict[str, Any] = {"type": "object", "required": ["name"]}
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_QUANTITY = {"type": ["string", "integer"]}
_RESOURCES = {"type": "object", "additionalProperties": False, "properties": {
    "requests": {"type": "object", "additionalProperties": _QUANTITY},
    "limits": {"type": "object", "additionalProperties": _QUANTITY}}}
_POS = {"type": "integer", "minimum": 1}
_INT = {"type": "integer", "minimum": 0}


def _resource(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
            "properties": {"apiVersion": {"const": "postgresql.cnpg.io/v1"}, "kind": {"const": kind},
                           "metadata": _META, "spec": spec}}


CLUSTER = _resource("Cluster", {
    "type": "object", "required": ["instances", "storage"], "additionalProperties": False,
    "properties": {
        "instances": _POS, "imageName": {"type": "string"},
        "primaryUpdateStrategy": {"enum": ["unsupervised", "supervised"]},
        "primaryUpdateMethod": {"enum": ["switchover", "restart"]},
        "minSyncReplicas": _INT, "maxSyncReplicas": _INT,
        "postgresql": {"type": "object", "additionalProperties": False, "properties": {
            "parameters": _STR_MAP, "pg_hba": {"type": "array", "items": {"type": "string"}},
            "synchronous": {"type": "object"}}},
        "bootstrap": {"type": "object", "additionalProperties": False, "properties": {
            "initdb": {"type": "object", "additionalProperties": False, "properties": {
                "database": {"type": "string"}, "owner": {"type": "string"},
                "secret": {"type": "object", "required": ["name"], "additionalProperties": False,
                           "properties": {"name": {"type": "string"}}},
                "encoding": {"type": "string"}, "localeCollate": {"type": "string"}, "localeCType": {"type": "string"}}}}},
        "storage": {"type": "object", "required": ["size"], "additionalProperties": False, "properties": {
            "size": {"type": "string"}, "storageClass": {"type": "string"},
            "resizeInUseVolumes": {"type": "boolean"}}},
        "resources": _RESOURCES,
        "affinity": {"type": "object", "additionalProperties": False, "properties": {
            "enablePodAntiAffinity": {"type": "boolean"}, "topologyKey": {"type": "string"},
            "podAntiAffinityType": {"enum": ["preferred", "required"]}, "nodeSelector": _STR_MAP,
            "tolerations": {"type": "array"}}},
        "monitoring": {"type": "object", "additionalProperties": False, "properties": {
            "enablePodMonitor": {"type": "boolean"}}},
    },
})

POOLER = _resource("Pooler", {
    "type": "object", "required": ["cluster", "pgbouncer"], "additionalProperties": False,
    "properties": {
        "cluster": {"type": "object", "required": ["name"], "additionalProperties": False,
                    "properties": {"name": {"type": "string"}}},
        "instances": _INT, "type": {"enum": ["rw", "ro", "r"]},
        "pgbouncer": {"type": "object", "additionalProperties": False, "properties": {
            "poolMode": {"enum": ["session", "transaction"]}, "parameters": _STR_MAP,
            "paused": {"type": "boolean"}}},
        # a PodTemplateSpec: CloudNativePG requires `containers` when a template is given
        "template": {"type": "object", "additionalProperties": False, "properties": {
            "metadata": {"type": "object"},
            "spec": {"type": "object", "required": ["containers"], "properties": {"containers": {"type": "array"}}}}},
        "monitoring": {"type": "object"},
    },
})

CNPG_SCHEMAS = {("postgresql.cnpg.io/v1", "Cluster"): CLUSTER, ("postgresql.cnpg.io/v1", "Pooler"): POOLER}
