"""cameo on the peer comparison's workloads (bench/peers/common.py), for `python -m bench.peers`.

Run: `python -m bench.peers.ours [--events N] [--repeat R] [--seconds S] [--warmup S]
      [--bulk-rate EPS] [--json FILE]`

- throughput: bench/throughput.py on `common.throughput_workload()`: one
  executor core in-process, and on Ray with 1 and 2 executors end to end;
- latency: alerts + bulk (common.py's queries and workloads) on a pool of two
  executors under `cameo`, then under `fifo`, by bench/harness/runner.py.
"""

from __future__ import annotations

import argparse
from importlib.metadata import version
from typing import Any

from bench.harness.output import save_json
from bench.harness.workload import THROUGHPUT_EVENTS
from bench.peers import common


def throughput(events: int, repeat: int) -> dict[str, Any]:
    from bench import throughput as tp

    r = tp.main(["--events", str(events), "--repeat", str(repeat)])
    ray1, core = r["ray_x1"], r["executor_core"]
    return {"events": events, "eps": ray1["events_per_s"], "eps_per_core": ray1["per_core"], "parallelism": 1,
            "runs": ray1["runs"], "by_setup": r,
            "in_process_eps_per_core": core["per_core"],
            "x2_eps_per_core": r["ray_x2"]["per_core"]}


def latency(seconds: float, warmup: float, bulk_rate: float, policy: str) -> dict[str, Any]:
    from bench.harness.runner import Load, run
    from bench.harness.tenants import alerts, bulk

    run_s = warmup + seconds + 60  # played until the run stops them
    loads = [Load(alerts(), common.alerts_workload(run_s), latency_sensitive=True),
             Load(bulk(), common.bulk_workload(bulk_rate, run_s))]
    res = run(loads, policy, {"policy": policy, "isolation": "shared"}, warmup, seconds)
    dfs = res["dataflows"]
    return {"alerts": dfs["alerts"], "bulk": dfs["bulk"], "policy": policy,
            "offered_eps": {"alerts": 1000.0, "bulk": bulk_rate}, "seconds": seconds, "warmup_s": warmup,
            "utilization": res["utilization"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=THROUGHPUT_EVENTS)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--bulk-rate", type=float, default=10_000.0)
    p.add_argument("--json")
    a = p.parse_args(argv)

    import ray

    from bench.harness.cluster import ensure_ray

    ensure_ray()
    try:
        tp = throughput(a.events, a.repeat)
        lat = {pol: latency(a.seconds, a.warmup, a.bulk_rate, pol) for pol in ("cameo", "fifo")}
    finally:
        ray.shutdown()
    out = common.result("cameo", f"{version('cameo-actors')} (Ray {ray.__version__})", throughput=tp,
                        latency=lat["cameo"], notes=["throughput: Ray, 1 executor, end to end from a driver pushing batches",
                               "latency: 2 executors shared, policy cameo; latency_fifo: the same under fifo"])
    out["latency_fifo"] = lat["fifo"]
    for pol, d in lat.items():
        print(f"cameo ({pol}): alerts p50 {d['alerts']['p50_ms']:.1f} p99 {d['alerts']['p99_ms']:.1f} ms, "
              f"bulk p99 {d['bulk'].get('p99_ms', float('nan')):.0f} ms")
    save_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
