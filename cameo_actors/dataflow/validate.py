"""Whole-spec validation: every rule a spec must meet before anything runs.

Run on every spec, built in Python or received over RPC. Each failure is a
SpecError naming the step, what was expected, what arrived and the fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, TypeGuard

from cameo_actors.dataflow.expressions import parse_expression
from cameo_actors.dataflow.spec import (
    AGGREGATE_FUNCTIONS,
    DELIVERY_MODES,
    JOIN_KINDS,
    SCHEMA_TYPES,
    ConnectorSpec,
    DataflowSpec,
    FaultToleranceSpec,
    FilterStep,
    FlatMapStep,
    JoinStep,
    KeyByStep,
    MapStep,
    ProcessStep,
    SinkStep,
    SourceStep,
    Step,
    UnionStep,
    WindowStep,
    is_schema_type,
)
from cameo_actors.dataflow.streams import stream_key
from cameo_actors.errors import SpecError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
FUNCTION_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
MAX_STEPS = 1000
MAX_PARALLELISM = 1024
#: The largest number a spec field takes: the largest integer a JSON number (a double)
#: holds exactly, so every client reads back what it sent. NaN and the infinities are refused.
MAX_NUMBER = 2**53
MAX_LATENCY_TARGET_MS = 86_400_000  # a day
#: The checkpoint intervals a spec may ask for, in ms; 0 (no checkpoints) is allowed too.
MIN_CHECKPOINT_INTERVAL_MS = 100
MAX_CHECKPOINT_INTERVAL_MS = 3_600_000  # an hour
#: The largest n of a top(field, n) aggregate.
MAX_TOP_N = 1000


def validate(spec: DataflowSpec) -> None:
    """Raise SpecError at the first rule the spec breaks."""
    _check_header(spec)
    by_id: dict[str, Step] = {}
    for step in spec.steps:
        if not isinstance(step.id, str) or not NAME_RE.match(step.id):
            raise SpecError(str(step.id), "a step id of letters, digits, '_', '.', '-' (1-128 chars)",
                            step.id, "rename the step")
        if step.id in by_id:
            raise SpecError(step.id, "unique step ids", f"a second step named {step.id!r}",
                            "give each step its own id")
        by_id[step.id] = step
    for step in spec.steps:
        _check_step(step, by_id)
    order = topological_order(spec)
    consumed = {i for s in spec.steps for i in s.inputs}
    for step in spec.steps:
        if not isinstance(step, SinkStep) and step.id not in consumed:
            raise SpecError(step.id, "every step's output to reach a sink", "no step reads it",
                            f"add a sink step whose inputs include {step.id!r}, or remove the step")
    for step_id in order:
        _check_stream_fields(spec, by_id[step_id])


def topological_order(spec: DataflowSpec) -> list[str]:
    """Step ids, upstream first. Raises SpecError on a cycle."""
    pending = {s.id: len(set(s.inputs)) for s in spec.steps}
    readers: dict[str, list[str]] = {s.id: [] for s in spec.steps}
    for s in spec.steps:
        for i in set(s.inputs):
            readers[i].append(s.id)
    ready = [sid for sid, n in pending.items() if n == 0]
    order: list[str] = []
    while ready:
        sid = ready.pop(0)
        order.append(sid)
        for r in readers[sid]:
            pending[r] -= 1
            if pending[r] == 0:
                ready.append(r)
    if len(order) < len(spec.steps):
        # What is left are cycles plus steps downstream of them; prune the latter.
        left = {sid for sid, n in pending.items() if n > 0}
        while True:
            tails = {sid for sid in left if not any(r in left for r in readers[sid])}
            if not tails:
                break
            left -= tails
        cycle = sorted(left)
        raise SpecError(cycle[0], "an acyclic graph (a DAG)", f"a cycle through {cycle}",
                        "remove the edge that feeds a step back into its own upstream")
    return order


# -- per-step rules -------------------------------------------------------------

_ARITY = {SourceStep: (0, 0), JoinStep: (2, 2), UnionStep: (2, 64)}


def _check_header(spec: DataflowSpec) -> None:
    if not isinstance(spec.name, str) or not NAME_RE.match(spec.name):
        raise SpecError(None, "a dataflow name of letters, digits, '_', '.', '-' (1-128 chars)",
                        spec.name, "rename the dataflow")
    if not isinstance(spec.tenant, str) or not NAME_RE.match(spec.tenant):
        raise SpecError(None, "a tenant name of letters, digits, '_', '.', '-'", spec.tenant,
                        "rename the tenant")
    sched = spec.scheduling
    check_live_settings(spec.latency_target_ms, sched.weight, where="scheduling.")
    if sched.rate_limit_eps is not None and not _positive(sched.rate_limit_eps):
        raise SpecError(None, f"scheduling.rate_limit_eps > 0 and {_FINITE}, or null",
                        sched.rate_limit_eps, "use a positive events/s limit, or null for none")
    if sched.expected_rate_eps is not None and not _positive(sched.expected_rate_eps):
        raise SpecError(None, f"scheduling.expected_rate_eps > 0 and {_FINITE}, or null",
                        sched.expected_rate_eps, "give the events/s you expect to send, or null")
    for name in ("state_bytes", "state_disk_bytes"):
        budget = getattr(spec.limits, name)
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)
                                   or budget <= 0):
            raise SpecError(None, f"limits.{name}: a whole number of bytes > 0, or null", budget,
                            "give the budget in bytes (e.g. 268435456 for 256 MiB), or leave it "
                            "out for the pool's default")
    check_fault_tolerance(spec.fault_tolerance)
    if spec.errors is not None:
        _check_connector(spec.errors, "errors")
    if not spec.steps:
        raise SpecError(None, "at least a source and a sink", "no steps",
                        "add a source step and a sink step to 'steps'")
    if len(spec.steps) > MAX_STEPS:
        raise SpecError(None, f"at most {MAX_STEPS} steps", len(spec.steps), "split the dataflow")
    if not spec.sources or not spec.sinks:
        raise SpecError(None, "at least one source and one sink",
                        f"{len(spec.sources)} sources, {len(spec.sinks)} sinks",
                        "add the missing source or sink step")


def _check_step(step: Step, by_id: dict[str, Step]) -> None:
    lo, hi = _ARITY.get(type(step), (1, 1))
    n = len(step.inputs)
    if not lo <= n <= hi:
        want = f"{lo} input(s)" if lo == hi else f"{lo} to {hi} inputs"
        raise SpecError(step.id, f"a {step.OP} step with {want}", f"{n} inputs {list(step.inputs)}",
                        "connect the step to the right number of upstream steps")
    for i in step.inputs:
        if i not in by_id:
            raise SpecError(step.id, "inputs that name existing steps", i,
                            f"add a step named {i!r} or correct the input (known: {sorted(by_id)})")
        if isinstance(by_id[i], SinkStep):
            raise SpecError(step.id, "an input that is not a sink", i, "read the step before the sink")
    if isinstance(step.parallelism, bool) or not isinstance(step.parallelism, int) \
            or not 1 <= step.parallelism <= MAX_PARALLELISM:
        raise SpecError(step.id, f"parallelism an integer from 1 to {MAX_PARALLELISM}",
                        step.parallelism, f"set 'parallelism' to 1 or more (at most {MAX_PARALLELISM})")
    check_step_rules(step)


def _check_source(step: SourceStep) -> None:
    if not step.schema:
        raise SpecError(step.id, "a schema (field -> type)", "no fields",
                        'declare the fields in \'schema\', e.g. {"ts": "int", "level": "str"}; '
                        f"types: {sorted(SCHEMA_TYPES)}, nullable with '?' (\"int?\")")
    for name, typ in step.schema:
        if not is_schema_type(typ):
            raise SpecError(step.id, f"field types from {sorted(SCHEMA_TYPES)}, or one of them "
                            "with '?' for a nullable field (\"int?\")", f"{name}: {typ!r}",
                            f"declare {name!r} with one of those types")
    names = [n for n, _ in step.schema]
    if step.event_time is not None:
        if step.event_time not in names:
            raise SpecError(step.id, f"event_time to be a schema field ({names})", step.event_time,
                            "name a schema field that holds event time in ms")
        if dict(step.schema)[step.event_time] not in ("int", "float"):
            raise SpecError(step.id, "event_time field of type int or float (ms), not nullable",
                            dict(step.schema)[step.event_time],
                            "declare it as int or float ms: every event needs a time")
    if not _non_negative(step.allowed_lateness_ms):
        raise SpecError(step.id, f"allowed_lateness_ms >= 0 and {_FINITE} of ms",
                        step.allowed_lateness_ms, "use 0 or a positive number of ms")
    if step.idle_timeout_ms is not None and not _positive(step.idle_timeout_ms):
        raise SpecError(step.id, f"idle_timeout_ms > 0 and {_FINITE} of ms, or null (never idle)",
                        step.idle_timeout_ms, "use a number of ms such as 1000, or leave it out")
    if step.connector is not None:
        _check_connector(step.connector, step.id)
        _check_kafka(step.connector, step.id, "subscribe")
        others = [n for n in names if n not in KAFKA_RECORD_FIELDS]
        if step.connector.format == "kafka" and "_value" in names and others:
            raise SpecError(step.id, "with '_value' (each record's value whole, as text), "
                            "only the record's fields: " + ", ".join(KAFKA_RECORD_FIELDS),
                            others, "drop them, or drop '_value' to read each value's JSON "
                            "object into the schema's fields")


def _check_sink(step: SinkStep) -> None:
    if step.connector is not None:
        _check_connector(step.connector, step.id)
        _check_kafka(step.connector, step.id, "topic")


#: The fields of a Kafka record a source's schema may name: its key (text), partition,
#: offset, timestamp (ms), headers (name -> text), and its value whole as text (then no
#: other field: the value is not parsed).
KAFKA_RECORD_FIELDS = ("_key", "_partition", "_offset", "_timestamp", "_headers", "_value")
#: The Kafka connector's own options, and the values each may take (None: any text).
_KAFKA_OPTIONS: dict[str, tuple[str, ...] | None] = {
    "subscribe": None, "topic": None, "key": None,
    "startingOffsets": ("earliest", "latest"), "endingOffsets": ("latest",),
    "client": ("cameo", "librdkafka")}


def _check_kafka(c: ConnectorSpec, where: str, topic: str) -> None:
    """A Kafka connector names its broker and its topic (`subscribe` for a source,
    `topic` for a sink); its other options are known ones or `kafka.<librdkafka setting>`."""
    if c.format != "kafka":
        return
    options = dict(c.options)
    for name in ("kafka.bootstrap.servers", topic):
        if not isinstance(options.get(name), str) or not options[name].strip():
            raise SpecError(where, f"the Kafka connector's option {name!r}", options.get(name),
                            f"add options {{'{name}': ...}} (e.g. 'kafka.bootstrap.servers': "
                            "'host:9092', 'subscribe' / 'topic': 'events')")
    for name, value in options.items():
        if name.startswith("kafka."):
            continue
        if name not in _KAFKA_OPTIONS:
            raise SpecError(where, "a Kafka connector option: " + ", ".join(_KAFKA_OPTIONS)
                            + ", or kafka.<a librdkafka setting>", name,
                            "rename it (a client setting such as group.id goes as kafka.group.id)")
        allowed = _KAFKA_OPTIONS[name]
        if allowed is not None and value not in allowed:
            raise SpecError(where, f"the Kafka option {name} one of {list(allowed)}", value,
                            f"set {name} to {' or '.join(allowed)}")


def _check_connector(c: ConnectorSpec, where: str) -> None:
    if not isinstance(c.format, str) or not c.format:
        raise SpecError(where, "a connector format (e.g. 'json', 'parquet')", c.format,
                        "set the connector's 'format'")
    if c.trigger_ms is not None and not _positive(c.trigger_ms):
        raise SpecError(where, f"trigger_ms > 0 and {_FINITE} of ms, or null", c.trigger_ms,
                        "use e.g. 1000, or null for Spark's default")
    if c.checkpoint is not None and not isinstance(c.checkpoint, str):
        raise SpecError(where, "checkpoint as a path string", c.checkpoint, "give a folder path")


def _check_filter(step: FilterStep) -> None:
    _check_expression(step.id, step.predicate, "a predicate expression", "e.g. \"level == 'ERROR'\"")


def _check_expression(step_id: str, text: object, expected: str, fix: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise SpecError(step_id, expected, text, fix)
    parse_expression(text, step_id)


def _check_map(step: MapStep) -> None:
    if (step.fields is None) == (step.function is None):
        raise SpecError(step.id, "exactly one of 'fields' (projection) or 'function' (import path)",
                        {"fields": step.fields, "function": step.function},
                        "give 'fields' ({output name: expression}) or 'function' ('pkg.mod:fn'), "
                        "not both")
    if step.fields is not None:
        if not step.fields:
            raise SpecError(step.id, "at least one output field", "no fields", "name the fields to keep")
        for _name, expr in step.fields:
            parse_expression(expr, step.id)
    else:
        _check_function(step.function, step.id)


def _check_flat_map(step: FlatMapStep) -> None:
    _check_function(step.function, step.id)


def _check_function(path: object, step_id: str) -> None:
    if not isinstance(path, str) or not FUNCTION_RE.match(path):
        raise SpecError(step_id, "a function import path 'package.module:function'", path,
                        "reference a module-level function, e.g. 'myjobs.parse:split_words'")


def _check_process(step: ProcessStep) -> None:
    if not isinstance(step.function, str) or not FUNCTION_RE.match(step.function):
        raise SpecError(step.id, "a KeyedProcess class by import path 'package.module:Name'",
                        step.function, "reference a module-level class, e.g. "
                        "'myjobs.fraud:RunningCount' (a subclass of cameo_actors.KeyedProcess)")
    if step.time_field is not None and (not isinstance(step.time_field, str)
                                        or not step.time_field):
        raise SpecError(step.id, "time_field: the event-time field name, or null", step.time_field,
                        "name the field holding event time in ms, or leave it out (then no "
                        "event is late)")


def _check_key_by(step: KeyByStep) -> None:
    _check_expression(step.id, step.key, "a key expression (e.g. a field name)",
                      "set 'key', e.g. \"user_id\"")


def check_window_shape(step: WindowStep) -> None:
    """Kind and sizes of a window (the builder checks these before the aggregates exist)."""
    if step.kind == "session":
        _require_positive(step, "gap_ms", step.gap_ms, "30000")
    elif step.kind in ("tumbling", "sliding"):
        _check_sizes(step, "use a slide no larger than the window, or a tumbling window")
    else:
        raise SpecError(step.id, "a window kind: tumbling, sliding or session", step.kind,
                        "set 'kind' to tumbling (with size_ms), sliding (with size_ms and slide_ms) "
                        "or session (with gap_ms)")


def _check_window(step: WindowStep) -> None:
    check_window_shape(step)
    if not step.aggregates:
        raise SpecError(step.id, "at least one aggregate", "none",
                        'list them in \'aggregates\', e.g. [{"name": "n", "fn": "count"}]')
    seen: set[str] = set()
    for agg in step.aggregates:
        if agg.fn not in AGGREGATE_FUNCTIONS:
            raise SpecError(step.id, f"an aggregate from {list(AGGREGATE_FUNCTIONS)}", agg.fn,
                            "use count, sum, min, max, avg, max_by or top")
        if agg.fn != "count" and not agg.field:
            raise SpecError(step.id, f"a field for {agg.fn}", None,
                            f'give the aggregate a \'field\': {{"name": "{agg.name}", '
                            f'"fn": "{agg.fn}", "field": "value"}}')
        if agg.fn != "count" and not isinstance(agg.field, str):
            raise SpecError(step.id, f"the field of {agg.fn} as a field name (a string)",
                            agg.field, f'write e.g. "field": "value" in aggregate {agg.name!r}')
        if agg.fn == "top":
            if isinstance(agg.n, bool) or not isinstance(agg.n, int) \
                    or not 1 <= agg.n <= MAX_TOP_N:
                raise SpecError(step.id, f"n for top (aggregate {agg.name!r}): a whole number "
                                f"from 1 to {MAX_TOP_N}", agg.n,
                                f'give the aggregate an \'n\': {{"name": "{agg.name}", "fn": '
                                f'"top", "field": "{agg.field}", "n": 3}}')
        elif agg.n is not None:
            raise SpecError(step.id, f"no n for {agg.fn} (aggregate {agg.name!r}; only top "
                            "takes n)", agg.n, "remove 'n', or use fn 'top'")
        if not isinstance(agg.name, str) or not agg.name or agg.name in seen:
            raise SpecError(step.id, "unique aggregate names", agg.name, "name each aggregate once")
        if agg.name in ("key", "window_start", "window_end", step.time_field):
            raise SpecError(step.id, "aggregate names other than the result's own fields", agg.name,
                            "rename the aggregate")
        seen.add(agg.name)


def _check_join(step: JoinStep) -> None:
    if step.kind not in JOIN_KINDS:
        raise SpecError(step.id, "a join kind: tumbling, sliding or interval", step.kind,
                        "set 'kind' to tumbling or sliding (with size_ms), or interval (with "
                        "lower_ms and upper_ms)")
    taken = ("key", "left", "right") + (() if step.kind == "interval"
                                        else ("window_start", "window_end"))
    if step.left_time_field in taken:
        raise SpecError(step.id, f"a left time field other than the result's own fields "
                        f"{list(taken)}", step.left_time_field,
                        "rename the left stream's event-time field (a map before key_by)")
    if step.kind != "interval":
        for name in ("lower_ms", "upper_ms"):
            if getattr(step, name) is not None:
                raise SpecError(step.id, f"no {name} for a {step.kind} join (only kind interval "
                                "has bounds)", {name: getattr(step, name)},
                                f"remove {name}, or set 'kind' to interval")
        _check_sizes(step, "use a slide no larger than the window")
        return
    for name, value in (("size_ms", step.size_ms), ("slide_ms", step.slide_ms)):
        if value not in (None, 0) or isinstance(value, bool):
            raise SpecError(step.id, f"no {name} for an interval join (it has lower_ms and "
                            "upper_ms, no windows)", {name: value},
                            f"remove {name} (or set it to 0), or use a tumbling or sliding join")
    for name, value in (("lower_ms", step.lower_ms), ("upper_ms", step.upper_ms)):
        if not _finite(value):
            raise SpecError(step.id, f"{name} for an interval join: {_FINITE} of ms (may be "
                            "negative)", value,
                            f"give '{name}': a right event at tr joins a left one at tl when "
                            "tl + lower_ms <= tr <= tl + upper_ms, e.g. lower_ms 0, upper_ms 10000")
    if step.lower_ms > step.upper_ms:  # type: ignore[operator]  # both checked finite above
        raise SpecError(step.id, "lower_ms <= upper_ms for an interval join",
                        {"lower_ms": step.lower_ms, "upper_ms": step.upper_ms},
                        "swap the bounds, or widen the interval")


def _check_sizes(step: WindowStep | JoinStep, slide_fix: str) -> None:
    """A tumbling or sliding window's sizes: positive, and a slide no larger than the size."""
    _require_positive(step, "size_ms", step.size_ms, "1000")
    if step.kind == "sliding":
        _require_positive(step, "slide_ms", step.slide_ms, "500")
        if step.slide_ms > step.size_ms:  # type: ignore[operator]  # both checked positive above
            raise SpecError(step.id, f"slide_ms <= size_ms ({step.size_ms})", step.slide_ms,
                            slide_fix)


