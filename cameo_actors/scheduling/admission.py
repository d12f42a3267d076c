"""Admission control and the overload report: will every dataflow on the shared pool keep
its latency target, and if not, which misses, by how much, and whose load causes it?

A coarse model, and honest about it. The pool gives `capacity_ms_per_s` of executor time
every second (1,000 per executor, or what the executors' hosts are measured to give
them). A dataflow demands its offered rate times the executor ms one input event costs in
its operators, plus what receiving its calls costs every second (a client calls once per
period, whatever it carries: a higher rate means larger calls, not more); a tenant demands
the sum over its dataflows and weighs as much as its heaviest one. Under overload the
tenant floors split the pool by weighted max-min fairness (`fair_allocation`) and a
tenant's allocation goes to its dataflows in proportion to their demands; within spare
capacity deadline order decides. It sees rates averaged over seconds: not bursts, not
one executor busier than another, not a target tighter than a dataflow's own processing
time. Measured misses stand in for what it cannot see.

Verdicts, per dataflow. `misses`: its tenant is given less than 99% of its demand (its
results fall `behind_s_per_s` seconds further behind every second), or fewer than 90% of
its recent results were within target (measured, whatever the model says). `unknown`: its
rate or its cost per event is not known yet, so it counts as no load, and it is not
measured missing. `at_risk`: it gets its demand, but all known demand is above `headroom`
of the capacity, where queues grow fast. `meets`: otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

#: The verdicts an `Outcome` carries.
VERDICTS = ("meets", "at_risk", "misses", "unknown")
#: A dataflow measured with fewer of its recent results within target than this misses.
MEASURED_MISS = 0.9
#: A tenant given less than this share of its demand misses (less short is rounding).
_SHORT = 0.99
#: Bisection steps for `Prediction.max_rate_eps`: the range / 2**60, a float's precision.
_STEPS = 60
#: A dataflow whose calls take more than this share of its cost is told to batch more.
CALLS_HEAVY = 0.5
#: How the capacity was found, unless the caller measured it.
PER_EXECUTOR = "1,000 ms/s per executor"


@dataclass(frozen=True, slots=True)
class Demand:
    """One dataflow's load on the pool.

    Attributes:
        name: the dataflow (unique in the pool).
        tenant: the tenant that owns it.
        weight: its `scheduling.weight` (a tenant weighs as much as its heaviest dataflow).
        target_ms: its latency target.
        rate_eps: offered events/s (None: unknown).
        cost_ms_per_event: executor ms one input event costs in its operators (None:
            unknown); where its calls are not measured apart, theirs too.
        within_target: measured share of its recent results within target (running ones).
        p99_ms: measured p99 latency of its recent results.
        calls_ms_per_s: executor ms per second spent receiving the calls that bring its
            events in, whatever their size (None: not measured apart).

    Example:
        >>> Demand("clicks", "acme", weight=1.0, target_ms=500.0, rate_eps=2_000.0,
        ...        cost_ms_per_event=0.25, calls_ms_per_s=120.0).demand_ms_per_s
        620.0
    """

    name: str
    tenant: str
    weight: float
    target_ms: float
    rate_eps: float | None
    cost_ms_per_event: float | None
    within_target: float | None = None
    p99_ms: float | None = None
    calls_ms_per_s: float | None = None

    @property
    def demand_ms_per_s(self) -> float | None:
        """Executor ms per second it needs at its rate (None if rate or cost is unknown)."""
        if self.rate_eps is None or self.cost_ms_per_event is None:
            return None
        return self.rate_eps * self.cost_ms_per_event + (self.calls_ms_per_s or 0.0)

    @property
    def calls_share(self) -> float | None:
        """The share of its demand spent receiving its calls (None: unknown or none)."""
        demand = self.demand_ms_per_s
        if not demand or self.calls_ms_per_s is None:
            return None
        return self.calls_ms_per_s / demand


@dataclass(frozen=True, slots=True)
class Outcome:
    """What is predicted (or measured) for one dataflow.

    Attributes:
        name: the dataflow.
        tenant: its tenant.
        verdict: "meets", "at_risk", "misses" or "unknown" (see the module docstring).
        demand_ms_per_s: executor ms per second it needs (None: unknown).
        calls_ms_per_s: of that, what receiving its calls takes (None: not measured apart).
        allocation_ms_per_s: executor ms per second it is predicted to get (None: unknown).
        sustainable_eps: events/s it keeps up with at that allocation, its calls' cost
            paid first (None: its demand is unknown, or an event costs nothing).
        behind_s_per_s: how much later its results get every second: 1 - allocation /
            demand when it is given too little, else 0.
        reason: the verdict in plain words.
    """

    name: str
    tenant: str
    verdict: str
    demand_ms_per_s: float | None
    calls_ms_per_s: float | None
    allocation_ms_per_s: float | None
    sustainable_eps: float | None
    behind_s_per_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class Prediction:
    """The pool's prediction: every dataflow's outcome, and what would fix an overload.

    Attributes:
        capacity_ms_per_s: executor ms per second the pool has.
        utilization: all known demand / capacity (None when no demand is known).
        outcomes: one per dataflow: the running ones in their order, then the new one.
        causes: (tenant, ms/s it demands above its weighted share of the pool) for the
            tenants over their share, largest first; empty unless the pool is overloaded or
            a dataflow is measured missing.
        executors_needed: executors for all known demand to fit under the headroom (at
            least 1; None when no demand is known).
        max_rate_eps: for a new dataflow, the largest rate at which neither it nor any
            dataflow not already missing without it is predicted to miss, at most what the
            whole pool serves; 0 when no rate does. None: no new dataflow, its cost per
            event is unknown, or an event costs nothing (no rate is too high).
        capacity_basis: how the capacity was found, in words.
    """

    capacity_ms_per_s: float
    utilization: float | None
    outcomes: tuple[Outcome, ...]
    causes: tuple[tuple[str, float], ...]
    executors_needed: int | None
    max_rate_eps: float | None
    capacity_basis: str = PER_EXECUTOR

    @property
    def feasible(self) -> bool:
        """No dataflow is predicted, or measured, to miss its target."""
        return not self.misses()

    def misses(self) -> list[Outcome]:
        """The outcomes whose verdict is "misses", in order."""
        return [o for o in self.outcomes if o.verdict == "misses"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, rounded for people (the HTTP API's `Prediction`).

        `max_rate_eps` is rounded down, so that it stays a rate that fits.
        """
        return {
            "feasible": self.feasible,
            "capacity_ms_per_s": round(self.capacity_ms_per_s, 1),
            "capacity_basis": self.capacity_basis,
            "utilization": _round(self.utilization, 4),
            "outcomes": [{"name": o.name, "tenant": o.tenant, "verdict": o.verdict,
                          "demand_ms_per_s": _round(o.demand_ms_per_s, 2),
                          "calls_ms_per_s": _round(o.calls_ms_per_s, 2),
                          "allocation_ms_per_s": _round(o.allocation_ms_per_s, 2),
                          "sustainable_eps": _round(o.sustainable_eps, 1),
                          "behind_s_per_s": round(o.behind_s_per_s, 4),
                          "reason": o.reason}
                         for o in self.outcomes],
            "causes": [{"tenant": t, "over_share_ms_per_s": round(ms, 2)}
                       for t, ms in self.causes],
            "executors_needed": self.executors_needed,
            "max_rate_eps": (None if self.max_rate_eps is None
                             else math.floor(self.max_rate_eps * 10) / 10),
        }


