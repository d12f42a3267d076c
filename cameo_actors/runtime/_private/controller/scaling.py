"""The scaling controller's runtime half: it measures, asks the policy, and acts.

Every `interval_s` it collects DS2's counters from every executor (events in and
out, processing, decoding and encoding time per activation), turns their
differences over the last `window_s` into each step's rates (`RateTracker`),
hands them with the writers' reported backlogs and the recent share of results
within target to the pure `Scaler` (`cameo_actors.scaling`), and carries out its
plan with the live-reconfiguration operations: executors first (on a cluster
Ray's autoscaler is asked for the CPUs), then one scaling migration per dataflow,
then lessees. An action that fails is logged with the decision and tried again
after the warm-up; the dataflow runs on meanwhile on its current plan. Executors
are given back one at a time once the plan has wanted fewer for a whole
scale-down window, emptiest first.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.runtime._private.controller.plans import MigrationState
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.reconfig import Reconfiguration
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime._private.placement import Placement, is_keyed_step
from cameo_actors.runtime.boundary import RUNNING, ScalingStatus
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.interface import ControlAPI, serves
from cameo_actors.scaling import (
    DataflowMeasure,
    Plan,
    Scaler,
    ScalingConfigError,
    ScalingSettings,
    SourceMeasure,
    StepMeasure,
    settings_from_dict,
)

logger = logging.getLogger(__name__)

#: Counters of one activation: events in, events out, processing ms, deserialization
#: ms, serialization ms, recent queueing delay ms, events waiting, events arrived (a
#: source's: from clients), results a sink wrote and those within target, when the
#: executor read them (`ExecutorCore.counters`).
(EVENTS_IN, EVENTS_OUT, PROC_MS, DESER_MS, SER_MS, QUEUE_MS, WAITING, ARRIVED, RESULTS,
 WITHIN, AT) = range(11)
#: The counters that only grow (a drop means the activation was restored).
GROWING = (EVENTS_IN, EVENTS_OUT, PROC_MS, DESER_MS, SER_MS, ARRIVED, RESULTS, WITHIN)
#: How far a source's recent rate may be from its window's before the policy waits.
UNSTEADY = 0.2
#: Below this many events/s a difference is noise.
STEADY_EPS = 20.0
#: Failed actions kept for the status view.
ERRORS_KEPT = 20


class RateTracker:
    """Recent samples of each activation's counters; rates are differences over `window_s`."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._samples: dict[str, deque[tuple[float, list[float]]]] = {}
        #: (dataflow, source) -> recent (time, events waiting at the writers)
        self._backlogs: dict[tuple[str, str], deque[tuple[float, float]]] = {}

    def observe(self, now: float, counters: Mapping[str, Mapping[str, list[float]]]) -> None:
        seen = set()
        for acts in counters.values():
            for aid, c in acts.items():
                seen.add(aid)
                q = self._samples.setdefault(aid, deque())
                if q and any(c[k] < q[-1][1][k] for k in GROWING):
                    q.clear()  # restarted (restored from a checkpoint): start over
                # Timed where they were read: the call may have waited behind a message.
                q.append((c[AT], c))
                while len(q) > 2 and now - q[1][0] >= self.window_s:
                    q.popleft()
        for gone in [a for a in self._samples if a not in seen]:
            del self._samples[gone]

    def report_backlog(self, now: float, dataflow: str, source: str, events: float) -> None:
        q = self._backlogs.setdefault((dataflow, source), deque())
        q.append((now, float(events)))
        while len(q) > 2 and now - q[1][0] >= self.window_s:
            q.popleft()

    def forget(self, dataflow: str) -> None:
        for key in [k for k in self._backlogs if k[0] == dataflow]:
            del self._backlogs[key]

    def _rate(self, aid: str) -> tuple[float, list[float]] | None:
        """(seconds covered, counter differences; the last two as they are now)."""
        q = self._samples.get(aid)
        if not q or len(q) < 2 or q[-1][0] <= q[0][0]:
            return None
        (t0, a), (t1, b) = q[0], q[-1]
        return t1 - t0, [b[k] if k in (QUEUE_MS, WAITING) else b[k] - a[k]
                         for k in range(AT)]

    def measure(self, now: float, spec: DataflowSpec, placement: Placement,
                lessees: Mapping[str, Sequence[str]]) -> DataflowMeasure:
        """One dataflow's rates per step over the window, as the policies take them, and
        the share of its results within target over the same window."""
        steps, sources = [], []
        results = within = 0.0
        for step in spec.steps:
            ids = [str(a) for a in placement.of_step(step.id)]
            lent = list(lessees.get(step.id, ()))
            rates = [r for r in (self._rate(a) for a in ids + lent) if r is not None]
            dt = max((r[0] for r in rates), default=0.0)
            total = [sum(r[1][k] for r in rates) for k in range(AT)]
            if step.OP == "sink":
                results, within = results + total[RESULTS], within + total[WITHIN]
            if step.OP == "source":
                # Offered: what clients got in (queued at the source or not), plus the
                # growth of what they hold back; backlog: both queues.
                backlog, growth = self._backlog(spec.name, step.id)
                queued = sum(self._queued(a) for a in ids)
                sources.append(SourceMeasure(step.id, total[ARRIVED] / dt if dt else 0.0,
                                             backlog + queued, growth))
                continue
            useful = total[PROC_MS] + total[DESER_MS] + total[SER_MS]
            busy = tuple(min(1.0, (r[1][PROC_MS] + r[1][DESER_MS] + r[1][SER_MS]) / (r[0] * 1000.0))
                         for r in rates)
            steps.append(StepMeasure(
                step.id, tuple(step.inputs), len(ids), is_keyed_step(spec, step),
                total[EVENTS_IN] / dt if dt else 0.0, total[EVENTS_OUT] / dt if dt else 0.0,
                useful / dt if dt else 0.0, float(total[WAITING]), busy, lessees=len(lent)))
        return DataflowMeasure(spec.name, spec.tenant, spec.latency_target_ms, tuple(steps),
                               tuple(sources), within_target=within / results if results else None)

    def steady(self, spec: DataflowSpec, placement: Placement) -> bool:
        """Whether each source's offered rate (events in, plus the growth of its writers'
        backlog) over the window's recent half is within `UNSTEADY` of the whole window's.
        A rate that is still changing would be planned for half-way: the policy waits."""
        for src in spec.sources:
            whole = half = 0.0
            for aid in placement.of_step(src.id):
                q = self._samples.get(str(aid))
                if not q or len(q) < 3:
                    return False
                t_end, c_end = q[-1]
                t_mid, c_mid = next(x for x in q if x[0] >= t_end - self.window_s / 2)
                if t_mid >= t_end:
                    return False
                whole += (c_end[ARRIVED] - q[0][1][ARRIVED]) / (t_end - q[0][0])
                half += (c_end[ARRIVED] - c_mid[ARRIVED]) / (t_end - t_mid)
            growth = self._backlog(spec.name, src.id)[1]
            whole, half = whole + growth, half + growth
            if abs(half - whole) > max(UNSTEADY * whole, STEADY_EPS):
                return False
        return True

    def _queued(self, aid: str) -> float:
        """Events a source accepted and has not run yet."""
        q = self._samples.get(aid)
        return q[-1][1][WAITING] if q else 0.0

    def _backlog(self, dataflow: str, source: str) -> tuple[float, float]:
        """(events waiting at the writers now, their growth per second)."""
        q = self._backlogs.get((dataflow, source))
        if not q:
            return 0.0, 0.0
        (t0, a), (t1, b) = q[0], q[-1]
        return b, (b - a) / (t1 - t0) if t1 > t0 else 0.0

    def instance_rates(self, placement: Placement, step: str) -> list[dict[str, Any]]:
        out = []
        for aid in placement.of_step(step) + placement.lessees_of(step):
            r = self._rate(str(aid))
            if r is None:
                continue
            dt, d = r
            useful = (d[PROC_MS] + d[DESER_MS] + d[SER_MS]) / 1000.0
            out.append({"instance": str(aid), "lessee": aid in placement.lessees,
                        "events_in_eps": d[EVENTS_IN] / dt,
                        "busy": min(1.0, useful / dt),
                        "true_processing_eps": d[EVENTS_IN] / useful if useful else None,
                        "useful_split_ms": {"deserialization": d[DESER_MS], "processing": d[PROC_MS],
                                            "serialization": d[SER_MS]},
                        "queue_delay_ms": d[QUEUE_MS], "waiting": d[WAITING]})
        return out


