"""`bench.push_cost`'s table: the CPU per call of the client and of the executor, per call
size and arm (medians over the rounds)."""

from __future__ import annotations

import statistics
from typing import Any


def table(figures: dict[str, Any]) -> list[str]:
    """Per call size, each arm's client and executor CPU per call, and the wall time."""
    arms = list(dict.fromkeys(r["arm"] for r in figures["rounds"]))
    label = {"baseline": f"baseline ({figures['baseline']})"} if "baseline" in figures else {}
    lines = ["| events a call | arm | client CPU µs a call | executor CPU µs a call | wall µs a call |",
             "|---|---|---|---|---|"]
    for n in map(str, figures["sizes"]):
        for arm in arms:
            rounds = [r["sizes"][n] for r in figures["rounds"] if r["arm"] == arm]

            def med(field: str, rounds: list[dict[str, float]] = rounds) -> str:
                return f"{statistics.median(r[field] for r in rounds):,.0f}"
            lines.append(f"| {n} | {label.get(arm, arm)} | {med('client_cpu_us')} | "
                         f"{med('executor_cpu_us')} | {med('wall_us')} |")
    lines += ["", f"Medians over {len(figures['rounds']) // len(arms)} rounds of "
              f"{figures['calls']:,} calls a size."]
    return lines
