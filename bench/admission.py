"""Admission's forecast against what the pool then keeps up with, for the issue's mix.

Run: `python -m bench.admission [--rounds N] [--json FILE]`

Each round, on a pool of two executors:
1. what bulk alone takes in flat out (`tenants.measure_capacity`);
2. the issue's mix (`bench/mixes.py`: a filter, a projection and a keyed window of 500
   events/s each beside two bulk tenants) runs with its bulk at `BASE` of that, and once
   the pool has measured it for a full load window, admission is asked about one more
   bulk tenant of the same shape: up to what rate would it fit? Three answers from the
   same pool at the same moment:
   - the pool's own (`Runtime.predict`): its operators' CPU per event plus its calls' CPU
     per second, against what the executors' hosts give them;
   - the same CPU with the calls priced per event, as the pool did before (its calls'
     CPU spread over the events they brought), from the pool's own outcomes;
   - the worker threads' busy time per event against 1,000 ms/s per executor, as the
     pool did before that, from the same run's counters;
3. the bulk rate the mix keeps up with, measured (`scenarios.sustainable`: bisection on
   fresh pools, each probe kept up with when its bulk takes in 90% of what it is offered
   with its p99 within target).

A forecast is the base rate plus the new tenant's rate: where the pool goes past its
headroom ("at risk", 90%) and where someone is predicted to miss ("fits"). Its ratio to
the measured rate is what the table shows: above 1, admission would admit load the pool
cannot keep up with, before it arrives.
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import replace
from typing import Any

from bench import mixes, scenarios
from bench.harness.cluster import ensure_ray
from bench.harness.output import save_json
from bench.harness.runner import NUM_EXECUTORS, play
from bench.harness.tenants import CONFIG, bulk, measure_capacity
from cameo_actors.scheduling.admission import Demand, predict

#: The mix's bulk rate while admission is asked, as a share of what bulk alone takes in.
BASE = 0.12
#: Seconds the mix runs before the question: a warm-up, then the load tracker's window.
WARMUP_S, WINDOW_S = 5.0, 11.0
#: The new tenant: bulk's shape under another name and tenant, target 2 s.
NEW = "bulk-new"


def ask(base_eps: float) -> dict[str, Any]:
    """The mix at `base_eps` of bulk; admission's answers for one more bulk tenant."""
    from cameo_actors.runtime import Runtime, RuntimeConfig

    loads = mixes.loads(mixes.ISSUE_MIX, base_eps)
    rt = Runtime.start(RuntimeConfig(num_executors=NUM_EXECUTORS, **CONFIG), pool="admission")
    stop = threading.Event()
    feeders = [Runtime.connect(pool=rt.pool, address=None) for _ in loads]
    threads = [threading.Thread(target=play, args=(f, ld, stop), daemon=True)
               for f, ld in zip(feeders, loads, strict=True)]
    try:
        for ld in loads:
            rt.deploy(ld.flow)
        for t in threads:
            t.start()
        time.sleep(WARMUP_S)
        before = {ld.name: rt.stats(ld.name) for ld in loads}
        t0 = time.monotonic()
        time.sleep(WINDOW_S)
        after = {ld.name: rt.stats(ld.name) for ld in loads}
        dt = time.monotonic() - t0
        pool = rt.predict(bulk(NEW, NEW, 1.0, target_ms=2000))
    finally:
        stop.set()
        for t in threads:  # no push under way when the pool goes
            t.join()
        rt.shutdown(stop_ray=False)
    # The same CPU, its calls spread over the events they brought (nothing is short at
    # the base, so each running dataflow keeps up with its rate: `sustainable_eps`).
    targets = {ld.name: ld.target_ms for ld in loads}
    per_event = [Demand(o["name"], o["tenant"], 1.0, targets[o["name"]], o["sustainable_eps"],
                        o["demand_ms_per_s"] / o["sustainable_eps"])
                 for o in pool["outcomes"] if o["name"] in targets and o["sustainable_eps"]]
    like = next(d for d in per_event if d.name == "bulk-1s")
    per_event_model = predict(pool["capacity_ms_per_s"], per_event,
                              replace(like, name=NEW, tenant=NEW, target_ms=2000.0,
                                      rate_eps=None)).to_dict()
    # Busy ms per event, 1,000 ms/s per executor, the same counters.
    running = []
    for ld in loads:
        events = after[ld.name]["events_in"] - before[ld.name]["events_in"]
        busy = after[ld.name]["busy_ms"] - before[ld.name]["busy_ms"]
        running.append(Demand(ld.name, ld.name, 1.0, ld.target_ms, events / dt,
                              busy / events if events else None))
    bulk_cost = next(d.cost_ms_per_event for d in running if d.name == "bulk-1s")
    busy_model = predict(1000.0 * NUM_EXECUTORS, running,
                         Demand(NEW, NEW, 1.0, 2000.0, None, bulk_cost)).to_dict()
    return {"base_bulk_eps": base_eps, "cpu_calls": _answer(pool, base_eps),
            "cpu": _answer(per_event_model, base_eps), "busy": _answer(busy_model, base_eps),
            "reasons": {o["name"]: o["reason"] for o in pool["outcomes"]}}


