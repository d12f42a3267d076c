"""A latency-sensitive dataflow next to a bulk one on a shared pool, under fifo, cameo and isolated.

Run: `python -m bench.multitenant [--seconds S] [--warmup S] [--load U] [--json FILE]`

- "alerts" (tenant ops, target 50 ms): source -> filter -> sink, 1,000 events/s
  in batches every 10 ms.
- "bulk" (tenant analytics, target 1,000 ms): source -> map (a CPU-bound
  function) -> key_by -> 1 s tumbling count, parallelism 2, offered at a rate
  that keeps the pool at about --load of its capacity (calibrated at start),
  in bursts every 100 ms.

Modes, one after another in one run, with the same load: `fifo` and `cameo`
share two executors; `isolated` gives each dataflow its own executor (the
slot-per-job style). Latency of a result = egress time - ingest time of the
message that made it computable; results ingested in the warm-up are not
counted, the same way in every mode.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

from bench.output import save_json
from cameo_actors import Dataflow, count

SCHEMA = {"ts": "int", "key": "str", "value": "float"}
#: The same for every mode: ingress cut into messages of ~5 ms of bulk work.
CONFIG = dict(max_message_events=100)
MODES = {
    "fifo": dict(policy="fifo", isolation="shared"),
    "cameo": dict(policy="cameo", isolation="shared"),
    "isolated": dict(policy="fifo", isolation="isolated"),
}


def alerts() -> Dataflow:
    return (Dataflow("alerts", latency_target_ms=50, tenant="ops")
            .source("s", schema=SCHEMA, event_time="ts")
            .filter("value >= 0").sink("o"))


def bulk(name: str = "bulk", tenant: str = "analytics", weight: float = 1.0,
         window_ms: int = 1000, target_ms: float = 1000) -> Dataflow:
    """source -> burn map -> key_by -> tumbling count, parallelism 2, target 1 s."""
    return (Dataflow(name, latency_target_ms=target_ms, tenant=tenant, weight=weight)
            .source("s", schema=SCHEMA, event_time="ts", parallelism=2)
            .map(function="bench.work:burn", parallelism=2)
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


def generate(rt: Any, name: str, rate: float, period_s: float, stop: threading.Event,
             keys: int, max_batch: int = 1_000_000) -> None:
    """Push `rate` events/s to `name`, a batch every `period_s`, event time = now."""
    n = max(1, min(max_batch, int(rate * period_s)))
    i = 0
    next_t = time.monotonic()
    while not stop.is_set():
        now_ms = int(time.time() * 1000)
        batch = [{"ts": now_ms, "key": f"k{(i + j) % keys}", "value": float((i + j) % 97)}
                 for j in range(n)]
        i += n
        rt.push(name, "s", batch, batch_size=n)
        next_t += period_s
        time.sleep(max(0.0, next_t - time.monotonic()))


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summarize(rows: list[tuple[dict[str, Any], float, float]], since_ms: float, target: float,
              seconds: float) -> dict[str, Any]:
    lat = [eg - ing for _, ing, eg in rows if ing >= since_ms]
    if not lat:
        return {"results": 0}
    return {"results": len(lat), "p50_ms": percentile(lat, 0.5), "p95_ms": percentile(lat, 0.95),
            "p99_ms": percentile(lat, 0.99), "max_ms": max(lat),
            "within_target": sum(1 for x in lat if x <= target) / len(lat),
            "target_ms": target}


def run_mode(mode: str, seconds: float, warmup: float, bulk_rate: float) -> dict[str, Any]:
    from cameo_actors.runtime import Runtime, RuntimeConfig

    rt = Runtime.start(RuntimeConfig(num_executors=2, **CONFIG, **MODES[mode]), pool=f"mt-{mode}")
    feeders = [Runtime.connect(pool=f"mt-{mode}", address=None) for _ in range(2)]
    try:
        rt.deploy(alerts())
        rt.deploy(bulk())
        stop = threading.Event()
        threads = [threading.Thread(target=generate, args=(feeders[0], "alerts", 1000, 0.01, stop, 10)),
                   threading.Thread(target=generate, args=(feeders[1], "bulk", bulk_rate, 0.1, stop, 200))]
        for t in threads:
            t.start()
        time.sleep(warmup)
        since_ms = time.time() * 1000
        busy0 = {e["executor"]: e["busy_ms"] for e in rt.executor_stats()}
        bulk_in0 = rt.stats("bulk")["events_in"]
        time.sleep(seconds)
        busy1 = {e["executor"]: e["busy_ms"] for e in rt.executor_stats()}
        bulk_in1 = rt.stats("bulk")["events_in"]
        stop.set()
        for t in threads:
            t.join()
        rt.close("alerts")
        rt.close("bulk")
        rt.wait_idle(timeout_s=120)
        out = {
            "alerts": summarize(rt.result_rows("alerts"), since_ms, 50, seconds),
            "bulk": summarize(rt.result_rows("bulk"), since_ms, 1000, seconds),
            "utilization": {ex: (busy1[ex] - busy0[ex]) / (seconds * 1000) for ex in busy1},
            "bulk_ingested_eps": (bulk_in1 - bulk_in0) / seconds,
        }
        return out
    finally:
        rt.shutdown(stop_ray=False)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per mode")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds per mode not counted")
    parser.add_argument("--load", type=float, default=0.85,
                        help="offered bulk load, as a share of the pool's measured capacity")
    parser.add_argument("--calibrate", type=float, default=5.0, help="seconds to measure capacity")
    parser.add_argument("--modes", default="fifo,cameo,isolated")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)

    import ray

    from cameo_actors.runtime import start_local_ray

    start_local_ray(num_cpus=16, log_to_driver=False)
    capacity = calibrate_capacity(args.calibrate)
    bulk_rate = args.load * capacity
    print(f"the shared pool sustains {capacity:,.0f} bulk events/s alone; offering {bulk_rate:,.0f}/s "
          f"({args.load:.0%}) + 1,000 alert events/s")
    results: dict[str, Any] = {"bulk_capacity_eps": capacity, "bulk_offered_eps": bulk_rate,
                               "modes": {}}
    for mode in args.modes.split(","):
        r = results["modes"][mode] = run_mode(mode, args.seconds, args.warmup, bulk_rate)
        a, b = r["alerts"], r["bulk"]
        util = statistics.mean(r["utilization"].values())
        print(f"{mode:9s} alerts p50 {a['p50_ms']:7.1f} p99 {a['p99_ms']:7.1f} ms, "
              f"{a['within_target']:6.1%} within 50 ms | bulk p99 {b.get('p99_ms', float('nan')):7.1f} ms, "
              f"{b.get('within_target', 0):6.1%} within 1 s, ingested {r['bulk_ingested_eps']:,.0f}/s | "
              f"busy {util:.0%}")
    m = results["modes"]
    if "cameo" in m:
        cam = m["cameo"]["alerts"]["p99_ms"]
        results["ratios"] = {f"{k}_over_cameo_p99": m[k]["alerts"]["p99_ms"] / cam
                             for k in m if k != "cameo"}
        print("alerts p99 ratios:", {k: round(v, 2) for k, v in results["ratios"].items()})
    save_json(args.json, results)
    ray.shutdown()
    return results


if __name__ == "__main__":
    main()
