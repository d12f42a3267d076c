"""How each benchmark's JSON becomes its table in the docs: one module per benchmark,
named as the table's marker names it, with `table(figures) -> lines`. Pure: they read a
dict and format it (`python -m bench.report` calls them)."""

from __future__ import annotations

from typing import Any


def k(v: float | None) -> str:
    """Events/s as thousands: 1,234 K ("" when not measured)."""
    return "" if v is None else f"{v / 1e3:,.0f} K"


def ratio(a: float | None, b: float | None) -> str:
    """a / b as 1.2x ("" when either is missing or zero)."""
    return "" if not a or not b else f"{a / b:.1f}x"


def ms(v: float | None) -> str:
    """A latency: 34.4 under 100 ms, 1,199 from there ("" when there is none)."""
    return "" if v is None else f"{v:,.1f}" if v < 100 else f"{v:,.0f}"


def per_event(cpu: dict[str, Any] | None) -> tuple[float, float, float | None] | None:
    """A run's `{events, cpu_s_all, wall_s}` (every process's CPU counted) as (events per
    CPU second, CPU µs per event, cores kept busy: CPU over wall time); None when absent."""
    if not cpu or not cpu.get("cpu_s_all"):
        return None
    wall = cpu.get("wall_s")
    return (cpu["events"] / cpu["cpu_s_all"], 1e6 * cpu["cpu_s_all"] / cpu["events"],
            cpu["cpu_s_all"] / wall if wall else None)
