"""The raw scaling policies: pure functions from one measurement of a dataflow to the
parallelism each scalable step should run at, with the sentence that explains it.

`ds2` (Kalavri et al., OSDI'18) plans from true rates in one step; `threshold` is the
rule-based baseline (+1 when busy or backlogged, -1 when idle). Neither keeps state:
warm-up, delayed scale-down, bounds and pins are the `Scaler`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .model import DataflowMeasure, ScalingConfigError, StepMeasure, check, is_number

#: scalable step -> (parallelism, reason)
Recommendation = dict[str, tuple[int, str]]


@dataclass(frozen=True)
class PolicySettings:
    """The policies' knobs (ds2 reads the first two, threshold the last three).

    Attributes:
        target_utilization: ds2 plans so that instances run at most this busy.
        catch_up_s: ds2 plans to work off every backlog within this many seconds.
        high: threshold adds an instance above this busy.
        low: threshold removes one below this busy (when nothing is waiting).
        backlog_events: threshold adds an instance above this backlog per instance.
    """

    target_utilization: float = 0.8
    catch_up_s: float = 30.0
    high: float = 0.8
    low: float = 0.3
    backlog_events: float = 1000.0

    def __post_init__(self) -> None:
        u, low, high = self.target_utilization, self.low, self.high
        check(is_number(u) and 0 < u <= 1, "target_utilization", "a number in (0, 1]", u,
              "use 0.8")
        check(is_number(self.catch_up_s) and self.catch_up_s > 0, "catch_up_s", "seconds > 0",
              self.catch_up_s, "use 30")
        check(is_number(high) and 0 < high <= 1, "high", "a busy share in (0, 1]", high,
              "use 0.8")
        check(is_number(low) and 0 <= low < high, "low", f"a busy share in [0, high ({high}))",
              low, "use low=0.3 with high=0.8")
        check(is_number(self.backlog_events) and self.backlog_events >= 0, "backlog_events",
              "events >= 0", self.backlog_events, "use 1000")


def ceil(x: float) -> int:
    """`math.ceil`, forgiving float noise: 3.0000000000000004 instances is 3."""
    return math.ceil(x * (1 - 1e-9))


def _n(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:.2g}"


def topological(m: DataflowMeasure) -> list[StepMeasure]:
    """`m`'s steps, each after all its upstreams (Kahn's algorithm, stable).

    Raises:
        ValueError: a step reads from something neither measured nor a source, or the
            steps form a cycle.
    """
    steps = {st.step: st for st in m.steps}
    sources = {src.step for src in m.sources}
    waiting: dict[str, int] = {}
    for st in m.steps:
        unknown = [u for u in st.inputs if u not in steps and u not in sources]
        if unknown:
            raise ValueError(
                f"dataflow {m.name!r}: step {st.step!r} reads from {unknown[0]!r}, which is "
                "neither a measured step nor a source. Fix: measure every step and source")
        waiting[st.step] = sum(u in steps for u in st.inputs)
    ready = [st for st in m.steps if waiting[st.step] == 0]
    order: list[StepMeasure] = []
    while ready:
        st = ready.pop(0)
        order.append(st)
        for down in m.steps:
            if st.step in down.inputs:
                waiting[down.step] -= down.inputs.count(st.step)
                if waiting[down.step] == 0:
                    ready.append(down)
    if len(order) < len(m.steps):
        cycle = sorted(set(steps) - {st.step for st in order})
        raise ValueError(f"dataflow {m.name!r}: steps {cycle} form a cycle. "
                         "Fix: measure a dataflow's DAG (inputs are upstream step ids)")
    return order


def target_rates(m: DataflowMeasure, s: PolicySettings) -> dict[str, float]:
    """Events/s each step must take in to keep up with its sources and work off every
    backlog within `catch_up_s` (DS2's propagation, every step, scalable or not).

    A source offers what got in plus what its backlog grew by; a step emits its target
    times its selectivity (0 while it has had no input).
    """
    out = {src.step: src.rate_eps + max(0.0, src.backlog_growth_eps)
           + src.backlog_events / s.catch_up_s for src in m.sources}
    target: dict[str, float] = {}
    for st in topological(m):
        target[st.step] = sum(out[u] for u in st.inputs) + st.backlog_events / s.catch_up_s
        out[st.step] = target[st.step] * (st.selectivity or 0.0)
    return target


def predicted_busy(m: DataflowMeasure, s: PolicySettings) -> dict[str, float]:
    """Instance-seconds per second each scalable step will be busy at its target rate
    (0 while its true rate is unknown)."""
    targets = target_rates(m, s)
    busy = {}
    for st in m.steps:
        if st.scalable:
            rate = st.true_processing_eps
            busy[st.step] = targets[st.step] / rate if rate else 0.0
    return busy


def ds2(m: DataflowMeasure, s: PolicySettings) -> Recommendation:
    """DS2: each scalable step gets ceil(target rate / (true rate per instance x utilization)).

    Example:
        >>> from cameo_actors.scaling import DataflowMeasure, SourceMeasure, StepMeasure
        >>> src = SourceMeasure("in", rate_eps=1_000.0, backlog_growth_eps=1_400.0)
        >>> w = StepMeasure("w", ("in",), 1, True, 1_000.0, 10.0, 1_000.0)
        >>> ds2(DataflowMeasure("d", "t", 500.0, (w,), (src,)), PolicySettings())
        {'w': (3, 'ds2: target 2,400 ev/s at 1,000 ev/s per instance (utilization 0.8) needs 3')}
    """
    targets = target_rates(m, s)
    rec: Recommendation = {}
    for st in topological(m):
        if not st.scalable:
            continue
        rate = st.true_processing_eps
        if not rate or st.events_in_eps <= 0:
            rec[st.step] = (st.parallelism, f"ds2: no measurement yet for step {st.step!r}; "
                                            f"keeps {st.parallelism}")
            continue
        need = max(1, ceil(targets[st.step] / (rate * s.target_utilization)))
        rec[st.step] = (need, f"ds2: target {_n(targets[st.step])} ev/s at {_n(rate)} ev/s "
                              f"per instance (utilization {s.target_utilization:g}) needs {need}")
    return rec


def threshold(m: DataflowMeasure, s: PolicySettings) -> Recommendation:
    """The rule-based baseline: +1 instance when busy above `high` or backlogged above
    `backlog_events` per instance, -1 when busy below `low` with nothing waiting."""
    rec: Recommendation = {}
    for st in topological(m):
        if not st.scalable:
            continue
        p, busy = st.parallelism, st.busy
        per_instance = st.backlog_events / max(1, p)
        if busy > s.high:
            rec[st.step] = (p + 1, f"threshold: busy {busy:.2f} above high {s.high:g}: +1")
        elif per_instance > s.backlog_events:
            rec[st.step] = (p + 1, f"threshold: backlog {_n(per_instance)} events per instance "
                                   f"above {_n(s.backlog_events)}: +1")
        elif busy < s.low and st.backlog_events <= 0 and p > 1:
            rec[st.step] = (p - 1, f"threshold: busy {busy:.2f} below low {s.low:g} "
                                   "and no backlog: -1")
        else:
            rec[st.step] = (p, f"threshold: busy {busy:.2f}, backlog {_n(per_instance)} "
                               f"per instance: keeps {p}")
    return rec


Policy = Callable[[DataflowMeasure, PolicySettings], Recommendation]
POLICIES: dict[str, Policy] = {"ds2": ds2, "threshold": threshold}


def policy_named(name: str) -> Policy:
    """The policy called `name`.

    Raises:
        ScalingConfigError: no policy has that name.
    """
    if name not in POLICIES:
        raise ScalingConfigError("scaling.policy", f"one of {', '.join(POLICIES)}", name,
                                 "use one of those names")
    return POLICIES[name]
