"""The two-tenant setup most suites build on: "alerts" (latency-sensitive, 50 ms) beside
"bulk" (a CPU-bound map and a keyed window, 1 s), and the pool's capacity for bulk."""

from __future__ import annotations

import threading
import time
from typing import Any

from bench.harness.feeds import generate
from cameo_actors import Dataflow, count

SCHEMA = {"ts": "int", "key": "str", "value": "float"}
#: The same for every mode: ingress cut into messages of ~5 ms of bulk work.
CONFIG: dict[str, Any] = dict(max_message_events=100)


def alerts() -> Dataflow:
    return (Dataflow("alerts", latency_target_ms=50, tenant="ops")
            .source("s", schema=SCHEMA, event_time="ts")
            .filter("value >= 0").sink("o"))


def bulk(name: str = "bulk", tenant: str = "analytics", weight: float = 1.0,
         window_ms: int = 1000, target_ms: float = 1000) -> Dataflow:
    """source -> burn map -> key_by -> tumbling count, parallelism 2, target 1 s."""
    return (Dataflow(name, latency_target_ms=target_ms, tenant=tenant, weight=weight)
            .source("s", schema=SCHEMA, event_time="ts", parallelism=2)
            .map(function="bench.harness.work:burn", parallelism=2)
            .key_by("key").window(tumbling_ms=window_ms, parallelism=2).aggregate(n=count())
            .sink("o"))


def calibrate_capacity(seconds: float) -> float:
    """Bulk events/s the shared pool sustains alone, flat out (backpressure-limited)."""
    from cameo_actors.runtime import Runtime, RuntimeConfig

    rt = Runtime.start(RuntimeConfig(num_executors=2, **CONFIG), pool="mt-calibrate")
    feeder = Runtime.connect(pool="mt-calibrate", address=None)
    try:
        rt.deploy(bulk())
        stop = threading.Event()
        t = threading.Thread(target=generate, args=(feeder, "bulk", 1e9, 0.005, stop, 200, 1000))
        t.start()
        time.sleep(2.0)
        n0 = rt.stats("bulk")["events_in"]
        time.sleep(seconds)
        n1 = rt.stats("bulk")["events_in"]
        stop.set()
        t.join()
        return (n1 - n0) / seconds
    finally:
        rt.shutdown(stop_ray=False)
