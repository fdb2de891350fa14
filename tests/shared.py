"""The one way tests and benchmarks reach the workspace's ``../shared`` folder (beside the repository root).

Why it exists: the real traces and the real CRDs of Karpenter, CapacityBuffer, Kueue and Volcano are not part
of the project (data from other repositories is never committed), so a user's clone usually has no
``../shared``. A test that needs it must say so in one reason and skip, wherever it runs, instead of
failing on a missing file; and no test may name a machine's absolute path for it.

    from tests.shared import require_shared
    crds = require_shared("crds")                            # skips when ../shared/crds is absent
    trace = require_shared("traces", "servegen_m_small_10min.csv")
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
CRDS = SHARED / "crds"
TRACES = SHARED / "traces"


def shared_path(*parts: str) -> Path:
    """``../shared/<parts>`` (relative to the repository root); it may not exist."""
    return SHARED.joinpath(*parts)


def absent_reason(*parts: str) -> str | None:
    """Why ``../shared/<parts>`` cannot be used (it is absent), or ``None`` when it is there."""
    path = shared_path(*parts)
    if path.exists():
        return None
    shown = "/".join(("..", "shared", *parts))
    return (f"{shown} is absent: real traces and CRDs come from the workspace's shared folder beside the "
            "repository, never from the repository itself")


def require_shared(*parts: str) -> Path:
    """``../shared/<parts>``, or skip the calling test (or module, at import) with the reason it is absent."""
    reason = absent_reason(*parts)
    if reason is not None:
        pytest.skip(reason, allow_module_level=True)
    return shared_path(*parts)
