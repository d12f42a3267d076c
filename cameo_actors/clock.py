"""Physical time, injected: logic reads time from a Clock, never from the OS directly.

All physical times in cameo are float milliseconds since the Unix epoch (UTC),
the same unit as event times, so latencies and deadlines need no conversion.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> float: ...


class SystemClock:
    """Wall-clock time in ms since the epoch (comparable across processes of one host)."""

    def now_ms(self) -> float:
        return time.time() * 1000.0


class FakeClock:
    """A clock that moves only when told to, for tests.

    >>> c = FakeClock(1000.0); c.advance(5); c.now_ms()
    1005.0
    """

    def __init__(self, start_ms: float = 0.0) -> None:
        self._now = float(start_ms)

    def now_ms(self) -> float:
        return self._now

    def advance(self, ms: float) -> None:
        if ms < 0:
            raise ValueError(f"FakeClock.advance: expected ms >= 0, got {ms}")
        self._now += ms

    def set(self, now_ms: float) -> None:
        self._now = float(now_ms)
