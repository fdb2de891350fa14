"""The README and the reference under docs/ say what the code does, and keep saying it.

Why: a README is the first thing a person follows and the last thing anyone updates. Each check here ties a claim
of the text to the code that makes it true, so that a renamed flag, a changed verdict line, a metric added without
its row or a moved heading fails a test instead of a reader:

* every ``predictive-autoscaler ...`` line of an ``sh`` block (README and docs) parses with the real parser;
* the README's commands that need no cluster and no Prometheus run, in order, in a scratch directory (the main job
  on a two-day synthetic trace, so the test stays short), and exit 0;
* the ``simulate`` output the README quotes has the columns, policies and verdict lines the command prints;
* every flag of every subcommand is in docs/commands.md, and every flag a command's table there names is its own;
* every relative link of README.md and docs/*.md reaches a file, and its ``#anchor`` a heading of that file;
* docs/metrics-and-alerts.md lists exactly the metrics the controller exports, the alerts it pushes and the alerts
  deploy/prometheusrule.yaml ships.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from autoscaler.adapters.alertmanager import ALERT_NAMES
from autoscaler.cli import build_parser, main
from autoscaler.runtime.metrics import ControllerMetrics

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
COMMANDS_DOC = DOCS / "commands.md"
METRICS_DOC = DOCS / "metrics-and-alerts.md"
SETUP = "bash scripts/install.sh && .venv/bin/predictive-autoscaler simulate"
TESTS = "bash scripts/test.sh"
# Commands that read a cluster or a Prometheus: parsed, never run here.
NEEDS_OUTSIDE = {"run", "explain", "export", "capacity"}
OUTSIDE_FLAGS = {"--deployment", "--prometheus-url", "--config", "--kubeconfig"}
FENCE = re.compile(r"^```(\w*)\s*$")


def documents() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def fenced(text: str) -> Iterator[tuple[str, int, list[str]]]:
    """``(language, first line number, lines)`` of every fenced block of ``text``."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i].strip())
        if m is None:
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        yield m.group(1), start + 1, body
        i += 1


def shell_lines(path: Path) -> list[tuple[int, str]]:
    """Every logical line (backslash continuations joined) of the ``sh`` blocks of ``path``."""
    out: list[tuple[int, str]] = []
    for lang, first, body in fenced(path.read_text()):
        if lang != "sh":
            continue
        pending, at = "", first
        for n, line in enumerate(body, first):
            if not pending:
                at = n
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            out.append((at, pending + line))
            pending = ""
    return out


def commands_in(line: str) -> list[list[str]]:
    """The ``predictive-autoscaler`` invocations of one shell line, as argument lists (after the program)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    found: list[list[str]] = []
    segment: list[str] = []
    for w in [*words, ";"]:
        if w in {"&&", "||", ";", "|", "&"}:
            rest = [x for x in segment if not re.match(r"^[A-Z_][A-Z0-9_]*=", x)] if segment else []
            if rest and (rest[0] == "predictive-autoscaler" or rest[0].endswith("/predictive-autoscaler")):
                found.append(rest[1:])
            segment = []
        else:
            segment.append(w)
    return found


def documented_commands(path: Path) -> list[tuple[int, list[str]]]:
    return [(n, argv) for n, line in shell_lines(path) for argv in commands_in(line)]


def subparsers(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """``{"simulate": ..., "trace synth": ...}``: every leaf subcommand's parser."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{prefix} {name}".strip()
                inner = subparsers(sub, full)
                out.update(inner or {full: sub})
    return out


def flags_of(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s not in {"-h", "--help"}}


# ------------------------------------------------------------------------------------------- the commands parse


