"""`bench.migration`'s table: latency while key bins move, per strategy."""

from __future__ import annotations

from typing import Any


def _ms(v: float | None) -> str:
    return "" if v is None else f"{v:,.0f}"


def _busy(before: list[float] | None, during: list[float] | None) -> str:
    """"39%, 5% → 87%, 75%": each executor's busy share, steady then during the move."""
    if not before or not during:
        return ""
    return (", ".join(f"{b:.0%}" for b in before) + " → " + ", ".join(f"{b:.0%}" for b in during))


def _row(r: dict[str, Any]) -> str:
    epochs = (f"{r['epochs_done']:,}" if r["completed"] else
              f"{r['epochs_done']:,} of {r['epochs_total']:,} (not done)")
    equal = {None: "not checked", True: "yes", False: "**no**"}[r["results_match"]]
    return (f"| `{r['strategy']}` | {r.get('backend', 'memory')} | {epochs} | {r['duration_s']:,.1f} | "
            f"{r['bytes_moved'] / 1e6:,.1f} | {_ms(r['steady_p99_ms'])} | "
            f"{_ms(r['migration_p99_ms'])} | {_ms(r['after_p99_ms'])} | {_ms(r['alerts_p99_ms'])} | "
            f"{_busy(r.get('executor_busy_steady'), r.get('executor_busy_migration'))} | {equal} |")


def _setup(figures: dict[str, Any]) -> str:
    """The run's shape: the state, the bins, the rate offered."""
    s = figures["setup"]
    keys = max((r.get("keys_in_state_est") or 0 for r in figures["strategies"].values()),
               default=0)
    rate = ("" if not s["capacity_eps"] else
            f" offered {s['rate_eps']:,.0f} events/s, {s['load']:.0%} of the "
            f"{s['capacity_eps']:,.0f} it took flat out"
            f"{'' if s['capacity_measured'] else ' (given with --capacity)'};")
    return (f"The count keeps {s['open_windows']} windows of {s['keys_per_window']:,} keys open "
            f"(about {round(keys, -3):,} keys in state) in {s['bins']:,} bins;{rate} half the bins move.")


def goals(figures: dict[str, Any]) -> list[str]:
    """The goals the JSON reports: batched within 2x its steady p99 with the alerts on
    target, and the spike of the others."""
    g, runs = figures["goals"], figures["strategies"]
    lines = []
    for backend in dict.fromkeys(r.get("backend", "memory") for r in runs.values()):
        at, suffix = ("", "") if backend == "memory" else (f"@{backend}", f"_{backend}")
        if f"batched{at}" in runs:
            b = runs[f"batched{at}"]
            x = b.get("migration_over_steady_p99")
            lines.append(f"- {backend}: `batched` p99 during within 2x its steady p99: "
                         f"{'met' if g[f'batched_p99_within_2x_steady{suffix}'] else '**not met**'}"
                         + ("" if x is None else f" ({x:.1f}x)"))
            lines.append(f"- {backend}: the alerts' p99 within {b['alerts_target_ms']:g} ms during "
                         f"`batched`: "
                         f"{'met' if g[f'batched_alerts_within_target{suffix}'] else '**not met**'}"
                         + ("" if b["alerts_p99_ms"] is None else f" ({b['alerts_p99_ms']:,.0f} ms)"))
        spikes = [f"`{name}` {x:.1f}x" for name in ("all_at_once", "stop_the_world")
                  if (x := g.get(f"spike_{name}_x{suffix}")) is not None]
        if spikes:
            lines.append(f"- {backend}: the spike, p99 during over steady: " + ", ".join(spikes))
    return lines


def table(figures: dict[str, Any]) -> list[str]:
    """`bench.migration`: per strategy, the move and the latency before, during and after
    it; the run's shape and the goals under it."""
    lines = ["| strategy | backend | epochs | duration s | MB moved | p99 before ms | p99 during ms | "
             "p99 after ms | alerts p99 ms | executors busy, before → during | results equal |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row(r) for r in figures["strategies"].values()]
    return [*lines, "", _setup(figures), "", *goals(figures)]
