"""A one-line progress bar for a terminal, shared by the commands that take a while (``backtest``, the
Prometheus reads of ``backtest``/``simulate``/``export``).

Why it exists: a backtest or a two-week fetch takes from seconds to minutes, and a silent terminal looks hung.
The bar is drawn only on a terminal (callers check ``stream.isatty()``), so piped or captured stderr stays
empty unless something went wrong; it is redrawn at most ten times a second and erased when done.
"""

from __future__ import annotations

import time
from typing import TextIO

__all__ = ["ProgressBar"]


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

    def __call__(self, done: int) -> None:
        now = time.perf_counter()
        if now - self.drawn < 0.1 and done < self.total:
            return
        self.drawn = now
        per_label = self.total // max(1, len(self.labels))
        label = self.labels[max(0, min(len(self.labels) - 1, (done - 1) // max(1, per_label)))]
        frac = min(1.0, done / self.total)
        bar = "#" * int(30 * frac)
        self.stream.write(f"\r{self.title} [{bar:<30}] {frac:4.0%} {label:<16} {now - self.started:5.0f}s")
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r" + " " * (len(self.title) + 62) + "\r")
        self.stream.flush()
