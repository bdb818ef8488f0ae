"""Fixtures of the deployment tests: paths and the rendered Kubernetes manifests.

These tests need no NATS, PostgreSQL or Docker: they render and validate files.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # deploy_paths, kustomize_lite, k8s_checks, compose_checks

import k8s_checks  # noqa: E402
from deploy_paths import OVERLAY, REPO, variant_dir  # noqa: E402


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
