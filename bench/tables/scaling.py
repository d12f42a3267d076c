"""`bench.scaling`'s tables: the policies on the rate steps, and the hot key with and
without a lessee, each with its goals met or not."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.harness.output import format_ms


def _latency(ms: float | None) -> str:
    """Whole ms, or whole seconds from 10 s up."""
    return format_ms(ms) if ms is None or ms < 10_000 else f"{ms / 1e3:,.0f} s"


def _list(values: Sequence[float]) -> str:
    """1, 4.3, 20: one decimal at most, none when whole."""
    return ", ".join(f"{v:.1f}".removesuffix(".0") for v in values)


def _yes(ok: bool | None) -> str:
    return "" if ok is None else "yes" if ok else "**no**"


def _goal(ok: bool | None) -> str:
    return "not measured" if ok is None else "met" if ok else "**not met**"


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.scaling`, scenario 1: per policy, what it did on each rate step; then the
    DS2 goals."""
    optimum = ", ".join(str(o) for o in figures["setup"]["optimum"])
    lines = [f"| policy | actions per rate step | settled (optimum {optimum}) | overshoot | "
             "oscillations | s to converge | backlog max (events) | alerts within target | "
             "results equal |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in figures["policies"].items():
        deadline = sum(r["deadline_actions"])
        actions = _list(r["actions"]) + (f" ({deadline} by the deadline rule)" if deadline else "")
        within = "" if r["within_target"] is None else f"{r['within_target']:.1%}"
        lines.append(f"| `{name}` | {actions} | {_list(r['settled'])} | {sum(r['overshoot'])} | "
                     f"{r['oscillations']} | {_list(r['seconds_to_converge'])} | "
                     f"{r['backlog_max_events']:,} | {within} | {_yes(r['results_equal'])} |")
    goals, summ = figures["goals"], figures["summary"]
    ds2, thr = summ.get("ds2"), summ.get("threshold")
    if ds2 is None:
        return lines
    lines += ["",
              f"- DS2 in at most 2 actions per rate step: {_goal(goals['ds2_at_most_2_actions_per_step'])} "
              f"(at most {ds2['max_actions_per_step']}).",
              f"- DS2 without oscillation: {_goal(goals['ds2_no_oscillation'])} "
              f"({ds2['oscillations']}).",
              f"- DS2 ahead of threshold: {_goal(goals['ds2_ahead_of_threshold'])}"
              + ("" if thr is None else
                 f" (phases at the optimum {ds2['phases_at_optimum']} against "
                 f"{thr['phases_at_optimum']}, actions {ds2['total_actions']} against "
                 f"{thr['total_actions']}, instances over the optimum {ds2['overshoot_total']} "
                 f"against {thr['overshoot_total']}).")]
    return lines


def hot_key(figures: dict[str, Any]) -> list[str]:
    """`bench.scaling`, scenario 2: the hot key's throughput and p99 without and with one
    lessee, and the speedup against its goal."""
    hot = figures.get("hot_key")
    if not hot:
        return ["The hot key was not measured in this run."]
    lines = ["| hot key | events/s | p99 | results equal |", "|---|---|---|---|"]
    for label, run in (("no lessee", hot["without"]), ("one lessee", hot["with"])):
        if "throughput_eps" not in run:
            lines.append(f"| {label} | {run.get('lessees', 'not measured')} | | |")
            continue
        lines.append(f"| {label} | {run['throughput_eps']:,.0f} | {_latency(run['p99_ms'])} | "
                     f"{_yes(run['results_equal'])} |")
    speedup = hot.get("lessee_speedup")
    shown = "" if speedup is None else f" **{speedup:.2f}x**"
    lines += ["", f"- Lessee speedup{shown}, goal 1.5x: "
                  f"{_goal(figures['goals']['lessee_speedup_at_least_1_5'])}."]
    return lines


def capped(figures: dict[str, Any]) -> list[str]:
    """`bench.scaling`, scenario 3: DS2 from one executor, the window offered 3x one
    instance's capacity: its decisions, the time to take the rate in, and the goals."""
    c = figures.get("capped")
    if not c:
        return ["(no capped run in this file)"]
    lines = ["| seconds in (seen) | instances from | to | why (the scaler's words) |",
             "|---|---|---|---|"]
    for d in c["decisions"]:
        lines.append(f"| {d.get('seen_s', '')} | {d.get('from_parallelism', '')} | "
                     f"{d.get('to_parallelism', '')} | "
                     f"{str(d.get('reason', '')).replace('|', '/')} |")
    by_p = ", ".join(f"{p}: {v:,}" for p, v in c["window_eps_by_parallelism"].items())
    one = ", ".join(f"{p}: {v:,}" for p, v in c.get("instance_eps_by_parallelism", {}).items())
    back = c["p99_within_target_from_s"]
    goals = figures["goals"]
    return lines + [
        "",
        f"- Offered: {c['offered_eps']:,.0f} events/s to the window, each instance capped at "
        f"{c['capacity_eps']:,.0f}, for {c['seconds']:g} s; settled at {c['settled']} "
        f"instances (optimum {c['optimum']}), {c['executors_max']} executors at most.",
        f"- The window's events/s in all at each parallelism (median of the samples): {by_p}; "
        f"one instance's, per second of its useful time: {one}.",
        f"- The offered rate taken in after {c['seconds_to_rate']:.0f} s (nothing waits at the "
        f"generator from then on); the window's p99 "
        + (f"within its target from second {back} on" if back is not None else
           "not back within its target by the end of the run (the backlog built before it "
           "scaled still drained)")
        + f"; p99 over the run {_latency(c['p99_ms'])}.",
        f"- Taken in within 60 s: {_goal(goals.get('capped_rate_taken_within_60_s'))}; at most 3 "
        f"actions: {_goal(goals.get('capped_at_most_3_actions'))}; no oscillation: "
        f"{_goal(goals.get('capped_no_oscillation'))}; results equal to run_local's: "
        f"{_goal(goals.get('capped_results_match'))}."]