def test_the_set_up_commands_are_the_readmes() -> None:
    commands = {line.strip() for _, line in shell_lines(README)}
    assert SETUP in commands, f"the README's set-up command is `{SETUP}`"
    assert TESTS in commands, f"the README's test command is `{TESTS}`"
    assert (REPO / "scripts" / "install.sh").is_file()
    assert (REPO / "scripts" / "test.sh").is_file()


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.name)
def test_every_documented_command_parses(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = []
    for n, argv in documented_commands(path):
        try:
            args = build_parser().parse_args(argv)
        except SystemExit:
            bad.append(f"{path.name}:{n}: predictive-autoscaler {shlex.join(argv)}: {capsys.readouterr().err.strip()}")
            continue
        if not getattr(args, "command", None):
            bad.append(f"{path.name}:{n}: predictive-autoscaler {shlex.join(argv)}: no subcommand")
    assert not bad, "documented commands the parser refuses:\n" + "\n".join(bad)


def test_the_readme_shows_every_command_a_tour_needs() -> None:
    seen = {" ".join(argv[:2]) if argv[:1] == ["trace"] else argv[0] for _, argv in documented_commands(README)}
    assert {"simulate", "backtest", "trace synth", "trace from-log", "export", "run", "explain"} <= seen, seen
    runs = [argv for _, argv in documented_commands(README) if argv[:1] == ["run"]]
    assert any("--dry-run" in a and "--once" in a for a in runs), "the tour tries run --once --dry-run"


# ------------------------------------------------------------------------------------- the README's commands run


def write_access_log(path: Path, days: int = 3) -> None:
    """A Common Log Format access log: a few requests a minute with a daily cycle, as a gateway would write it."""
    rng = np.random.default_rng(7)
    start = 1_709_510_400  # Monday 2024-03-04 00:00 UTC, as the synthetic traffic
    minutes = np.arange(days * 1440)
    rate = 3 + 2 * np.sin(2 * np.pi * (minutes / 1440 - 0.25))
    lines = []
    for m, n in zip(minutes, rng.poisson(rate), strict=True):
        for k in range(int(n)):
            t = start + int(m) * 60 + k
            stamp = np.datetime64(t, "s").astype(object).strftime("%d/%b/%Y:%H:%M:%S +0000")
            lines.append(f'10.0.0.1 - - [{stamp}] "POST /v1/completions HTTP/1.1" 200 512\n')
    path.write_text("".join(lines))


def runnable(argv: list[str]) -> bool:
    return argv[0] not in NEEDS_OUTSIDE and not OUTSIDE_FLAGS & {a.split("=")[0] for a in argv}


@pytest.fixture(scope="module")
def readme_runs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[list[str], int, str, str]]:
    """Every runnable README command, run in order in one scratch directory: ``(argv, exit, stdout, stderr)``.

    The main job (``simulate`` without ``--trace``) replays two synthetic days instead of fourteen; the example fleet
    (``simulate --fleet``) half a day instead of three."""
    work = tmp_path_factory.mktemp("readme")
    write_access_log(work / "access.log")
    short = work / "short.csv"
    capture = pytest.MonkeyPatch()
    results = []
    try:
        capture.chdir(work)
        assert main(["trace", "synth", "--days", "2", "-o", str(short)]) == 0
        example = (REPO / "examples" / "fleet.yaml").read_text()
        assert example.count("\ndays: 3 ") == 1, "the example fleet's days changed: update this test's shortening"
        (work / "examples").mkdir()
        (work / "examples" / "fleet.yaml").write_text(example.replace("\ndays: 3 ", "\ndays: 0.5 "))
        for _, argv in documented_commands(README):
            if not runnable(argv):
                continue
            run = list(argv)
            if (run[0] in {"simulate", "backtest"} and "--trace" not in run and "--plot" not in run
                    and "--fleet" not in run):
                run += ["--trace", str(short)]
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(run)
                except SystemExit as exc:  # argparse's own refusal
                    code = int(exc.code or 0)
            results.append((run, code, out.getvalue(), err.getvalue()))
    finally:
        capture.undo()
    return results


