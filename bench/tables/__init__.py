"""How each benchmark's JSON becomes its table in the docs: one module per benchmark,
named as the table's marker names it, with `table(figures) -> lines`. Pure: they read a
dict and format it (`python -m bench.report` calls them)."""

from __future__ import annotations


def k(v: float | None) -> str:
    """Events/s as thousands: 1,234 K ("" when not measured)."""
    return "" if v is None else f"{v / 1e3:,.0f} K"


def ratio(a: float | None, b: float | None) -> str:
    """a / b as 1.2x ("" when either is missing or zero)."""
    return "" if not a or not b else f"{a / b:.1f}x"


def ms(v: float | None) -> str:
    """A latency: 34.4 under 100 ms, 1,199 from there ("" when there is none)."""
    return "" if v is None else f"{v:,.1f}" if v < 100 else f"{v:,.0f}"
