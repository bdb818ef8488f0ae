"""Fixtures of the deployment tests: paths and the rendered Kubernetes manifests.

These tests need no NATS, PostgreSQL or Docker: they render and validate files.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # kustomize_lite, k8s_checks, compose_checks

import k8s_checks  # noqa: E402

REPO = HERE.parents[1]
K8S = REPO / "deploy" / "k8s"
OVERLAY = K8S / "overlays" / "example"
NAMESPACE = "zcbot"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def rendered() -> tuple[list[dict[str, Any]], str]:
    """The example overlay, rendered (docs, renderer name)."""
    return k8s_checks.render(OVERLAY)


@pytest.fixture(scope="session")
def docs(rendered: tuple[list[dict[str, Any]], str]) -> list[dict[str, Any]]:
    return rendered[0]


@pytest.fixture(scope="session")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example overlay + the external-postgres component + the optional gVisor patch."""
    return variant_dir(tmp_path_factory.mktemp("variant"), components=["components/external-postgres"],
                       patches=[OVERLAY / "patches" / "executor-gvisor.yaml"])


def variant_dir(tmp_path: Path, *, components: list[str] = (), patches: list[Path] = ()) -> Path:
    """A throwaway overlay on top of the example one (kustomize wants relative paths)."""
    import shutil

    import yaml

    kust: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(OVERLAY, tmp_path)],
    }
    if components:
        kust["components"] = [os.path.relpath(K8S / c, tmp_path) for c in components]
    if patches:
        kust["patches"] = []
        for patch in patches:
            shutil.copy(patch, tmp_path / patch.name)
            kust["patches"].append({"path": patch.name})
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    return tmp_path