def test_the_readmes_commands_that_need_no_cluster_run(readme_runs: list[tuple[list[str], int, str, str]]) -> None:
    ran = [argv[0] if argv[0] != "trace" else " ".join(argv[:2]) for argv, *_ in readme_runs]
    assert {"simulate", "backtest", "trace synth", "trace from-log"} <= set(ran), ran
    failed = [f"predictive-autoscaler {shlex.join(argv)} -> exit {code}: {err.strip()[-300:]}"
              for argv, code, _, err in readme_runs if code != 0]
    assert not failed, "\n".join(failed)


def test_the_from_log_trace_is_what_the_log_holds(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    write_access_log(log, days=1)
    out = tmp_path / "t.csv.gz"
    assert main(["trace", "from-log", str(log), "-o", str(out)]) == 0
    with gzip.open(out, "rt") as f:
        rows = f.read().splitlines()
    assert sum(int(r.split(",")[1]) for r in rows[1:]) == len(log.read_text().splitlines())


def quoted_simulate_output() -> list[str]:
    for lang, _, body in fenced(README.read_text()):
        if lang == "text" and body and body[0].startswith("policy "):
            return body
    raise AssertionError("the README quotes no simulate table (a ```text block starting with its header)")


def shape(line: str) -> str:
    """A verdict line without its numbers, its judgement words and the bracket saying where on the HPA's curve it was
    read (interpolated between two targets, or the nearest one outside them), up to its first colon."""
    masked = re.sub(r"\d[\d.,]*", "#", line)
    masked = re.sub(r"\((interpolated between|outside the targets' range)[^)]*\)", "(~)", masked)
    masked = re.sub(r"\b(MORE|more|fewer|FEWER|met|MISSED)\b", "~", masked)
    return masked.split(":")[0].strip()


def test_the_quoted_verdict_is_what_simulate_prints(readme_runs: list[tuple[list[str], int, str, str]]) -> None:
    main_job = [out for argv, code, out, _ in readme_runs if argv[0] == "simulate" and "--policies" not in argv]
    assert main_job, "the main job did not run"
    printed = main_job[0].splitlines()
    quoted = quoted_simulate_output()
    header = next(i for i, line in enumerate(printed) if line.startswith("policy "))
    # the same columns in the same order (their widths follow the numbers: the test replays two days, not fourteen)
    assert quoted[0].split() == printed[header].split(), "the quoted table header is not the one simulate prints"
    assert len(quoted[1].split()) == len(printed[header + 1].split())
    printed_policies = {line.split()[0] for line in printed[header + 2:] if line.strip()}
    rows = [line for line in quoted[2:] if line.strip() and not line.startswith("Predictive")]
    verdicts = [line for line in quoted[2:] if line.startswith("Predictive")]
    missing = [r.split()[0] for r in rows if r.split()[0] not in printed_policies]
    assert not missing, f"quoted policies simulate does not print: {missing}"
    assert len(verdicts) >= 3
    printed_shapes = {shape(line) for line in printed if line.startswith("Predictive")}
    stale = [v for v in verdicts if shape(v) not in printed_shapes]
    assert not stale, "quoted verdict lines simulate no longer prints:\n" + "\n".join(stale)


# ----------------------------------------------------------------------------------------------- every flag


def command_sections() -> dict[str, str]:
    """The text of each ``## <subcommand>`` section of docs/commands.md."""
    text = COMMANDS_DOC.read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_flag_of_every_command_is_in_the_commands_reference() -> None:
    sections = command_sections()
    missing = []
    for name, parser in subparsers(build_parser()).items():
        assert name in sections, f"docs/commands.md has no section '## {name}'"
        for flag in sorted(flags_of(parser)):
            if not re.search(rf"`{re.escape(flag)}[` ,=]", sections[name]):
                missing.append(f"{name} {flag}")
    assert not missing, "flags docs/commands.md does not document:\n" + "\n".join(missing)


def test_every_flag_in_the_commands_reference_is_the_commands_own() -> None:
    sections = command_sections()
    unknown = []
    for name, parser in subparsers(build_parser()).items():
        rows = [line for line in sections[name].splitlines() if line.startswith("| `")]
        own = flags_of(parser)
        for row in rows:
            first = row.split(" | ")[0]
            for flag in re.findall(r"`(-{1,2}[a-z][a-z-]*)", first):
                if flag not in own:
                    unknown.append(f"{name}: {flag}")
    assert not unknown, "docs/commands.md documents flags the parser does not have:\n" + "\n".join(unknown)


# ---------------------------------------------------------------------------------------------------- links


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text()
    for _, _, body in fenced(text):
        for line in body:
            text = text.replace(line, "", 1)
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.MULTILINE):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def links(path: Path) -> Iterator[tuple[int, str]]:
    in_code = False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line.strip()) or line.strip() == "```":
            in_code = not in_code
            continue
        if in_code:
            continue
        for m in re.finditer(r"\]\(([^)\s]+)\)", re.sub(r"`[^`]*`", "", line)):
            yield n, m.group(1)


