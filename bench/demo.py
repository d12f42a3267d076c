"""The `make run` demo measured: JSON files -> Spark -> two tenants on the pool -> Spark ->
Parquet, each leg's latency and the cores each part used, in `--runs` runs (2).

Run: `python -m bench.demo [--runs 2] [--events 20000] [--baseline REV] [--full-jit-arm]
--json bench/results/demo.json`

With `--baseline REV`, each run of this tree follows a run of commit REV (checked out in
a git worktree of its own, with this environment's packages): the two side by side in
one session, as the machine's speed varies from day to day. With `--full-jit-arm`, a
third arm runs this tree with the JVM's optimizing compiler (the demo's Spark compiles
with C1 only: `SparkConfig.quick_jit`).

Each run is `python -m cameo_actors.demo --spark` (`spark_ingest.demo.run_end_to_end`:
files of 166 events land every 100 ms once the queries run) in a process of its own, as
`make run` starts it: its own private Ray, pool and Spark. Kept per run: the alerts' and
bulk's latency per leg (`spark_ingest.latency.STAGES`), the share within target in the
runtime, and the cores each part used while the files landed and drained
(`spark_ingest.cpu.CoreShares`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.harness.baseline import git, run_child, worktree
from bench.harness.output import REPO, save_json

#: Events per file, as `make run` lands them (`cameo_actors.demo`).
ROWS = 166
CHILD = """
import json, sys
from spark_ingest.demo import run_end_to_end
more = {"quick_jit": sys.argv[4] == "quick"} if len(sys.argv) > 4 else {}
summary = run_end_to_end(files=int(sys.argv[2]), rows=int(sys.argv[3]), **more)
summary.pop("work", None)
with open(sys.argv[1], "w") as f:
    json.dump(summary, f)
"""


def one_run(events: int, tree: Path = Path(REPO), jit: str | None = None,
            timeout_s: float = 900.0) -> dict[str, Any]:
    """One run of the demo from the source `tree` (this one, or a baseline's worktree);
    `jit`: "quick" or "full" (`SparkConfig.quick_jit`; None: the tree's default)."""
    # (Spark's Python workers inherit the tree's path.)
    summary: dict[str, Any] = run_child(CHILD, [str(max(1, events // ROWS)), str(ROWS),
                                                *([jit] if jit else [])], tree, timeout_s,
                                        "bench.demo: the demo's run")
    return summary


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--events", type=int, default=20_000, help="events per run")
    parser.add_argument("--baseline", help="a commit to run before each run of this tree")
    parser.add_argument("--full-jit-arm", action="store_true",
                        help="also run this tree with the JVM's optimizing compiler "
                             "(run_end_to_end(quick_jit=False))")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    from spark_ingest.demo import GOALS

    figures: dict[str, Any] = {"events": args.events, "rows_per_file": ROWS, "goals": GOALS,
                               "runs": []}
    with worktree(args.baseline) as base:
        if base is not None:
            figures["baseline"] = git("rev-parse", "--short=10", args.baseline)
        for i in range(args.runs):
            arms: list[tuple[str, Path, str | None]] = \
                ([("baseline", base, None)] if base is not None else []) \
                + [("this tree", Path(REPO), None)] \
                + ([("this tree, full JIT", Path(REPO), "full")] if args.full_jit_arm else [])
            for arm, tree, jit in arms:
                print(f"run {i + 1} of {args.runs}, {arm}:", flush=True)
                figures["runs"].append({"arm": arm, **one_run(args.events, tree, jit)})
                save_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
