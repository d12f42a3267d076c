"""What each dataflow asks of the pool, measured: the input of admission control and of
the overload report (`cameo_actors.scheduling.admission` holds the model).

The controller's monitor hands `observe` each dataflow's counters summed over its
executors once a second (events in, executor ms, CPU ms charged to it, results and those
within target) and each executor's CPU and its host's; rates and shares come from the
difference over the last `window_s`. What a dataflow costs is the executors' CPU charged
to it (`executor/cpu.py`; the worker threads' busy time where CPU is not measured), in two
parts: its operators' CPU per input event, and its calls' CPU per second (a client calls
once per period whatever its rate, so a higher rate brings larger calls, not more of them;
calls that carry hundreds of events cost about what calls of ten do). Both are learned per
dataflow and kept per *shape* (its steps without names), so that a new dataflow like one
seen before is predicted with them; otherwise with the pool's mean cost per event and step
and its mean calls' CPU per dataflow.

The pool's capacity is what the executors' hosts give them (`capacity`): per host, its
cores less what other processes take there, and at most a core per worker thread plus
what the executors' other threads take. (`bench.admission` sets the forecast made this
way beside the one made from busy time and 1,000 ms/s per executor, and what the pool
then kept up with.)
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cameo_actors.runtime._private.executor_api import HostCpu
from cameo_actors.scheduling.admission import Demand

#: Seconds of counters rates are measured over.
LOAD_WINDOW_S = 10.0
#: Shapes whose cost per event is remembered (the least recently measured go first).
SHAPES_KEPT = 1_000

#: (time s, events in, executor ms, results, results within target, CPU ms, its calls' CPU ms)
Sample = tuple[float, float, float, float, float, float, float]


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
        # shape -> (operators' executor ms per input event, calls' executor ms per second)
        self._costs: dict[str, tuple[float, float | None]] = {}
        self._step_cost: float | None = None  # the pool's mean ms per event and step
        self._calls_cost: float | None = None  # the pool's mean calls' ms/s per dataflow
        self._cpu: dict[int, deque[HostCpu]] = {}  # executor -> its CPU readings

    def observe(self, now: float, usage: Mapping[str, Mapping[str, float]],
                specs: Mapping[str, Mapping[str, Any]],
                cpu: Mapping[int, HostCpu] | None = None) -> None:
        """One sample per running dataflow (`usage`: counters summed over executors) and
        per executor that answered (`cpu`: its CPU and its host's)."""
        for index, reading in (cpu or {}).items():
            readings = self._cpu.setdefault(index, deque())
            if readings and reading["process_ms"] < readings[-1]["process_ms"]:
                readings.clear()  # a new process
            readings.append(reading)
            while len(readings) > 2 and reading["at_s"] - readings[1]["at_s"] >= self.window_s:
                readings.popleft()
        for name in [n for n in self._samples if n not in usage]:
            del self._samples[name]
        spent = events_steps = 0.0
        calls: list[float] = []
        for name, u in usage.items():
            sample = (now, u.get("events_in", 0.0), u.get("busy_ms", 0.0), u.get("results", 0.0),
                      u.get("within", 0.0), u.get("cpu_ms", 0.0), u.get("calls_cpu_ms", 0.0))
            q = self._samples.setdefault(name, deque())
            if q and any(new < old for new, old in zip(sample[1:], q[-1][1:], strict=True)):
                # Counters restarted (a recovery, a migration): start over.
                q.clear()
            q.append(sample)
            while len(q) > 2 and now - q[1][0] >= self.window_s:
                q.popleft()
            spec, measured = specs.get(name), _costs(q)
            if measured is None or spec is None:
                continue
            rate, per_event, calls_ms = measured
            key = shape(spec)
            self._costs.pop(key, None)
            self._costs[key] = (per_event, calls_ms)
            if len(self._costs) > SHAPES_KEPT:
                del self._costs[next(iter(self._costs))]
            spent += rate * per_event  # operators' ms/s
            events_steps += rate * max(1, len(spec.get("steps", [])))
            if calls_ms is not None:
                calls.append(calls_ms)
        if events_steps > 0:
            self._step_cost = spent / events_steps
        if calls:
            self._calls_cost = sum(calls) / len(calls)

    def capacity(self, executors: Sequence[int]) -> tuple[float, str]:
        """The executor ms per second `executors` can have, and how it was found, in words.

        Per host, from the executors' last `window_s` of readings: its cores less the CPU of
        the processes that are not these executors, but no less than the executors' fair
        share of the cores beside those processes (what the kernel gives each runnable
        thread alike: others busy while the executors were idle yield when they are not),
        and at most a core per executor's worker thread plus what their other threads
        take. 1,000 ms/s per executor whose host's CPU is not known yet."""
        hosts: dict[str, list[tuple[float, float]]] = {}  # per executor: its CPU, its worker's
        cores: dict[str, int] = {}
        busy: dict[str, float] = {}  # host -> its CPU busy ms/s
        unknown = 0
        for index in executors:
            readings = self._cpu.get(index)
            first, last = (readings[0], readings[-1]) if readings else (None, None)
            if first is None or last is None or last["at_s"] <= first["at_s"] \
                    or first["host_busy_ms"] is None or last["host_busy_ms"] is None:
                unknown += 1
                continue
            dt = last["at_s"] - first["at_s"]
            host = last["host"]
            hosts.setdefault(host, []).append(((last["process_ms"] - first["process_ms"]) / dt,
                                               (last["worker_ms"] - first["worker_ms"]) / dt))
            cores[host] = max(cores.get(host, 0), last["cores"])
            busy[host] = (last["host_busy_ms"] - first["host_busy_ms"]) / dt
        total, words = 1000.0 * unknown, []
        for host, rates in hosts.items():
            n, others = len(rates), max(0.0, busy[host] - sum(p for p, _ in rates))
            threads = sum(max(0.0, p - w) for p, w in rates)
            fair = 1000.0 * cores[host] * n / (n + math.ceil(others / 1000.0))
            total += min(max(1000.0 * cores[host] - others, fair), 1000.0 * n + threads)
            words.append(f"{n} on a host of {cores[host]} cores, {others:,.0f} ms/s of "
                         f"them taken by other processes, {threads:,.0f} ms/s by the "
                         "executors' threads besides their worker threads")
        if unknown:
            words.append(f"1,000 ms/s for each of {unknown} whose host's CPU is not measured yet")
        return max(1.0, total), "the executors' CPU: " + "; ".join(words)

    def running(self, infos: Iterable[Mapping[str, Any]]) -> list[Demand]:
        """What each running dataflow demands now, from its recent counters."""
        out = []
        for info in infos:
            spec = info["spec"]
            rate = cost = within = calls = None
            q = self._samples.get(info["name"])
            if q is not None and len(q) >= 2:
                dt = q[-1][0] - q[0][0]
                d_results, d_within = q[-1][3] - q[0][3], q[-1][4] - q[0][4]
                measured = _costs(q)
                if measured is not None:
                    rate, cost, calls = measured
                elif dt > 0:  # no events came: its shape's cost per event, no calls
                    rate, cost, calls = 0.0, self._estimated(spec)[0], \
                        (q[-1][6] - q[0][6]) / dt
                within = d_within / d_results if d_results > 0 else None
            out.append(_demand(spec, rate, cost, calls, within))
        return out

    def new(self, spec: Mapping[str, Any]) -> Demand:
        """What a dataflow not yet running would demand, from its spec's expected rate (or
        rate limit) and the cost learned for its shape (or the pool's mean)."""
        sched = spec.get("scheduling", {})
        rate = sched.get("expected_rate_eps") or sched.get("rate_limit_eps")
        return _demand(spec, rate, *self._estimated(spec), None)

    def _estimated(self, spec: Mapping[str, Any]) -> tuple[float | None, float | None]:
        """A dataflow's operators' ms per event and calls' ms/s: its shape's, else the
        pool's means."""
        known = self._costs.get(shape(spec))
        if known is not None:
            return known
        cost = None
        if self._step_cost is not None:
            cost = self._step_cost * max(1, len(spec.get("steps", [])))
        return cost, self._calls_cost


def _costs(q: deque[Sample]) -> tuple[float, float, float | None] | None:
    """Over a dataflow's samples: its rate, its operators' ms per event and its calls' ms
    per second (its CPU where measured; else its busy time per event, calls not apart).
    None: no events came."""
    dt, d_events = q[-1][0] - q[0][0], q[-1][1] - q[0][1]
    if dt <= 0 or d_events <= 0:
        return None
    d_cpu, d_calls = q[-1][5] - q[0][5], q[-1][6] - q[0][6]
    if d_cpu <= 0:
        return d_events / dt, (q[-1][2] - q[0][2]) / d_events, None
    d_calls = min(d_calls, d_cpu)
    return d_events / dt, (d_cpu - d_calls) / d_events, d_calls / dt


def _demand(spec: Mapping[str, Any], rate: float | None, cost: float | None,
            calls: float | None, within: float | None) -> Demand:
    return Demand(name=spec["name"], tenant=spec["tenant"], weight=spec["scheduling"]["weight"],
                  target_ms=spec["latency_target_ms"], rate_eps=rate, cost_ms_per_event=cost,
                  within_target=within, calls_ms_per_s=calls)