_STEP_CHECKS: dict[type, Callable[[Any], None]] = {
    SourceStep: _check_source, SinkStep: _check_sink, FilterStep: _check_filter,
    MapStep: _check_map, FlatMapStep: _check_flat_map, KeyByStep: _check_key_by,
    WindowStep: _check_window, JoinStep: _check_join, ProcessStep: _check_process,
}


def check_step_rules(step: Step) -> None:
    """A step's own rules, those that need no other step (the builder runs them at once)."""
    check = _STEP_CHECKS.get(type(step))
    if check:
        check(step)


def _check_stream_fields(spec: DataflowSpec, step: Step) -> None:
    """Rules that need the upstream graph: event time and keys for windows and joins."""
    if isinstance(step, WindowStep):
        if step.parallelism > 1 and stream_key(spec, step.inputs[0]) is None:
            raise SpecError(step.id, "a keyed input for a window with parallelism > 1",
                            f"an unkeyed stream and parallelism {step.parallelism}",
                            "add a key_by step before the window, or set its 'parallelism' to 1")
        if not step.time_field:
            raise SpecError(step.id, "an event-time field", "none",
                            "set 'time_field' on the window step, or 'event_time' on the source "
                            "step that feeds it")
        _require_time(spec, step, step.inputs[0], step.time_field)
    if isinstance(step, JoinStep):
        for side, upstream, tf in (("left", step.inputs[0], step.left_time_field),
                                   ("right", step.inputs[1], step.right_time_field)):
            if stream_key(spec, upstream) is None:
                raise SpecError(step.id, f"a keyed {side} input", f"unkeyed stream from {upstream!r}",
                                f"add a key_by step on the {side} input, before the join")
            if not tf:
                raise SpecError(step.id, f"an event-time field on the {side} input", "none",
                                f"set '{side}_time_field' on the join step, or 'event_time' on the "
                                "source step of that input")
            _require_time(spec, step, upstream, tf)
    if isinstance(step, ProcessStep):
        if stream_key(spec, step.inputs[0]) is None:
            raise SpecError(step.id, "a keyed input for process (its state and timers are per "
                            "key)", f"unkeyed stream from {step.inputs[0]!r}",
                            "add key_by before process")
        if step.time_field is not None:
            _require_time(spec, step, step.inputs[0], step.time_field)


