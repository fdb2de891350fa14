"""The repository is exactly what a user clones: nothing in it points outside it.

Why: a reader of a clone cannot follow an absolute path of the machine the project was written on, a design
document that is not in the repository, or an issue number of a tracker they cannot see; and the packages that
``pip install`` ships must not carry data sets (real traces live beside the repository, in ``../shared``, and
are never committed). Each check scans the files ``git ls-files`` lists, as they are in the working tree, and
names every offending line.

The forbidden strings are assembled at run time, so this file does not trip its own checks.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WORKSPACE = REPO.parent
# Directories that many machines share and that files mention for their own reasons (a container's /tmp, a
# pod's /root/.cache): with the clone directly inside one of them, its parent says nothing about this machine.
SHARED_SYSTEM_DIRS = frozenset({"/", "/tmp", "/var/tmp", "/private/tmp", "/root", "/home", "/usr", "/usr/src",
                                "/opt", "/srv", "/mnt"})
SHARED_FOLDER = "/" + "/".join(("work", "shared"))  # the workspace's shared folder by its absolute path
DESIGN_DOC = "DESIGN" + ".md"
BRIEF = re.compile(r"\b(the|from the) " + "brief" + r"\b", re.IGNORECASE)
ISSUE = re.compile(r"\bissues?\s?#?\d+", re.IGNORECASE)
CHANGELOG_LIKE = re.compile(r"^(changelog|changes|history|news|release[-_]?notes)\b", re.IGNORECASE)
DATA_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".jsonl", ".jsonl.gz")
DATA_LIMIT_BYTES = 20_000
PACKAGES = ("autoscaler/", "models/")


def tracked_files() -> list[str]:
    """Every tracked path (``git ls-files``), or skip where this is not a git checkout."""
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed: the tracked files cannot be listed")
    done = subprocess.run([git, "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"{REPO} is not a git checkout: {done.stderr.decode(errors='replace').strip()}")
    return [p for p in done.stdout.decode().split("\0") if p]


def tracked_texts() -> list[tuple[str, list[str]]]:
    """``(path, lines)`` of every tracked text file present in the working tree (not symlinks: their targets are
    tracked too; not binary files: a NUL byte in the first 8 kB)."""
    out: list[tuple[str, list[str]]] = []
    for rel in tracked_files():
        path = REPO / rel
        if path.is_symlink() or not path.is_file():
            continue  # a link's target is scanned on its own; a file deleted but not yet committed is not shipped
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        out.append((rel, data.decode("utf-8", errors="replace").splitlines()))
    return out


def offending(needles: list[str], pattern: re.Pattern[str] | None = None,
              skip: re.Pattern[str] | None = None) -> list[str]:
    """``path:line: text`` for every tracked text line holding one of ``needles`` (or matching ``pattern``)."""
    hits: list[str] = []
    for rel, lines in tracked_texts():
        if skip is not None and skip.match(Path(rel).name):
            continue
        for n, line in enumerate(lines, 1):
            if any(s in line for s in needles) or (pattern is not None and pattern.search(line)):
                hits.append(f"{rel}:{n}: {line.strip()[:160]}")
    return hits


def test_no_tracked_file_names_a_path_of_this_machine() -> None:
    needles = [SHARED_FOLDER]
    workspace = WORKSPACE.as_posix()
    if workspace not in SHARED_SYSTEM_DIRS:
        needles.append(workspace.rstrip("/") + "/")
    hits = offending(needles)
    assert not hits, ("absolute paths of the workspace (say ../shared/... relative to the repository root, or "
                      "describe the thing):\n" + "\n".join(hits))


def test_no_tracked_file_points_to_a_design_document_outside_the_repository() -> None:
    hits = offending([DESIGN_DOC])
    assert not hits, (f"references to a {DESIGN_DOC} that is not in the repository (docs/ARCHITECTURE.md is the "
                      "project's architecture):\n" + "\n".join(hits))


def test_no_tracked_file_answers_to_a_brief_a_reader_cannot_see() -> None:
    hits = offending([], BRIEF)
    assert not hits, ("references to a brief that is not in the repository (state the reason instead):\n"
                      + "\n".join(hits))


def test_no_tracked_file_cites_an_issue_number() -> None:
    hits = offending([], ISSUE, skip=CHANGELOG_LIKE)
    assert not hits, ("issue numbers of a tracker a user cannot see (state the behaviour and the reason "
                      "instead):\n" + "\n".join(hits))


def test_the_packages_ship_no_data_set() -> None:
    big = []
    for rel in tracked_files():
        path = REPO / rel
        if rel.startswith(PACKAGES) and rel.lower().endswith(DATA_SUFFIXES) and path.is_file():
            size = path.stat().st_size
            if size > DATA_LIMIT_BYTES:
                big.append(f"{rel}: {size:,} bytes")
    assert not big, (f"data files over {DATA_LIMIT_BYTES:,} bytes inside autoscaler/ or models/ (data sets are "
                     "never committed; tests and benchmarks read ../shared/traces):\n" + "\n".join(big))
