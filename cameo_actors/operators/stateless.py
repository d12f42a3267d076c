"""Operators that keep no state but their watermark: source, filter, map,
flat_map, key_by, union, sink."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from types import CodeType, FunctionType
from typing import Any

import pyarrow as pa

from cameo_actors.dataflow.expression_batches import compile_filter, compile_projection
from cameo_actors.dataflow.expressions import Expression, compile_scalar, parse_expression
from cameo_actors.dataflow.spec import SCHEMA_TYPES, schema_type
from cameo_actors.operators.base import Event, Operator, Output, short_repr
from cameo_actors.operators.column_expressions import Declined, filter_columns, project_columns
from cameo_actors.operators.column_keys import hashable_column, key_field
from cameo_actors.operators.column_schema import source_columns
from cameo_actors.operators.columns import Columns, max_of

BatchFn = Callable[[list[Event]], tuple[list[Event], list[tuple[Event, str]]]]

#: The integers msgpack carries between processes (64 bits, signed or unsigned).
MIN_INT, MAX_INT = -(2**63), 2**64 - 1
INT_RANGE = "an integer within 64 bits (-2**63 .. 2**64-1)"
#: Longest text a `str` field may hold, in characters (the pool's `max_string_chars`).
DEFAULT_MAX_STRING_CHARS = 1 << 20
#: Characters of an over-long text kept in its error record.
KEPT_CHARS = 100
_INF = float("inf")


class SourceOperator(Operator):
    """Checks events against the schema and makes the source's watermark:
    the largest event time seen minus the allowed lateness.

    Beyond the types: an `int` field must fit in 64 bits, a `float` field must be
    finite, a `str` field at most `max_string_chars` long. A nullable field ("int?")
    may be null or missing: a missing one is set to None in the event, so that
    every later step (and every tier) sees the same None.
    """

    def __init__(self, step_id: str, schema: Sequence[tuple[str, str]], event_time: str | None,
                 allowed_lateness_ms: float = 0, *,
                 max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
                 watermarks_given: bool = False) -> None:
        super().__init__(step_id)
        #: the watermark comes with the input (a connector's, per partition), not from
        #: the largest event time seen: records of several partitions are not in order
        self.watermarks_given = watermarks_given
        # bool is an int subclass; an exact type check keeps True out of int fields.
        bases = [(name, *schema_type(typ)) for name, typ in schema]
        self._checks = [(name, SCHEMA_TYPES[base], nullable) for name, base, nullable in bases
                        if base != "any"]
        self._names = [name for name, _ in schema]
        self._ints = [name for name, base, _ in bases if base == "int"]
        self._floats = [name for name, base, _ in bases if base == "float"]
        self._strs = [name for name, base, _ in bases if base == "str"]
        self.max_string_chars = max_string_chars
        self._keep, self._ok = _compile_schema_check(schema, max_string_chars)
        self._schema = list(schema)
        self.event_time = event_time
        self.allowed_lateness_ms = allowed_lateness_ms
        self.max_event_time = float("-inf")

    def process(self, events: list[Event], port: int, out: Output) -> None:
        try:
            good: list[Event] | None = self._keep(events)
        except (KeyError, TypeError):  # a missing field, or not an event object
            good = None
        if good is None or len(good) < len(events):  # sort the batch out event by event
            good, ok = [], self._ok
            for e in events:
                try:
                    if ok(e):
                        good.append(e)
                        continue
                except (KeyError, TypeError):
                    pass
                self._refuse(out, e)
        out.events = good
        if self.event_time is not None and len(good):
            tf = self.event_time
            self._saw(max(e[tf] for e in good), out)

    def process_columns(self, batch: Columns, port: int, out: Output) -> bool:
        if not source_columns(batch, self._schema, self.max_string_chars):
            return False  # some event fails a check: the rows say which, and why
        out.events = batch
        if self.event_time is not None and len(batch):
            self._saw(max_of(batch, self.event_time), out)
        return True

    def _saw(self, batch_max: Any, out: Output) -> None:
        """The largest event time of a batch: the watermark follows."""
        if batch_max > self.max_event_time:
            self.max_event_time = batch_max
            if self.watermarks_given:
                return
            wm = batch_max - self.allowed_lateness_ms
            if wm > self.watermark:
                self.watermark = wm
                out.watermark = wm

    def on_watermark(self, watermark: float, port: int = 0) -> Output:
        # An explicit watermark (a test script, end of stream) moves it forward too.
        out = Output()
        if watermark > self.watermark:
            self.watermark = out.watermark = watermark
        return out

    def _refuse(self, out: Output, e: Any) -> None:
        message = self._explain(e)
        kept = e
        if isinstance(e, dict):  # over-long text is kept cut, so the error log stays small
            cut = {name: f"{e[name][:KEPT_CHARS]}... ({len(e[name])} characters)"
                   for name in self._strs
                   if type(e.get(name)) is str and len(e[name]) > self.max_string_chars}
            kept = {**e, **cut} if cut else e
        self.error(out, "malformed", message, kept)

    def _explain(self, e: Any) -> str:
        if not isinstance(e, dict):
            return f"expected an event object with fields {self._names}, got {type(e).__name__}"
        for name, types, nullable in self._checks:
            if nullable and e.get(name) is None:
                continue
            if name not in e:
                return f"field {name!r} is missing (expected fields {self._names})"
            if type(e[name]) not in types:
                want = "/".join(t.__name__ for t in types)
                return f"field {name!r}: expected {want}, got {type(e[name]).__name__} {short_repr(e[name])}"
        for name in self._floats:
            v = e.get(name)
            if type(v) is float and not -_INF < v < _INF:
                return (f"field {name!r}: expected a finite float, got {v!r} (JSON cannot carry "
                        "NaN or Infinity either). Fix: send a finite number, or leave the "
                        "event out")
        for name in self._ints + self._floats:
            v = e.get(name)
            if type(v) is int and not MIN_INT <= v <= MAX_INT:
                return (f"field {name!r}: expected {INT_RANGE}, got int {short_repr(v)}. "
                        "Fix: send it as text (a str field), or scale it down")
        for name in self._strs:
            if type(e.get(name)) is str and len(e[name]) > self.max_string_chars:
                return (f"field {name!r}: expected text of at most {self.max_string_chars} "
                        f"characters, got {len(e[name])}. Fix: shorten it, or raise the pool's "
                        "max_string_chars (RuntimeConfig)")
        return "event does not match the schema"

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "max_event_time": self.max_event_time}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.max_event_time = state["max_event_time"]


def _field_test(i: int, name: str, typ: str, max_chars: int) -> str | None:
    """One field's test as Python source; the field name enters as a literal (repr).
    A nullable field's test sets a missing value to None first and accepts None."""
    base, nullable = schema_type(typ)
    v, key = f"v{i}", repr(name)
    if nullable:  # `got` is the first use of the value: the walrus binds v there
        got, first = f"({v} := e.setdefault({key}, None))", v
    else:
        got = first = f"({v} := e[{key}])"
    in_range = f"{MIN_INT} <= {v} <= {MAX_INT}"
    if base == "int":
        test = f"type({first}) is int and {in_range}"
    elif base == "float":  # x - x is 0.0 for finite floats, NaN for NaN and the infinities
        # An int becomes a float here, as the Spark tier's JSON reader makes it: one spec,
        # one answer (`f * 2` is 2.0 in every tier). __setitem__ returns None.
        test = (f"(type({first}) is float and {v} - {v} == 0.0)"
                f" or (type({v}) is int and {in_range} and not e.__setitem__({key}, float({v})))")
    elif base == "str":
        test = f"type({first}) is str and len({v}) <= {max_chars}"
    elif base == "bool":
        test = f"type({first}) is bool"
    elif nullable:  # any?: only the missing value is set
        return f"({got} is None or True)"
    else:
        return None  # any: not checked
    return f"({got} is None or ({test}))" if nullable else f"({test})"