def _require_time(spec: DataflowSpec, step: Step, upstream: str, time_field: str) -> None:
    upstream_step = spec.step(upstream)
    # A projection that drops the time field is caught here; a Python map is checked at run time.
    if isinstance(upstream_step, MapStep) and upstream_step.fields is not None \
            and time_field not in dict(upstream_step.fields):
        raise SpecError(step.id, f"the field {time_field!r} in its input", f"a projection without it ({upstream!r})",
                        f"keep {time_field!r} in the fields of {upstream!r}")


def _require_positive(step: Step, name: str, value: object, example: str) -> None:
    if not _positive(value):
        raise SpecError(step.id, f"{name} > 0 and {_FINITE} of ms", value,
                        f"give '{name}' a positive number of ms, e.g. {example}")


def check_live_settings(latency_target_ms: object, weight: object, *, where: str = "") -> None:
    """The rules of what may change while a dataflow runs (the spec's target and weight;
    None: unchanged). The spec check and every update run them, so an update cannot
    store what a submit would refuse. `where` prefixes the weight's name ("scheduling.")."""
    target = latency_target_ms
    if target is not None and not (_finite(target) and 0 < target < MAX_LATENCY_TARGET_MS):
        raise SpecError(None, f"latency_target_ms > 0 and under a day ({MAX_LATENCY_TARGET_MS}), "
                        "a finite number of ms", target,
                        "set latency_target_ms, e.g. 50 for alerts, 1000 for bulk aggregates")
    if weight is not None and not _positive(weight):
        raise SpecError(None, f"{where}weight > 0 and {_FINITE}", weight,
                        "use a positive weight, e.g. 1.0")


