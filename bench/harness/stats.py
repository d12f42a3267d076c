"""Quantiles and latency summaries, defined once for every suite: result latencies by
nearest rank (`quantile`), and the interpolated p99 that `bench.service` reports."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any


def quantile(values: Iterable[float], q: float) -> float | None:
    """The q-quantile of `values` by nearest rank (the sorted values' item at `int(q * n)`,
    the last one at most); None when there are none.

    >>> quantile([5.0, 1.0, 3.0, 2.0], 0.5), quantile([], 0.99)
    (3.0, None)
    """
    v = sorted(values)
    if not v:
        return None
    return v[min(len(v) - 1, int(q * len(v)))]


def interpolated_p99(samples: list[float]) -> float:
    """The p99 by `statistics.quantiles` (interpolated between ranks, the "exclusive"
    method), as `bench.service` reports its API calls; nan for fewer than two samples."""
    return statistics.quantiles(samples, n=100)[98] if len(samples) >= 2 else float("nan")


def latency_summary(latencies_ms: list[float], target_ms: float) -> dict[str, Any]:
    """p50/p95/p99/max and the share within target, the fields every scenario reports."""
    if not latencies_ms:
        return {"results": 0, "target_ms": target_ms}
    lat = sorted(latencies_ms)
    return {"results": len(lat), "p50_ms": quantile(lat, 0.5), "p95_ms": quantile(lat, 0.95),
            "p99_ms": quantile(lat, 0.99), "max_ms": lat[-1],
            "within_target": sum(1 for x in lat if x <= target_ms) / len(lat), "target_ms": target_ms}


def summarize(rows: list[tuple[dict[str, Any], float, float]], since_ms: float,
              target_ms: float) -> dict[str, Any]:
    """`latency_summary` of result rows (event, ingest ms, egress ms) ingested from
    `since_ms` on, latency = egress - ingest; only `results` when there are none."""
    lat = [eg - ing for _, ing, eg in rows if ing >= since_ms]
    if not lat:
        return {"results": 0}
    return latency_summary(lat, target_ms)
