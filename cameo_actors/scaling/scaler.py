"""The `Scaler`: the policies' raw recommendations made safe to act on, for a whole pool.

It keeps what a single measurement cannot: when each dataflow was last acted on (no
decision during its warm-up), DS2's recommendations over the scale-down window (scale
up at once, down only when the whole window agrees, as the Flink autoscaler does), the
operator's pins, and a bounded history of decisions. On top it is deadline-aware: a
dataflow missing its target is never scaled down and gets +1 where it is busiest when
the policy adds nothing, and when the pool is capped, dataflows missing their target,
then those with the tightest targets, get the capacity first. Time is always `now`,
in seconds, handed in: no clock, no sleeping, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .model import (
    Bounds,
    DataflowMeasure,
    Decision,
    Miss,
    Plan,
    ScalingConfigError,
    StepMeasure,
    check,
    is_number,
)
from .policies import POLICIES, PolicySettings, ceil, predicted_busy, target_rates

#: Decisions kept for `Scaler.history`, all dataflows together.
HISTORY = 200
#: A step whose hottest instance is at least this busy while the others' mean is below
#: COOL has a hot key: more instances cannot split one key, a lessee can (Dirigo).
HOT, COOL = 0.9, 0.5
#: Deadline awareness adds an instance only to a step at least this busy.
DEADLINE_BUSY = 0.5

#: A source backlog of more than this many seconds of its rate is being caught up.
CATCHING_UP_S = 1.0

Plans = dict[str, tuple[int, str]]  # scalable step -> (parallelism, reason)


def catching_up(m: DataflowMeasure) -> bool:
    """Whether a source works off a backlog: its late results are the backlog's (ds2's
    catch-up term plans for it), no reason for more capacity."""
    return any(s.backlog_events > s.rate_eps * CATCHING_UP_S for s in m.sources)


@dataclass(frozen=True)
class ScalingSettings:
    """How a pool (or one dataflow, see `Scaler.set_dataflow`) is scaled.

    A dataflow's own settings decide everything about it (policy, min/max_parallelism,
    windows, deadline awareness, lessees); the pool's decide its size (min/max_executors)
    and its target utilization. `interval_s` and `rate_window_s` are the runtime
    controller's: how often it measures and decides, and over how long it takes rates.

    Example:
        >>> ScalingSettings(policy="magic")
        Traceback (most recent call last):
        ...
        cameo_actors.scaling.model.ScalingConfigError: scaling.policy: expected one of ds2, threshold, off, got 'magic'. Fix: use one of those names
    """

    policy: str = "ds2"
    bounds: Bounds = field(default_factory=Bounds)
    policy_settings: PolicySettings = field(default_factory=PolicySettings)
    warmup_s: float = 10.0
    scale_down_window_s: float = 30.0
    deadline_aware: bool = True
    lessees: bool = False
    max_lessees: int = 2
    interval_s: float = 5.0
    rate_window_s: float = 10.0

    def __post_init__(self) -> None:
        check(isinstance(self.policy, str) and (self.policy in POLICIES or self.policy == "off"),
              "policy", f"one of {', '.join([*POLICIES, 'off'])}", self.policy,
              "use one of those names")
        for name in ("warmup_s", "scale_down_window_s"):
            value = getattr(self, name)
            check(is_number(value) and value >= 0, name, "seconds >= 0", value,
                  f"set {name} to 0 or more")
        for name in ("interval_s", "rate_window_s"):
            value = getattr(self, name)
            check(is_number(value) and value > 0, name, "seconds > 0", value,
                  f"set {name} above 0")
        for name in ("deadline_aware", "lessees"):
            value = getattr(self, name)
            check(isinstance(value, bool), name, "true or false", value, "use a boolean")
        check(type(self.max_lessees) is int and self.max_lessees >= 0, "max_lessees",
              "an int >= 0", self.max_lessees, "use 2")


_OWN = tuple(f.name for f in fields(ScalingSettings) if f.name not in ("bounds",
                                                                        "policy_settings"))
_KEYS = sorted({*_OWN, *(f.name for f in fields(Bounds)), *(f.name for f in fields(PolicySettings))})


def settings_from_dict(d: Mapping[str, Any], where: str = "scaling") -> ScalingSettings:
    """Settings from flat keys (a config file's, an API call's): any field of
    `ScalingSettings`, `Bounds` or `PolicySettings`; the policy is "off" unless given.

    Raises:
        ScalingConfigError: an unknown key or a bad value, named as `where`.key.

    Example:
        >>> settings_from_dict({"policy": "ds2", "max_executors": 4}).bounds.max_executors
        4
        >>> settings_from_dict({"max_executors": 0}, where="RuntimeConfig.scaling")
        Traceback (most recent call last):
        ...
        cameo_actors.scaling.model.ScalingConfigError: RuntimeConfig.scaling.max_executors: expected an int >= 1, got 0. Fix: set max_executors to a whole number such as 1
    """
    if not isinstance(d, Mapping):
        raise ScalingConfigError(where, "a dict of settings", d, 'pass e.g. {"policy": "ds2"}')
    unknown = sorted(set(d) - set(_KEYS))
    if unknown:
        raise ScalingConfigError(where, f"keys among {', '.join(_KEYS)}", unknown[0],
                                 "correct its spelling or drop it")
    try:
        return ScalingSettings(
            **{"policy": "off", **{k: d[k] for k in _OWN if k in d}},
            bounds=Bounds(**{f.name: d[f.name] for f in fields(Bounds) if f.name in d}),
            policy_settings=PolicySettings(**{f.name: d[f.name] for f in fields(PolicySettings)
                                              if f.name in d}))
    except ScalingConfigError as e:
        if not e.expected or where == "scaling":
            raise
        key = str(e.subject).removeprefix("scaling.")
        raise ScalingConfigError(f"{where}.{key}", e.expected, e.got, e.fix) from None


def _delayed(hist: deque[tuple[float, int]], now: float, span: float, want: int,
             current: int) -> int:
    """Up at once; down only when `hist` covers the last `span` s and every value in it
    is below `current`, and then to the highest of them."""
    hist.append((now, want))
    while len(hist) >= 2 and hist[1][0] <= now - span:
        hist.popleft()  # the sample at the window's start stays
    if want >= current:
        return want
    if hist[0][0] <= now - span and all(w < current for _, w in hist):
        return max(w for _, w in hist)
    return current


def _hot(st: StepMeasure) -> tuple[float, float] | None:
    """(hottest instance's busy, the others' mean) when one key saturates one instance."""
    if len(st.instance_busy) < 2:
        return None
    hottest = max(st.instance_busy)
    others = (sum(st.instance_busy) - hottest) / (len(st.instance_busy) - 1)
    return (hottest, others) if hottest >= HOT and others < COOL else None


class Scaler:
    """Decides, for every measured dataflow, how many instances each scalable step runs.

    Example:
        >>> from cameo_actors.scaling import DataflowMeasure, SourceMeasure, StepMeasure
        >>> w = StepMeasure("w", ("in",), 1, True, 1_000.0, 10.0, 1_000.0)
        >>> src = SourceMeasure("in", rate_eps=1_000.0, backlog_growth_eps=1_400.0)
        >>> plan = Scaler(ScalingSettings()).decide(0.0, [DataflowMeasure(
        ...     "d", "t", 500.0, (w,), (src,))], executors=1)
        >>> plan.parallelism, plan.executors
        ({'d': {'w': 3}}, 3)
    """

    def __init__(self, settings: ScalingSettings,
                 per_dataflow: dict[str, ScalingSettings] | None = None) -> None:
        self.settings = settings
        self._per = dict(per_dataflow or {})
        self._pins: dict[str, dict[str, int]] = {}
        self._applied: dict[str, float] = {}
        self._recs: dict[tuple[str, str], deque[tuple[float, int]]] = {}
        self._hot: dict[tuple[str, str], float] = {}  # last seen hot (or holding lessees)
        self._history: deque[Decision] = deque(maxlen=HISTORY)

    def settings_for(self, name: str) -> ScalingSettings:
        """The dataflow's own settings, else the pool's."""
        return self._per.get(name, self.settings)

    def set_dataflow(self, name: str, settings: ScalingSettings | None) -> None:
        """Scale `name` by its own settings (None: by the pool's again)."""
        if settings is None:
            self._per.pop(name, None)
        else:
            self._per[name] = settings

    def pin(self, name: str, step: str, parallelism: int | None) -> None:
        """Keep `step` of `name` at `parallelism` whatever the policy says (None: unpin)."""
        if parallelism is None:
            self._pins.get(name, {}).pop(step, None)
            return
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise ScalingConfigError(f"scaling pin of {name!r}/{step!r}", "an int >= 1",
                                     parallelism, "pin a whole number of instances, or None")
        self._pins.setdefault(name, {})[step] = parallelism

    def applied(self, now: float, dataflow: str) -> None:
        """An action on `dataflow` completed at `now`: its warm-up starts, and what was
        recommended for its old parallelism no longer counts."""
        self._applied[dataflow] = now
        for key in [k for k in self._recs if k[0] == dataflow]:
            del self._recs[key]

    def forget(self, name: str) -> None:
        """`name` is gone: drop its settings, pins and state (its history stays)."""
        for table in (self._per, self._pins, self._applied):
            table.pop(name, None)
        for keyed in (self._recs, self._hot):
            for key in [k for k in keyed if k[0] == name]:
                del keyed[key]

    def history(self, name: str | None = None, limit: int = 20) -> list[Decision]:
        """The last `limit` decisions (of `name`, or of all), newest last."""
        found = [d for d in self._history if name is None or d.dataflow == name]
        return found[-limit:] if limit > 0 else []

    def decide(self, now: float, measures: Sequence[DataflowMeasure], executors: int) -> Plan:
        """The plan for `measures` at `now` (seconds, any origin); its changes go to the
        history. `executors` is the pool's size now: the plan says what it should be.
        Call `applied` once an action on a dataflow completes."""
        plans = {m.name: self._plan(now, m) for m in measures}
        busy = {m.name: predicted_busy(m, self.settings_for(m.name).policy_settings)
                for m in measures}
        misses = self._fit(measures, plans, busy)
        decisions = []
        for m in measures:
            for st in m.steps:
                to, why = plans[m.name].get(st.step, (st.parallelism, ""))
                if to != st.parallelism:
                    decisions.append(Decision(now, m.name, st.step, st.parallelism, to,
                                              self.settings_for(m.name).policy, why))
        lessees = self._lessees(now, measures, decisions)
        self._history.extend(decisions)
        return Plan(parallelism={name: {s: p for s, (p, _) in plan.items()}
                                 for name, plan in plans.items()},
                    executors=self._executors(measures, plans, busy),
                    decisions=tuple(decisions), misses=tuple(misses), lessees=lessees)

    def _warming(self, now: float, name: str) -> bool:
        return (name in self._applied
                and now - self._applied[name] < self.settings_for(name).warmup_s)

    def _plan(self, now: float, m: DataflowMeasure) -> Plans:
        """One dataflow: policy, delayed scale-down, deadline, bounds, pins (in that order)."""
        cfg = self.settings_for(m.name)
        scalable = [st for st in m.steps if st.scalable]
        plan = {st.step: (st.parallelism, "keeps its parallelism") for st in scalable}
        if cfg.policy != "off" and not m.hold and not self._warming(now, m.name):
            rec = POLICIES[cfg.policy](m, cfg.policy_settings)
            missing = cfg.deadline_aware and m.misses_target
            for st in scalable:
                to, why = rec[st.step]
                if cfg.policy == "ds2":
                    hist = self._recs.setdefault((m.name, st.step), deque())
                    to = _delayed(hist, now, cfg.scale_down_window_s, to, st.parallelism)
                    if to < st.parallelism:
                        why += (f"; every recommendation of the last "
                                f"{cfg.scale_down_window_s:g} s was below {st.parallelism}, "
                                f"the highest {to}")
                if missing and to < st.parallelism:
                    to, why = st.parallelism, f"deadline: misses its target, no scale-down ({why})"
                plan[st.step] = (to, why)
            if missing:
                self._deadline(m, cfg, plan)
            bounds = cfg.bounds
            for step, (to, why) in plan.items():
                if to > bounds.max_parallelism:
                    plan[step] = (bounds.max_parallelism,
                                  f"{why}; capped at max_parallelism {bounds.max_parallelism}")
                elif to < bounds.min_parallelism:
                    plan[step] = (bounds.min_parallelism,
                                  f"{why}; raised to min_parallelism {bounds.min_parallelism}")
        for step, p in self._pins.get(m.name, {}).items():
            if step in plan:
                plan[step] = (p, "pinned by operator")
        return plan

    def _deadline(self, m: DataflowMeasure, cfg: ScalingSettings, plan: Plans) -> None:
        """+1 on the busiest growable step of a dataflow missing its target, when the
        policy adds nothing."""
        scalable = [st for st in m.steps if st.scalable]
        if any(plan[st.step][0] > st.parallelism for st in scalable):
            return
        pins = self._pins.get(m.name, {})
        growable = [st for st in scalable if st.step not in pins
                    and st.parallelism < cfg.bounds.max_parallelism]
        if not growable:
            return
        st = max(growable, key=lambda s: s.busy)
        if st.busy < DEADLINE_BUSY or catching_up(m):
            return
        if m.p99_ms is not None and m.p99_ms > m.latency_target_ms:
            miss = f"p99 {m.p99_ms:,.0f} ms over target {m.latency_target_ms:,.0f} ms"
        else:
            miss = (f"{m.within_target or 0:.0%} of results within target "
                    f"{m.latency_target_ms:,.0f} ms (under 99%)")
        plan[st.step] = (st.parallelism + 1, f"deadline: {miss} at busy {st.busy:.2f}")

    def _fit(self, measures: Sequence[DataflowMeasure], plans: dict[str, Plans],
             busy: dict[str, dict[str, float]]) -> list[Miss]:
        """When the pool's max cannot carry every dataflow, serve those missing their
        target first, then the tightest targets; the rest keep what fits and get a Miss."""
        u = self.settings.policy_settings.target_utilization
        most = self.settings.bounds.max_executors
        need = {m.name: sum(busy[m.name].values()) / u for m in measures}
        if ceil(sum(need.values())) <= most:
            return []
        left, misses = float(most), []
        for m in sorted(measures, key=lambda m: (not m.misses_target, m.latency_target_ms,
                                                 m.name)):
            if need[m.name] <= left * (1 + 1e-9):
                left -= need[m.name]
                continue
            plan, pins = plans[m.name], self._pins.get(m.name, {})
            for step, (to, why) in plan.items():  # no more instances than executors left
                current = next(st.parallelism for st in m.steps if st.step == step)
                if to > current and step not in pins:
                    fit = max(current, min(to, math.floor(left)))
                    if fit != to:
                        plan[step] = (fit, f"{why}; the pool has room for {fit}")
            step = max(busy[m.name], key=lambda s: busy[m.name][s])
            p = plan[step][0]
            target = target_rates(m, self.settings_for(m.name).policy_settings)[step]
            misses.append(Miss(m.name, (
                f"needs {need[m.name]:.1f} executors but only {left:.1f} of the pool's max "
                f"{most} are left after the dataflows that come first (missing their target, "
                f"then tighter targets): its step {step!r} will run at "
                f"{busy[m.name][step] / p:.0%} busy on {p} instance(s) "
                f"(target {target:,.0f} ev/s)")))
            left = 0.0
        return misses

    def _executors(self, measures: Sequence[DataflowMeasure], plans: dict[str, Plans],
                   busy: dict[str, dict[str, float]]) -> int:
        """Executors for the largest step and for the predicted busy time at the target
        utilization, within bounds (the controller delays giving executors back)."""
        bounds = self.settings.bounds
        largest = max([p for plan in plans.values() for p, _ in plan.values()]
                      + [st.parallelism for m in measures for st in m.steps if not st.scalable],
                      default=1)
        total = sum(b for per in busy.values() for b in per.values())
        want = max(bounds.min_executors, largest,
                   ceil(total / self.settings.policy_settings.target_utilization))
        return min(want, bounds.max_executors)

    def _lessees(self, now: float, measures: Sequence[DataflowMeasure],
                 decisions: list[Decision]) -> dict[str, dict[str, int]]:
        """Lessees wanted per step (Dirigo): one more while a key saturates one instance,
        none once no key was hot for a whole scale-down window."""
        out: dict[str, dict[str, int]] = {}
        for m in measures:
            cfg = self.settings_for(m.name)
            if not cfg.lessees or cfg.policy == "off":
                continue
            warming = self._warming(now, m.name)
            for st in m.steps:
                key, hot = (m.name, st.step), _hot(st)
                want, why = st.lessees, ""
                if warming or not st.scalable:
                    pass
                elif hot:
                    self._hot[key] = now
                    want = min(st.lessees + 1, cfg.max_lessees)
                    why = (f"hot key: instance busy {hot[0]:.2f} while others {hot[1]:.2f}: "
                           "a lessee takes the overflow")
                elif st.lessees > 0 and now - self._hot.setdefault(key, now) \
                        >= cfg.scale_down_window_s:
                    want = 0
                    why = (f"no hot key for {cfg.scale_down_window_s:g} s: "
                           f"its {st.lessees} lessee(s) are given back")
                if want or st.lessees:
                    out.setdefault(m.name, {})[st.step] = want
                if want != st.lessees:
                    decisions.append(Decision(now, m.name, st.step, st.lessees, want,
                                              cfg.policy, why, kind="lessees"))
        return out
