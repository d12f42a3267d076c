"""What the egress keeps per dataflow: results with offsets, latency, errors.

Latency of a result = the time it reaches the egress minus the ingest time of
the message that made it computable (for a window result: the watermark or
event that closed the window).
"""

from __future__ import annotations

import bisect
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from cameo_actors.operators.base import ErrorRecord, Event

#: Histogram bucket upper bounds in ms (1 ms .. 10 s), Prometheus style (cumulative on export).
LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


@dataclass
class LatencyStats:
    """Counts, a fixed-bucket histogram, and recent samples for percentiles."""

    target_ms: float
    count: int = 0
    within_target: int = 0
    sum_ms: float = 0.0
    max_ms: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_MS) + 1))
    #: (latency_ms, results) of recent batches; results of one batch share a latency.
    recent: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=20_000))

    def record(self, latency_ms: float, n: int = 1) -> None:
        self.count += n
        self.sum_ms += latency_ms * n
        if latency_ms <= self.target_ms:
            self.within_target += n
        if latency_ms > self.max_ms:
            self.max_ms = latency_ms
        self.buckets[bisect.bisect_left(LATENCY_BUCKETS_MS, latency_ms)] += n
        self.recent.append((latency_ms, n))

    def percentile(self, q: float) -> float | None:
        """The q-quantile (0..1) of recent results' latency, weighted by results."""
        if not self.recent:
            return None
        samples = sorted(self.recent)
        total = sum(n for _, n in samples)
        rank = q * total
        seen = 0
        for latency, n in samples:
            seen += n
            if seen >= rank:
                return latency
        return samples[-1][0]

    def summary(self) -> dict[str, Any]:
        return {
            "results": self.count,
            "target_ms": self.target_ms,
            "within_target": self.within_target / self.count if self.count else None,
            "p50_ms": self.percentile(0.5),
            "p95_ms": self.percentile(0.95),
            "p99_ms": self.percentile(0.99),
            "max_ms": self.max_ms if self.count else None,
            "mean_ms": self.sum_ms / self.count if self.count else None,
        }

    def merge(self, other: LatencyStats) -> None:
        """Fold another executor's stats into these (for a dataflow spread over executors)."""
        self.count += other.count
        self.within_target += other.within_target
        self.sum_ms += other.sum_ms
        self.max_ms = max(self.max_ms, other.max_ms)
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.recent.extend(other.recent)

    def to_dict(self) -> dict[str, Any]:
        return {"target_ms": self.target_ms, "count": self.count, "within_target": self.within_target,
                "sum_ms": self.sum_ms, "max_ms": self.max_ms, "buckets": list(self.buckets),
                "recent": list(self.recent)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LatencyStats:
        s = cls(target_ms=d["target_ms"], count=d["count"], within_target=d["within_target"],
                sum_ms=d["sum_ms"], max_ms=d["max_ms"], buckets=list(d["buckets"]))
        s.recent.extend((float(a), int(b)) for a, b in d["recent"])
        return s


class ResultLog:
    """A sink's results with offsets, kept until a reader commits them.

    Each row is (event, ingest_ms, egress_ms). Offsets count rows from the
    first result ever appended, so a reader that restarts resumes exactly.
    """

    def __init__(self) -> None:
        self._rows: deque[tuple[Event, float, float]] = deque()
        self._base = 0  # offset of self._rows[0]

    @property
    def end_offset(self) -> int:
        return self._base + len(self._rows)

    @property
    def committed_offset(self) -> int:
        return self._base

    def __len__(self) -> int:
        return len(self._rows)

    def append(self, events: list[Event], ingest_ms: float, egress_ms: float) -> None:
        self._rows.extend((e, ingest_ms, egress_ms) for e in events)

    def read(self, start: int, end: int | None = None) -> list[tuple[Event, float, float]]:
        """Rows with offsets in [start, end); start below the committed offset is an error."""
        if start < self._base:
            raise ValueError(f"offset {start} was committed already (first kept: {self._base})")
        stop = self.end_offset if end is None else min(end, self.end_offset)
        return [self._rows[i - self._base] for i in range(start, max(start, stop))]

    def commit(self, offset: int) -> None:
        """Drop rows below `offset` (a reader persisted them)."""
        while self._base < offset and self._rows:
            self._rows.popleft()
            self._base += 1


class ErrorLog:
    """A dataflow's error output: recent records and counts per (step, kind)."""

    def __init__(self, keep: int = 10_000) -> None:
        self.records: deque[ErrorRecord] = deque(maxlen=keep)
        self.counts: Counter[tuple[str, str]] = Counter()

    def extend(self, errors: list[ErrorRecord]) -> None:
        self.records.extend(errors)
        self.counts.update((e.step, e.kind) for e in errors)