def check_fault_tolerance(ft: FaultToleranceSpec) -> None:
    """The rules of a spec's `fault_tolerance` section (None: the pool's default). The spec
    check and the builder's `.fault_tolerance(...)` run them."""
    interval = ft.checkpoint_interval_ms
    if interval is not None and not (
            _finite(interval)
            and (interval == 0 or MIN_CHECKPOINT_INTERVAL_MS <= interval <= MAX_CHECKPOINT_INTERVAL_MS)):
        raise SpecError(None, "fault_tolerance.checkpoint_interval_ms: 0 (no checkpoints) or a "
                        f"finite number of ms from {MIN_CHECKPOINT_INTERVAL_MS} to "
                        f"{MAX_CHECKPOINT_INTERVAL_MS}, or null", interval,
                        "give the interval in ms (e.g. 2000 for a checkpoint every 2 s), 0 to "
                        "turn checkpoints off, or leave it out for the pool's default")
    delivery = ft.delivery
    if delivery is not None and not (isinstance(delivery, str) and delivery in DELIVERY_MODES):
        raise SpecError(None, f"fault_tolerance.delivery: one of {list(DELIVERY_MODES)}, or null",
                        delivery, "use 'exactly_once' (results readable after the next "
                        "checkpoint) or 'at_least_once' (readable at once, may repeat after a "
                        "recovery), or leave it out for the pool's default")
    if ft.incremental is not None and not isinstance(ft.incremental, bool):
        raise SpecError(None, "fault_tolerance.incremental: true, false or null", ft.incremental,
                        "use true (parts of windows hold only what changed since the checkpoint "
                        "before), false (every part whole), or leave it out for the pool's "
                        "default")


