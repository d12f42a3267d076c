"""What each dataflow asks of the pool, measured: the input of admission control and of
the overload report (`cameo_actors.scheduling.admission` holds the model).

The controller's monitor hands `observe` each dataflow's counters summed over its
executors once a second (events in, executor ms, results and those within target);
rates and shares come from the difference over the last `window_s`. The executor
time one input event costs is learned per dataflow and kept per *shape* (its steps
without names), so that a new dataflow like one seen before is predicted with that
cost; otherwise with the pool's mean cost per event and step.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from cameo_actors.scheduling.admission import Demand

#: Seconds of counters rates are measured over.
LOAD_WINDOW_S = 10.0
#: Shapes whose cost per event is remembered (the least recently measured go first).
SHAPES_KEPT = 1_000

#: (time s, events in, executor ms, results, results within target)
Sample = tuple[float, float, float, float, float]


def shape(spec: Mapping[str, Any]) -> str:
    """A dataflow's steps without their names: dataflows of one shape cost alike per event."""
    steps = [{k: v for k, v in step.items() if k not in ("id", "inputs")}
             for step in spec.get("steps", [])]
    return json.dumps(steps, sort_keys=True, default=str)


class LoadTracker:
    """Recent rates of the running dataflows and the learned costs per event."""

    def __init__(self, window_s: float = LOAD_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: dict[str, deque[Sample]] = {}
        self._costs: dict[str, float] = {}  # shape -> executor ms per input event
        self._step_cost: float | None = None  # the pool's mean ms per event and step

    def observe(self, now: float, usage: Mapping[str, Mapping[str, float]],
                specs: Mapping[str, Mapping[str, Any]]) -> None:
        """One sample per running dataflow (`usage`: counters summed over executors)."""
        for name in [n for n in self._samples if n not in usage]:
            del self._samples[name]
        spent = events_steps = 0.0
        for name, u in usage.items():
            sample = (now, u.get("events_in", 0.0), u.get("busy_ms", 0.0), u.get("results", 0.0),
                      u.get("within", 0.0))
            q = self._samples.setdefault(name, deque())
            if q and any(new < old for new, old in zip(sample[1:], q[-1][1:], strict=True)):
                # Counters restarted (a recovery, a migration): start over.
                q.clear()
            q.append(sample)
            while len(q) > 2 and now - q[1][0] >= self.window_s:
                q.popleft()
            d_events, d_busy = q[-1][1] - q[0][1], q[-1][2] - q[0][2]
            spec = specs.get(name)
            if d_events > 0 and spec is not None:
                key = shape(spec)
                self._costs.pop(key, None)
                self._costs[key] = d_busy / d_events
                if len(self._costs) > SHAPES_KEPT:
                    del self._costs[next(iter(self._costs))]
                spent += d_busy
                events_steps += d_events * max(1, len(spec.get("steps", [])))
        if events_steps > 0:
            self._step_cost = spent / events_steps

    def running(self, infos: Iterable[Mapping[str, Any]]) -> list[Demand]:
        """What each running dataflow demands now, from its recent counters."""
        out = []
        for info in infos:
            spec = info["spec"]
            rate = cost = within = None
            q = self._samples.get(info["name"])
            if q is not None and len(q) >= 2:
                dt = q[-1][0] - q[0][0]
                d_events, d_busy = q[-1][1] - q[0][1], q[-1][2] - q[0][2]
                d_results, d_within = q[-1][3] - q[0][3], q[-1][4] - q[0][4]
                if dt > 0:
                    rate = d_events / dt
                    cost = d_busy / d_events if d_events > 0 else self._estimated_cost(spec)
                within = d_within / d_results if d_results > 0 else None
            out.append(_demand(spec, rate, cost, within))
        return out

    def new(self, spec: Mapping[str, Any]) -> Demand:
        """What a dataflow not yet running would demand, from its spec's expected rate (or
        rate limit) and the cost learned for its shape (or the pool's mean)."""
        sched = spec.get("scheduling", {})
        rate = sched.get("expected_rate_eps") or sched.get("rate_limit_eps")
        return _demand(spec, rate, self._estimated_cost(spec), None)

    def _estimated_cost(self, spec: Mapping[str, Any]) -> float | None:
        cost = self._costs.get(shape(spec))
        if cost is None and self._step_cost is not None:
            cost = self._step_cost * max(1, len(spec.get("steps", [])))
        return cost


def _demand(spec: Mapping[str, Any], rate: float | None, cost: float | None,
            within: float | None) -> Demand:
    return Demand(name=spec["name"], tenant=spec["tenant"], weight=spec["scheduling"]["weight"],
                  target_ms=spec["latency_target_ms"], rate_eps=rate, cost_ms_per_event=cost,
                  within_target=within)
