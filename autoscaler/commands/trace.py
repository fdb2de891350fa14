"""``predictive-autoscaler trace synth|from-log``: make a trace CSV, from a seeded generator or from an access log.

Why it exists: ``backtest`` and ``simulate`` replay trace CSVs (``timestamp,requests[,input_tokens,output_tokens]``,
counts per bin). ``export`` writes one from a Deployment's Prometheus history; these two cover the other sources.
``synth`` writes the synthetic traffic the two commands replay when given no trace (``autoscaler.synth``: a daily
and weekly cycle, bursts, a level shift, token counts; the same seed gives the same file), to look at, edit or
share; its other shapes (``bursty``, ``flat``) and seeds are what-ifs. ``from-log`` counts the requests of a web
server or gateway access log per bin (``autoscaler.access_log``: Common or Combined Log Format, or JSON lines; zero
where a bin has no request), so traffic that was never in Prometheus can be replayed too.

Both write through ``trace_from_rates``/``write_trace`` (so the file reads back with ``load_trace`` to the very
rates they built), to stdout or to ``-o FILE`` (``.gz``: gzipped; written to a temporary file and renamed, as
``export`` does).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from autoscaler.cli import duration_flag
from autoscaler.commands.export import write_file
from autoscaler.errors import UserError
from autoscaler.traces import Trace, iso_time, write_trace

SUBCOMMANDS = ("synth", "from-log")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "trace", help="make a trace CSV: synthetic traffic (synth) or an access log's requests (from-log)",
        description="Write a trace CSV (timestamp,requests[,input_tokens,output_tokens], counts per bin) that "
        "backtest and simulate replay with --trace: 'synth' from the seeded traffic generator they use by default, "
        "'from-log' from a web server or gateway access log.",
    )
    sub = parser.add_subparsers(dest="trace_command", metavar="{" + ",".join(SUBCOMMANDS) + "}")
    synth = sub.add_parser(
        "synth", help="write synthetic inference traffic (the default traffic of simulate and backtest)",
        description="Write seeded synthetic LLM inference traffic as a trace CSV: a daily cycle (peak 3x the night "
        "trough), quieter weekends, bursts, a level shift at 60% of the span, and input/output token counts per "
        "bin (code and conversation requests with the token lengths of the Azure LLM inference traces of 2023). "
        "Every number is documented in autoscaler/synth.py. Starts Monday 2024-03-04 00:00 UTC. The same options "
        "give the same file.",
    )
    synth.add_argument("--days", default=None, metavar="N", help="how many days (default 14; fractions allowed)")
    synth.add_argument("--seed", default=None, metavar="N", help="the random seed, an integer >= 0 (default 1)")
    synth.add_argument("--shape", default=None, metavar="{diurnal,bursty,flat}",
                       help="diurnal (default): inference traffic with its cycles; bursty: the same with hourly, "
                       "larger bursts on noisier traffic; flat: a constant level with noise only")
    synth.add_argument("--step", default="1m", help="the bin size (default 1m)")
    synth.add_argument("-o", "--output", default=None, metavar="FILE.csv",
                       help="where to write (default: stdout); a name ending in .gz is gzipped")
    from_log = sub.add_parser(
        "from-log", help="count an access log's requests per bin (CLF, Combined Log Format, JSON lines)",
        description="Count the requests of a web server or gateway access log per bin and write them as a trace "
        "CSV. Formats: clf (Common Log Format), combined (Combined Log Format), json (JSON lines with a timestamp: "
        "ISO 8601, or epoch seconds/milliseconds); detected from the first lines unless --format is given; gzipped "
        "logs are read as they are. Timezone offsets are applied (timestamps are UTC). A bin without a request "
        "between the first and the last is zero (an access log has a line for every request). Lines that do not "
        "parse are skipped and counted on stderr. JSON lines that all carry prompt and completion token counts "
        "(prompt_tokens/completion_tokens, input_tokens/output_tokens, or a usage object) give token columns too.",
    )
    from_log.add_argument("log", type=Path, metavar="FILE", help="the access log (plain text or gzip)")
    from_log.add_argument("--format", default=None, metavar="{clf,combined,json}",
                          help="the log's format (default: detected from its first lines)")
    from_log.add_argument("--step", default="1m", help="the bin size (default 1m)")
    from_log.add_argument("--timestamp-field", default=None, metavar="NAME",
                          help="JSON lines: the field holding the time (a dotted name reaches into nested objects; "
                          "default: the first of time, timestamp, @timestamp, ts, ... present)")
    from_log.add_argument("-o", "--output", default=None, metavar="FILE.csv",
                          help="where to write (default: stdout); a name ending in .gz is gzipped")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.trace_command == "synth":
        return run_synth(args)
    if args.trace_command == "from-log":
        return run_from_log(args)
    raise UserError(f"no subcommand given; choose one of {', '.join(SUBCOMMANDS)} (see predictive-autoscaler trace "
                    "--help)")


def _days(text: str | None) -> float:
    from autoscaler.synth import DEFAULT_DAYS

    if text is None:
        return DEFAULT_DAYS
    try:
        days = float(text)
    except ValueError:
        raise UserError(f"--days: {text.strip()!r} is not a number of days") from None
    if not (math.isfinite(days) and days > 0):
        raise UserError(f"--days: must be positive, got {text.strip()}")
    return days


def _seed(text: str | None) -> int:
    from autoscaler.synth import DEFAULT_SEED

    if text is None:
        return DEFAULT_SEED
    try:
        seed = int(text)
    except ValueError:
        raise UserError(f"--seed: {text.strip()!r} is not an integer") from None
    if seed < 0:
        raise UserError(f"--seed: must be >= 0, got {seed}")
    return seed


def _shape(text: str | None) -> str:
    from autoscaler.synth import DEFAULT_SHAPE, SHAPES

    shape = DEFAULT_SHAPE if text is None else text.strip()
    if shape not in SHAPES:
        raise UserError(f"--shape: unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
    return shape


def _step(text: str) -> int:
    step = duration_flag("--step", text)
    if step < 1:
        raise UserError(f"--step: must be at least 1s, got {text.strip()}")
    return step


def _output(text: str | None) -> Path | None:
    return None if text in (None, "-") else Path(str(text))




def _emit(trace: Trace, output: Path | None, what: str) -> None:
    """``trace`` to stdout, or to ``output`` and one line on stdout saying what was written."""
    if output is None:
        write_trace(trace, sys.stdout)
        sys.stdout.flush()
        return
    write_file(trace, output)
    columns = ", ".join(["requests", *trace.tokens])
    print(f"wrote {len(trace.requests):,} bins of {trace.step_seconds}s ({iso_time(trace.requests.start)} to "
          f"{iso_time(trace.requests.end)}) {what} to {output}: {columns}")


def run_synth(args: argparse.Namespace) -> int:
    from autoscaler.synth import synth_trace

    days, seed, shape = _days(args.days), _seed(args.seed), _shape(args.shape)
    step = _step(args.step)
    output = _output(args.output)
    try:
        trace = synth_trace(days=days, seed=seed, shape=shape, step_seconds=step)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    _emit(trace, output, f"of {trace.name}")
    return 0


def run_from_log(args: argparse.Namespace) -> int:
    from autoscaler.access_log import FORMAT_NAMES, FORMATS, log_trace, read_log

    fmt = None if args.format is None else str(args.format).strip().lower()
    if fmt is not None and fmt not in FORMATS:
        raise UserError(f"--format: unknown format {args.format!r}; choose from {', '.join(FORMATS)}")
    if args.timestamp_field is not None and fmt not in (None, "json"):
        raise UserError(f"--timestamp-field: names a field of JSON lines; --format {fmt} lines have none")
    step = _step(args.step)
    output = _output(args.output)
    parsed = read_log(args.log, fmt, args.timestamp_field)
    if args.timestamp_field is not None and parsed.format != "json":
        raise UserError(f"--timestamp-field: names a field of JSON lines, but {args.log} is "
                        f"{FORMAT_NAMES[parsed.format]}")
    if parsed.skipped:
        print(f"skipped {parsed.skipped:,} of {parsed.lines:,} lines that were not {FORMAT_NAMES[parsed.format]} "
              f"(the first: {_shown(parsed.first_skipped or '')})", file=sys.stderr)
    if parsed.format == "json" and not parsed.has_tokens and parsed.lines_with_tokens:
        print(f"token columns left out: {len(parsed.times) - parsed.lines_with_tokens:,} of {len(parsed.times):,} "
              "requests have no prompt and completion token counts", file=sys.stderr)
    trace = log_trace(parsed, step, args.log.name)
    _emit(trace, output, f"from {len(parsed.times):,} requests ({FORMAT_NAMES[parsed.format]}) in {args.log}")
    return 0


def _shown(line: str) -> str:
    return repr(line if len(line) <= 60 else line[:57] + "...")