def _compile_schema_check(schema: Sequence[tuple[str, str]], max_chars: int
                          ) -> tuple[Callable[[list[Event]], list[Event]], Callable[[Event], bool]]:
    """The schema check compiled, as filters are (`compile_filter`): a batch function
    that is one list comprehension, with no Python call per event, and a per-event
    test for batches with bad events. The types are those of `SCHEMA_TYPES`.

    Measured (CPython 3.11, 500 log events of 4 fields): about 250 ns per event, where
    a loop over the fields took 270 ns without the range and length checks."""
    tests = [t for i, (name, typ) in enumerate(schema)
             if (t := _field_test(i, name, typ, max_chars)) is not None]
    cond = " and ".join(tests) or "True"
    scope = {"__builtins__": {}, "type": type, "len": len, "int": int, "float": float,
             "str": str, "bool": bool}
    keep = _compile_lambda(f"lambda batch: [e for e in batch if {cond}]", scope)
    ok = _compile_lambda(f"lambda e: bool({cond})", scope)
    return keep, ok


def _compile_lambda(source: str, scope: dict[str, Any]) -> Any:
    # The source is made of the fixed templates above and repr'd field names only;
    # its code object is wrapped directly, so neither eval nor exec runs.
    module = compile(source, "<schema check>", "eval", dont_inherit=True)
    code = next(c for c in module.co_consts if isinstance(c, CodeType))
    return FunctionType(code, scope)


