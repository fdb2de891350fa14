"""Shared test helpers.

``require_binary`` is the one rule for tests that need a real server (prometheus, promtool,
prometheus-alertmanager, amtool): skip on a user's machine that lacks the binary, fail under
``CI=true`` where ``scripts/test.sh`` must have installed it. ``kube_server`` is the session's real
kube-apiserver (``tests/kubeserver.py``), with every CRD of ``../shared/crds`` installed. It is opt-in
(``KUBE_BIN_DIR`` or ``PA_E2E_KUBECONFIG``): without either, every test marked ``kube`` (or using
``kube_server``) skips with one reason, in CI too.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The end-to-end tests on a real API server skip, with one reason naming both ways to run them, unless
    ``KUBE_BIN_DIR`` or ``PA_E2E_KUBECONFIG`` is set."""
    if e2e_source() is not None:
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if item.get_closest_marker("kube") or "kube_server" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def kube_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeServer]:
    """One real kube-apiserver for the session, with the workspace's CRDs installed and Established."""
    for server in session_kube_server(tmp_path_factory.mktemp("kube")):
        with server.admin() as api:
            install_crds(api, record=server)
        yield server


from tests.kubeserver import SKIP_REASON, KubeServer, e2e_source, install_crds, session_kube_server  # noqa: E402

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
