"""Statistics: latency counts, and the one place where the parts of a dataflow spread
over executors are merged (what each executor counts is `executor/counters.py`).

Latency of a result = the time it reaches the egress minus the ingest time of
the message that made it computable (for a window result: the watermark or
event that closed the window).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cameo_actors.runtime.boundary import (
    LATENCY_BUCKETS_MS,
    DataflowInfo,
    DataflowMetrics,
    DataflowPart,
    DataflowStats,
    LatencySummary,
)


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

    def percentiles(self, *qs: float) -> list[float | None]:
        """The q-quantiles (0..1) of recent results' latency, weighted by results, from
        one sort of the recent samples."""
        if not self.recent:
            return [None] * len(qs)
        samples = sorted(self.recent)
        total = sum(n for _, n in samples)
        out: list[float | None] = []
        for q in qs:
            rank, seen, found = q * total, 0, samples[-1][0]
            for latency, n in samples:
                seen += n
                if seen >= rank:
                    found = latency
                    break
            out.append(found)
        return out

    def summary(self) -> LatencySummary:
        p50, p95, p99 = self.percentiles(0.5, 0.95, 0.99)
        return {
            "results": self.count,
            "target_ms": self.target_ms,
            "within_target": self.within_target / self.count if self.count else None,
            "p50_ms": p50,
            "p95_ms": p95,
            "p99_ms": p99,
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


@dataclass
class Merged:
    """A dataflow's parts folded together."""

    latency: LatencyStats
    errors: dict[str, int]
    events_in: int
    events_out: int
    backlog: int
    busy_ms: float
    failures: list[str]
    held: list[str]
    connectors: dict[str, dict[str, Any]]


def merge_parts(target_ms: float, parts: Iterable[DataflowPart]) -> Merged:
    """Fold the parts of one dataflow (one per executor it runs on) together."""
    m = Merged(LatencyStats(target_ms), {}, 0, 0, 0, 0.0, [], [], {})
    for p in parts:
        m.latency.merge(LatencyStats.from_dict(p["latency"]))
        for k, n in p["errors"].items():
            m.errors[k] = m.errors.get(k, 0) + n
        m.events_in += p["events_in"]
        m.events_out += p["events_out"]
        m.backlog += p["backlog"]
        m.busy_ms += p["busy_ms"]
        m.failures += p["failures"]
        m.held += p["held"]
        m.connectors.update(p.get("connectors", {}))
    return m


def dataflow_stats(info: DataflowInfo, parts: Iterable[DataflowPart]) -> DataflowStats:
    spec = info["spec"]
    m = merge_parts(spec["latency_target_ms"], parts)
    return {
        "name": info["name"],
        "tenant": spec["tenant"],
        **m.latency.summary(),
        "events_in": m.events_in,
        "events_out": m.events_out,
        "backlog": m.backlog,
        "busy_ms": m.busy_ms,
        "errors": m.errors,
        "failures": m.failures,
        "held": m.held,
        "sources": sorted(s["id"] for s in spec["steps"] if s["op"] == "source"),
        "latency_buckets": m.latency.buckets,
        "connectors": m.connectors,
    }


def dataflow_metrics(info: DataflowInfo, parts: Iterable[DataflowPart]) -> DataflowMetrics:
    spec = info["spec"]
    m = merge_parts(spec["latency_target_ms"], parts)
    lat = m.latency
    p50, p95, p99 = lat.percentiles(0.5, 0.95, 0.99)
    return {
        "name": info["name"], "tenant": spec["tenant"], "target_ms": spec["latency_target_ms"],
        "weight": spec["scheduling"]["weight"], "results": lat.count,
        "within_target_count": lat.within_target, "sum_ms": lat.sum_ms,
        "buckets": list(lat.buckets), "p50_ms": p50, "p95_ms": p95, "p99_ms": p99,
        "events_in": m.events_in, "events_out": m.events_out, "backlog": m.backlog,
        "errors": m.errors, "checkpoints": info.get("checkpoints"),
        "recoveries": info.get("recoveries", 0), "connectors": m.connectors,
    }
