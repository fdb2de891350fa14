"""Write one benchmark's section of ``docs/BENCHMARKS.md`` without touching the others.

Why: each benchmark (backtest, simulation, fleet tick) is run by its own command at its own time;
they share one results page, so each owns the text between ``<!-- BEGIN name -->`` and
``<!-- END name -->`` and replaces only that.
"""

from __future__ import annotations

import platform
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"
HEADER = """# Benchmarks

Every figure below was measured by the command named in its section, on the project's own machine
(2 cores, 24 GiB), and is reported as a ratio against anchors measured in the same run, so the
numbers stay comparable when the machine changes. Re-run a section's command to refresh it.
"""


def require_traces(traces: Path, command: str) -> None:
    """Stop with one line (exit status 1) when the real traces are absent, before anything is measured or written.

    Why: every benchmark runs on the public traces of the workspace's ``../shared/traces`` (beside the
    repository, never part of it). Without them a run would crash on a missing file or, worse, replace its
    section of the page with an empty table.
    """
    if not traces.is_dir():
        raise SystemExit(f"{command}: ../shared/traces (the real traces, beside the repository) is absent: "
                         f"no {traces} here; nothing measured, docs/BENCHMARKS.md left as it was")


def machine() -> str:
    return f"{platform.machine()}, Python {platform.python_version()}, {platform.system()}"


def update_section(name: str, text: str, doc: Path = DOC) -> None:
    """Replace (or append) the section ``name`` of the benchmarks page with ``text``."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    body = doc.read_text() if doc.exists() else HEADER
    block = f"{begin}\n{text.strip()}\n{end}"
    if begin in body and end in body:
        head, rest = body.split(begin, 1)
        _, tail = rest.split(end, 1)
        body = head + block + tail
    else:
        body = body.rstrip() + "\n\n" + block + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(body)
