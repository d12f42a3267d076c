"""What the stream a step outputs carries, read from a spec: its key, its event-time
field, and whether a source's event time reaches the steps that judge lateness as the
source took it in. The spec's checks (`validate`), the builder, the placement and the
Kafka reader ask these.
"""

from __future__ import annotations

from cameo_actors.dataflow.spec import (
    DataflowSpec,
    FilterStep,
    JoinStep,
    KeyByStep,
    MapStep,
    ProcessStep,
    SinkStep,
    SourceStep,
    UnionStep,
    WindowStep,
)


def stream_key(spec: DataflowSpec, step_id: str) -> str | None:
    """The key expression of the stream a step outputs, or None if unkeyed.

    key_by sets it; filter and sink keep it; a union keeps it when all inputs
    share it; map, flat_map, window, join and process outputs are unkeyed (a
    window's results carry the key in their "key" field, so key_by("key") re-keys
    them).
    """
    step = spec.step(step_id)
    if isinstance(step, KeyByStep):
        return step.key
    if isinstance(step, (FilterStep, SinkStep)):
        return stream_key(spec, step.inputs[0])
    if isinstance(step, UnionStep):
        keys = {stream_key(spec, i) for i in step.inputs}
        return keys.pop() if len(keys) == 1 else None
    return None


def stream_time_field(spec: DataflowSpec, step_id: str) -> str | None:
    """The event-time field of the stream a step outputs (None if unknown)."""
    step = spec.step(step_id)
    if isinstance(step, SourceStep):
        return step.event_time
    if isinstance(step, WindowStep):
        return step.time_field
    if isinstance(step, JoinStep):
        return step.left_time_field
    if isinstance(step, ProcessStep):
        return step.time_field
    if isinstance(step, MapStep) and step.fields is not None:
        upstream = stream_time_field(spec, step.inputs[0])
        return upstream if upstream in dict(step.fields) else None
    if isinstance(step, UnionStep):
        fields = {stream_time_field(spec, i) for i in step.inputs}
        return fields.pop() if len(fields) == 1 else None
    return stream_time_field(spec, step.inputs[0]) if step.inputs else None


def time_reaches_as_is(spec: DataflowSpec, source_id: str) -> bool:
    """Whether every step downstream of source `source_id` that judges lateness (a window,
    a join, a process with a time field) reads the source's event time as the source took
    it in: through filters, key_by, unions, and maps that keep or rename the field
    without changing it. Then an event the source's own watermark does not make late is
    late nowhere, so its events may be cut into messages as the source likes (the Kafka
    reader joins blocks of records between two watermarks when none of them is behind).

    >>> from cameo_actors import Dataflow, count
    >>> def flow(fields, time_field="t"):
    ...     return (Dataflow("d", latency_target_ms=100)
    ...             .source("s", schema={"t": "int", "k": "str"}, event_time="t")
    ...             .map(fields).key_by("k").window(tumbling_ms=10, time_field=time_field)
    ...             .aggregate(n=count()).sink("o")).spec
    >>> time_reaches_as_is(flow({"when": "t", "k": "k"}, time_field="when"), "s")
    True
    >>> time_reaches_as_is(flow({"t": "t - 5000", "k": "k"}), "s")
    False
    """
    source = spec.step(source_id)
    if not isinstance(source, SourceStep):
        return False
    todo: list[tuple[str, str | None]] = [(source_id, source.event_time)]
    while todo:
        step_id, time = todo.pop()  # time: the source's event time's name here, if kept
        for step, port in spec.consumers(step_id):
            if isinstance(step, (FilterStep, KeyByStep, UnionStep)):
                todo.append((step.id, time))
            elif isinstance(step, MapStep) and step.fields is not None:
                kept = [name for name, expression in step.fields
                        if time is not None and expression.strip() == time]
                todo.append((step.id, kept[0] if kept else None))
            elif isinstance(step, WindowStep):
                if time is None or step.time_field != time:
                    return False
            elif isinstance(step, JoinStep):
                if time is None or (step.left_time_field, step.right_time_field)[port] != time:
                    return False
            elif isinstance(step, ProcessStep):
                if time is None or step.time_field != time:
                    return False
            elif not isinstance(step, SinkStep):  # a Python map or flat_map
                return False
    return True
