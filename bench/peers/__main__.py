"""cameo next to the systems users would pick instead, on the same events and machine, in one run.

Run: `python -m bench.peers [--systems cameo,spark,flink,bytewax] [--quick] [--bulk-rate EPS]
      [--json FILE]`

Each system runs in its own process, one after another, on the workloads of
bench/peers/common.py (same seeds, same queries):
- throughput per core of filter -> map -> 1 s tumbling count per key
  (cameo, PyFlink, Bytewax);
- latency of the alerts query next to the bulk query on the same machine
  (cameo under `cameo` and `fifo`, Spark with FAIR pools, PyFlink).
A system whose package is missing is reported as skipped with the install
command (`pip install -e '.[bench]'`; PyFlink: `make bench-peers`, its own venv).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from bench.harness.output import save_json

SYSTEMS = ("cameo", "spark", "flink", "bytewax")
MODULES = {"cameo": "bench.peers.ours", "spark": "bench.peers.spark_fair", "flink": "bench.peers.flink",
           "bytewax": "bench.peers.bytewax_peer"}
#: PyFlink pins its own pandas, pyarrow and numpy, so it lives in a venv of its own (make bench-peers).
FLINK_PYTHON = os.path.join(".venv-peers", "flink", "bin", "python")
PROBE = {"spark": "pyspark", "flink": "pyflink", "bytewax": "bytewax", "cameo": "ray"}


def args_for(system: str, a: argparse.Namespace) -> list[str]:
    lat = ["--seconds", str(a.seconds), "--warmup", str(a.warmup), "--bulk-rate", str(a.bulk_rate)]
    tp = ["--events", str(a.events), "--repeat", str(a.repeat)]
    return {"cameo": tp + lat, "spark": lat, "flink": tp + lat, "bytewax": tp}[system]


def run_system(system: str, a: argparse.Namespace, folder: str) -> dict[str, Any]:
    python = FLINK_PYTHON if system == "flink" else sys.executable
    if not os.path.exists(python) or subprocess.run([python, "-c", f"import {PROBE[system]}"],
                                                    capture_output=True).returncode:
        how = "make bench-peers" if system == "flink" else "pip install -e '.[bench]'"
        return {"system": system, "skipped": f"not installed; install with: {how}"}
    out = os.path.join(folder, f"{system}.json")
    cmd = [python, "-m", MODULES[system], *args_for(system, a), "--json", out]
    print("$", " ".join(cmd), flush=True)
    done = subprocess.run(cmd)
    if done.returncode or not os.path.exists(out):
        return {"system": system, "failed": f"exit code {done.returncode}"}
    with open(out) as f:
        result: dict[str, Any] = json.load(f)
    return result


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = ["| system | throughput per core (ev/s) | alerts p50 / p99 ms | alerts within 50 ms | bulk p99 ms |",
            "|---|---|---|---|---|"]
    for name, r in results.items():
        if "skipped" in r or "failed" in r:
            rows.append(f"| {name} | {r.get('skipped') or r.get('failed')} | | | |")
            continue
        tp = r.get("throughput") or {}
        for label, lat in (("", r.get("latency")), (" (fifo)", r.get("latency_fifo"))):
            if label and not lat:
                continue
            a = (lat or {}).get("alerts", {})
            b = (lat or {}).get("bulk", {})
            rows.append(f"| {name}{label} | {tp.get('eps_per_core', 0):,.0f} | "
                        f"{a.get('p50_ms', float('nan')):.1f} / {a.get('p99_ms', float('nan')):.1f} | "
                        f"{a.get('within_target', float('nan')):.1%} | {b.get('p99_ms', float('nan')):,.0f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--quick", action="store_true", help="100,000 events, 1 repeat, 10 s of latency")
    p.add_argument("--events", type=int)
    p.add_argument("--repeat", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--warmup", type=float)
    p.add_argument("--bulk-rate", type=float, default=10_000.0, help="bulk events/s next to the alerts")
    p.add_argument("--json")
    a = p.parse_args(argv)
    a.events = a.events or (100_000 if a.quick else 400_000)
    a.repeat = a.repeat or (1 if a.quick else 3)
    a.seconds = a.seconds or (10.0 if a.quick else 20.0)
    a.warmup = a.warmup or (5.0 if a.quick else 10.0)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="cameo-peers-") as folder:
        for system in a.systems.split(","):
            results[system] = run_system(system, a, folder)
    print(table(results))
    save_json(a.json, results)
    return results


if __name__ == "__main__":
    main()