def fair_allocation(capacity: float, demands: Mapping[str, float],
                    weights: Mapping[str, float]) -> dict[str, float]:
    """Weighted max-min fairness by water-filling: each tenant gets the smaller of its demand
    and its weighted share of what is left; what the tenants that fit leave is shared again
    by weight among the others. Exact, and done in at most `len(demands)` rounds.

    Args:
        capacity: what there is to share (>= 0, finite).
        demands: tenant -> what it asks (>= 0, finite).
        weights: tenant -> its weight (> 0, finite), for every tenant in `demands`.

    Returns:
        tenant -> what it gets, for every tenant in `demands`.

    Raises:
        ValueError: an argument out of range, or a tenant without a weight.

    Example:
        >>> fair_allocation(100.0, {"a": 10.0, "b": 80.0, "c": 80.0}, {"a": 1, "b": 1, "c": 2})
        {'a': 10.0, 'b': 30.0, 'c': 60.0}
    """
    _require(_is_number(capacity) and 0 <= capacity < math.inf, "fair_allocation: capacity",
             "a finite number >= 0", capacity)
    for t, d in demands.items():
        _require(_is_number(d) and 0 <= d < math.inf, f"fair_allocation: demands[{t!r}]",
                 "a finite number >= 0", d)
        w = weights.get(t)
        _require(w is not None and _is_number(w) and 0 < w < math.inf,
                 f"fair_allocation: weights[{t!r}]", "a finite number > 0 for every tenant in "
                 "demands", w)
    out = {t: 0.0 for t in demands}
    todo = [t for t, d in demands.items() if d > 0]
    left = float(capacity)
    while todo and left > 0:
        level = left / math.fsum(weights[t] for t in todo)  # what one unit of weight gets
        fits = {t for t in todo if demands[t] <= level * weights[t]}
        if not fits:
            for t in todo:
                out[t] = level * weights[t]
            break
        for t in fits:
            out[t] = float(demands[t])
        left -= math.fsum(demands[t] for t in fits)
        todo = [t for t in todo if t not in fits]
    return out


