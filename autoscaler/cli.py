"""The ``predictive-autoscaler`` command: a thin dispatcher over ``autoscaler.commands``.

Each subcommand lives in its own module exposing ``register(subparsers)`` and ``run(args) -> int``
so that the controller's heavy imports (kubernetes, prophet) are paid only by the command that
needs them, and so commands are tested one by one.

Errors the user can act on (bad trace, unknown model, malformed config) are raised as
``UserError`` (or ``TraceError``/``ValueError`` from parsing) and printed as one line on stderr
with exit status 2; anything else is a bug and keeps its traceback. argparse's own errors (an unknown
flag, ``--peak-replicas abc``) are one line too, without the usage block, and a negative value after a
flag (``--horizon -15m``) reaches the flag's own check instead of being taken for an option.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import re
import sys
import typing
from collections.abc import Sequence
from pathlib import Path

from autoscaler import __version__
from autoscaler.domain.demand import DEMAND_UNITS, DemandUnit, TokenWeights
from autoscaler.errors import UserError
from autoscaler.plot_files import check_plot_path
from autoscaler.traces import TraceError, parse_duration

COMMANDS = ("backtest", "simulate", "export", "trace", "capacity", "run", "explain")


def warn(command: str, message: str) -> None:
    """One line on stderr about input that was used but may not say what its author meant (``predictive-autoscaler
    simulate: warning: ...``), so that it is seen before the results it shaped."""
    print(f"predictive-autoscaler {command}: warning: {message}", file=sys.stderr, flush=True)


# A value that starts with a dash but is not an option: -15m, -1e3, -.5 (argparse only lets -5 and -0.5 through).
_NEGATIVE_VALUE = re.compile(r"^-[0-9.]")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr (no usage block), exit status 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# The unit a bare number given to a duration flag most likely meant, first in the fix the error suggests.
_LIKELY_UNIT = {"--horizon": "m", "--origin-every": "m", "--refit-every": "h", "--window": "d", "--min-train": "d",
                "--since": "d", "--step": "s", "--pod-startup": "s", "--node-startup": "s", "--decision-interval": "s"}


def duration_flag(flag: str, text: str) -> int:
    """A command-line duration (``15m``, ``90s``, ``1d``) in seconds, or a ``UserError`` naming the flag.

    A bare number is refused, with the fix in the line (``--horizon 15`` would be 15 seconds, and the person who
    typed it almost always meant minutes); zero and negative numbers get "must be positive" first.
    """
    s = text.strip().lower()
    try:
        bare = float(s)
    except ValueError:
        bare = None
    if bare is not None and math.isfinite(bare) and bare > 0:
        shown = f"{bare:g}" if bare != int(bare) or bare >= 1e15 else str(int(bare))
        likely = _LIKELY_UNIT.get(flag, "s")
        others = ", ".join(f"{shown}{u}" for u in "smhd" if u != likely)
        raise UserError(f"{flag}: {text.strip()} has no unit; write {flag} {shown}{likely} (or {others})")
    try:
        return parse_duration(text)
    except ValueError:
        pass
    try:
        number = float(s[:-1] if s and s[-1] in "smhdw" else s)
    except ValueError:
        raise UserError(f"{flag}: invalid duration {text!r} (use e.g. 90s, 15m, 2h, 1d)") from None
    raise UserError(f"{flag}: must be positive, got {text.strip()}" if number <= 0 or number != number
                    else f"{flag}: invalid duration {text!r} (use e.g. 90s, 15m, 2h, 1d)")


def add_target_arguments(parser: argparse.ArgumentParser, example: str) -> None:
    """The Deployment a command is about: ``NAMESPACE/NAME`` as a positional, or ``--deployment NAMESPACE/NAME``
    as ``backtest``, ``simulate`` and ``export`` take it (one form works everywhere)."""
    parser.add_argument("target", nargs="?", default=None, metavar="NAMESPACE/NAME",
                        help=f"the Deployment, e.g. {example}")
    parser.add_argument("--deployment", dest="deployment_flag", default=None, metavar="NAMESPACE/NAME",
                        help="the same Deployment, as backtest, simulate and export take it")


def target_of(args: argparse.Namespace) -> str:
    """The Deployment of :func:`add_target_arguments`, given once; else a ``UserError``."""
    positional, flag = args.target, args.deployment_flag
    if positional is not None and flag is not None and positional != flag:
        raise UserError(f"two Deployments given ({positional!r} and --deployment {flag!r}); give one")
    value = positional if positional is not None else flag
    if value is None:
        raise UserError("which Deployment? give NAMESPACE/NAME (or --deployment NAMESPACE/NAME)")
    return str(value)


def plot_flag(path: str | Path, flag: str = "--plot") -> str:
    """The image format ``--plot PATH`` will be written in, checked before a long run; else a ``UserError``."""
    try:
        return check_plot_path(path)
    except ValueError as exc:
        raise UserError(f"{flag}: {exc}") from None


def add_demand_arguments(parser: argparse.ArgumentParser, capacity_flag: bool = False) -> None:
    """``--demand requests|tokens`` and ``--token-weights IN,OUT`` (``backtest``, ``simulate``)."""
    sizing = " (--capacity-per-replica is then tokens/s, --peak-replicas sizes from the token peak)" \
        if capacity_flag else ""
    parser.add_argument(
        "--demand", default=None, metavar="{" + ",".join(DEMAND_UNITS) + "}",
        help="what demand is counted in: requests/s (default), or tokens/s = input_tokens x IN + output_tokens x OUT "
        f"(--token-weights), from the trace's token columns or vLLM's token counters{sizing}",
    )
    parser.add_argument(
        "--token-weights", default=None, metavar="IN,OUT",
        help="with --demand tokens: the weights of input (prompt) and output (generated) tokens (default 1,1)",
    )


def demand_flags(args: argparse.Namespace) -> tuple[DemandUnit, TokenWeights]:
    """The demand unit and token weights of ``--demand``/``--token-weights``, or a ``UserError`` naming the flag."""
    raw = "requests" if getattr(args, "demand", None) is None else str(args.demand).strip()
    if raw not in DEMAND_UNITS:
        raise UserError(f"--demand: unknown unit {raw!r}; choose from {', '.join(DEMAND_UNITS)}")
    unit = DemandUnit(raw)
    weights_text = getattr(args, "token_weights", None)
    if weights_text is None:
        return unit, TokenWeights()
    if unit is not DemandUnit.TOKENS:
        raise UserError("--token-weights: weighs token demand; add --demand tokens")
    try:
        return unit, TokenWeights.parse(str(weights_text))
    except ValueError as exc:
        raise UserError(f"--token-weights: {exc}") from None


def _value_flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and its subcommands that takes one value."""
    flags: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags |= _value_flags(sub)
        elif action.option_strings and action.nargs is None:
            flags.update(action.option_strings)
    return flags


