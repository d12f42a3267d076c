"""What tracing costs, how fast its analysis runs, and whether it finds the straggler.

Run: `python -m bench.critical_path [--quick] [--json FILE]`

- `tracing_overhead`: the multitenant pair ("alerts", 50 ms target, 1,000 events/s;
  "bulk", a CPU-bound map and a keyed window, fed flat out) on three pools of two
  executors, measured one after the other, round after round with the order rotated
  (machines here are shared and noisy): `untraced` (`trace_sample=0`), `traced` (every
  message traced, nobody reading the analysis: the executors' cost) and `read` (the same,
  with a reader asking `explain` every second, as the web page does every 5 s: the
  analysis runs as snapshots come). Bulk events/s taken in (backpressure-limited: the
  throughput) and alerts p99, each traced mode over untraced.
- `analysis_activities_per_s`: activities the controller analysed per second of its
  analysis time (one thread), next to the activities traced per second of the run:
  the analysis keeps up when the first is larger.
- `precision_at_1`: a chain of three CPU-bound maps, one of them three times slower
  (which one rotates from run to run); a run counts when `explain` ranks that step's
  processing first.
"""

from __future__ import annotations

import argparse
import math
import threading
import time
from typing import Any

from bench.harness.cluster import ensure_ray
from bench.harness.feeds import generate
from bench.harness.output import save_json
from bench.harness.stats import summarize
from bench.harness.tenants import CONFIG, alerts, bulk
from cameo_actors import Dataflow

SCHEMA = {"ts": "int", "key": "str", "value": "float"}
STEPS = ("parse", "enrich", "score")


def straggler_chain(name: str, slow: str) -> Dataflow:
    """Three maps of `burn`, the one named `slow` three times slower (`burn_3x`)."""
    d = Dataflow(name, latency_target_ms=500, tenant=name).source("s", schema=SCHEMA,
                                                                  event_time="ts")
    for step in STEPS:
        d = d.map(function="bench.harness.work:burn_3x" if step == slow else "bench.harness.work:burn", id=step)
    return d.sink("o")


def read_every_second(rt: Any, stop: threading.Event) -> None:
    """A reader of the analysis (as the web page is): `explain` of alerts every second."""
    while not stop.wait(1.0):
        rt.explain("alerts", last_s=10)


def overhead_round(rt: Any, feeders: list[Any], seconds: float, warmup: float,
                   reader: Any = None) -> dict[str, Any]:
    """One measurement of the multitenant pair on `rt` (`reader`: a third handle that
    reads the analysis meanwhile)."""
    rt.deploy(alerts())
    rt.deploy(bulk())
    stop = threading.Event()
    threads = [threading.Thread(target=generate, args=(feeders[0], "alerts", 1000, 0.01, stop, 10)),
               threading.Thread(target=generate, args=(feeders[1], "bulk", 1e9, 0.005, stop, 200,
                                                       1000))]
    if reader is not None:
        threads.append(threading.Thread(target=read_every_second, args=(reader, stop)))
    try:
        for t in threads:
            t.start()
        time.sleep(warmup)
        deadline = time.monotonic() + 60.0  # a loaded machine: wait for the load to arrive
        while rt.stats("bulk")["events_in"] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        since_ms = time.time() * 1000
        n0, t0 = rt.stats("bulk")["events_in"], time.monotonic()
        time.sleep(seconds)
        n1 = rt.stats("bulk")["events_in"]
        until = time.monotonic() + 60.0  # a short window on a loaded machine may see none
        while n1 == n0 and time.monotonic() < until:
            time.sleep(0.1)
            n1 = rt.stats("bulk")["events_in"]
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        for t in threads:
            t.join()
    rows = rt.result_rows("alerts")
    # Activities traced per second under this load (the analysis has to keep up with it);
    # snapshots are analysed one interval late, so the last two seconds hold the last one.
    traced = rt.explain(None, last_s=seconds + 2.0)["tracing"].get("traced_per_s") \
        if reader else None
    rt.cancel("alerts")
    rt.cancel("bulk")
    return {"bulk_eps": (n1 - n0) / elapsed, "alerts": summarize(rows, since_ms, 50),
            "traced_per_s": traced}


