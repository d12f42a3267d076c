"""Operators that keep no state but their watermark: source, filter, map,
flat_map, key_by, union, sink."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cameo_actors.dataflow.expressions import compile_filter, compile_projection, compile_scalar
from cameo_actors.dataflow.spec import SCHEMA_TYPES
from cameo_actors.operators.base import Event, Operator, Output

BatchFn = Callable[[list[Event]], tuple[list[Event], list[tuple[Event, str]]]]


class SourceOperator(Operator):
    """Checks events against the schema and makes the source's watermark:
    the largest event time seen minus the allowed lateness."""

    def __init__(self, step_id: str, schema: Sequence[tuple[str, str]], event_time: str | None,
                 allowed_lateness_ms: float = 0) -> None:
        super().__init__(step_id)
        # bool is an int subclass; an exact type check keeps True out of int fields.
        self._checks = [(name, SCHEMA_TYPES[typ]) for name, typ in schema if typ != "any"]
        self._names = [name for name, _ in schema]
        self.event_time = event_time
        self.allowed_lateness_ms = allowed_lateness_ms
        self.max_event_time = float("-inf")

    def process(self, events: list[Event], port: int, out: Output) -> None:
        checks = self._checks
        good = out.events
        for e in events:
            try:
                if all(type(e[name]) in types for name, types in checks):
                    good.append(e)
                    continue
            except (KeyError, TypeError):
                pass
            self.error(out, "malformed", self._explain(e), e)
        if self.event_time is not None and len(good):
            tf = self.event_time
            batch_max = max(e[tf] for e in good)
            if batch_max > self.max_event_time:
                self.max_event_time = batch_max
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

    def _explain(self, e: Any) -> str:
        if not isinstance(e, dict):
            return f"expected an event object with fields {self._names}, got {type(e).__name__}"
        for name, types in self._checks:
            if name not in e:
                return f"field {name!r} is missing (expected fields {self._names})"
            if type(e[name]) not in types:
                want = "/".join(t.__name__ for t in types)
                return f"field {name!r}: expected {want}, got {type(e[name]).__name__} {e[name]!r}"
        return "event does not match the schema"

    def snapshot(self) -> dict[str, Any]:
        return {**super().snapshot(), "max_event_time": self.max_event_time}

    def restore(self, state: dict[str, Any]) -> None:
        super().restore(state)
        self.max_event_time = state["max_event_time"]


class BatchFnOperator(Operator):
    """Runs a compiled batch function (a filter or a projection of safe expressions)."""

    def __init__(self, step_id: str, fn: BatchFn) -> None:
        super().__init__(step_id)
        self._fn = fn

    def process(self, events: list[Event], port: int, out: Output) -> None:
        good, bad = self._fn(events)
        out.events = good
        for event, message in bad:
            self.error(out, "malformed", message, event)


def filter_operator(step_id: str, predicate: str) -> BatchFnOperator:
    return BatchFnOperator(step_id, compile_filter(predicate, step_id))


def project_operator(step_id: str, fields: Sequence[tuple[str, str]]) -> BatchFnOperator:
    return BatchFnOperator(step_id, compile_projection(dict(fields), step_id))


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
