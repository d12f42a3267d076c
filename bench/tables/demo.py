"""`bench.demo`'s table (docs/benchmarks.md): the `make run` demo, leg by leg, run by run."""

from __future__ import annotations

from typing import Any

from bench.tables.spark import LEGS  # the legs of an alert's way, as the Spark tables name them
from spark_ingest.demo import goals_met

#: The parts whose cores the demo counts (`spark_ingest.cpu.PARTS`), as the table names them.
PARTS = (("spark jvm", "Spark JVM"), ("spark python", "its Python workers"),
         ("executors", "executors"), ("ray (other)", "rest of Ray"), ("driver", "driver"),
         ("other", "other"))


def leg(s: dict[str, Any] | None, runtime: bool) -> str:
    if not s or not s.get("n"):
        return "no rows"
    if runtime:
        return f"{s['p50_ms']:.0f} / {s['p99_ms']:.0f} ms"
    return f"{s['p50_ms'] / 1000:.2f} / {s['p99_ms'] / 1000:.2f} s"


def phases(q: dict[str, Any] | None) -> str:
    """A query's mean micro-batch by phase (`spark_ingest.demo.micro_batch_phases`)."""
    if not q:
        return "not recorded"
    ms = q["ms"]

    def part(*keys: str) -> float:
        return sum(ms.get(k, 0.0) for k in keys)

    return (f"{part('triggerExecution'):.0f} ({part('addBatch'):.0f}, "
            f"{part('walCommit', 'commitOffsets'):.0f}, {part('latestOffset', 'getBatch'):.0f}, "
            f"{part('queryPlanning'):.0f}) over {q['batches']} batches")


def table(figures: dict[str, Any]) -> list[str]:
    """The alerts' latency per leg (p50 / p99) and the cores each part used, per run; then
    the goals and how many runs met them."""
    runs, goals = figures["runs"], figures["goals"]
    alerts = [r["dataflows"]["alerts"] for r in runs]
    base = figures.get("baseline")
    arms = {r.get("arm") for r in runs}
    names = [f"run {i + 1}" for i in range(len(runs))] if arms == {None} else [
        f"{'baseline `' + str(base) + '`' if r['arm'] == 'baseline' else r['arm']}, run "
        f"{sum(q.get('arm') == r.get('arm') for q in runs[:i + 1])}" for i, r in enumerate(runs)]
    lines = ["| the alerts (target 50 ms) | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(runs)]
    for stage, label in LEGS:
        cells = [leg(a["stages"].get(stage), stage == "runtime") for a in alerts]
        if stage == "runtime":
            cells = [f"{c}, {a['within_target']:.1%} within target" for c, a in zip(cells, alerts,
                                                                                   strict=True)]
        lines.append(f"| {label} p50 / p99 | " + " | ".join(cells) + " |")
    lines.append("| cores used: " + ", ".join(name for _, name in PARTS) + " | " + " | ".join(
        ", ".join(f"{r['cores'].get(part, 0.0):.2f}" for part, _ in PARTS) for r in runs) + " |")
    def alerts_input(r: dict[str, Any]) -> dict[str, Any] | None:
        """The alerts' input query: the shared one, or (before inputs were shared) their own."""
        batches = r.get("micro_batches", {})
        return next((batches[q] for q in sorted(batches)
                     if q.startswith("cameo-input-") or q.startswith("cameo-in-alerts-")), None)

    lines.append("| the alerts' Spark input query (shared with bulk: `cameo-input-events`; before, "
                 "their own `cameo-in-alerts-logs`), ms per micro-batch with data: whole (writing, "
                 "the offset and commit logs, reading, planning) | "
                 + " | ".join(phases(alerts_input(r)) for r in runs) + " |")
    queries = sorted({q for r in runs for q in r.get("micro_batches", {})
                      if "alerts" in q and not q.startswith("cameo-in-")})
    for q in queries:
        lines.append(f"| Spark query `{q}`, ms per micro-batch with data: whole (writing, the "
                     "offset and commit logs, reading, planning) | "
                     + " | ".join(phases(r.get("micro_batches", {}).get(q)) for r in runs) + " |")
    met: dict[str, tuple[int, int]] = {}
    for r, a in zip(runs, alerts, strict=True):
        arm = r.get("arm", "this tree")
        hits, n = met.get(arm, (0, 0))
        met[arm] = (hits + goals_met(a, goals), n + 1)
    lines += ["", f"Goals (end to end p50 at most {goals['end_to_end_p50_ms'] / 1000:g} s, p99 at "
              f"most {goals['end_to_end_p99_ms'] / 1000:g} s, {goals['within_target']:.0%} within "
              "target in the runtime): met in " + "; ".join(
                  f"{hits} of {n} runs" + (f" ({arm})" if len(met) > 1 else "")
                  for arm, (hits, n) in met.items()) + "."]
    return lines