def predict(capacity_ms_per_s: float, running: Sequence[Demand], new: Demand | None = None,
            *, headroom: float = 0.9, executor_ms_per_s: float = 1000.0,
            capacity_basis: str = PER_EXECUTOR) -> Prediction:
    """The outcome of every dataflow in `running`, and of `new` as if it were admitted.

    Args:
        capacity_ms_per_s: the pool's executor time per second (1,000 per executor, or
            what its hosts are measured to give it).
        running: the dataflows on the pool (names unique).
        new: a dataflow to admit, not in `running`; `max_rate_eps` is computed for it.
        headroom: the share of the capacity above which every dataflow is at risk.
        executor_ms_per_s: what one more executor would add, for `executors_needed`.
        capacity_basis: how the capacity was found, in words (kept in the prediction).

    Returns:
        The `Prediction`.

    Raises:
        ValueError: the capacity is not finite and > 0, the headroom is not in (0, 1], a
            weight is not > 0, a rate, cost or measurement is out of range, or a name
            appears twice.

    Example:
        >>> etl = Demand("etl", "bulk", weight=1.0, target_ms=60_000.0, rate_eps=1_800.0,
        ...              cost_ms_per_event=1.0)
        >>> alerts = Demand("alerts", "ops", weight=1.0, target_ms=200.0, rate_eps=1_200.0,
        ...                 cost_ms_per_event=0.25)
        >>> p = predict(2_000.0, [etl, alerts])
        >>> [(o.name, o.verdict, o.allocation_ms_per_s) for o in p.outcomes]
        [('etl', 'misses', 1700.0), ('alerts', 'at_risk', 300.0)]
        >>> p.causes, p.executors_needed
        ((('bulk', 800.0),), 3)
        >>> print(p.outcomes[0].reason)  # doctest: +NORMALIZE_WHITESPACE
        needs 1,800 ms/s of executor time, its floor gives 1,700 ms/s: it keeps up with
        1,700 of 1,800 events/s and its results fall 0.06 s further behind every second
        (its tenant 'bulk' asks 800 ms/s above its weighted share of 1,000 ms/s)
    """
    _require(_is_number(capacity_ms_per_s) and 0 < capacity_ms_per_s < math.inf,
             "predict: capacity_ms_per_s", "a finite number > 0 (1,000 per executor)",
             capacity_ms_per_s)
    _require(_is_number(headroom) and 0 < headroom <= 1, "predict: headroom",
             "a share in (0, 1], such as 0.9", headroom)
    _require(_is_number(executor_ms_per_s) and 0 < executor_ms_per_s < math.inf,
             "predict: executor_ms_per_s", "a finite number > 0, such as 1,000",
             executor_ms_per_s)
    demands = [*running, *([] if new is None else [new])]
    seen: set[str] = set()
    for i, d in enumerate(demands):
        where = f"predict: running[{i}]" if i < len(running) else "predict: new"
        _check_demand(where, d)
        _require(d.name not in seen, f"{where} ({d.name!r}).name", "a name not used by "
                 "another dataflow (to predict a dataflow as new, leave it out of running)",
                 d.name)
        seen.add(d.name)

    capacity = float(capacity_ms_per_s)
    need, weight, given = _tenants(capacity, demands)
    known = [x for x in (d.demand_ms_per_s for d in demands) if x is not None]
    total = math.fsum(known)
    utilization = total / capacity if known else None
    busy = math.fsum(w for t, w in weight.items() if need[t] > 0)
    share = {t: capacity * weight[t] / busy for t in need if need[t] > 0}
    # Whose load causes it: the tenants above their weighted share, when the pool is over
    # its capacity or someone misses although the averages fit (bursts, a busier executor).
    pressed = total > capacity or any(_measured_miss(d) for d in demands)
    over = {t: need[t] - share[t] for t in share if need[t] > share[t]} if pressed else {}
    causes = tuple(sorted(over.items(), key=lambda c: (-c[1], c[0])))
    at_risk = utilization is not None and utilization > headroom
    outcomes = tuple(_with_calls(d, _outcome(d, need, given, share, over,
                                             utilization if at_risk else None, headroom))
                     for d in demands)
    needed = max(1, math.ceil(total / (headroom * executor_ms_per_s) - 1e-9)) if known else None
    max_rate = None
    if new is not None and new.cost_ms_per_event:
        max_rate = _max_rate(capacity, running, new, new.cost_ms_per_event)
    return Prediction(capacity, utilization, outcomes, causes, needed, max_rate, capacity_basis)