#: How the messages word the bound every number of a spec meets (see MAX_NUMBER).
_FINITE = f"at most {MAX_NUMBER}: a finite number"


def _finite(v: object) -> TypeGuard[int | float]:
    """A number a spec may hold: not a bool, not NaN or infinite, at most MAX_NUMBER in size
    (a JSON integer of 400 digits is a valid Python int, but no client reads it back)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return -MAX_NUMBER <= v <= MAX_NUMBER  # False for NaN; ints are compared exactly


def _positive(v: object) -> bool:
    return _finite(v) and v > 0


def _non_negative(v: object) -> bool:
    return _finite(v) and v >= 0


def check_pool_limits(spec: DataflowSpec, *, max_windows_per_event: int,
                      max_state_bytes: int, max_state_disk_bytes: int | None = None) -> None:
    """The rules a pool adds to a valid spec, so that no spec can take the shared pool down:
    how many windows one event may open (a sliding window's size / slide) and how much
    state the spec may ask for. Raises SpecError with the numbers and the fix."""
    for step in spec.steps:
        if not isinstance(step, (WindowStep, JoinStep)) or step.kind != "sliding":
            continue
        size, slide = step.size_ms or 0, step.slide_ms or 0
        windows = math.ceil(size / slide) if slide > 0 else math.inf
        if windows > max_windows_per_event:
            raise SpecError(step.id, f"at most {max_windows_per_event} windows per event "
                            "(size_ms / slide_ms) on this pool",
                            f"size_ms {size} / slide_ms {slide} = {windows} windows per event",
                            f"use a slide_ms of at least {math.ceil(size / max_windows_per_event)} "
                            "(or a smaller size_ms), or ask the operator to raise the pool's "
                            "max_windows_per_event")
    for name, most in (("state_bytes", max_state_bytes),
                       ("state_disk_bytes", max_state_disk_bytes)):
        budget = getattr(spec.limits, name)
        if budget is not None and most is not None and budget > most:
            raise SpecError(None, f"limits.{name} at most {most} on this pool", budget,
                            "ask for less state, or ask the operator to raise the pool's "
                            f"max_{name}")