def straggler_run(rt: Any, feeder: Any, run: int, seconds: float) -> dict[str, Any]:
    slow = STEPS[run % len(STEPS)]
    name = f"cp-straggler-{run}"
    rt.deploy(straggler_chain(name, slow))
    stop = threading.Event()
    t = threading.Thread(target=generate, args=(feeder, name, 500, 0.02, stop, 50))
    t.start()
    try:
        time.sleep(seconds)
        why = rt.explain(name, last_s=seconds)
    finally:
        stop.set()
        t.join()
        rt.cancel(name)
    top = why["critical_path"][0] if why["critical_path"] else {}
    hit = top.get("kind") == "processing" and top.get("step") == slow
    return {"straggler": slow, "ranked_first": top.get("text"), "hit": hit,
            "results": why["results"], "operators": why["operators"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one short round, three runs")
    parser.add_argument("--rounds", type=int, help="overhead rounds (each: traced and not)")
    parser.add_argument("--seconds", type=float, help="measured seconds per round")
    parser.add_argument("--runs", type=int, help="straggler runs")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    seconds = args.seconds or (5.0 if args.quick else 15.0)
    runs = args.runs or (3 if args.quick else 9)

    import ray

    from cameo_actors.runtime import Runtime, RuntimeConfig

    started = ensure_ray()
    modes = {"untraced": 0.0, "traced": 1.0, "read": 1.0}
    pools = {mode: Runtime.start(RuntimeConfig(num_executors=2, trace_sample=sample, **CONFIG),
                                 pool=f"cp-{mode}") for mode, sample in modes.items()}
    feeders = {mode: [Runtime.connect(pool=f"cp-{mode}", address=None) for _ in range(3)]
               for mode in pools}
    out: dict[str, Any] = {"rounds": [], "seconds": seconds}
    try:
        order = list(modes)
        for r in range(rounds):
            row = {m: overhead_round(pools[m], feeders[m][:2], seconds, 2.0,
                                     feeders[m][2] if m == "read" else None) for m in order}
            order = order[1:] + order[:1]  # whichever runs last looks worse: rotate
            out["rounds"].append(row)
            print(f"round {r}: bulk events/s " + ", ".join(
                f"{m} {row[m]['bulk_eps']:,.0f}" for m in modes) + "; alerts p99 ms " + ", ".join(
                f"{m} {row[m]['alerts'].get('p99_ms', float('nan')):.1f}" for m in modes))
        # Every mode measured beside untraced in the same round: the ratio per round, then
        # their median.
        out["tracing_overhead"] = {}
        for m in ("traced", "read"):
            ratios = sorted(x[m]["bulk_eps"] / x["untraced"]["bulk_eps"] for x in out["rounds"]
                            if x["untraced"]["bulk_eps"]) or [math.nan]
            p99s = sorted(x[m]["alerts"]["p99_ms"] / x["untraced"]["alerts"]["p99_ms"]
                          for x in out["rounds"] if x[m]["alerts"].get("results")
                          and x["untraced"]["alerts"].get("results"))
            out["tracing_overhead"][m] = {
                "throughput_over_untraced": ratios[len(ratios) // 2],
                "throughput_cost": 1.0 - ratios[len(ratios) // 2],
                "alerts_p99_over_untraced": p99s[len(p99s) // 2] if p99s else None}
        tracing = pools["read"].explain(None, last_s=600)["tracing"]
        out["analysis"] = tracing
        out["analysis_activities_per_s"] = tracing.get("analysed_per_s")
        out["traced_activities_per_s"] = max(x["read"]["traced_per_s"] or 0.0
                                             for x in out["rounds"])
        straggler = [straggler_run(pools["read"], feeders["read"][0], i, 4.0 if args.quick
                                   else 6.0) for i in range(runs)]
        out["straggler_runs"] = straggler
        out["precision_at_1"] = sum(s["hit"] for s in straggler) / len(straggler)
        for m, o in out["tracing_overhead"].items():
            print(f"{m}: throughput over untraced {o['throughput_over_untraced']:.3f}, alerts p99 "
                  f"over untraced {o['alerts_p99_over_untraced']}")
        print(f"analysis: {out['analysis_activities_per_s']} activities/s analysed on one thread, "
              f"{out['traced_activities_per_s']} traced/s")
        print(f"straggler ranked first in {sum(s['hit'] for s in straggler)} of {len(straggler)} "
              f"runs (precision@1 {out['precision_at_1']:.2f})")
    finally:
        for rt in pools.values():
            rt.shutdown(stop_ray=False)
        if started:
            ray.shutdown()
    save_json(args.json, out)
    return out


if __name__ == "__main__":
    main()
