"""`bench.network`'s table: three nodes on loopback and as hosts of their own."""

from __future__ import annotations

from typing import Any


def table(figures: dict[str, Any]) -> list[str]:
    """CPU µs per event of every process, rows and Arrow, on loopback and across network
    namespaces, and the one over the other."""
    lines = ["| three nodes | rows: CPU µs per event | rows: wall s | Arrow: CPU µs per event | "
             "Arrow: wall s | cores kept busy (rows, Arrow) | calls between executors (rows, "
             "Arrow) |", "|---|---|---|---|---|---|---|"]
    for arm, label in (("loopback", "on loopback addresses"),
                       ("netns", "in network namespaces")):
        r = figures[arm]
        busy = ", ".join(f"{r[kind]['cpu_s_all'] / r[kind]['wall_s']:.2f}" for kind in ("rows", "arrow"))
        lines.append(f"| {label} | {r['rows']['cpu_us_per_event']:.2f} | {r['rows']['wall_s']:.2f} | "
                     f"{r['arrow']['cpu_us_per_event']:.2f} | {r['arrow']['wall_s']:.2f} | {busy} | "
                     f"{r['rows']['exchange']['calls']:,}, {r['arrow']['exchange']['calls']:,} |")
    ratio = figures["netns_over_loopback"]
    delay = (f"each veth delayed {figures['delay_ms']} ms" if figures.get("delay_ms")
             else f"no delay: `tc netem` failed here ({figures.get('delay_error') or 'not asked'})")
    return lines + ["", f"- Namespaces over loopback, CPU per event: rows {ratio['rows']:.2f}x, "
                    f"Arrow {ratio['arrow']:.2f}x (goal: within 1.10x); {delay}."]
