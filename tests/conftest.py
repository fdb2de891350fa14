"""Shared test helpers.

``require_binary`` is the one rule for tests that need a real server (prometheus, promtool,
prometheus-alertmanager, amtool): skip on a user's machine that lacks the binary, fail under
``CI=true`` where ``scripts/test.sh`` must have installed it. ``kube_server`` is the session's real
kube-apiserver (``tests/kubeserver.py``), with every CRD of ``../shared/crds`` installed; the same
rule holds for it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_TRACES = REPO.parent / "shared" / "traces"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (scripts/test.sh installs it from Debian packages)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def kube_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    """One real kube-apiserver for the session, with the workspace's CRDs installed and Established."""
    for server in running_kube_server(tmp_path_factory.mktemp("kube")):
        with server.admin() as api:
            install_crds(api)
        yield server


from tests.kubeserver import KubeServer, install_crds, running_kube_server  # noqa: E402

# The real-server fixtures are registered here, once, for the whole suite: a session-scoped
# fixture imported into several conftest modules would start one server per module.
from tests.servers import (  # noqa: E402
    alertmanager_server,
    alertmanager_tls_server,
    prometheus_server,
    prometheus_tls_server,
)
from tests.synthetic_vllm import capacity_prometheus  # noqa: E402

__all__ = [
    "alertmanager_server",
    "alertmanager_tls_server",
    "capacity_prometheus",
    "in_ci",
    "prometheus_server",
    "prometheus_tls_server",
    "require_binary",
]
