"""Shared test helpers.

``require_binary`` is the one rule for tests that need a real server (prometheus, promtool,
prometheus-alertmanager, amtool): skip on a user's machine that lacks the binary, fail under
``CI=true`` where ``scripts/test.sh`` must have installed it.
"""

from __future__ import annotations

import os
import shutil
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


# The real-server fixtures are registered here, once, for the whole suite: a session-scoped
# fixture imported into several conftest modules would start one server per module.
from tests.servers import (  # noqa: E402
    alertmanager_server,
    alertmanager_tls_server,
    prometheus_server,
    prometheus_tls_server,
)

__all__ = [
    "alertmanager_server",
    "alertmanager_tls_server",
    "in_ci",
    "prometheus_server",
    "prometheus_tls_server",
    "require_binary",
]
