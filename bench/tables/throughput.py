"""`bench.throughput`'s table."""

from __future__ import annotations

from typing import Any

from bench.tables import k, ratio

ROWS = (  # (label, rows arm, Arrow arm)
    ("operators alone, in-process (`run_local`)", "operators", None),
    ("one executor core, in-process (no Ray)", "executor_core", "executor_core_arrow"),
    ("Ray, 1 executor, end to end (driver pushing)", "ray_x1", "ray_x1_arrow"),
    ("Ray, 2 executors, end to end (parallelism 2)", "ray_x2", "ray_x2_arrow"),
    ("Ray, 1 executor, per CPU second of its worker thread", "ray_x1_busy", "ray_x1_arrow_busy"),
    ("Ray, 2 executors, per CPU second of their worker threads", "ray_x2_busy", "ray_x2_arrow_busy"),
)


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.throughput`: events/s of each arm, rows and Arrow; the Ray arms also per CPU
    second of every process (what carries to a cluster)."""
    def cell(arm: str | None, field: str = "events_per_s") -> float | None:
        return figures[arm].get(field) if arm and arm in figures else None

    lines = ["| measured | rows: events/s | Arrow: events/s | Arrow / rows |",
             "|---|---|---|---|"]
    for label, rows, arrow in ROWS:
        lines.append(f"| {label} | {k(cell(rows))} | {k(cell(arrow))} | "
                     f"{ratio(cell(arrow), cell(rows))} |")
    ray_arms = [(label.split(", end")[0], rows, arrow) for label, rows, arrow in ROWS[2:4]]
    for short, rows, arrow in ray_arms:
        lines.append(f"| {short}, per CPU second of every process | "
                     f"{k(cell(rows, 'events_per_cpu_s'))} | {k(cell(arrow, 'events_per_cpu_s'))} | "
                     f"{ratio(cell(arrow, 'events_per_cpu_s'), cell(rows, 'events_per_cpu_s'))} |")
    profiles, nproc = figures.get("profiles", {}), figures.get("measured_on", {}).get("nproc")
    for short, rows, arrow in ray_arms:  # the share of the machine a run kept busy
        busy = [profiles.get(arm, {}).get("machine", {}).get("cores_busy") for arm in (rows, arrow)]
        if any(b is not None for b in busy):
            lines.append(f"| {short}, cores kept busy (last run, of {nproc}) | "
                         + " | ".join("" if b is None else f"{b:.2f}" for b in busy) + " | |")
    return lines


def headline(figures: dict[str, Any]) -> list[str]:
    """The README's figure: what one and two executors take, per CPU second of every
    process, rows and Arrow."""
    def per_cpu(arm: str) -> float | None:
        return figures.get(arm, {}).get("events_per_cpu_s")

    lines = ["| filter -> map -> keyed count on Ray, events per CPU second of every process | "
             "rows | Arrow |", "|---|---|---|"]
    for label, arm in (("1 executor", "ray_x1"), ("2 executors", "ray_x2")):
        lines.append(f"| {label} | {k(per_cpu(arm))} | {k(per_cpu(f'{arm}_arrow'))} |")
    return lines
