"""The dataflow spec: frozen dataclasses that travel over RPC as JSON or msgpack.

A spec is what the builder compiles to and what the runtime deploys. Every
field is plain data (strings, numbers, tuples), so `from_dict(to_dict(s)) == s`
holds exactly, through JSON and through msgpack. `from_dict` trusts nothing:
it checks every field's presence and type and then validates the whole graph,
so a spec that arrives over the network is held to the same rules as one built
in Python. The graph rules live in `validate.py`, which imports this module;
this module never imports them back: `cameo_actors.dataflow` (which Python
loads before any of its modules) installs them with `set_validator`.

The JSON schema is documented in docs/spec.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import msgpack

from cameo_actors.errors import SpecError

SPEC_VERSION = 1

#: Field types a source schema may declare, and the Python types that satisfy them.
SCHEMA_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "float": (float, int),
    "str": (str,),
    "bool": (bool,),
    "any": (object,),
}
#: A schema type ending in this is nullable ("int?"): a missing or null value is None.
NULLABLE = "?"
AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max", "avg", "max_by", "top")
WINDOW_KINDS = ("tumbling", "sliding", "session")
JOIN_KINDS = ("tumbling", "sliding", "interval")
#: How results reach readers across failures (see FaultToleranceSpec.delivery).
DELIVERY_MODES = ("exactly_once", "at_least_once")

Pairs = tuple[tuple[str, str], ...]


def schema_type(typ: str) -> tuple[str, bool]:
    """A schema type's base type and whether it is nullable.

    >>> schema_type("int?"), schema_type("str")
    (('int', True), ('str', False))
    """
    nullable = typ.endswith(NULLABLE)
    return (typ[:-1] if nullable else typ), nullable


def is_schema_type(typ: object) -> bool:
    """True for a type a source schema may declare: a `SCHEMA_TYPES` name, or one with "?"."""
    return isinstance(typ, str) and schema_type(typ)[0] in SCHEMA_TYPES


@dataclass(frozen=True)
class ConnectorSpec:
    """Where a source reads or a sink writes outside the runtime (the Spark tier).

    Attributes:
        format: a Spark format ("json", "parquet", "rate", "socket", ...).
        options: Spark options, in order (path, etc.).
        trigger_ms: the Spark trigger interval, None for Spark's default.
        checkpoint: Spark's checkpoint location (sinks), None to let the runtime choose.
    """

    format: str
    options: Pairs = ()
    trigger_ms: int | None = None
    checkpoint: str | None = None


@dataclass(frozen=True)
class AggSpec:
    """One aggregate of a window: `name` = fn(field); count takes no field.

    max_by(field) is the list of the window's events with the greatest value of
    `field`; top(field, n) the up to `n` events with the largest values (n only
    for top, 1 to 1000). The JSON form leaves `n` out when it is null.
    """

    name: str
    fn: str
    field: str | None = None
    n: int | None = None


@dataclass(frozen=True)
class Step:
    """A node of the dataflow graph. `inputs` name upstream steps (the edges)."""

    OP: ClassVar[str] = ""
    id: str
    inputs: tuple[str, ...] = ()
    parallelism: int = 1


@dataclass(frozen=True)
class SourceStep(Step):
    """Where events enter the dataflow. Events are checked against `schema`;
    the watermark is the largest event time seen minus `allowed_lateness_ms`. An
    instance that takes in nothing for `idle_timeout_ms` (None: never) is idle: the
    steps after it leave it out of their watermark until it sends again."""

    OP: ClassVar[str] = "source"
    schema: Pairs = ()
    event_time: str | None = None
    allowed_lateness_ms: int = 0
    connector: ConnectorSpec | None = None
    idle_timeout_ms: float | None = None


@dataclass(frozen=True)
class FilterStep(Step):
    OP: ClassVar[str] = "filter"
    predicate: str = ""


@dataclass(frozen=True)
class MapStep(Step):
    """Either a projection (`fields`: output name -> expression) or a Python
    function by import path (`function`: "pkg.mod:fn", event -> event)."""

    OP: ClassVar[str] = "map"
    fields: Pairs | None = None
    function: str | None = None


@dataclass(frozen=True)
class FlatMapStep(Step):
    """A Python function by import path: event -> iterable of events."""

    OP: ClassVar[str] = "flat_map"
    function: str = ""


@dataclass(frozen=True)
class KeyByStep(Step):
    """Keys the stream by an expression; windows and joins downstream group by it."""

    OP: ClassVar[str] = "key_by"
    key: str = ""


@dataclass(frozen=True)
class WindowStep(Step):
    """An event-time window with aggregates. Sizes in ms of event time."""

    OP: ClassVar[str] = "window"
    kind: str = "tumbling"
    size_ms: int | None = None
    slide_ms: int | None = None
    gap_ms: int | None = None
    aggregates: tuple[AggSpec, ...] = ()
    time_field: str = ""


@dataclass(frozen=True)
class JoinStep(Step):
    """Inner join of two keyed streams (inputs: left, right) per event-time window
    (kind tumbling or sliding: `size_ms`, `slide_ms`), or per interval (kind
    interval: a left event at tl and a right one at tr join when
    ``tl + lower_ms <= tr <= tl + upper_ms``)."""

    OP: ClassVar[str] = "join"
    kind: str = "tumbling"
    size_ms: int = 0
    slide_ms: int | None = None
    left_time_field: str = ""
    right_time_field: str = ""
    lower_ms: int | None = None
    upper_ms: int | None = None


@dataclass(frozen=True)
class ProcessStep(Step):
    """A keyed stateful Python function by import path ("pkg.mod:Name", a
    `KeyedProcess` class): per key, a state dict and event-time timers. With
    `time_field`, events behind the watermark are late."""

    OP: ClassVar[str] = "process"
    function: str = ""
    time_field: str | None = None


@dataclass(frozen=True)
class UnionStep(Step):
    OP: ClassVar[str] = "union"


@dataclass(frozen=True)
class SinkStep(Step):
    """Where results leave the dataflow; latency is measured here."""

    OP: ClassVar[str] = "sink"
    connector: ConnectorSpec | None = None


STEP_TYPES: dict[str, type[Step]] = {
    cls.OP: cls
    for cls in (SourceStep, FilterStep, MapStep, FlatMapStep, KeyByStep, WindowStep,
                JoinStep, ProcessStep, UnionStep, SinkStep)
}


@dataclass(frozen=True)
class SchedulingSpec:
    """How the scheduler treats this dataflow against others on the shared pool.

    Attributes:
        weight: the tenant's share of the pool under overload (its guaranteed floor,
            relative to other tenants; a tenant's weight is its dataflows' largest), and
            under the fair_share policy.
        rate_limit_eps: events/s the tenant may ingest before its work is demoted
            (token_bucket policy); None for no limit.
        expected_rate_eps: events/s the dataflow is expected to receive: admission
            control predicts with it whether every target can still be met; None: the
            rate limit if there is one, else unknown.
    """

    weight: float = 1.0
    rate_limit_eps: float | None = None
    expected_rate_eps: float | None = None


@dataclass(frozen=True)
class LimitsSpec:
    """What this dataflow may consume of the shared pool.

    Attributes:
        state_bytes: operator state and unread results it may keep (estimated, over all
            its executors); None takes the pool's default. Over it, the dataflow fails
            (state `failed`, its state freed) and no other dataflow notices. The pool
            refuses a spec asking more than its maximum.
        state_disk_bytes: operator state it may keep on disk (a pool whose state backend
            is a store: its table files, over all its executors); None takes the pool's
            default. Over it, the dataflow fails as over `state_bytes`.
    """

    state_bytes: int | None = None
    state_disk_bytes: int | None = None


@dataclass(frozen=True)
class FaultToleranceSpec:
    """How this dataflow survives failures (an executor that dies).

    Attributes:
        checkpoint_interval_ms: how often its state is checkpointed; None takes the pool's
            default (RuntimeConfig.checkpoint_interval_s); 0 turns checkpoints off (then a
            failure fails the dataflow instead of recovering it).
        delivery: "exactly_once": results become readable once the checkpoint after them
            completed (a reader that commits sees each exactly once across failures);
            "at_least_once": readable at once, and after a recovery results since the last
            checkpoint may come again (each row carries an id to drop them by). None takes
            the pool's default.
        incremental: whether a window's part of a checkpoint may hold only the state
            changed since the one before (RuntimeConfig.incremental_checkpoints); None
            takes the pool's default.
    """

    checkpoint_interval_ms: float | None = None
    delivery: str | None = None
    incremental: bool | None = None


@dataclass(frozen=True)
class DataflowSpec:
    """A whole dataflow: what a tenant submits. Build it with `Dataflow`."""

    name: str
    latency_target_ms: float
    steps: tuple[Step, ...]
    tenant: str = "default"
    scheduling: SchedulingSpec = field(default_factory=SchedulingSpec)
    limits: LimitsSpec = field(default_factory=LimitsSpec)
    fault_tolerance: FaultToleranceSpec = field(default_factory=FaultToleranceSpec)
    #: Where records that failed (malformed, late, user errors) are written by the Spark tier.
    errors: ConnectorSpec | None = None
    version: int = SPEC_VERSION

    # -- lookups -----------------------------------------------------------------
    def step(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    @property
    def sources(self) -> tuple[SourceStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, SourceStep))

    @property
    def sinks(self) -> tuple[SinkStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, SinkStep))

    def consumers(self, step_id: str) -> list[tuple[Step, int]]:
        """Steps reading `step_id`, each with the input port it arrives on."""
        return [(s, port) for s in self.steps for port, i in enumerate(s.inputs) if i == step_id]

    # -- wire forms --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "name": self.name,
            "tenant": self.tenant,
            "latency_target_ms": self.latency_target_ms,
            "scheduling": _plain(self.scheduling),
            # Without a disk budget, as before there was one: a pool's older executors (a
            # rolling upgrade) refuse fields they do not know.
            "limits": {k: v for k, v in _plain(self.limits).items()
                       if v is not None or k != "state_disk_bytes"},
            "fault_tolerance": _plain(self.fault_tolerance),
            "errors": _plain(self.errors) if self.errors else None,
            "steps": [_step_to_dict(s) for s in self.steps],
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def to_msgpack(self) -> bytes:
        blob: bytes = msgpack.packb(self.to_dict(), use_bin_type=True)
        return blob

    @classmethod
    def from_dict(cls, data: Any) -> DataflowSpec:
        """Parse and validate a spec from its dict form (raises SpecError)."""
        spec = _parse_dataflow(data)
        if _validator is None:
            raise RuntimeError("no spec validator installed: import cameo_actors.dataflow, "
                               "which installs cameo_actors.dataflow.validate.validate")
        _validator(spec)
        return spec

    @classmethod
    def from_json(cls, text: str | bytes) -> DataflowSpec:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(None, "a JSON object", f"invalid JSON ({e})", "send the spec as valid JSON") from e
        return cls.from_dict(data)

    @classmethod
    def from_msgpack(cls, blob: bytes) -> DataflowSpec:
        try:
            data = msgpack.unpackb(blob, raw=False)
        except Exception as e:  # msgpack raises several unrelated types
            raise SpecError(None, "a msgpack map", f"undecodable bytes ({e})", "send the spec as msgpack") from e
        return cls.from_dict(data)


#: The whole-graph check `from_dict` runs after parsing (see the module docstring).
_validator: Callable[[DataflowSpec], None] | None = None


def set_validator(check: Callable[[DataflowSpec], None]) -> None:
    """Install the check `DataflowSpec.from_dict` runs on every spec it parses; it
    raises SpecError at the first rule the spec breaks."""
    global _validator
    _validator = check


# -- to plain data --------------------------------------------------------------

def _plain(obj: Any) -> dict[str, Any]:
    """A spec dataclass -> a dict of plain data (the JSON / msgpack form)."""
    return {f.name: _plain_field(f.name, getattr(obj, f.name)) for f in fields(obj)}


def _plain_field(name: str, value: Any) -> Any:
    if name in _PAIR_FIELDS:
        return dict(value) if value is not None else None
    if isinstance(value, AggSpec):
        plain = _plain(value)
        if plain["n"] is None:  # only top has n: the other aggregates' JSON stays as it was
            del plain["n"]
        return plain
    if isinstance(value, ConnectorSpec):
        return _plain(value)
    if isinstance(value, tuple):
        return [_plain_field(name, v) for v in value]
    return value


def _step_to_dict(step: Step) -> dict[str, Any]:
    plain = _plain(step)
    for name in _LEFT_OUT_WHEN_NONE:  # added later: an older version reads the spec unset
        if plain.get(name, 0) is None:
            del plain[name]
    return {"op": step.OP, **plain}


#: Step fields added after specs were first stored and served: left out of the wire form
#: while unset, so that a spec without them still reads in an older version (a rolling
#: upgrade's old service or controller refuses a field it does not know).
_LEFT_OUT_WHEN_NONE = ("idle_timeout_ms",)


# -- from plain data, checking every field --------------------------------------

_PAIR_FIELDS = {"schema", "options", "fields"}
_MISSING = object()


def _parse_dataflow(data: Any) -> DataflowSpec:
    if not isinstance(data, dict):
        raise SpecError(None, "a spec object (JSON object / msgpack map)", type(data).__name__,
                        "send the dict that DataflowSpec.to_dict() produces")
    name = data.get("name")
    where = name if isinstance(name, str) else None
    known = {"version", "name", "tenant", "latency_target_ms", "scheduling", "limits",
             "fault_tolerance", "errors", "steps"}
    _no_unknown(data, known, None, f"dataflow {where!r}")
    version = data.get("version", SPEC_VERSION)
    if version != SPEC_VERSION:
        raise SpecError(None, f"spec version {SPEC_VERSION}", version,
                        "rebuild the spec with this version of cameo")
    steps_raw = _require(data, "steps", list, None, "a list of steps")
    steps = tuple(_parse_step(raw, i) for i, raw in enumerate(steps_raw))
    sched_raw = data.get("scheduling") or {}
    scheduling = _parse_fixed(SchedulingSpec, sched_raw, None, "scheduling")
    limits = _parse_fixed(LimitsSpec, data.get("limits") or {}, None, "limits")
    fault_tolerance = _parse_fixed(FaultToleranceSpec, data.get("fault_tolerance") or {}, None,
                                   "fault_tolerance")
    errors_raw = data.get("errors")
    errors = _parse_fixed(ConnectorSpec, errors_raw, None, "errors") if errors_raw else None
    return DataflowSpec(
        name=_require(data, "name", str, None, "a dataflow name"),
        tenant=data.get("tenant", "default"),
        latency_target_ms=_require(data, "latency_target_ms", (int, float), None,
                                   "a latency target in ms"),
        scheduling=scheduling,
        limits=limits,
        fault_tolerance=fault_tolerance,
        errors=errors,
        steps=steps,
        version=version,
    )


def _parse_step(raw: Any, index: int) -> Step:
    if not isinstance(raw, dict):
        raise SpecError(f"#{index}", "a step object", type(raw).__name__, "each step is an object with 'op' and 'id'")
    step_id = raw.get("id")
    where = step_id if isinstance(step_id, str) else f"#{index}"
    op = raw.get("op")
    cls = STEP_TYPES.get(op) if isinstance(op, str) else None
    if cls is None:
        raise SpecError(where, f"'op' one of {sorted(STEP_TYPES)}", op, "use a known operator")
    kwargs: dict[str, Any] = {}
    names = {f.name for f in fields(cls)}
    _no_unknown(raw, names | {"op"}, where, f"a {op} step")
    for f in fields(cls):
        value = raw.get(f.name, _MISSING)
        if value is _MISSING:
            continue  # the dataclass default applies; validate() checks required ones
        kwargs[f.name] = _convert_field(f.name, value, where)
    if "id" not in kwargs:
        raise SpecError(where, "an 'id' for the step", None, "give every step a unique id")
    try:
        return cls(**kwargs)
    except TypeError as e:  # pragma: no cover - every field is covered above
        raise SpecError(where, f"the fields of a {op} step", sorted(kwargs), str(e)) from e


def _convert_field(name: str, value: Any, where: str) -> Any:
    if name in _PAIR_FIELDS:
        if value is None:
            return None
        if not isinstance(value, dict):
            raise SpecError(where, f"'{name}' as an object of name -> string", type(value).__name__,
                            f'write {name} as {{"name": "..."}}')
        for k, v in value.items():
            if not isinstance(v, str):
                raise SpecError(where, f"'{name}.{k}' to be a string", v, "quote the value")
        return tuple((str(k), v) for k, v in value.items())
    if name == "inputs":
        if not isinstance(value, list) or not all(isinstance(i, str) for i in value):
            raise SpecError(where, "'inputs' as a list of step ids", value, 'write e.g. "inputs": ["source"]')
        return tuple(value)
    if name == "aggregates":
        if not isinstance(value, list):
            raise SpecError(where, "'aggregates' as a list", type(value).__name__, "list the aggregates")
        return tuple(_parse_fixed(AggSpec, a, where, "aggregate") for a in value)
    if name == "connector":
        return _parse_fixed(ConnectorSpec, value, where, "connector") if value is not None else None
    return value


def _parse_fixed(cls: Any, raw: Any, where: str | None, what: str) -> Any:
    if not isinstance(raw, dict):
        raise SpecError(where, f"'{what}' as an object", type(raw).__name__, f"write {what} as an object")
    names = {f.name for f in fields(cls)}
    _no_unknown(raw, names, where, what)
    kwargs = {k: (_convert_field(k, v, where or what)) for k, v in raw.items()}
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise SpecError(where, f"the fields of {what}: {sorted(names)}", sorted(raw), str(e)) from e


def _require(data: dict[str, Any], key: str, types: Any, where: str | None, what: str) -> Any:
    value = data.get(key, _MISSING)
    if value is _MISSING:
        raise SpecError(where, f"'{key}' ({what})", "nothing", f"add '{key}'")
    if not isinstance(value, types) or isinstance(value, bool):
        raise SpecError(where, f"'{key}' ({what})", value, f"give '{key}' as {what}")
    return value


def _no_unknown(data: dict[str, Any], known: set[str], where: str | None, what: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecError(where, f"only the fields of {what}: {sorted(known)}", unknown,
                        f"remove or correct {unknown}")
