"""Where a shared pool places the issue's mix, and what it does to the tight targets.

Run: `python -m bench.placement [--rounds N] [--share S] [--json FILE]`

The issue's mix (`bench/mixes.py`: a 50 ms filter, a 100 ms projection and a 300 ms
window of 500 events/s each in calls every 10 ms, beside two bulk tenants) deployed in
that order on a pool of two executors, under the default policy, placed two ways:

- `targets_apart` (the default): a dataflow starts on the executor whose targets weigh
  least among those within one dataflow's instances of the least loaded;
- `even` (the placement before): on the least loaded, so the 300 ms window joins the
  50 ms filter.

Its bulk is offered `share` of what bulk alone takes in flat out (measured first): near
the mix's capacity, which is a quarter to a half of bulk alone on this machine
(docs/benchmarks.md, "Mixes near capacity"). Each round runs both arms in turn, the
first arm alternating, each on a fresh pool: 5 s of warm-up, 20 s measured. Per arm and
round: each tenant's executors and share of results within target, the executors' busy
share and the CPU of every process.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench import mixes, scenarios
from bench.harness.cluster import ensure_ray
from bench.harness.output import save_json
from bench.harness.runner import run
from bench.harness.tenants import measure_capacity

#: The two placements (`RuntimeConfig.placement`) and the mix's modes that run them.
ARMS = {"targets_apart": "floor", "even": "floor_even"}
#: The mix's bulk rate, as a share of what bulk alone takes in flat out.
SHARE = 0.25
WARMUP_S, MEASURED_S = 5.0, 20.0


def one_round(bulk_eps: float, first: int) -> dict[str, Any]:
    """Both arms at `bulk_eps`, the `first`-th of `ARMS` first."""
    out: dict[str, Any] = {}
    arms = list(ARMS)
    for arm in arms[first:] + arms[:first]:
        mode = ARMS[arm]
        res = run(mixes.loads(mixes.ISSUE_MIX, bulk_eps), mode, scenarios.MIX_MODES[mode],
                  WARMUP_S, MEASURED_S)
        out[arm] = {"utilization": res["utilization"], "cpu": res["cpu"],
                    "dataflows": {n: {k: d.get(k) for k in (
                        "executors", "within_target", "p99_ms", "throughput_eps", "offered_eps",
                        "target_ms", "latency_sensitive")}
                        for n, d in res["dataflows"].items()}}
        print(f"  {arm}: " + ", ".join(
            f"{n} on {d['executors']} {d['within_target']:.2%}"
            for n, d in out[arm]["dataflows"].items() if d["latency_sensitive"]), flush=True)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--share", type=float, default=SHARE, help="the mix's bulk rate, a "
                        "share of what bulk alone takes in flat out")
    parser.add_argument("--calibrate", type=float, default=6.0, help="seconds of each "
                        "calibration phase of bulk alone")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    ensure_ray()
    alone = measure_capacity(args.calibrate)
    bulk_eps = args.share * alone.eps
    print(f"bulk alone: {alone.eps:,.0f} events/s flat out; the mix's bulk at {bulk_eps:,.0f}",
          flush=True)
    figures: dict[str, Any] = {"bulk_alone_eps": alone.eps, "share": args.share,
                               "bulk_eps": bulk_eps, "arms": list(ARMS),
                               "tenants": [dict(vars(t)) for t in mixes.ISSUE_MIX], "rounds": []}
    for i in range(args.rounds):
        print(f"round {i + 1}:", flush=True)
        figures["rounds"].append(one_round(bulk_eps, i % len(ARMS)))
        save_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
