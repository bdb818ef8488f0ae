"""deploy/k8s/components/btrfs-quota: the kernel disk quota on Kubernetes (issue 36).

The example overlay plus the component, rendered like the others (the real kustomize where
installed, compared with kustomize_lite): the user roots are one node-local btrfs volume of the
operator's `zcbot-btrfs` class, the executor is told the kernel quota is required (so a missing
piece stops it instead of falling back to the meter), runs only on the storage node as root with
CAP_SYS_ADMIN and the bwrap sandbox, every other pod that mounts the user roots can be scheduled
there, the image carries btrfs-progs, and docs/operations.md names what the operator provides.
Without the component the base keeps its RWX volume and `auto` (the meter on a network volume).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import k8s_checks as kc
import kustomize_lite
from deploy_paths import REPO, variant_dir
from zcbot_core.quota import kernel

STORAGE_NODE = {"zcbot.io/sandbox": "true", "zcbot.io/storage": "btrfs"}  # the labels docs/operations.md asks for
SANDBOX_TAINT = {"key": "zcbot.io/sandbox", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
CORE_GROUPS = {"v1", "apps/v1", "batch/v1", "autoscaling/v2", "policy/v1", "networking.k8s.io/v1"}


@pytest.fixture(scope="module")
def quota_overlay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return variant_dir(tmp_path_factory.mktemp("btrfs-quota"), components=["components/btrfs-quota"])


@pytest.fixture(scope="module")
def quota_docs(quota_overlay: Path) -> list[dict[str, Any]]:
    return kc.render(quota_overlay)[0]


def _config(docs: list[dict[str, Any]]) -> dict[str, str]:
    return kc.by_kind(docs, "ConfigMap")["zcbot-config"]["data"]


def _mounting_user_roots(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The workloads (by component) whose pods mount the `zcbot-users` claim."""
    out = {}
    for doc in docs:
        if doc["kind"] not in kc.WORKLOAD_KINDS:
            continue
        spec = kc.pod_spec(doc)
        if any(v.get("persistentVolumeClaim", {}).get("claimName") == "zcbot-users" for v in spec.get("volumes") or []):
            out[kc.pod_labels(doc)["app.kubernetes.io/component"]] = doc
    return out


def test_user_roots_are_one_node_local_btrfs_volume_under_a_required_kernel_quota(quota_docs: list[dict[str, Any]]) -> None:
    pvc = kc.by_kind(quota_docs, "PersistentVolumeClaim")["zcbot-users"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]  # one node: the executor there sets the limits
    assert pvc["spec"]["storageClassName"] == "zcbot-btrfs"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "200Gi"  # the overlay's size is kept
    config = _config(quota_docs)
    assert config["ZCBOT_DISK_QUOTA_BACKEND"] == "btrfs" and config["ZCBOT_DISK_QUOTA_BACKEND"] in kernel.BACKENDS
    assert config["ZCBOT_STORAGE_ROOT"] == "/data/users"
    assert int(config.get("ZCBOT_USER_DISK_QUOTA_MB", "10240")) > 0  # 0 would turn the quota off


def test_the_executor_runs_on_the_storage_node_able_to_set_qgroup_limits(quota_docs: list[dict[str, Any]]) -> None:
    executor = kc.by_kind(quota_docs, "DaemonSet")["zcbot-executor"]
    spec = kc.pod_spec(executor)
    assert spec["nodeSelector"] == STORAGE_NODE
    (main,) = spec["containers"]
    security = main["securityContext"]
    assert security["runAsUser"] == 0 and "SYS_ADMIN" in security["capabilities"]["add"]  # btrfs quota / qgroup limit
    env = {e["name"]: e.get("value") for e in main.get("env") or []}
    # bwrap (the default), whose seccomp filter keeps nested subvolumes out of the sandbox
    assert env.get("ZCBOT_SANDBOX", _config(quota_docs).get("ZCBOT_SANDBOX", "bwrap")) == "bwrap"
    assert [m["mountPath"] for m in main["volumeMounts"] if m["name"] == "users"] == ["/data/users"]


def test_every_pod_that_mounts_the_user_roots_can_run_on_the_storage_node(quota_docs: list[dict[str, Any]]) -> None:
    mounting = _mounting_user_roots(quota_docs)
    assert set(mounting) == {"gateway", "runner", "executor", "channels"}
    for component, doc in mounting.items():
        spec = kc.pod_spec(doc)
        assert SANDBOX_TAINT in (spec.get("tolerations") or []), component  # the storage node is a sandbox node
        assert all(STORAGE_NODE.get(k) == v for k, v in (spec.get("nodeSelector") or {}).items()), component
        assert not (spec.get("affinity") or {}).get("nodeAffinity"), component  # the volume's node affinity decides
    # the pods that do not mount it stay off the sandbox nodes as before
    for doc in quota_docs:
        if doc["kind"] in kc.WORKLOAD_KINDS and kc.pod_labels(doc).get("app.kubernetes.io/component") not in mounting:
            assert SANDBOX_TAINT not in (kc.pod_spec(doc).get("tolerations") or []), kc.ident(doc)


def test_without_the_component_the_volume_is_rwx_and_the_quota_auto(docs: list[dict[str, Any]]) -> None:
    assert kc.by_kind(docs, "PersistentVolumeClaim")["zcbot-users"]["spec"]["accessModes"] == ["ReadWriteMany"]
    assert _config(docs).get("ZCBOT_DISK_QUOTA_BACKEND", "auto") == "auto"


@pytest.mark.parametrize("version", ["1.30", "latest"])
def test_rendered_objects_match_the_kubernetes_schema(quota_docs: list[dict[str, Any]], version: str) -> None:
    version = kc.schema_versions()[-1] if version == "latest" else version
    core = [d for d in quota_docs if d["apiVersion"] in CORE_GROUPS]
    failures = {kc.ident(d): errs for d in core if (errs := kc.schema_errors(d, version)) or (errs := kc.model_errors(d))}
    assert not failures, f"Kubernetes {version}: {failures}"


def test_lite_renderer_matches_kustomize(quota_overlay: Path) -> None:
    command = kc.kustomize_command()
    if command is None:
        pytest.skip("no kubectl/kustomize on this machine: kustomize_lite is the only renderer")
    real = {kc.ident(d): d for d in kc.render_with_tool(quota_overlay, command)}
    lite = {kc.ident(d): d for d in kustomize_lite.build(quota_overlay)}
    assert real == lite


def test_the_image_has_btrfs_progs_and_the_docs_say_what_the_operator_provides() -> None:
    runtime = (REPO / "Dockerfile").read_text().split("AS runtime", 1)[1]
    install = next(line for line in runtime.splitlines() if "tini" in line and "zip" in line)
    assert "btrfs-progs" in install.split()
    ops = (REPO / "docs" / "operations.md").read_text()
    for needle in ("components/btrfs-quota", "`zcbot-btrfs`", "zcbot.io/storage=btrfs", "ZCBOT_DISK_QUOTA_BACKEND=btrfs",
                   "kubernetes.io/no-provisioner"):
        assert needle in ops, needle
