"""What every system in the peer comparison runs: the same queries over the same seeded events.

Throughput query (per core, bounded input): filter `value > 10` -> map (keep
ts, key, value) -> key by `key` -> 1 s tumbling count per key, over
`bench.harness.workload.throughput_workload()` (event time `ts` in ms, 10 events per ms).

Two-tenant latency (live input, one shared machine):
- alerts: filter `value >= 0` (every event is a result), target 50 ms,
  `alerts_workload()`: 1,000 events/s in batches every 10 ms;
- bulk: map `bench.harness.work.burn` (a fixed ~45 µs of Python per event) -> key by
  `key` -> 1 s tumbling count, target 1 s, `bulk_workload(rate)`.
Latency of an alert = time its result is visible at the sink - its event time
(`ts`, the wall clock when it was due to be sent).

Every peer writes a JSON shaped like `result(...)` (latencies summarized by
`bench.harness.stats.latency_summary`) so `python -m bench.peers` can put them in one
table.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from bench.harness.workload import Workload

ALERTS_TARGET_MS = 50.0
BULK_TARGET_MS = 1000.0
ALERTS_FILTER = "value >= 0"


def alerts_workload(seconds: float, seed: int = 2) -> Workload:
    return Workload(rate_eps=1_000, seconds=seconds, period_s=0.01, keys=10, seed=seed)


def bulk_workload(rate_eps: float, seconds: float, seed: int = 3) -> Workload:
    return Workload(rate_eps=rate_eps, seconds=seconds, period_s=0.1, keys=200, zipf_s=0.0, seed=seed)


def result(system: str, version: str, *, throughput: dict[str, Any] | None = None,
           latency: dict[str, Any] | None = None, notes: list[str] | None = None) -> dict[str, Any]:
    """One peer's figures.

    throughput: {"events", "seconds", "eps", "eps_per_core", "parallelism"};
    latency: {"alerts": latency_summary(...), "bulk": latency_summary(...),
              "offered_eps": {"alerts": x, "bulk": y}, "seconds": s, "warmup_s": w}.
    """
    return {"system": system, "version": version, "machine": machine(),
            "throughput": throughput, "latency": latency, "notes": notes or []}


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
