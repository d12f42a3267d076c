"""The `make run` demo measured: JSON files -> Spark -> two tenants on the pool -> Spark ->
Parquet, each leg's latency and the cores each part used, in `--runs` runs (2).

Run: `python -m bench.demo [--runs 2] [--events 20000] --json bench/results/demo.json`

Each run is `python -m cameo_actors.demo --spark` (`spark_ingest.demo.run_end_to_end`:
files of 166 events land every 100 ms once the queries run) in a process of its own, as
`make run` starts it: its own private Ray, pool and Spark. Kept per run: the alerts' and
bulk's latency per leg (`spark_ingest.latency.STAGES`), the share within target in the
runtime, and the cores each part used while the files landed and drained
(`spark_ingest.cpu.CoreShares`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.harness.output import REPO, save_json

#: Events per file, as `make run` lands them (`cameo_actors.demo`).
ROWS = 166
CHILD = """
import json, sys
from spark_ingest.demo import run_end_to_end
summary = run_end_to_end(files=int(sys.argv[2]), rows=int(sys.argv[3]))
summary.pop("work", None)
with open(sys.argv[1], "w") as f:
    json.dump(summary, f)
"""


def one_run(events: int, timeout_s: float = 900.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "summary.json"
        proc = subprocess.run([sys.executable, "-c", CHILD, str(out), str(max(1, events // ROWS)),
                               str(ROWS)], cwd=REPO, timeout=timeout_s)
        if proc.returncode != 0:
            raise SystemExit(f"bench.demo: the demo's run exited with {proc.returncode} "
                             "(its output is above)")
        summary: dict[str, Any] = json.loads(out.read_text())
        return summary


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--events", type=int, default=20_000, help="events per run")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    from spark_ingest.demo import GOALS

    figures: dict[str, Any] = {"events": args.events, "rows_per_file": ROWS, "goals": GOALS,
                               "runs": []}
    for i in range(args.runs):
        print(f"run {i + 1} of {args.runs}:", flush=True)
        figures["runs"].append(one_run(args.events))
        save_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
