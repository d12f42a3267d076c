"""User functions for benchmarks: a fixed amount of CPU work per event."""

from __future__ import annotations

from typing import Any

#: Iterations of the loop in `burn`; about 40-50 µs per event on this machine.
ITERATIONS = 700


def burn(e: dict[str, Any]) -> dict[str, Any]:
    """A map step that costs a fixed amount of CPU, like parsing or enrichment would."""
    x = e["value"]
    for _ in range(ITERATIONS):
        x = (x * 1.000001 + 1.0) % 1000.0
    return {"ts": e["ts"], "key": e["key"], "value": x}


def burn_3x(e: dict[str, Any]) -> dict[str, Any]:
    """`burn` made three times slower: the straggler of the critical-path tests."""
    for _ in range(2):
        e = burn(e)
    return burn(e)