def join_negative_values(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``['--horizon', '-15m']`` -> ``['--horizon=-15m']`` for flags that take a value, so that a negative
    value gets the flag's own one-line message ("must be positive") instead of argparse's
    "expected one argument"."""
    flags = _value_flags(parser)
    out: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            out.extend(args[i:])
            break
        if arg in flags and i + 1 < len(args) and _NEGATIVE_VALUE.match(args[i + 1]):
            out.append(f"{arg}={args[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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


def _command_parser(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    """The parser of subcommand ``command`` (``parser`` itself when there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            sub: argparse.ArgumentParser = action.choices[command]
            return sub
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(join_negative_values(parser, sys.argv[1:] if argv is None else argv))
    if extra:  # reported by the subcommand's parser, so the line names the command and its --help
        _command_parser(parser, getattr(args, "command", None)).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "command", None):
        print(f"{parser.prog}: error: no command given; choose one of {', '.join(COMMANDS)} (see {parser.prog} "
              "--help)", file=sys.stderr)
        return 2
    try:
        code: int = args.handler(args)
    except (UserError, TraceError) as exc:
        command = " ".join(c for c in (args.command, getattr(args, "trace_command", None)) if c)  # "trace synth"
        print(f"predictive-autoscaler {command}: error: {exc}", file=sys.stderr)
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