@pytest.mark.parametrize("path", documents(), ids=lambda p: p.name)
def test_every_relative_link_resolves(path: Path) -> None:
    broken = []
    for n, target in links(path):
        if re.match(r"^[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{path.name}:{n}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{path.name}:{n}: {target}: no heading #{anchor} in {dest.name}")
    assert not broken, "\n".join(broken)


def test_the_readme_links_every_reference_page() -> None:
    linked = {target.split("#")[0] for _, target in links(README)}
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert pages <= linked, f"reference pages the README does not link: {sorted(pages - linked)}"
    for page in ("annotations.md", "configuration.md", "metrics-and-alerts.md"):
        assert (DOCS / page).is_file()


def test_the_picture_is_committed_small_and_made_by_a_script() -> None:
    picture = DOCS / "img" / "a-day.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert picture.stat().st_size < 200_000
    assert "docs/img/a-day.png" in README.read_text()
    script = REPO / "scripts" / "plot_a_day.py"
    assert "-o docs/img/a-day.png" in script.read_text()
    assert "-o docs/img/a-day.png" in README.read_text()


# ------------------------------------------------------------------------------------------ metrics and alerts


def exported_metrics() -> set[str]:
    names = set()
    for family in ControllerMetrics().registry.collect():
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


def documented_metrics() -> set[str]:
    found = set(re.findall(r"\bpredictive_autoscaler_[a-z0-9_]+", METRICS_DOC.read_text()))
    return {re.sub(r"_(bucket|sum|count)$", "", n) if n.startswith("predictive_autoscaler_tick_duration") else n
            for n in found}


def test_the_metrics_page_lists_exactly_what_the_controller_exports() -> None:
    exported, documented = exported_metrics(), documented_metrics()
    assert len(exported) > 30
    assert not exported - documented, f"exported but not documented: {sorted(exported - documented)}"
    assert not documented - exported, f"documented but not exported: {sorted(documented - exported)}"


def alert_tables() -> list[set[str]]:
    section = METRICS_DOC.read_text().split("## Alerts", 1)[1].split("\n## ", 1)[0]
    tables: list[set[str]] = []
    current: set[str] | None = None
    for line in section.splitlines():
        if line.startswith("| `"):
            if current is None:
                current = set()
                tables.append(current)
            current.add(line.split("`")[1])
        elif not line.startswith("|"):
            current = None
    return tables


def test_the_alerts_page_lists_the_pushed_and_the_shipped_alerts() -> None:
    pushed, shipped = alert_tables()[:2]
    assert pushed == set(ALERT_NAMES)
    rules = yaml.safe_load((REPO / "deploy" / "prometheusrule.yaml").read_text())
    names = {r["alert"] for g in rules["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert shipped == names
