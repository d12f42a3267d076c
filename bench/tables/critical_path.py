"""`bench.critical_path`'s table (each traced mode over untraced, round by round) and its
findings (the cost against its goal, whether the analysis keeps up, the straggler found)."""

from __future__ import annotations

from typing import Any

#: The goal for tracing unread: under 5% of the bulk throughput.
GOAL_COST = 0.05
MODES = (("traced", "traced, nobody reading the analysis"),
         ("read", "traced and read every second (analysis online)"))


def per_round(figures: dict[str, Any], mode: str) -> tuple[list[float], list[float]]:
    """`mode` over untraced in each round: bulk throughputs, alerts p99s (the rounds where
    both sides had results, as the benchmark takes them)."""
    rounds = figures["rounds"]
    eps = [r[mode]["bulk_eps"] / r["untraced"]["bulk_eps"] for r in rounds
           if r["untraced"]["bulk_eps"]]
    p99 = [r[mode]["alerts"]["p99_ms"] / r["untraced"]["alerts"]["p99_ms"] for r in rounds
           if r[mode]["alerts"].get("results") and r["untraced"]["alerts"].get("results")]
    return eps, p99


def spread(median: float | None, values: list[float], digits: int) -> str:
    """The median, then the per-round range: 0.972 (per round 0.91-1.04)."""
    if median is None or not values:
        return ""
    return f"{median:.{digits}f} (per round {min(values):.2f}-{max(values):.2f})"


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.critical_path`: bulk throughput and alerts p99 of each traced mode over
    untraced, the median of the rounds and their range."""
    n = len(figures["rounds"])
    lines = [f"| | bulk throughput over untraced (median of {n}) | alerts p99 over untraced |",
             "|---|---|---|"]
    for mode, label in MODES:
        eps, p99 = per_round(figures, mode)
        o = figures["tracing_overhead"][mode]
        lines.append(f"| {label} | {spread(o['throughput_over_untraced'], eps, 3)} | "
                     f"{spread(o['alerts_p99_over_untraced'], p99, 2)} |")
    return lines


def noisy(rounds: list[float]) -> bool:
    """The rounds fall on both sides of 1: the machine's noise is larger than the cost."""
    return bool(rounds) and min(rounds) < 1.0 < max(rounds)


def cost(ratio: float, rounds: list[float]) -> str:
    """Throughput lost to tracing: "a cost of 2.8%", or why this run cannot tell it."""
    if noisy(rounds):
        return ("the rounds fall on both sides of 1: this machine's noise is larger than "
                "the cost, which this run does not resolve")
    return f"a cost of {1.0 - ratio:.1%}"


def findings(figures: dict[str, Any]) -> list[str]:
    """`bench.critical_path`'s findings, as bullets: the cost unread (against its goal) and
    read, whether the analysis keeps up, and how often the straggler was ranked first."""
    traced, read = (figures["tracing_overhead"][m]["throughput_over_untraced"]
                    for m in ("traced", "read"))
    traced_rounds, read_rounds = per_round(figures, "traced")[0], per_round(figures, "read")[0]
    met = ("not shown" if noisy(traced_rounds) else
           "met" if 1.0 - traced < GOAL_COST else "not met")
    analysed, load = figures["analysis_activities_per_s"], figures["traced_activities_per_s"]
    keeps_up = "keeps up" if analysed and analysed > load else "does not keep up"
    runs = figures["straggler_runs"]
    return [
        f"- Unread, the bulk throughput traced was {traced:.3f} of untraced "
        f"({cost(traced, traced_rounds)}; the goal, a cost under {GOAL_COST:.0%}: {met}).",
        f"- The analysis: {analysed:,.0f} activities per second of CPU on one thread, against "
        f"{load:,.0f} traced per second under this load (the most in a round): it {keeps_up}, "
        f"with {load / analysed:.0%} of a core. Read every second, the bulk throughput was "
        f"{read:.3f} of untraced ({cost(read, read_rounds)}).",
        f"- The straggler (a map three times slower than its neighbours, which one rotating "
        f"per run) was ranked first in {sum(r['hit'] for r in runs)} of {len(runs)} runs "
        f"(precision@1 = {figures['precision_at_1']:.2f}).",
    ]