class AutoScaling:
    """The loop that measures, decides and acts, for one controller."""

    def __init__(self, config: RuntimeConfig, pool: Pool, registry: Registry,
                 reconfig: Reconfiguration) -> None:
        self.config, self.pool, self.registry, self.reconfig = config, pool, registry, reconfig
        settings = settings_from_dict(config.scaling)
        self.interval_s = settings.interval_s
        self.scaler = Scaler(settings)
        self.rates = RateTracker(settings.rate_window_s)
        self.settings = settings
        self.plan: Plan | None = None
        self.measures: dict[str, Any] = {}
        #: dataflow -> the migration carrying out its last decision
        self.acting: dict[str, str] = {}
        self.errors: deque[dict[str, Any]] = deque(maxlen=ERRORS_KEPT)
        self._shrink_since: float | None = None
        self._lock = threading.Lock()

    def enabled(self) -> bool:
        """Whether a policy is on, the pool's or a running dataflow's own."""
        return self.settings.policy != "off" or any(
            self.scaler.settings_for(n).policy != "off" for n in self.measures)

    @property
    def sizes_pool(self) -> bool:
        """Whether the loop adds and gives back executors (the pool's policy is on)."""
        return self.settings.policy != "off"

    def set_dataflow(self, name: str, settings: ScalingSettings | None) -> None:
        with self._lock:
            self.scaler.set_dataflow(name, settings)

    @serves(ControlAPI.scaling)
    def scaling(self, name: str | None = None) -> ScalingStatus:
        """The status of one live dataflow, or pool-wide."""
        if name is not None:
            self.registry.live(name)
        return self.status(name)

    @serves(ControlAPI.set_scaling)
    def configure(self, name: str, settings: dict[str, Any] | None = None, *,
                  pin: dict[str, int | None] | None = None) -> ScalingStatus:
        """A dataflow's own scaling settings (None without pins: the pool's again), and
        steps pinned to a parallelism by an operator (a step mapped to None is unpinned;
        pins alone keep the dataflow's settings)."""
        info = self.registry.live(name)
        spec = DataflowSpec.from_dict(info["spec"])
        own = None if settings is None else settings_from_dict(
            {**self.config.scaling, **settings}, where=f"dataflow {name!r}: scaling")
        ids = [s.id for s in spec.steps if is_keyed_step(spec, s)]
        bins = self.config.bins
        for step, p in (pin or {}).items():
            if step not in ids:
                raise ScalingConfigError(f"dataflow {name!r}: pin", f"one of its scalable "
                                         f"steps {ids}", step, "pin a keyed window, join or "
                                         "process step")
            if p is not None and (type(p) is not int or not 1 <= p <= bins):
                raise ScalingConfigError(f"dataflow {name!r}: pin {step!r}", "a parallelism "
                                         f"from 1 to {bins}", p, "give a whole number of "
                                         "instances, or null to unpin")
        if settings is not None or not pin:  # pins alone keep the dataflow's settings
            self.set_dataflow(name, own)
        for step, p in (pin or {}).items():
            self.scaler.pin(name, step, p)
        return self.status(name)

    @serves(ControlAPI.report_backlog)
    def report_backlog(self, name: str, source: str, events: int) -> None:
        """Events a writer holds for `source` that it could not send yet (its lag): the
        policies count it as backlog, and its growth as offered rate."""
        if name in self.registry.dataflows and isinstance(events, (int, float)) and events >= 0:
            self.rates.report_backlog(time.time(), name, source, float(events))

    def forget(self, name: str) -> None:
        with self._lock:
            self.acting.pop(name, None)
            self.scaler.forget(name)
            self.rates.forget(name)

    def run(self, stopped: threading.Event) -> None:
        # It always measures (`cameo scaling` shows rates with every policy off); with a
        # policy off nothing changes but what an operator pinned.
        while not stopped.wait(self.interval_s):
            try:
                self.once(time.time())  # wall clock: decisions show when they were made
            except Exception:  # a bug here must not stop the pool
                logger.exception("scaling controller: a round failed")

    # -- one round -----------------------------------------------------------------------
    def once(self, now: float) -> Plan | None:
        registry, reconfig = self.registry, self.reconfig
        live = self.pool.usable()
        counters: dict[str, dict[str, list[float]]] = {}
        gateway = self.pool.gateway
        for part in gateway.gather_each(gateway.send_all(live, ExecutorAPI.counters),
                                        timeout_s=10.0):
            for name, acts in (part or {}).items():
                counters.setdefault(name, {}).update(acts)
        with self._lock:
            self.rates.observe(now, counters)
            for name, mid in list(self.acting.items()):
                mig = reconfig.migrations.get(mid)
                if mig is not None and mig.state is MigrationState.RUNNING:
                    continue
                del self.acting[name]
                self.scaler.applied(now, name)  # the warm-up starts (a failure retries after it)
                if mig is not None and mig.state is MigrationState.FAILED:
                    self._error(name, f"scaling migration {mid} failed: {mig.error}; the "
                                      "dataflow runs on its current plan and the action is "
                                      "retried")
            measures = []
            for info in registry.named((RUNNING,)):
                name = info["name"]
                spec = DataflowSpec.from_dict(info["spec"])
                placement = registry.placements[name]
                m = self.rates.measure(now, spec, placement, registry.lessees_of(name))
                hold = name in reconfig.migrating or name in self.acting \
                    or not self.rates.steady(spec, placement)
                self.measures[name] = m = replace(m, hold=hold)
                measures.append(m)
            for gone in [n for n in self.measures if n not in registry.dataflows]:
                del self.measures[gone]
            plan = self.plan = self.scaler.decide(now, measures, len(live))
        self._act(now, plan, live)
        return plan

    def _act(self, now: float, plan: Plan, live: list[int]) -> None:
        c, lessees_of = self.reconfig, self.registry.lessees_of
        if self.sizes_pool and plan.executors > len(live):
            try:
                c.add_executors(plan.executors - len(live))
            except Exception as e:
                self._error("pool", f"adding {plan.executors - len(live)} executors failed: "
                                    f"{e}; retried next round")
                return
        for d in plan.decisions:
            if d.kind != "parallelism" or d.dataflow in self.acting or d.dataflow in c.migrating:
                continue  # lessees: below
            try:
                if lessees_of(d.dataflow).get(d.step):  # no bins move while lessees lend
                    started = c.lease(d.dataflow, d.step, 0)
                else:
                    # One epoch: under overload every marker waits behind the step's queue.
                    started = c.scale(d.dataflow, d.step, d.to_parallelism,
                                      strategy="all_at_once")
                self.acting[d.dataflow] = started["id"]
                logger.info("scaling %s/%s %d -> %d: %s", d.dataflow, d.step, d.from_parallelism,
                            d.to_parallelism, d.reason)
            except Exception as e:
                self.scaler.applied(now, d.dataflow)
                self._error(d.dataflow, f"scaling step {d.step!r} to {d.to_parallelism} failed: "
                                        f"{e}; the dataflow runs on its current plan")
        for name, steps in plan.lessees.items():
            for step, n in steps.items():
                if name in self.acting or name in c.migrating:
                    continue
                if len(lessees_of(name).get(step, ())) == n:
                    continue
                try:
                    self.acting[name] = c.lease(name, step, n)["id"]
                    logger.info("scaling %s/%s: %d lessees", name, step, n)
                except Exception as e:
                    self.scaler.applied(now, name)
                    self._error(name, f"giving step {step!r} {n} lessees failed: {e}")
        self._shrink(now, plan, live)

    def _shrink(self, now: float, plan: Plan, live: list[int]) -> None:
        """One executor back when the plan has wanted fewer for a whole scale-down window."""
        c = self.reconfig
        if not self.sizes_pool or plan.executors >= len(live) or c.migrating \
                or self.pool.draining:
            self._shrink_since = None
            return
        if self._shrink_since is None:
            self._shrink_since = now
        if now - self._shrink_since < self.settings.scale_down_window_s:
            return
        movable = [i for i in live if c.only_keyed_on(i)]
        if not movable:
            return
        index = min(movable, key=lambda i: (self.pool.load.get(i, 0), -i))
        try:
            c.remove_executor(index)
            self._shrink_since = None
            logger.info("scaling: executor %d given back (the plan wants %d of %d)", index,
                        plan.executors, len(live))
        except Exception as e:
            self._error("pool", f"giving back executor {index} failed: {e}")

    def _error(self, where: str, why: str) -> None:
        logger.warning("scaling %s: %s", where, why)
        self.errors.append({"at": time.time(), "where": where, "error": why})

    # -- what clients see ----------------------------------------------------------------
    def status(self, name: str | None = None) -> ScalingStatus:
        placements = self.registry.placements
        with self._lock:
            flows = {}
            for df, m in self.measures.items():
                if name is not None and df != name:
                    continue
                flows[df] = {
                    "policy": self.scaler.settings_for(df).policy,
                    "steps": {s.step: _step_view(s) for s in m.steps},
                    "sources": {s.step: {"rate_eps": s.rate_eps, "backlog_events": s.backlog_events,
                                         "backlog_growth_eps": s.backlog_growth_eps}
                                for s in m.sources},
                    "within_target": m.within_target,
                    "instances": {s.step: self.rates.instance_rates(placements[df], s.step)
                                  for s in m.steps if s.scalable and df in placements},
                }
            plan = self.plan
            return {
                "policy": self.settings.policy,
                "enabled": self.enabled(),
                "executors": len(self.pool.usable()),
                "wanted_executors": plan.executors if plan else None,
                "bounds": {"min_executors": self.settings.bounds.min_executors,
                           "max_executors": self.settings.bounds.max_executors,
                           "max_parallelism": self.settings.bounds.max_parallelism},
                "dataflows": flows,
                "decisions": [d.to_dict() for d in self.scaler.history(name, limit=50)],
                "misses": [{"dataflow": m.dataflow, "reason": m.reason} for m in (plan.misses if plan else ())
                           if name is None or m.dataflow == name],
                "errors": [e for e in self.errors if name is None or e["where"] in (name, "pool")],
            }


def _step_view(s: StepMeasure) -> dict[str, Any]:
    def r(x: float | None) -> float | None:
        return None if x is None or not math.isfinite(x) else round(x, 3)
    return {"parallelism": s.parallelism, "scalable": s.scalable, "lessees": s.lessees,
            "events_in_eps": r(s.events_in_eps), "events_out_eps": r(s.events_out_eps),
            "true_processing_eps": r(s.true_processing_eps), "true_output_eps": r(s.true_output_eps),
            "busy": r(s.busy), "backlog_events": s.backlog_events}
