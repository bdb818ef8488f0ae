"""Paths of the deployment files, and a throwaway overlay helper (shared by the deploy tests)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
K8S = REPO / "deploy" / "k8s"
OVERLAY = K8S / "overlays" / "example"
NAMESPACE = "zcbot"


def variant_dir(directory: Path, *, components: list[str] = (), patches: list[Path] = ()) -> Path:
    """An overlay on top of the example one in `directory` (kustomize wants relative paths)."""
    kust: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(OVERLAY, directory)],
    }
    if components:
        kust["components"] = [os.path.relpath(K8S / c, directory) for c in components]
    if patches:
        kust["patches"] = []
        for patch in patches:
            shutil.copy(patch, directory / patch.name)
            kust["patches"].append({"path": patch.name})
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kust))
    return directory
