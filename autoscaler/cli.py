"""The ``predictive-autoscaler`` command: a thin dispatcher over ``autoscaler.commands``.

Each subcommand lives in its own module exposing ``register(subparsers)`` and ``run(args) -> int``
so that the controller's heavy imports (kubernetes, prophet) are paid only by the command that
needs them, and so commands are tested one by one.

Errors the user can act on (bad trace, unknown model, malformed config) are raised as
``UserError`` (or ``TraceError``/``ValueError`` from parsing) and printed as one line on stderr
with exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from autoscaler import __version__
from autoscaler.traces import TraceError, parse_duration

COMMANDS = ("backtest", "simulate", "run", "explain")


class UserError(Exception):
    """An error caused by the user's input; printed as one line, exit status 2."""


def duration_flag(flag: str, text: str) -> int:
    """A command-line duration (``15m``, ``90s``, ``1d``) in seconds, or a ``UserError`` naming the flag."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise UserError(f"{flag}: {exc}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="predictive-autoscaler",
        description="Forecast inference demand and pre-scale GPU Deployments before it lands.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"autoscaler.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"autoscaler.commands.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        code: int = args.handler(args)
    except (UserError, TraceError) as exc:
        print(f"predictive-autoscaler {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``simulate | head``): not an error of ours. Point stdout at /dev/null so that
        # the interpreter's final flush does not raise again, and exit as a killed-by-SIGPIPE process would.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    return code


if __name__ == "__main__":
    sys.exit(main())
