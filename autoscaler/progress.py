"""Progress for the commands that take a while (``backtest``, ``simulate``, the Prometheus reads of
``backtest``/``simulate``/``export``/``capacity``): a one-line bar on a terminal, a line every few seconds elsewhere.

Why it exists: a backtest, a long simulation or a two-week fetch takes from seconds to minutes, and a silent
terminal, or a silent CI log, looks hung. On a terminal the bar is redrawn at most ten times a second and
erased when done. Anywhere else (a CI log, a file, a pipe) a carriage-return bar would be garbage, so
:class:`LineProgress` writes one plain line every :data:`LINE_EVERY_SECONDS` instead, the way ``pip`` and
``kubectl`` report in CI logs; the first only after that long, so a run that finishes quickly leaves stderr
empty (scripts that treat any stderr as a failure keep working for them). :class:`Heartbeat` does the same for
work that reports no progress of its own (one simulated policy), from a timer thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Protocol, TextIO

__all__ = ["LINE_EVERY_SECONDS", "Heartbeat", "LineProgress", "Progress", "ProgressBar", "progress_for"]

LINE_EVERY_SECONDS = 10.0


class Progress(Protocol):
    """What the commands call: with the units done, then ``close()`` at the end."""

    def __call__(self, done: int) -> None: ...

    def close(self) -> None: ...


class ProgressBar:
    """``title [#####     ] 40% label 12s`` on ``stream``; call it with the units done, ``close()`` at the end.

    ``labels`` name the equal shares of ``total`` done one after another (models, queries); the current one
    is shown.
    """

    def __init__(self, total: int, labels: list[str], stream: TextIO, title: str = "backtest") -> None:
        self.total = max(1, total)
        self.labels = labels or [""]
        self.stream = stream
        self.title = title
        self.started = time.perf_counter()
        self.drawn = 0.0

    def label(self, done: int) -> str:
        per_label = self.total // max(1, len(self.labels))
        return self.labels[max(0, min(len(self.labels) - 1, (done - 1) // max(1, per_label)))]

    def __call__(self, done: int) -> None:
        now = time.perf_counter()
        if now - self.drawn < 0.1 and done < self.total:
            return
        self.drawn = now
        frac = min(1.0, done / self.total)
        bar = "#" * int(30 * frac)
        self.stream.write(f"\r{self.title} [{bar:<30}] {frac:4.0%} {self.label(done):<16} {now - self.started:5.0f}s")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r" + " " * (len(self.title) + 62) + "\r")
        self.stream.flush()


class LineProgress(ProgressBar):
    """``title: 40% (label), 20s elapsed`` as a line of its own on ``stream``, at most every ``every`` seconds and
    the first only after ``every`` seconds; nothing on ``close()``."""

    def __init__(self, total: int, labels: list[str], stream: TextIO, title: str = "backtest",
                 every: float | None = None) -> None:
        super().__init__(total, labels, stream, title)
        self.every = LINE_EVERY_SECONDS if every is None else every
        self.drawn = self.started

    def __call__(self, done: int) -> None:
        now = time.perf_counter()
        if now - self.drawn < self.every:
            return
        self.drawn = now
        label = self.label(done)
        self.stream.write(f"{self.title}: {min(1.0, done / self.total):.0%}{f' ({label})' if label else ''}, "
                          f"{now - self.started:.0f}s elapsed\n")
        self.stream.flush()

    def close(self) -> None:
        pass


def progress_for(total: int, labels: list[str], stream: TextIO, title: str) -> Progress:
    """A bar on a terminal, lines every few seconds elsewhere."""
    if stream.isatty():
        return ProgressBar(total, labels, stream, title)
    return LineProgress(total, labels, stream, title)


class Heartbeat:
    """``title: status(), 20s elapsed`` on ``stream`` every ``every`` seconds while the ``with`` block runs (the
    first after ``every`` seconds), from a daemon thread: for work that cannot report its own progress."""

    def __init__(self, stream: TextIO, title: str, status: Callable[[], str], every: float | None = None) -> None:
        self.stream = stream
        self.title = title
        self.status = status
        self.every = LINE_EVERY_SECONDS if every is None else every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"{title}-progress", daemon=True)
        self.started = time.perf_counter()

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            elapsed = time.perf_counter() - self.started
            self.stream.write(f"{self.title}: {self.status()}, {elapsed:.0f}s elapsed\n")
            self.stream.flush()

    def __enter__(self) -> Heartbeat:
        self.started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
