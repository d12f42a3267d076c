"""`bench.placement`'s table: per placement, where each latency-sensitive tenant of the
issue's mix was placed and its share of results within target over the rounds."""

from __future__ import annotations

import statistics
from typing import Any

from bench.tables.cameo import pct

LABELS = {"targets_apart": "tight targets apart (the default)",
          "even": "the least loaded executor (before)"}


def table(figures: dict[str, Any]) -> list[str]:
    """One row per placement: per latency-sensitive tenant its executors and its share
    within target (median, and the lowest of the rounds), the rounds at 99% or more of
    the tightest one, the executors' busy share and the cores every process kept busy."""
    sensitive = [t for t in figures["tenants"] if t["kind"] != "bulk"]
    tight = min(sensitive, key=lambda t: t["target_ms"])["name"]
    rounds = figures["rounds"]
    lines = ["| placement | " + " | ".join(f"{t['name']}: executor, within target (lowest)"
                                          for t in sensitive)
             + f" | rounds with {tight} at 99% or more | executors busy | cores busy |",
             "|---|" + "---|" * len(sensitive) + "---|---|---|"]
    for arm in figures["arms"]:
        runs = [r[arm] for r in rounds]
        cells = []
        for t in sensitive:
            shares = [run["dataflows"][t["name"]]["within_target"] for run in runs]
            where = sorted({tuple(run["dataflows"][t["name"]]["executors"]) for run in runs})
            cells.append(f"{' or '.join(','.join(map(str, w)) for w in where)}, "
                         f"{pct(statistics.median(shares))} ({pct(min(shares))})")
        met = sum(1 for run in runs if run["dataflows"][tight]["within_target"] >= 0.99)
        busy = statistics.median(run["utilization"] for run in runs)
        cores = statistics.median(run["cpu"]["cores_busy"] for run in runs)
        lines.append(f"| {LABELS.get(arm, arm)} | " + " | ".join(cells)
                     + f" | {met} of {len(runs)} | {busy:.0%} | {cores:.2f} |")
    lines += ["", f"{len(rounds)} rounds, each arm 20 s measured on a fresh pool of two "
              f"executors; the mix's bulk at {figures['bulk_eps']:,.0f} events/s, "
              f"{figures['share']:.0%} of what bulk alone took in flat out "
              f"({figures['bulk_alone_eps']:,.0f})."]
    return lines
