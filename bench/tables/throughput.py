"""`bench.throughput`'s tables."""

from __future__ import annotations

from typing import Any

from bench.tables import k, per_event, ratio


def ray_sizes(figures: dict[str, Any]) -> list[int]:
    """The executor counts the run measured on Ray (ray_x1, ray_x2, ...), ascending."""
    return sorted(int(arm[5:]) for arm in figures if arm.startswith("ray_x")
                  and arm[5:].isdigit())


def executors(n: int) -> str:
    return f"{n} executor{'s' if n > 1 else ''}"


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.throughput`: events/s of each arm, rows and Arrow, end to end and per CPU
    second of the executors' worker threads."""
    def cell(arm: str | None) -> float | None:
        return figures[arm].get("events_per_s") if arm and arm in figures else None

    rows = [("operators alone, in-process (`run_local`)", "operators", None),
            ("one executor core, in-process (no Ray)", "executor_core", "executor_core_arrow")]
    for n in ray_sizes(figures):
        rows.append((f"Ray, {executors(n)}, end to end (parallelism {n})", f"ray_x{n}",
                     f"ray_x{n}_arrow"))
    for n in ray_sizes(figures):
        rows.append((f"Ray, {executors(n)}, per CPU second of the worker threads",
                     f"ray_x{n}_busy", f"ray_x{n}_arrow_busy"))
    lines = ["| measured | rows: events/s | Arrow: events/s | Arrow / rows |",
             "|---|---|---|---|"]
    for label, row_arm, arrow_arm in rows:
        lines.append(f"| {label} | {k(cell(row_arm))} | {k(cell(arrow_arm))} | "
                     f"{ratio(cell(arrow_arm), cell(row_arm))} |")
    return lines


def cpu_of(figures: dict[str, Any], arm: str) -> tuple[float, float, float | None] | None:
    """`per_event` of a Ray arm's median run; a run from before `cpu` kept only its
    events per CPU second."""
    got = per_event(figures.get("cpu", {}).get(arm))
    if got is not None:
        return got
    per = figures.get(arm, {}).get("events_per_cpu_s")
    return (per, 1e6 / per, None) if per else None


def scale_out(figures: dict[str, Any]) -> list[str]:
    """What 1, 2 and 4 executors cost per event, counted over every process of the run
    (the driver, the executors, the controller, Ray's): rows and Arrow, and each against
    one executor."""
    lines = ["| on Ray | rows: events per CPU s | rows: CPU µs per event | rows: vs 1 executor "
             "| Arrow: events per CPU s | Arrow: CPU µs per event | Arrow: vs 1 executor "
             "| cores kept busy (rows, Arrow) |", "|---|---|---|---|---|---|---|---|"]
    for n in ray_sizes(figures):
        cells = []
        for kind in ("", "_arrow"):
            got, one = cpu_of(figures, f"ray_x{n}{kind}"), cpu_of(figures, f"ray_x1{kind}")
            cells += ["", "", ""] if got is None else [
                k(got[0]), f"{got[1]:.1f}", ratio(got[0], one[0] if one else None)]
        lines.append(f"| {executors(n)} | " + " | ".join(cells)
                     + f" | {busy([cpu_of(figures, f'ray_x{n}{kind}') for kind in ('', '_arrow')])} |")
    inside = [cpu_of(figures, f"ray_x1_p2{kind}") for kind in ("", "_arrow")]
    across = [cpu_of(figures, f"ray_x2{kind}") for kind in ("", "_arrow")]
    if any(inside):  # the same keyed exchange inside one executor: what crossing is set beside
        cells = []
        for got, other in zip(inside, across, strict=True):
            cells += ["", "", ""] if got is None else [
                k(got[0]), f"{got[1]:.1f}",
                f"2 executors: {other[1] / got[1]:.2f}x its CPU per event" if other else ""]
        lines.append("| 1 executor, parallelism 2 (the keyed exchange inside it) | "
                     + " | ".join(cells) + f" | {busy(inside)} |")
    return lines


def busy(runs: list[tuple[float, float, float | None] | None]) -> str:
    """The cores each run kept busy, side by side ("" when none was measured)."""
    shown = ["-" if r is None or r[2] is None else f"{r[2]:.2f}" for r in runs]
    return "" if all(x == "-" for x in shown) else ", ".join(shown)


def headline(figures: dict[str, Any]) -> list[str]:
    """The README's figure: what 1, 2 and 4 executors take per CPU second of every process,
    and the CPU each event costs, rows and Arrow."""
    lines = ["| filter -> map -> keyed count on Ray, every process counted | rows: events per "
             "CPU s | rows: CPU µs per event | Arrow: events per CPU s | Arrow: CPU µs per "
             "event | cores kept busy (rows, Arrow) |", "|---|---|---|---|---|---|"]
    for n in ray_sizes(figures):
        runs = [cpu_of(figures, f"ray_x{n}{kind}") for kind in ("", "_arrow")]
        cells = [c for got in runs for c in (("", "") if got is None else (k(got[0]), f"{got[1]:.1f}"))]
        lines.append(f"| {executors(n)} | " + " | ".join(cells) + f" | {busy(runs)} |")
    return lines
