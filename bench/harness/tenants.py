"""The two-tenant setup most suites build on: "alerts" (latency-sensitive, 50 ms) beside
"bulk" (a CPU-bound map and a keyed window, 1 s), and the pool's capacity for bulk."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from bench.harness.cpu import CpuMeter
from bench.harness.feeds import generate
from cameo_actors import Dataflow, Stream, count

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
    df = Dataflow(name, latency_target_ms=target_ms, tenant=tenant, weight=weight)
    return _burn_and_count(df.source("s", schema=SCHEMA, event_time="ts", parallelism=2), window_ms)


def skewed_bulk(name: str = "skewed", sources: int = 4, window_ms: int = 250,
                target_ms: float = 1000) -> Dataflow:
    """`bulk` fed by `sources` sources merged into one stream (the Cameo paper's single-tenant
    shape: many upstream tasks before one keyed window), so that their event times can
    progress apart (`runner.Load.skew_ms`)."""
    df = Dataflow(name, latency_target_ms=target_ms, tenant="analytics")
    inputs = [df.source(f"s{i}", schema=SCHEMA, event_time="ts") for i in range(sources)]
    return _burn_and_count(inputs[0].union(*inputs[1:]), window_ms)


def _burn_and_count(stream: Stream, window_ms: int) -> Dataflow:
    """bulk's steps after its input: burn map -> key_by -> tumbling count, parallelism 2."""
    return (stream.map(function="bench.harness.work:burn", parallelism=2)
            .key_by("key").window(tumbling_ms=window_ms, parallelism=2).aggregate(n=count())
            .sink("o"))


#: The rate bulk runs at while its cost is first measured: well within the pool's reach.
PROBE_EPS = 3_000.0
#: Then it is offered this many times what that cost says the pool sustains, to find
#: what it sustains flat out.
FLAT_OUT = 1.5
#: The pool's executors (every suite's pool).
EXECUTORS = 2


@dataclass(frozen=True)
class Capacity:
    """What the pool does with bulk alone, flat out: `eps` bulk events/s taken in, its
    executors `busy` that share of the time (below 1: Ray's threads, the feeders and the
    decoding of their calls share the cores with the executors' worker threads)."""

    eps: float
    busy: float
    #: the cores every process of the run kept busy meanwhile (`CpuMeter`): what the
    #: machine gives a run flat out, the executors and everything that feeds them
    cores: float = 0.0


def measure_capacity(seconds: float) -> Capacity:
    """Bulk alone, first at `PROBE_EPS` (its executors' busy ms per event say what two
    executors could take in, were they busy all the time), then offered `FLAT_OUT` times
    that by two feeders: what it took in per second then, and how busy the executors were.
    (The busy time per event at a low rate alone overestimated by up to a quarter: at 85%
    of it the pool was saturated; pushed flat out by one feeder, the rate measured the push
    path: at 85% of it the executors were 40% busy.)"""
    from cameo_actors.runtime import Runtime, RuntimeConfig

    rt = Runtime.start(RuntimeConfig(num_executors=EXECUTORS, **CONFIG), pool="mt-calibrate")
    try:
        rt.deploy(bulk())
        busy, taken = _fed(rt, [PROBE_EPS], seconds)
        estimate = EXECUTORS * 1000.0 / (busy / taken)
        with CpuMeter() as machine:
            busy, taken = _fed(rt, [FLAT_OUT * estimate / 2] * 2, seconds)
        return Capacity(eps=taken / seconds, busy=busy / (EXECUTORS * 1000.0 * seconds),
                        cores=machine.summary(taken)["cores_busy"] or 0.0)
    finally:
        rt.shutdown(stop_ray=False)


def _fed(rt: Any, rates: list[float], seconds: float) -> tuple[float, int]:
    """Bulk fed at `rates` (a feeder each) for 2 s, then measured for `seconds`: the
    executors' busy ms and the events bulk took in meanwhile."""
    from cameo_actors.runtime import Runtime

    stop = threading.Event()
    threads = [threading.Thread(target=generate, args=(Runtime.connect(pool=rt.pool, address=None),
                                                       "bulk", rate, 0.1, stop, 200))
               for rate in rates]
    for t in threads:
        t.start()
    try:
        time.sleep(2.0)  # warm: the first messages run slower, queues fill
        busy0, n0 = _busy_ms(rt), rt.stats("bulk")["events_in"]
        time.sleep(seconds)
        busy1, n1 = _busy_ms(rt), rt.stats("bulk")["events_in"]
    finally:
        stop.set()
        for t in threads:
            t.join()
    if n1 <= n0 or busy1 <= busy0:
        raise RuntimeError(f"calibration: bulk took in {n1 - n0} events in {seconds:g} s")
    return busy1 - busy0, n1 - n0


def _busy_ms(rt: Any) -> float:
    return float(sum(e["busy_ms"] for e in rt.executor_stats()))
