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

from bench.harness.cluster import ensure_ray
from bench.harness.feeds import generate
from bench.harness.output import save_json
from bench.harness.stats import summarize
from bench.harness.tenants import CONFIG, alerts, bulk, measure_capacity

MODES = {
    "fifo": dict(policy="fifo", isolation="shared"),
    "cameo": dict(policy="cameo", isolation="shared"),
    "isolated": dict(policy="fifo", isolation="isolated"),
}


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
        t0 = time.perf_counter()
        time.sleep(seconds)
        busy1 = {e["executor"]: e["busy_ms"] for e in rt.executor_stats()}
        bulk_in1 = rt.stats("bulk")["events_in"]
        measured_s = time.perf_counter() - t0  # the readings take time too: not `seconds`
        stop.set()
        for t in threads:
            t.join()
        rt.close("alerts")
        rt.close("bulk")
        rt.wait_idle(timeout_s=120)
        out = {
            "alerts": summarize(rt.result_rows("alerts"), since_ms, 50),
            "bulk": summarize(rt.result_rows("bulk"), since_ms, 1000),
            "utilization": {ex: (busy1[ex] - busy0[ex]) / (measured_s * 1000) for ex in busy1},
            "bulk_ingested_eps": (bulk_in1 - bulk_in0) / measured_s,
            "measured_s": round(measured_s, 3),
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

    started = ensure_ray()
    capacity = measure_capacity(args.calibrate).eps
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
    if started:
        ray.shutdown()
    return results


if __name__ == "__main__":
    main()
