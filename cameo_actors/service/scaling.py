"""The scaling controller as the service shows it: who may see what of its status, a
dataflow's summary for its status, and the count of decisions for /metrics.

Pure functions of the runtime's `Runtime.scaling()` answer (no I/O): the core fetches
it, these decide what a caller sees.

>>> status = {"policy": "ds2", "enabled": True, "executors": 3, "wanted_executors": 4,
...           "bounds": {}, "dataflows": {"a": {"policy": "ds2", "steps": {}},
...                                       "b": {"policy": "off", "steps": {}}},
...           "decisions": [], "misses": [{"dataflow": "b", "reason": "x"}], "errors": []}
>>> seen = visible(status, {"a"})
>>> sorted(seen["dataflows"]), seen["misses"], seen["executors"]
(['a'], [], None)
"""

from __future__ import annotations

import threading
from collections.abc import Container, Iterable
from typing import Any

#: A dataflow's last decisions its status shows.
DECISIONS_SHOWN = 5
#: Its last failed scaling actions its status shows.
ERRORS_SHOWN = 3
#: What only the admin sees of the pool (its layout, as in GET /v1/info).
ADMIN_FIELDS = ("executors", "wanted_executors")


def visible(status: dict[str, Any], own: Container[str] | None) -> dict[str, Any]:
    """The scaling status as a caller may see it: `own` None (the admin) sees it all; a
    tenant (`own`: its dataflows' names) sees its dataflows, their decisions, misses and
    failed actions, and not the pool's executors nor what failed pool-wide."""
    if own is None:
        return dict(status)
    return {**status, **dict.fromkeys(ADMIN_FIELDS),
            "dataflows": {n: d for n, d in (status.get("dataflows") or {}).items() if n in own},
            "decisions": [d for d in status.get("decisions") or [] if d.get("dataflow") in own],
            "misses": [m for m in status.get("misses") or [] if m.get("dataflow") in own],
            "errors": [e for e in status.get("errors") or [] if e.get("where") in own]}


def summary(status: dict[str, Any], name: str) -> dict[str, Any] | None:
    """One dataflow's part of the status (`Runtime.scaling(name)`) for its status page:
    its policy and steps, its last decisions, why it will miss, its failed actions. None
    when the controller knows nothing of it (not measured: scaling off, or just started).

    >>> summary({"policy": "off", "dataflows": {}, "decisions": [], "misses": [],
    ...          "errors": []}, "a") is None
    True
    """
    flow = (status.get("dataflows") or {}).get(name)
    decisions = [d for d in status.get("decisions") or [] if d.get("dataflow") == name]
    misses = [str(m.get("reason", "")) for m in status.get("misses") or []
              if m.get("dataflow") == name]
    errors = [e for e in status.get("errors") or [] if e.get("where") == name]
    if flow is None and not (decisions or misses or errors):
        return None
    flow = flow or {}
    return {"policy": flow.get("policy", status.get("policy", "off")),
            "steps": dict(flow.get("steps") or {}),
            "decisions": decisions[-DECISIONS_SHOWN:], "misses": misses,
            "errors": errors[-ERRORS_SHOWN:]}


def decision_key(d: dict[str, Any]) -> tuple[Any, ...]:
    """What tells one decision from another: when, which step, which change."""
    return (d.get("at"), d.get("dataflow"), d.get("step"), d.get("kind", "parallelism"),
            d.get("from_parallelism"), d.get("to_parallelism"))


class DecisionCounter:
    """A monotone count of the scaling decisions per dataflow, from the controller's
    history (its last few decisions), for `cameo_scaling_decisions_total`.

    Each look at the history counts the decisions not in the previous look; a decision
    leaves the history only for newer ones, so none is counted twice. Decisions that came
    and left between two looks are not counted (the history keeps 50, scrapes come every
    few seconds). The count starts at 0 with the service process, as a counter may.
    Safe to call from many threads.

    >>> c = DecisionCounter()
    >>> d = {"at": 1.0, "dataflow": "a", "step": "w", "from_parallelism": 1, "to_parallelism": 2}
    >>> c.observe([d]), c.observe([d]), c.observe([d, {**d, "at": 2.0}])
    ({'a': 1}, {'a': 1}, {'a': 2})
    """

    def __init__(self) -> None:
        self._seen: set[tuple[Any, ...]] = set()
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def observe(self, decisions: Iterable[dict[str, Any]],
                keep: Container[str] | None = None) -> dict[str, int]:
        """Count the new decisions among `decisions` (the history now); returns the counts
        so far. `keep`: the dataflows still known; the counts of others are forgotten."""
        history = list(decisions)
        with self._lock:
            keys = {decision_key(d) for d in history}
            for d in history:
                if decision_key(d) not in self._seen:
                    name = str(d.get("dataflow"))
                    self._counts[name] = self._counts.get(name, 0) + 1
            self._seen = keys
            if keep is not None:
                named = {str(d.get("dataflow")) for d in history}
                self._counts = {n: c for n, c in self._counts.items() if n in keep or n in named}
            return dict(self._counts)
