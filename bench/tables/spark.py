"""`bench.spark_throughput`'s and `bench.spark_latency`'s tables (docs/spark.md)."""

from __future__ import annotations

import statistics
from typing import Any

from bench.tables import k, ratio

#: The Spark tier's throughput goals: events/s into the runtime on 2 cores, per format.
GOAL_EPS = {"json": 500_000, "parquet": 1_000_000}
#: The arms: (push, who reads the files), label. Runs from before `--read` were Spark's.
ARMS = ((("rows", "spark"), "rows (one dict per event), Spark reads"),
        (("columns", "spark"), "Arrow columns, Spark reads"),
        (("columns", "arrow"), "Arrow columns, the writer reads the files (pyarrow)"))
LEGS = (("spark_in", "Spark in (file landed -> ingress)"), ("runtime", "runtime (ingress -> egress)"),
        ("spark_out", "Spark out (egress -> Parquet file written)"),
        ("end_to_end", "end to end (file landed -> Parquet)"))


def median(values: list[float | None]) -> float | None:
    """The median of the values measured (None: none was)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def throughput(figures: dict[str, Any]) -> list[str]:
    """`bench.spark_throughput`: events/s into the runtime per arm (push, reader; each run, their
    median), events per CPU second of every process, Spark alone into its `noop` sink, and
    the arms against each other where both ran; then whether the format's goal was met."""
    def machine(runs: list[dict[str, Any]], field: str) -> float | None:
        return median([r.get("machine", {}).get(field) for r in runs])

    def cores(v: float | None) -> str:
        return "" if v is None else f"{v:.2f}"

    def seconds(v: float | None) -> str:
        return "" if v is None else f"{v:.2f} s"

    args = figures["args"]
    runs = {arm: [r for r in figures["runs"] if (r["push"], r.get("read", "spark")) == arm]
            for arm, _ in ARMS}
    eps = {arm: median([r["events_per_s"] for r in rs]) for arm, rs in runs.items()}
    cpu = {arm: machine(rs, "events_per_cpu_s") for arm, rs in runs.items()}
    fmt = "JSON" if args["format"] == "json" else "Parquet"
    lines = [f"| {args['files'] * (args['rows'] // args['files']):,} rows in {args['files']} {fmt} "
             "files, pushed as | events/s into the runtime, each run | median | per CPU second "
             "of every process (median) | cores kept busy (median) | first event in after "
             "(median) | then (median, events/s) | Spark micro-batches |",
             "|---|---|---|---|---|---|---|---|"]
    for arm, label in ARMS:
        if runs[arm]:
            b = sorted(r["batches"] for r in runs[arm])
            lines.append(f"| {label} | {' / '.join(k(r['events_per_s']) for r in runs[arm])} | "
                         f"{k(eps[arm])} | {k(cpu[arm])} | "
                         f"{cores(machine(runs[arm], 'cores_busy'))} | "
                         f"{seconds(median([r.get('first_event_s') for r in runs[arm]]))} | "
                         f"{k(median([r.get('flowing_events_per_s') for r in runs[arm]]))} | "
                         f"{b[0] if b[0] == b[-1] else f'{b[0]}-{b[-1]}'} |")
    for (top, bottom), label in ((("columns", "spark"), ("rows", "spark")), "columns / rows"), \
            ((("columns", "arrow"), ("columns", "spark")), "the writer reading / Spark reading"):
        if runs[top] and runs[bottom]:
            lines.append(f"| {label} | | {ratio(eps[top], eps[bottom])} | "
                         f"{ratio(cpu[top], cpu[bottom])} | | | | |")
    if noop := figures.get("spark_noop"):
        lines.append(f"| Spark alone: the same files into its `noop` sink (rows/s) | | "
                     f"{k(noop['rows_per_s'])} | {k(machine([noop], 'events_per_cpu_s'))} | "
                     f"{cores(machine([noop], 'cores_busy'))} | | | |")
    goal = GOAL_EPS[args["format"]]
    met = [f"{'met' if m >= goal else 'not met'} by {label}"
           for arm, label in ARMS if (m := eps[arm]) is not None]
    nproc = figures.get("measured_on", {}).get("nproc") or figures.get("cores")
    where = "" if nproc == 2 else f" (this run had {nproc} cores)"
    return [*lines, "", f"The goal from {fmt}, {k(goal)} events/s into the runtime on 2 "
            f"cores{where}, by the median: {'; '.join(met)}."]


def trigger(ms: int) -> str:
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:g} s"


def latency(figures: dict[str, Any]) -> list[str]:
    """`bench.spark_latency`: per trigger interval, each leg's p50/p95/p99 in ms, and the
    mean time of Spark's micro-batches against the trigger."""
    def ms(stage: dict[str, Any], p: str) -> str:
        return f"{stage[p]:,.0f}" if stage.get("n") else ""

    lines = ["| trigger | leg | p50 | p95 | p99 |", "|---|---|---|---|---|"]
    batches = []
    for run in figures["runs"]:
        first = f"{trigger(run['trigger_ms'])} ({run['results']:,} results)"
        for i, (leg, label) in enumerate(LEGS):
            stage = run["stages"].get(leg, {})
            lines.append(f"| {first if i == 0 else ''} | {label} | {ms(stage, 'p50_ms')} | "
                         f"{ms(stage, 'p95_ms')} | {ms(stage, 'p99_ms')} |")
        took = {q: c.get("triggerExecution") for q, c in run["spark_batch_ms"].items()}
        if took.get("in") is not None and took.get("out") is not None:
            slow = max(took["in"], took["out"]) > run["trigger_ms"]
            batches.append(f"with the {trigger(run['trigger_ms'])} trigger, {took['in']:,.0f} ms "
                           f"(input query) and {took['out']:,.0f} ms (output query)"
                           + (": longer than the trigger, so the batches ran back to back"
                              if slow else ""))
    if batches:
        lines += ["", "Spark's mean time per micro-batch: " + "; ".join(batches) + "."]
    return lines
