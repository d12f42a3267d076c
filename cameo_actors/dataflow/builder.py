"""The fluent builder users write dataflows with; it compiles to a DataflowSpec.

>>> from cameo_actors import Dataflow, count, sum_
>>> df = (Dataflow("bulk", latency_target_ms=1000, tenant="analytics")
...       .source("events", schema={"ts": "int", "key": "str", "value": "float"}, event_time="ts")
...       .key_by("key")
...       .window(tumbling_ms=1000)
...       .aggregate(total=sum_("value"), n=count())
...       .sink("totals"))
>>> [s.id for s in df.spec.steps]
['events', 'key_by_1', 'window_2', 'totals']

Each call checks its own arguments at once (a window of size 0 fails on the
`.window(...)` line); `Dataflow.spec` checks the whole graph.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cameo_actors.dataflow.spec import (
    AggSpec,
    ConnectorSpec,
    DataflowSpec,
    FaultToleranceSpec,
    FilterStep,
    FlatMapStep,
    JoinStep,
    KeyByStep,
    LimitsSpec,
    MapStep,
    ProcessStep,
    SchedulingSpec,
    SinkStep,
    SourceStep,
    Step,
    UnionStep,
    WindowStep,
)
from cameo_actors.dataflow.streams import stream_time_field
from cameo_actors.dataflow.validate import (
    check_fault_tolerance,
    check_step_rules,
    check_window_shape,
    validate,
)
from cameo_actors.errors import SpecError

ConnectorArg = ConnectorSpec | Mapping[str, Any] | None


@dataclass(frozen=True)
class Aggregate:
    """An aggregate before it is named: `.aggregate(total=sum_("value"))` names it."""

    fn: str
    field: str | None = None
    n: int | None = None


def count() -> Aggregate:
    return Aggregate("count")


def sum_(field: str) -> Aggregate:
    return Aggregate("sum", field)


def min_(field: str) -> Aggregate:
    return Aggregate("min", field)


def max_(field: str) -> Aggregate:
    return Aggregate("max", field)


def avg(field: str) -> Aggregate:
    return Aggregate("avg", field)


def max_by(field: str) -> Aggregate:
    """The window's events with the greatest `field` (a list: ties are all kept, in a
    canonical order that does not depend on arrival).

    >>> max_by("price")
    Aggregate(fn='max_by', field='price', n=None)
    """
    return Aggregate("max_by", field)


def top(field: str, n: int) -> Aggregate:
    """Up to `n` (1 to 1000) of the window's events with the largest `field`, largest
    first (a list; ties in a canonical order that does not depend on arrival).

    >>> top("price", 3)
    Aggregate(fn='top', field='price', n=3)
    """
    return Aggregate("top", field, n)


class Dataflow:
    """A dataflow under construction. See the module docstring for an example.

    Args:
        name: unique per tenant; the runtime and the CLI address the dataflow by it.
        latency_target_ms: the end-to-end latency target L every result should meet.
        tenant: who owns it; fair sharing and rate limits are per tenant.
        weight: the tenant's share of the pool under overload (and under fair_share).
        rate_limit_eps: events/s before the tenant's work is demoted (token_bucket).
        expected_rate_eps: events/s it is expected to receive (admission control).
        errors: where the Spark tier writes the error output, e.g. {"format": "json", "path": ...}.
        state_bytes: the most operator state and unread results it may keep (spec:
            `limits.state_bytes`); None takes the pool's default budget.
        state_disk_bytes: the most operator state it may keep on disk (spec:
            `limits.state_disk_bytes`, a pool with a store as its state backend); None
            takes the pool's default.
    """

    def __init__(self, name: str, *, latency_target_ms: float, tenant: str = "default",
                 weight: float = 1.0, rate_limit_eps: float | None = None,
                 expected_rate_eps: float | None = None,
                 errors: ConnectorArg = None, state_bytes: int | None = None,
                 state_disk_bytes: int | None = None) -> None:
        self.name = name
        self.latency_target_ms = latency_target_ms
        self.tenant = tenant
        self.scheduling = SchedulingSpec(weight=weight, rate_limit_eps=rate_limit_eps,
                                         expected_rate_eps=expected_rate_eps)
        self.limits = LimitsSpec(state_bytes=state_bytes, state_disk_bytes=state_disk_bytes)
        self._fault_tolerance = FaultToleranceSpec()
        self.errors = _connector(errors, "errors")
        self._steps: list[Step] = []
        self._counter = 0

    def source(self, name: str, *, schema: Mapping[str, str], event_time: str | None = None,
               allowed_lateness_ms: int = 0, connector: ConnectorArg = None,
               parallelism: int = 1, idle_timeout_ms: float | None = None) -> Stream:
        """Where events enter. `schema` maps field -> int|float|str|bool|any;
        `event_time` names the field holding event time in ms; the watermark
        trails the largest event time seen by `allowed_lateness_ms`. An instance
        that takes in nothing for `idle_timeout_ms` is idle: the steps after it
        leave it out of their watermark until it sends again, so that a quiet
        instance (of several) does not hold every window back; an event it then
        takes in behind that watermark is late."""
        if not isinstance(schema, Mapping):
            raise SpecError(name, "schema as a mapping of field -> type", type(schema).__name__,
                            "schema={'ts': 'int', 'level': 'str'}")
        step = SourceStep(id=name, schema=tuple(schema.items()), event_time=event_time,
                          allowed_lateness_ms=allowed_lateness_ms,
                          connector=_connector(connector, name), parallelism=parallelism,
                          idle_timeout_ms=idle_timeout_ms)
        check_step_rules(step)  # fail on the line that made it
        return self._add(step)

    def fault_tolerance(self, checkpoint_interval_ms: float | None = None,
                        delivery: str | None = None, incremental: bool | None = None
                        ) -> Dataflow:
        """How the dataflow survives a failed executor (spec: `fault_tolerance`); None
        takes the pool's default. Returns the Dataflow, so it chains anywhere.

        Args:
            checkpoint_interval_ms: how often its state is checkpointed: 0 (no checkpoints:
                a failure fails the dataflow) or 100 to 3,600,000 ms.
            delivery: "exactly_once" (results readable once the next checkpoint completed)
                or "at_least_once" (readable at once; after a recovery, results since the
                last checkpoint may come again, each with an id to drop it by).
            incremental: whether a window's part of a checkpoint may hold only what
                changed since the one before (True), or always all of its state (False).

        >>> df = Dataflow("d", latency_target_ms=100).fault_tolerance(1000, "at_least_once")
        >>> df.source("s", schema={"ts": "int"}).sink("o").spec.fault_tolerance.delivery
        'at_least_once'
        """
        ft = FaultToleranceSpec(checkpoint_interval_ms=checkpoint_interval_ms, delivery=delivery,
                                incremental=incremental)
        check_fault_tolerance(ft)  # fail on the line that made it
        self._fault_tolerance = ft
        return self

    @property
    def spec(self) -> DataflowSpec:
        """The validated spec (raises SpecError if the graph is incomplete or wrong)."""
        spec = DataflowSpec(name=self.name, tenant=self.tenant,
                            latency_target_ms=self.latency_target_ms, scheduling=self.scheduling,
                            limits=self.limits, fault_tolerance=self._fault_tolerance,
                            errors=self.errors, steps=tuple(self._steps))
        validate(spec)
        return spec

    def to_json(self, indent: int | None = 2) -> str:
        return self.spec.to_json(indent=indent)

    # -- used by Stream --------------------------------------------------------------
    def _add(self, step: Step) -> Stream:
        if any(s.id == step.id for s in self._steps):
            raise SpecError(step.id, "unique step ids", f"a second step named {step.id!r}",
                            "pass id=... to name this step differently")
        self._steps.append(step)
        return Stream(self, step.id)

    def _parallelism_of(self, step_id: str) -> int:
        return next(s.parallelism for s in self._steps if s.id == step_id)

    def _next_id(self, op: str, given: str | None) -> str:
        self._counter += 1
        return given if given is not None else f"{op}_{self._counter}"

    def _time_field(self, step_id: str) -> str | None:
        partial = DataflowSpec(name=self.name, latency_target_ms=1, steps=tuple(self._steps))
        return stream_time_field(partial, step_id)


class Stream:
    """The output of one step; each method adds a step reading it."""

    def __init__(self, dataflow: Dataflow, step_id: str) -> None:
        self.dataflow = dataflow
        self.step_id = step_id

    def filter(self, predicate: str, *, id: str | None = None, parallelism: int | None = None
               ) -> Stream:
        """Keep events for which the safe expression is true, e.g. "level == 'ERROR'"."""
        return self._then(FilterStep, "filter", id, predicate=predicate, parallelism=parallelism)

    def map(self, fields: Mapping[str, str] | None = None, *, function: str | None = None,
            id: str | None = None, parallelism: int | None = None) -> Stream:
        """Project each event to new fields (name -> safe expression), or apply
        a Python function by import path ('pkg.mod:fn', event -> event)."""
        pairs = tuple(fields.items()) if fields is not None else None
        return self._then(MapStep, "map", id, fields=pairs, function=function,
                          parallelism=parallelism)

    def project(self, *names: str, id: str | None = None) -> Stream:
        """Keep only the named fields."""
        return self.map({n: n for n in names}, id=id)

    def flat_map(self, function: str, *, id: str | None = None, parallelism: int | None = None
                 ) -> Stream:
        """Apply a Python function by import path: event -> iterable of events."""
        return self._then(FlatMapStep, "flat_map", id, function=function, parallelism=parallelism)

    def key_by(self, key: str, *, id: str | None = None, parallelism: int | None = None
               ) -> Stream:
        """Key the stream by a safe expression (usually a field name)."""
        return self._then(KeyByStep, "key_by", id, key=key, parallelism=parallelism)

    def window(self, *, tumbling_ms: int | None = None, sliding_ms: int | None = None,
               slide_ms: int | None = None, session_gap_ms: int | None = None,
               time_field: str | None = None, id: str | None = None,
               parallelism: int = 1) -> WindowedStream:
        """An event-time window; give exactly one of tumbling_ms, sliding_ms
        (with slide_ms) or session_gap_ms, then call .aggregate(...)."""
        given = {k: v for k, v in (("tumbling_ms", tumbling_ms), ("sliding_ms", sliding_ms),
                                   ("session_gap_ms", session_gap_ms)) if v is not None}
        step_id = self.dataflow._next_id("window", id)
        if len(given) != 1:
            raise SpecError(step_id, "exactly one of tumbling_ms, sliding_ms, session_gap_ms",
                            given or "none", "e.g. .window(tumbling_ms=1000)")
        if slide_ms is not None and sliding_ms is None:
            raise SpecError(step_id, "slide_ms only with sliding_ms", {"slide_ms": slide_ms},
                            ".window(sliding_ms=1000, slide_ms=250)")
        kind = {"tumbling_ms": "tumbling", "sliding_ms": "sliding", "session_gap_ms": "session"}[
            next(iter(given))]
        shape = WindowStep(id=step_id, inputs=(self.step_id,), kind=kind,
                           size_ms=tumbling_ms if tumbling_ms is not None else sliding_ms,
                           slide_ms=slide_ms, gap_ms=session_gap_ms,
                           time_field=time_field or self.dataflow._time_field(self.step_id) or "",
                           parallelism=parallelism)
        try:
            check_window_shape(shape)
        except SpecError as e:
            # The spec names sizes size_ms / slide_ms / gap_ms; say which argument that is here.
            arg = {"tumbling": "tumbling_ms", "sliding": "sliding_ms and slide_ms",
                   "session": "session_gap_ms"}[kind]
            raise SpecError(e.step, e.expected, e.got, f"{e.fix} (here: pass {arg} to "
                            ".window(...))") from None
        return WindowedStream(self, shape)

    def join(self, right: Stream, *, tumbling_ms: int | None = None, sliding_ms: int | None = None,
             slide_ms: int | None = None, interval_ms: tuple[int, int] | None = None,
             id: str | None = None, parallelism: int = 1) -> Stream:
        """Inner join with another keyed stream: per event-time window (tumbling_ms, or
        sliding_ms with slide_ms), or per interval (interval_ms=(lower_ms, upper_ms): a
        left event at tl and a right one at tr join when tl + lower_ms <= tr <= tl +
        upper_ms, as soon as both are there). Give exactly one of the three.

        Results: {"key", "window_start", "window_end", <time field>, "left", "right"}
        (windows; time = window end - 1), {"key", <time field>, "left", "right"}
        (interval; time = max(tl, tr)). The time field is the left stream's.
        """
        df = self.dataflow
        step_id = df._next_id("join", id)
        given = {k: v for k, v in (("tumbling_ms", tumbling_ms), ("sliding_ms", sliding_ms),
                                   ("interval_ms", interval_ms)) if v is not None}
        if len(given) != 1:
            raise SpecError(step_id, "exactly one of tumbling_ms, sliding_ms or interval_ms",
                            given or "none", ".join(other, tumbling_ms=1000) or "
                            ".join(other, interval_ms=(0, 10_000))")
        lower = upper = None
        if interval_ms is not None:
            if not isinstance(interval_ms, (tuple, list)) or len(interval_ms) != 2:
                raise SpecError(step_id, "interval_ms as a pair (lower_ms, upper_ms)",
                                interval_ms, ".join(other, interval_ms=(-5000, 5000))")
            if slide_ms is not None:
                raise SpecError(step_id, "slide_ms only with sliding_ms", {"slide_ms": slide_ms},
                                "remove slide_ms from the interval join")
            lower, upper = interval_ms
        kind = {"tumbling_ms": "tumbling", "sliding_ms": "sliding",
                "interval_ms": "interval"}[next(iter(given))]
        step = JoinStep(id=step_id, inputs=(self.step_id, right.step_id), kind=kind,
                        size_ms=tumbling_ms if tumbling_ms is not None else (sliding_ms or 0), slide_ms=slide_ms,
                        left_time_field=df._time_field(self.step_id) or "",
                        right_time_field=df._time_field(right.step_id) or "",
                        lower_ms=lower, upper_ms=upper, parallelism=parallelism)
        check_step_rules(step)  # fail on the line that made it
        return df._add(step)

    def process(self, function: str, *, time_field: str | None = None, id: str | None = None,
                parallelism: int = 1) -> Stream:
        """Run a keyed stateful Python class by import path ('pkg.mod:Name', a
        `cameo_actors.KeyedProcess`): per key, a state dict kept between events and
        event-time timers. The input must be keyed (key_by before it). With
        `time_field`, an event behind the watermark goes to the error output as late,
        and the output stream has that time field.

        >>> from cameo_actors import Dataflow
        >>> df = Dataflow("d", latency_target_ms=100)
        >>> s = df.source("s", schema={"ts": "int", "user": "str"}, event_time="ts")
        >>> _ = s.key_by("user").process("myjobs.fraud:RunningCount", time_field="ts").sink("o")
        >>> df.spec.step("process_2").function
        'myjobs.fraud:RunningCount'
        """
        return self._then(ProcessStep, "process", id, function=function, time_field=time_field,
                          parallelism=parallelism)

    def union(self, *others: Stream, id: str | None = None) -> Stream:
        """Merge this stream with others (same dataflow) into one."""
        step = UnionStep(id=self.dataflow._next_id("union", id),
                         inputs=(self.step_id, *(o.step_id for o in others)))
        return self.dataflow._add(step)

    def sink(self, name: str, *, connector: ConnectorArg = None) -> Dataflow:
        """Where results leave; returns the Dataflow so a chain ends on it."""
        self.dataflow._add(SinkStep(id=name, inputs=(self.step_id,),
                                    connector=_connector(connector, name)))
        return self.dataflow

    def _then(self, cls: type[Step], op: str, id: str | None, **params: Any) -> Stream:
        if params.get("parallelism", 0) is None:
            # A stateless step left to choose runs as many instances as its input: instance
            # i of each stays with instance i of the step before it, on its executor
            # (a forward hop, no exchange), as Flink chains operators.
            params["parallelism"] = self.dataflow._parallelism_of(self.step_id)
        step = cls(id=self.dataflow._next_id(op, id), inputs=(self.step_id,), **params)
        check_step_rules(step)  # fail on the line that made it
        return self.dataflow._add(step)


class WindowedStream:
    """A window waiting for its aggregates."""

    def __init__(self, stream: Stream, shape: WindowStep) -> None:
        self._stream = stream
        self._shape = shape  # the window step, still without aggregates

    def aggregate(self, **aggregates: Aggregate) -> Stream:
        """Name the aggregates: .aggregate(n=count(), total=sum_("value"), mean=avg("value"))."""
        for name, agg in aggregates.items():
            if not isinstance(agg, Aggregate):
                raise SpecError(self._shape.id, "aggregates made by count(), sum_(), min_(), max_(), "
                                "avg(), max_by(), top()",
                                f"{name}={agg!r}", f"write {name}=sum_('field') or similar")
        step = dataclasses.replace(
            self._shape, aggregates=tuple(AggSpec(n, a.fn, a.field, a.n)
                                          for n, a in aggregates.items()))
        check_step_rules(step)  # fail on the line that made it
        return self._stream.dataflow._add(step)


def _connector(arg: ConnectorArg, where: str) -> ConnectorSpec | None:
    if arg is None or isinstance(arg, ConnectorSpec):
        return arg
    if not isinstance(arg, Mapping):
        raise SpecError(where, "a connector: ConnectorSpec or a mapping with 'format'",
                        type(arg).__name__, "connector={'format': 'json', 'path': '/data/in'}")
    params = dict(arg)
    fmt = params.pop("format", None)
    trigger = params.pop("trigger_ms", None)
    checkpoint = params.pop("checkpoint", None)
    options = params.pop("options", {})
    options = {**options, **{k: str(v) for k, v in params.items()}}
    return ConnectorSpec(format=fmt, options=tuple((k, str(v)) for k, v in options.items()),
                         trigger_ms=trigger, checkpoint=checkpoint)
