"""`bench.sched_overhead`'s table: µs per message of each phase, without and with floors."""

from __future__ import annotations

from typing import Any


def table(figures: dict[str, Any]) -> list[str]:
    lines = ["| activations | tenant floors | build | enqueue | dispatch | enq+disp | steady |",
             "|---|---|---|---|---|---|---|"]
    for r in figures["runs"]:
        cells = " | ".join(f"{r[f]:.2f}" for f in ("build", "enqueue", "dispatch", "enq_disp",
                                                    "steady"))
        lines.append(f"| {r['activations']:,} | {'on' if r['floors'] else 'off'} | {cells} |")
    return lines
