"""`bench.sched_overhead`'s table: µs per message of each phase, without and with floors,
and whether enqueueing stays under its goal."""

from __future__ import annotations

from typing import Any

#: What stamping a deadline and queueing a message may cost (µs per message).
GOAL_US = 10.0


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.sched_overhead`: each phase per activation count, floors off then on; the
    floors' cost as enq+disp on / off; then the goal's sentence."""
    lines = ["| activations | tenant floors | build | enqueue | dispatch | enq+disp | steady | "
             "enq+disp on / off |",
             "|---|---|---|---|---|---|---|---|"]
    off: dict[int, float] = {r["activations"]: r["enq_disp"] for r in figures["runs"]
                             if not r["floors"]}
    for r in figures["runs"]:
        cells = " | ".join(f"{r[f]:.2f}" for f in ("build", "enqueue", "dispatch", "enq_disp",
                                                    "steady"))
        base = off.get(r["activations"])  # two decimals: with one, the sizes look alike
        floors = f"{r['enq_disp'] / base:.2f}x" if r["floors"] and base else ""
        lines.append(f"| {r['activations']:,} | {'on' if r['floors'] else 'off'} | {cells} | "
                     f"{floors} |")
    return [*lines, "", *goal(figures)]


def goal(figures: dict[str, Any]) -> list[str]:
    """Enqueue at the fewest and the most activations, and the goal met or not (by every run)."""
    runs = figures["runs"]
    least, most = min(r["activations"] for r in runs), max(r["activations"] for r in runs)
    enq = {(r["activations"], r["floors"]): r["enqueue"] for r in runs}
    over = [r for r in runs if r["enqueue"] >= GOAL_US]
    verdict = (f"under the {GOAL_US:.0f} µs goal in every run" if not over else
               f"over the {GOAL_US:.0f} µs goal in {len(over)} of {len(runs)} runs")
    return [f"Enqueue costs {enq[least, False]:.1f} µs per message with {least:,} "
            f"activation{'s' * (least != 1)}, {enq[most, False]:.1f} µs with {most:,} "
            f"({enq[least, True]:.1f} and {enq[most, True]:.1f} with tenant floors): {verdict}."]
