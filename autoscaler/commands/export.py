"""``predictive-autoscaler export``: a Deployment's history from Prometheus as a trace CSV.

Why it exists: every operator workflow (``backtest``, ``simulate``, choosing a profile) starts from a trace, and
the history worth replaying is the one the controller forecasts, in the operator's own Prometheus. This command
writes it (``timestamp,requests[,input_tokens,output_tokens]``, counts per bin, a bin without a value an empty
cell) so that a run can be shared and replayed without access to the cluster. It reads through
``autoscaler.history``, the loop's own fetch: same query, namespace restriction, pod-to-Deployment mapping and
missing-data handling, so ``backtest --trace`` on the file gives what ``backtest --prometheus-url`` gives (a test
checks both, and the file against the loop's history, bin by bin).

The client is the controller's own Prometheus adapter (httpx), not ``prometheus-api-client``: the adapter
already has the controller's timeouts, retries, bearer token file, CA bundle, chunking and the policies that
make this *the controller's* series; the library would be a second HTTP stack (requests, pandas) behind the
same two endpoints, and a second place where "the same series" could drift.

Token columns come from the ``prompt_token_rate`` and ``generation_token_rate`` queries (vLLM's
``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total``; overridable in ``prometheus.queries``), each
only when it has values for the Deployment. Output: stdout, or ``-o FILE`` (``.gz``: gzip, with a zero mtime so
the same history gives the same bytes), written to a temporary file first and renamed, so a failed export never
leaves half a trace behind.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from autoscaler.errors import UserError
from autoscaler.history import add_arguments, check_source_flags, trace_from_args
from autoscaler.runtime.clock import SystemClock
from autoscaler.traces import Trace, write_trace

DESCRIPTION = (
    "Write one Deployment's request history, as the controller reads it from Prometheus (the same query, "
    "namespace restriction, pod-to-Deployment mapping and handling of missing data), as a trace CSV: "
    "timestamp,requests[,input_tokens,output_tokens], one row per bin, each value the count in the bin, an empty "
    "cell where Prometheus had no value. backtest and simulate replay it with --trace. Bins before the first "
    "value and after the last are left out."
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "export", help="write a Deployment's history from Prometheus as a trace CSV", description=DESCRIPTION
    )
    add_arguments(parser, trace=False)
    parser.add_argument("-o", "--output", default=None, metavar="FILE",
                        help="where to write (default: stdout); a name ending in .gz is gzipped")
    parser.add_argument("--no-tokens", action="store_true", help="leave out the token columns")
    parser.set_defaults(handler=run)


def _iso(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_file(trace: Trace, path: Path) -> None:
    """``trace`` to ``path`` (gzip for ``.gz``) through a temporary file renamed into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as raw:
            if path.name.endswith(".gz"):
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, io.TextIOWrapper(
                    gz, encoding="utf-8", newline=""
                ) as text:
                    write_trace(trace, text)
            else:
                with io.TextIOWrapper(raw, encoding="utf-8", newline="") as text:
                    write_trace(trace, text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UserError(f"--output: cannot write {path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    check_source_flags(args, None)
    if args.deployment is None:
        raise UserError("export needs --deployment NAMESPACE/NAME (the Deployment whose history to write)")
    output = None if args.output in (None, "-") else Path(args.output)
    if output is not None and output.is_dir():
        raise UserError(f"--output: {output} is a directory; give a file name (e.g. {output / 'trace.csv'})")
    if output is not None and not output.parent.is_dir():
        raise UserError(f"--output: no such directory {output.parent}")
    trace, url = trace_from_args(args, now=SystemClock().now(), tokens=not args.no_tokens, title="export")
    if output is None:
        write_trace(trace, sys.stdout)
        sys.stdout.flush()
        return 0
    write_file(trace, output)
    step = trace.step_seconds
    missing = int(np.isnan(trace.requests.values).sum())
    columns = ", ".join(["requests", *trace.tokens])
    print(
        f"wrote {len(trace.requests)} bins of {step}s ({_iso(trace.requests.start)} to {_iso(trace.requests.end)}) "
        f"of {trace.name} from Prometheus at {url} to {output}: {columns}"
        + (f"; {missing} bins without a value (empty cells)" if missing else "")
    )
    return 0