# -- the model ---------------------------------------------------------------------------------
def _tenants(capacity: float, demands: Sequence[Demand]
             ) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Per tenant: its demand (unknown ones count as 0), its weight, and its allocation."""
    need: dict[str, float] = {}
    weight: dict[str, float] = {}
    for d in demands:
        need[d.tenant] = need.get(d.tenant, 0.0) + (d.demand_ms_per_s or 0.0)
        weight[d.tenant] = max(weight.get(d.tenant, 0.0), d.weight)
    return need, weight, fair_allocation(capacity, need, weight)


def _starved(d: Demand, need: Mapping[str, float], given: Mapping[str, float]) -> bool:
    """It demands executor time and its tenant is given less than 99% of its demand."""
    demand = d.demand_ms_per_s
    return demand is not None and demand > 0 and given[d.tenant] < _SHORT * need[d.tenant]


def _measured_miss(d: Demand) -> bool:
    return d.within_target is not None and d.within_target < MEASURED_MISS


def _max_rate(capacity: float, running: Sequence[Demand], new: Demand, cost: float) -> float:
    """The largest rate of `new` at which neither it nor any running dataflow that does not
    miss without it misses, in [0, capacity / cost]. By bisection: raising one tenant's
    demand never gives any tenant a larger share of its demand, so a rate that does not fit
    has none above it that does."""
    if _measured_miss(new):
        return 0.0
    need, _, given = _tenants(capacity, running)
    keep = [d for d in running if not _measured_miss(d) and not _starved(d, need, given)]

    def fits(rate: float) -> bool:
        trial = replace(new, rate_eps=rate)
        need, _, given = _tenants(capacity, [*running, trial])
        return not any(_starved(d, need, given) for d in (*keep, trial))

    lo, hi = 0.0, capacity / cost
    if fits(hi):
        return hi
    if not fits(lo):  # its weight alone lifts its tenant's share at the others' expense
        return 0.0
    for _ in range(_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _outcome(d: Demand, need: Mapping[str, float], given: Mapping[str, float],
             share: Mapping[str, float], over: Mapping[str, float], risky: float | None,
             headroom: float) -> Outcome:
    """One dataflow's verdict and its reason (`risky`: the utilization when above the
    headroom, else None). Reasons name only the dataflow's own tenant: a tenant may read
    them."""
    rate, cost = d.rate_eps, d.cost_ms_per_event
    measured = _measured(d, d.within_target) if d.within_target is not None \
        and d.within_target < MEASURED_MISS else None
    if rate is None or cost is None:
        unknown = " and ".join(what for what, value in (("rate", d.rate_eps),
                                                        ("cost per event", d.cost_ms_per_event))
                               if value is None)
        why = (f"its {unknown} {'is' if ' and ' not in unknown else 'are'} not known yet, so "
               "it counts as no load")
        if measured is not None:
            return Outcome(d.name, d.tenant, "misses", None, None, None, None, 0.0,
                           f"{measured} ({why})")
        return Outcome(d.name, d.tenant, "unknown", None, None, None, None, 0.0, why)

    demand, calls = d.demand_ms_per_s or 0.0, d.calls_ms_per_s  # rate and cost known
    # The share of its demand it is given: its tenant's.
    given_share = given[d.tenant] / need[d.tenant] if demand > 0 else 1.0
    alloc = demand * given_share
    # Its calls come whatever it is given; the rest is what its events get.
    sustainable = max(0.0, alloc - (calls or 0.0)) / cost if cost > 0 else None
    if _starved(d, need, given):
        behind = 1.0 - given_share
        kept = (f"it keeps up with {_num(sustainable)} of {_num(rate)} events/s"
                if sustainable is not None else "receiving its calls alone needs more")
        reason = (f"needs {_num(demand)} ms/s of executor time, its floor gives {_num(alloc)} "
                  f"ms/s: {kept} and its results fall {behind:.2f} s further behind every "
                  "second")
        if d.tenant in over:
            reason += (f" (its tenant {d.tenant!r} asks {_num(over[d.tenant])} ms/s above its "
                       f"weighted share of {_num(share[d.tenant])} ms/s)")
        if measured is not None:
            reason += f"; {measured}"
        return Outcome(d.name, d.tenant, "misses", demand, calls, alloc, sustainable, behind,
                       reason)
    gets = f"gets the {_num(demand)} ms/s of executor time it needs"
    if measured is not None:
        reason = f"{measured}, although it {gets}"
        return Outcome(d.name, d.tenant, "misses", demand, calls, alloc, sustainable, 0.0,
                       reason)
    if risky is not None:
        reason = (f"{gets}, but the known demand is {_pct(risky)} of the pool's capacity "
                  f"(above the {_pct(headroom)} headroom): queues grow fast there and may "
                  "push results past the target")
        return Outcome(d.name, d.tenant, "at_risk", demand, calls, alloc, sustainable, 0.0,
                       reason)
    return Outcome(d.name, d.tenant, "meets", demand, calls, alloc, sustainable, 0.0, gets)


def _with_calls(d: Demand, o: Outcome) -> Outcome:
    """`o`, its reason telling a dataflow whose calls cost more than its operators to
    batch."""
    if d.calls_share is None or d.calls_share <= CALLS_HEAVY:
        return o
    return replace(o, reason=f"{o.reason}; {_pct(d.calls_share)} of its cost is receiving the "
                             "calls that bring its events in, not its operators: fewer, larger "
                             "batches would cost less")


# -- words and checks --------------------------------------------------------------------------
def _measured(d: Demand, within_target: float) -> str:
    """What was measured of a dataflow missing its target, e.g. "measured: p99 4.2 s against
    a 1 s target; 61% of recent results within target"."""
    within = f"{math.floor(100 * within_target)}% of recent results within"
    if d.p99_ms is None:
        return f"measured: {within} the {_duration(d.target_ms)} target"
    return f"measured: p99 {_duration(d.p99_ms)} against a {_duration(d.target_ms)} target; " \
           f"{within} target"