def _answer(p: dict[str, Any], base_eps: float) -> dict[str, Any]:
    """A prediction's forecast of the mix's bulk rate: where it passes the headroom (at
    risk) and where someone misses (fits), each the base plus the new tenant's rate. The
    new tenant is priced as `bulk-1s` is: its operators' ms per event (`demand` less its
    calls, over its rate) and its calls' ms/s."""
    cap, util = p["capacity_ms_per_s"], p["utilization"] or 0.0
    new = next(o for o in p["outcomes"] if o["name"] == NEW)
    others = [o for o in p["outcomes"] if o["name"] != NEW and o["demand_ms_per_s"]]
    bulk = next(o for o in others if o["name"] == "bulk-1s" and o["sustainable_eps"])
    calls = bulk.get("calls_ms_per_s") or 0.0
    cost = (bulk["demand_ms_per_s"] - calls) / bulk["sustainable_eps"]
    headroom = max(0.0, 0.9 * cap - util * cap - calls) / cost
    return {"capacity_ms_per_s": cap, "capacity_basis": p.get("capacity_basis"),
            "utilization": util, "bulk_cost_ms": cost, "bulk_calls_ms_per_s": calls,
            "demands": {o["name"]: o["demand_ms_per_s"] for o in others},
            "at_risk_eps": base_eps + headroom,
            "fits_eps": None if p["max_rate_eps"] is None else base_eps + p["max_rate_eps"],
            "new_verdict": new["verdict"]}


def one_round(calibrate_s: float, log: Any = print) -> dict[str, Any]:
    alone = measure_capacity(calibrate_s)
    log(f"bulk alone: {alone.eps:,.0f} events/s flat out")
    answer = ask(BASE * alone.eps)
    for model in ("cpu_calls", "cpu", "busy"):
        a = answer[model]
        log(f"  {model}: capacity {a['capacity_ms_per_s']:,.0f} ms/s, at {a['utilization']:.0%} "
            f"with bulk at {answer['base_bulk_eps']:,.0f}; at risk past {a['at_risk_eps']:,.0f}, "
            f"misses past {a['fits_eps'] or 0:,.0f} bulk events/s")
    kept = scenarios.sustainable(lambda eps: mixes.loads(mixes.ISSUE_MIX, eps), alone.eps, log=log)
    return {"bulk_alone_eps": alone.eps, **answer, "sustainable": kept}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calibrate", type=float, default=6.0, help="seconds of each "
                        "calibration phase of bulk alone")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    ensure_ray()
    figures: dict[str, Any] = {"base": BASE, "tenants": [dict(vars(t)) for t in mixes.ISSUE_MIX],
                               "rounds": []}
    for i in range(args.rounds):
        print(f"round {i + 1}:", flush=True)
        figures["rounds"].append(one_round(args.calibrate))
        save_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