class BatchFnOperator(Operator):
    """Runs a compiled batch function (a filter or a projection of safe expressions), and
    on columns its Arrow kernel (`columns.py`) where there is one."""

    def __init__(self, step_id: str, fn: BatchFn,
                 columns: Callable[[Columns], Columns] | None = None) -> None:
        super().__init__(step_id)
        self._fn = fn
        self._columns = columns

    def process_columns(self, batch: Columns, port: int, out: Output) -> bool:
        if self._columns is None:
            return False
        try:
            out.events = self._columns(batch)
        except Declined:
            return False
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return False  # an overflow, a division by zero, ...: the rows say where
        return True

    def process(self, events: list[Event], port: int, out: Output) -> None:
        good, bad = self._fn(events)
        out.events = good
        for event, message in bad:
            self.error(out, "malformed", message, event)


def filter_operator(step_id: str, predicate: str) -> BatchFnOperator:
    expression = parse_expression(predicate, step_id)
    return BatchFnOperator(step_id, compile_filter(predicate, step_id),
                           partial(filter_columns, expression))


def project_operator(step_id: str, fields: Sequence[tuple[str, str]]) -> BatchFnOperator:
    expressions: dict[str, Expression] = {name: parse_expression(text, step_id)
                                          for name, text in fields}
    return BatchFnOperator(step_id, compile_projection(dict(fields), step_id),
                           partial(project_columns, expressions))


class FunctionOperator(Operator):
    """A user's Python function: map (event -> event) or flat_map (event -> events).
    A raising function sends that event to the error output, chained message included."""

    def __init__(self, step_id: str, fn: Callable[[Event], Any], *, flat: bool) -> None:
        super().__init__(step_id)
        self._fn = fn
        self._flat = flat
        self._name = getattr(fn, "__qualname__", repr(fn))

    def process(self, events: list[Event], port: int, out: Output) -> None:
        fn, good = self._fn, out.events
        for e in events:
            try:
                result = fn(e)
                produced = list(result) if self._flat else [result]
            except Exception as exc:  # user code: report, never crash the dataflow
                self.error(out, "user_function", f"{self._name} raised {type(exc).__name__}: {exc}", e)
                continue
            for r in produced:
                if isinstance(r, dict):
                    good.append(r)
                else:
                    self.error(out, "user_function",
                               f"{self._name} returned {type(r).__name__}, expected an event dict", e)


class KeyByOperator(Operator):
    """Checks that every event has a key; the runtime routes by the same key function."""

    def __init__(self, step_id: str, key: str) -> None:
        super().__init__(step_id)
        self.key_fn = compile_scalar(key, step_id)
        self._key = key
        self._field = key_field(self.key_fn)

    def process_columns(self, batch: Columns, port: int, out: Output) -> bool:
        if self._field is None or not hashable_column(batch, self._field):
            return False
        out.events = batch  # every value of a field of scalars is a key
        return True

    def process(self, events: list[Event], port: int, out: Output) -> None:
        key_fn, good = self.key_fn, out.events
        for e in events:
            try:
                hash(key_fn(e))  # a key must be hashable to pick a key group
            except Exception as exc:  # a bad event, not a bad dataflow
                self.error(out, "malformed", f"key {self._key!r}: {type(exc).__name__}: {exc}", e)
                continue
            good.append(e)


class PassOperator(Operator):
    """Union (n ports; watermark = min over them) and sink: events pass unchanged."""

    def process(self, events: list[Event], port: int, out: Output) -> None:
        out.events = events

    def process_columns(self, batch: Columns, port: int, out: Output) -> bool:
        out.events = batch
        return True