def _duration(ms: float) -> str:
    if ms < 1000:
        return f"{ms:,.0f} ms"
    return f"{ms / 1000:,.1f}".removesuffix(".0") + " s"


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:.2g}"


def _pct(share: float) -> str:
    return f"{100 * share:,.1f}".removesuffix(".0") + "%"


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _require(ok: bool, where: str, expected: str, got: object) -> None:
    if not ok:
        raise ValueError(f"{where}: expected {expected}, got {got!r}")


def _check_demand(where: str, d: Demand) -> None:
    _require(isinstance(d, Demand), where, "a Demand", d)
    where = f"{where} ({d.name!r})"
    _require(_is_number(d.weight) and 0 < d.weight < math.inf, f"{where}.weight",
             "a finite number > 0 (the dataflow's scheduling.weight)", d.weight)
    _require(_is_number(d.target_ms) and 0 < d.target_ms < math.inf, f"{where}.target_ms",
             "a finite number > 0", d.target_ms)
    for field, value in (("rate_eps", d.rate_eps), ("cost_ms_per_event", d.cost_ms_per_event),
                         ("p99_ms", d.p99_ms), ("calls_ms_per_s", d.calls_ms_per_s)):
        _require(value is None or (_is_number(value) and 0 <= value < math.inf),
                 f"{where}.{field}", "None (unknown) or a finite number >= 0", value)
    _require(d.within_target is None or (_is_number(d.within_target)
                                         and 0 <= d.within_target <= 1),
             f"{where}.within_target", "None (unknown) or a share in [0, 1]", d.within_target)
    demand = d.demand_ms_per_s
    _require(demand is None or demand < math.inf, f"{where}.demand_ms_per_s",
             "a finite rate_eps * cost_ms_per_event + calls_ms_per_s", demand)
