"""What one push costs: the CPU its client and the executor that takes it spend per call, for
calls of a few events (a latency-sensitive tenant's, every 10 ms) up to bulk batches.

Run: `python -m bench.push_cost [--calls 1000] [--rounds 3] [--baseline REV]
--json bench/results/push_cost.json`

Each round runs, in a process of its own with a private Ray: a pool of one executor with a
filter dataflow (source -> filter -> sink) that keeps no event (nothing to read back, so
no result log fills and holds the source); one client pushes `--calls` calls of each size
(`SIZES` events) and waits for them (`flush`). Kept per size: the client's CPU per call (the
whole process: Python and Ray's own threads), the executor's (its process), and the wall
time per call. With `--baseline REV`, each round of this tree follows a round of commit REV
(in a git worktree of its own, with this environment's packages), side by side in one
session, as the machine's speed varies from day to day.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.harness.baseline import git, run_child, worktree
from bench.harness.output import REPO, save_json

#: Events per call: a latency-sensitive tenant's call every 10 ms at 500 events/s, then
#: bulk batches.
SIZES = (5, 100, 1000)
CHILD = """
import json, sys, time
import ray
from cameo_actors import Dataflow
from cameo_actors.runtime import Runtime, RuntimeConfig
out, calls = sys.argv[1], int(sys.argv[2])
sizes = [int(s) for s in sys.argv[3].split(",")]
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
rt = Runtime.start(RuntimeConfig(num_executors=1), pool="push-cost")
flow = (Dataflow("f", latency_target_ms=50, tenant="t")
        .source("s", schema={"ts": "int", "key": "str", "value": "float"}, event_time="ts")
        .filter("value < 0").sink("o"))  # no results: no reader, no result log to fill
rt.deploy(flow)
figures = {}
for n in sizes:
    events = [{"ts": int(time.time() * 1000), "key": f"k{i % 10}", "value": float(i)} for i in range(n)]
    for _ in range(50):  # warm: the first calls pay for imports and the first compilations
        rt.push("f", "s", events, batch_size=n)
    rt.flush()
    ex0, c0, w0 = rt.executor_stats()[0]["cpu_s"], time.process_time(), time.perf_counter()
    for _ in range(calls):
        rt.push("f", "s", events, batch_size=n)
    rt.flush()
    ex1, c1, w1 = rt.executor_stats()[0]["cpu_s"], time.process_time(), time.perf_counter()
    figures[str(n)] = {"client_cpu_us": 1e6 * (c1 - c0) / calls,
                       "executor_cpu_us": 1e6 * (ex1 - ex0) / calls,
                       "wall_us": 1e6 * (w1 - w0) / calls}
rt.shutdown()
with open(out, "w") as f:
    json.dump(figures, f)
"""


def one_round(calls: int, tree: Path = Path(REPO), timeout_s: float = 600.0) -> dict[str, Any]:
    """One round from the source `tree` (this one, or a baseline's worktree)."""
    figures: dict[str, Any] = run_child(CHILD, [str(calls), ",".join(map(str, SIZES))], tree,
                                        timeout_s, "bench.push_cost: a round")
    return figures


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="calls of each size per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", help="a commit to run before each round of this tree")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {"calls": args.calls, "sizes": list(SIZES), "rounds": []}
    with worktree(args.baseline) as base:
        if base is not None:
            figures["baseline"] = git("rev-parse", "--short=10", args.baseline)
        for i in range(args.rounds):
            arms = ([("baseline", base)] if base is not None else []) + [("this tree", Path(REPO))]
            for arm, tree in arms:
                got = one_round(args.calls, tree)
                figures["rounds"].append({"arm": arm, "sizes": got})
                print(f"round {i + 1}, {arm}: " + "; ".join(
                    f"{n} events: client {f['client_cpu_us']:,.0f} us, executor "
                    f"{f['executor_cpu_us']:,.0f} us CPU a call" for n, f in got.items()), flush=True)
                save_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
