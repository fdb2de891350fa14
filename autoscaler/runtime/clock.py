"""The only place that reads the wall clock.

Decisions take ``now`` as data (kopf's and aibrix's lesson: a fake clock makes every time-based
rule testable); the loop asks a ``Clock`` for it once per tick. ``FakeClock`` is the test double:
it is a real implementation of the same two methods, not a mock.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        """Wait ``seconds``; return True when woken early by ``stop``."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        if stop is None:
            time.sleep(max(0.0, seconds))
            return False
        return stop.wait(max(0.0, seconds))


class FakeClock:
    """A clock that moves only when told to; ``sleep`` advances it instantly."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def sleep(self, seconds: float, stop: threading.Event | None = None) -> bool:
        if stop is not None and stop.is_set():
            return True
        self._now += max(0.0, seconds)
        return False


def utc(ts: float) -> datetime:
    """A Unix timestamp as an aware UTC datetime (for Kubernetes times)."""
    return datetime.fromtimestamp(ts, tz=UTC)
