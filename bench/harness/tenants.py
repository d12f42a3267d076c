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


#: The rate bulk runs at while its cost is measured: well within the pool's reach.
PROBE_EPS = 3_000.0
#: The pool's executors (every suite's pool).
EXECUTORS = 2


def calibrate_capacity(seconds: float) -> float:
    """Bulk events/s the pool's executors sustain, from their busy time per event: bulk
    alone at `PROBE_EPS`, the executors' busy ms over the events it took in, and 1,000 ms
    per second of each executor. (Pushed flat out from this process instead, the rate
    measured the push path: at 85% of what it gave, the executors were 40% busy.)"""
    from cameo_actors.runtime import Runtime, RuntimeConfig

    rt = Runtime.start(RuntimeConfig(num_executors=EXECUTORS, **CONFIG), pool="mt-calibrate")
    feeder = Runtime.connect(pool="mt-calibrate", address=None)
    try:
        rt.deploy(bulk())
        stop = threading.Event()
        t = threading.Thread(target=generate, args=(feeder, "bulk", PROBE_EPS, 0.1, stop, 200))
        t.start()
        time.sleep(2.0)  # warm: the first messages run slower
        busy0, n0 = _busy_ms(rt), rt.stats("bulk")["events_in"]
        time.sleep(seconds)
        busy1, n1 = _busy_ms(rt), rt.stats("bulk")["events_in"]
        stop.set()
        t.join()
        if n1 <= n0 or busy1 <= busy0:
            raise RuntimeError(f"calibration: bulk took in {n1 - n0} events in {seconds:g} s")
        return EXECUTORS * 1000.0 / ((busy1 - busy0) / (n1 - n0))
    finally:
        rt.shutdown(stop_ray=False)


def _busy_ms(rt: Any) -> float:
    return float(sum(e["busy_ms"] for e in rt.executor_stats()))
