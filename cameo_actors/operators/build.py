"""Turns a spec step into the operator that runs it."""

from __future__ import annotations

from cameo_actors.dataflow import spec as steps
from cameo_actors.dataflow.expressions import compile_scalar
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec, Step
from cameo_actors.dataflow.streams import stream_key
from cameo_actors.operators.base import Operator
from cameo_actors.operators.interval_join import IntervalJoinOperator
from cameo_actors.operators.join import WindowJoinOperator
from cameo_actors.operators.process import ProcessOperator, make_process
from cameo_actors.operators.stateless import (
    DEFAULT_MAX_STRING_CHARS,
    FunctionOperator,
    KeyByOperator,
    PassOperator,
    SourceOperator,
    filter_operator,
    project_operator,
)
from cameo_actors.operators.windows import WindowOperator


def build_operator(spec: DataflowSpec, step: Step, resolver: FunctionResolver | None = None, *,
                   max_string_chars: int = DEFAULT_MAX_STRING_CHARS) -> Operator:
    """A fresh operator for `step` of a validated `spec`; a source refuses text longer
    than `max_string_chars` (the pool's setting)."""
    resolver = resolver or FunctionResolver(None)
    if isinstance(step, steps.SourceStep):
        return SourceOperator(step.id, step.schema, step.event_time, step.allowed_lateness_ms,
                              max_string_chars=max_string_chars,
                              watermarks_given=step.connector is not None
                              and step.connector.format == "kafka")
    if isinstance(step, steps.FilterStep):
        return filter_operator(step.id, step.predicate)
    if isinstance(step, steps.MapStep):
        if step.fields is not None:
            return project_operator(step.id, step.fields)
        return FunctionOperator(step.id, resolver.resolve(step.function or "", step.id), flat=False)
    if isinstance(step, steps.FlatMapStep):
        return FunctionOperator(step.id, resolver.resolve(step.function, step.id), flat=True)
    if isinstance(step, steps.KeyByStep):
        return KeyByOperator(step.id, step.key)
    if isinstance(step, steps.WindowStep):
        return WindowOperator(step.id, kind=step.kind, size_ms=step.size_ms, slide_ms=step.slide_ms,
                              gap_ms=step.gap_ms, aggregates=list(step.aggregates),
                              time_field=step.time_field, key_fn=key_function(spec, step.inputs[0]))
    if isinstance(step, steps.JoinStep):
        left, right = (key_function(spec, i) for i in step.inputs)
        if step.kind == "interval":
            return IntervalJoinOperator(step.id, lower_ms=step.lower_ms,  # type: ignore[arg-type]
                                        upper_ms=step.upper_ms,  # type: ignore[arg-type]
                                        left_key_fn=left, right_key_fn=right,
                                        left_time_field=step.left_time_field,
                                        right_time_field=step.right_time_field)
        return WindowJoinOperator(step.id, kind=step.kind, size_ms=step.size_ms,
                                  slide_ms=step.slide_ms, left_key_fn=left, right_key_fn=right,
                                  left_time_field=step.left_time_field,
                                  right_time_field=step.right_time_field)
    if isinstance(step, steps.ProcessStep):
        process = make_process(resolver.resolve(step.function, step.id), step.id, step.function)
        return ProcessOperator(step.id, process, key_fn=key_function(spec, step.inputs[0]),
                               time_field=step.time_field, name=step.function)
    if isinstance(step, (steps.UnionStep, steps.SinkStep)):
        return PassOperator(step.id, n_inputs=len(step.inputs))
    raise TypeError(f"no operator for step type {type(step).__name__}")


def key_function(spec: DataflowSpec, step_id: str):  # type: ignore[no-untyped-def]
    """The key function of the stream `step_id` outputs, or None if unkeyed.
    The runtime routes keyed operators' input by the same function."""
    key = stream_key(spec, step_id)
    return compile_scalar(key, step_id) if key is not None else None
