"""`bench.recovery`'s table: what checkpoints cost, and the way back from an executor's death."""

from __future__ import annotations

from typing import Any

#: The JSON's goals: (in words, the table's field each checks, its format). The
#: thresholds are `bench.recovery`'s GOAL_*.
GOALS = {
    "recovery_under_5s_large_state": ("recovery (kill → first new result read) under 5 s, "
                                      "large state", "recovery_s", "{:.3f} s"),
    "checkpoint_overhead_under_10pct": ("throughput with checkpoints at least 0.9 of without",
                                        "checkpoint_overhead", "{:.2f}"),
    "alerts_p99_within_1_2x": ("alerts p99 with checkpoints within 1.2x of without",
                               "alerts_p99_ratio", "{:.2f}x"),
}


def _s(v: float | None, digits: int = 1) -> str:
    return "" if v is None else f"{v:.{digits}f} s"


def _recovery(figures: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The recovery run behind a row (its JSON keys are the intervals as strings)."""
    runs = figures["backends"][row["backend"]]["sizes"][row["size"]].get("recovery", {})
    return next((r for iv, r in runs.items() if float(iv) == row["interval_s"]), {})


def _restore(rec: dict[str, Any]) -> str:
    """"1.3 s (wait 1.1, read 0.0, load 0.2)": `recovering` back to `running`, by phase."""
    p = rec.get("restore_phases")
    phases = "" if not p else (f" (wait {p['waited_s']:.1f}, read {p['read_s']:.1f}, "
                               f"load {p['restored_s']:.1f})")
    return _s(rec.get("restore_s")) + phases


def _row(figures: dict[str, Any], r: dict[str, Any]) -> str:
    rec = _recovery(figures, r) if r["parts"] == "incremental" else {}
    ckpt = ("" if r["steady_checkpoint_mb"] is None else
            f"{r['steady_checkpoint_mb']:,.1f} MB in {r['steady_checkpoint_s'] or 0:.2f} s")
    overhead = "" if r["checkpoint_overhead"] is None else f"{r['checkpoint_overhead']:.2f}"
    alerts = ("" if r["alerts_p99_on_ms"] is None else
              f"{r['alerts_p99_off_ms']:,.1f} → {r['alerts_p99_on_ms']:,.1f} ms "
              f"({r['alerts_p99_ratio']:.2f}x)")
    equal = {None: "", True: "yes", False: "**no**"}[r["results_match"]]
    if rec.get("error"):
        equal = "failed (its `error` in the JSON)"
    rss = "" if r.get("rss_mb") is None else f"{r['rss_mb']:,.0f} MB"
    kept = {"process": " in a process", "join": " in a join",
            "session": " in sessions"}.get(r.get("state", ""), "")
    return (f"| {r['backend']} | {r['keys']:,} keys{kept} | {r['interval_s']:g} s | {r['parts']} | "
            f"{ckpt} | {overhead} | {alerts} | {_s(r['recovery_s'])} | "
            f"{_s(r['detect_s'], 2)} | "
            f"{_restore(rec)} | {_s(rec.get('first_egress_s'))} | "
            f"{_s(r.get('checkpoint_after_restore_s'))} | {rss} | {equal} |")


def side_by_side(figures: dict[str, Any]) -> list[str]:
    """`bench.recovery --baseline REV --rounds N`: per state backend and size (incremental
    parts), the recovery and its detection in each round, the baseline beside this tree."""
    by: dict[tuple[str, int, float, str], list[dict[str, Any]]] = {}
    for run in figures["rounds"]:
        for r in run["table"]:
            if r["parts"] == "incremental":
                by.setdefault((r["backend"], r["keys"], r["interval_s"], run["arm"]), []).append(r)
    rev = figures["baseline"]

    def each(rows: list[dict[str, Any]], field: str, digits: int) -> str:
        return ", ".join("-" if r.get(field) is None else f"{r[field]:.{digits}f}" for r in rows)

    lines = [f"| backend | state | interval | recovery, baseline `{rev}` (s, per round) | "
             "recovery, this tree | detect, baseline | detect, this tree | results equal |",
             "|---|---|---|---|---|---|---|---|"]
    for backend, keys, interval, _ in sorted({k for k in by if k[3] == "this tree"}):
        base = by.get((backend, keys, interval, "baseline"), [])
        this = by[(backend, keys, interval, "this tree")]
        equal = "yes" if all(r["results_match"] for r in base + this) else "**no**"
        lines.append(f"| {backend} | {keys:,} keys | {interval:g} s | {each(base, 'recovery_s', 2)} | "
                     f"{each(this, 'recovery_s', 2)} | {each(base, 'detect_s', 2)} | "
                     f"{each(this, 'detect_s', 2)} | {equal} |")
    return lines


def goals(figures: dict[str, Any]) -> list[str]:
    """One line per goal: met or not, and the figure of each row it was checked on."""
    measured = {f"{r['backend']}/{r['size']}@{r['interval_s']:g}s": r for r in figures["table"]
                if r["parts"] == "incremental"}
    large = figures["setup"]["large_keys"]
    lines = []
    for key, g in figures["goals"].items():
        label, field, fmt = GOALS[key]
        verdict = {None: "not measured", True: "met", False: "**not met**"}[g["met"]]
        rows = []
        for row, ok in g["per_row"].items():
            run, _, interval = row.partition("@")
            v = measured[row][field]
            rows.append(f"{run.replace('/', ', ')} at {interval.removesuffix('s')} s: "
                        f"{'-' if v is None else fmt.format(v)}, "
                        f"{'-' if ok is None else ('met' if ok else 'not met')}")
        lines.append(f"- {label.replace('large state', f'large state ({large:,} keys)')}: "
                     f"{verdict}" + (f" ({'; '.join(rows)})" if rows else ""))
    return lines


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.recovery`: per state backend, state size, interval and parts, the checkpoint,
    its cost in throughput and in the alerts' p99, the recovery and its phases (when the
    first new result was made, and how long the first checkpoint after the restore took:
    exactly-once results are read once a checkpoint after them completes), the
    killed executor's resident memory before; then the goals."""
    lines = ["| backend | state | interval | parts | checkpoint | throughput with / without | "
             "alerts p99, without → with | recovery (kill → first new result read) | detect | "
             "restore (wait, read and unpack, load) | first new result made | "
             "first checkpoint after the restore | resident memory | results equal |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row(figures, r) for r in figures["table"]]
    return [*lines, "", "Goals (incremental parts, the default):", "", *goals(figures)]
