"""Cutting a Spark micro-batch into runtime messages. Pure: no Spark, no Ray.

A Spark micro-batch arrives at the writer as Arrow record batches of
thousands of rows. The runtime wants messages of a bounded size (one Ray call
each), and Cameo's scheduler gives every message one event-time window as
its local priority and a deadline from the window's end. So a message should
not straddle windows: rows are grouped (stably) by the *bucket* of their event
time, where the bucket is the finest window granularity downstream of the
source (the gcd of tumbling sizes and sliding slides), and each group is cut
into messages of at most `batch_size` rows. Buckets go out in event-time
order, which never makes a row late that was not late in Spark's own order
(earlier buckets only hold earlier times).

>>> import numpy as np
>>> plan = plan_messages(np.array([1500.0, 20.0, 1700.0, 999.0, np.nan]), 2, bucket_ms=1000)
>>> plan.order.tolist(), plan.spans
([4, 1, 3, 0, 2], [(0, 1), (1, 3), (3, 5)])
>>> plan_messages(None, 3, bucket_ms=None, n=7).spans
[(0, 3), (3, 6), (6, 7)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np
import pyarrow as pa

from cameo_actors.dataflow.spec import DataflowSpec, JoinStep, SourceStep, WindowStep
from spark_ingest.arrow import CORRUPT, event_times, to_columns, to_events


@dataclass(frozen=True)
class MessagePlan:
    """Which rows form which message.

    Attributes:
        order: a permutation of the rows (None: keep Spark's order).
        spans: [start, end) ranges over the (re)ordered rows, one per message.
    """

    order: np.ndarray | None
    spans: list[tuple[int, int]]


def plan_messages(times: np.ndarray | None, batch_size: int, *, bucket_ms: int | None,
                  n: int | None = None) -> MessagePlan:
    """Group rows by event-time bucket (if any) and cut the groups into messages.

    Args:
        times: event times in ms (NaN for a missing time), or None when the source has none.
        batch_size: most rows per message (>= 1).
        bucket_ms: the window granularity; None to keep Spark's order and cut only by size.
        n: the row count when `times` is None.
    """
    if batch_size < 1:
        raise ValueError(f"plan_messages: expected batch_size >= 1, got {batch_size}")
    rows = len(times) if times is not None else (n or 0)
    if times is None or bucket_ms is None or rows == 0:
        return MessagePlan(None, _cut(0, rows, batch_size))
    # Rows without a time (bad rows, reported by the runtime) form their own first group.
    times = np.asarray(times, dtype=np.float64)
    finite = np.isfinite(times)
    buckets = np.full(rows, -np.inf)
    buckets[finite] = np.floor(times[finite] / bucket_ms)
    if rows > 1 and bool(np.all(buckets[1:] >= buckets[:-1])):
        order = None  # already in bucket order: the common case of time-ordered files
        ordered = buckets
    else:
        order = np.argsort(buckets, kind="stable")
        ordered = buckets[order]
    bounds = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), rows]
    spans: list[tuple[int, int]] = []
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        spans.extend(_cut(start, end, batch_size))
    return MessagePlan(order, spans)


def _cut(start: int, end: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(i + size, end)) for i in range(start, end, size)]


def bucket_ms(spec: DataflowSpec, source: str) -> int | None:
    """The window granularity downstream of `source` (ms), or None when no window or
    join downstream groups by the source's event time (session windows do not align).

    >>> from cameo_actors import Dataflow, count
    >>> df = (Dataflow("d", latency_target_ms=10).source("s", schema={"ts": "int"}, event_time="ts")
    ...       .window(sliding_ms=1000, slide_ms=250).aggregate(n=count()).sink("o"))
    >>> bucket_ms(df.spec, "s")
    250
    """
    step = spec.step(source)
    if not isinstance(step, SourceStep) or step.event_time is None:
        return None
    grains: list[int] = []
    for sid in _downstream(spec, source):
        s = spec.step(sid)
        if isinstance(s, WindowStep) and s.kind != "session" and s.time_field == step.event_time:
            grains.append(int(s.slide_ms if s.kind == "sliding" and s.slide_ms else s.size_ms or 0))
        elif isinstance(s, JoinStep) and step.event_time in (s.left_time_field, s.right_time_field):
            grains.append(int(s.slide_ms if s.kind == "sliding" and s.slide_ms else s.size_ms))
    grains = [g for g in grains if g > 0]
    return reduce(math.gcd, grains) if grains else None


def _downstream(spec: DataflowSpec, step_id: str) -> list[str]:
    seen: list[str] = []
    todo = [step_id]
    while todo:
        for consumer, _ in spec.consumers(todo.pop()):
            if consumer.id not in seen:
                seen.append(consumer.id)
                todo.append(consumer.id)
    return seen


@dataclass(frozen=True)
class Target:
    """A dataflow's source that a Spark writer feeds, as the writer found it when its
    query started.

    Attributes:
        dataflow, source: the dataflow and its source step.
        event_time: the source's event-time field; bucket: the window its messages align to.
        deployment: the deployment the query feeds (`datasource.deployment_id`).
        schema: the source's fields: a span whose columns fit is pushed as Arrow.
    """

    dataflow: str
    source: str
    event_time: str | None
    bucket: int | None
    deployment: str
    schema: tuple[tuple[str, str], ...] = ()


def push_target(rt: Any, target: Target, batch: pa.RecordBatch | pa.Table, batch_size: int, *,
                columns: bool = True, select: bool = False) -> int:
    """Push `batch` to `target` (`rt.push`) as window-aligned messages of at most
    `batch_size` rows, as Arrow columns where they fit its schema (with `columns`) and as
    event dicts otherwise; with `select`, only the target's fields (and the corrupt-row
    mark) go: a shared input's rows carry every subscriber's. The messages sent."""
    if select:
        keep = {name for name, _ in target.schema} | {CORRUPT}
        batch = batch.select([n for n in batch.schema.names if n in keep])
    times = event_times(batch, target.event_time) if target.bucket is not None else None
    plan = plan_messages(times, batch_size, bucket_ms=target.bucket, n=batch.num_rows)
    if plan.order is not None:
        batch = batch.take(pa.array(plan.order))
    for start, end in plan.spans:
        span = batch.slice(start, end - start)
        parts = to_columns(span, target.source, target.schema) if columns else None
        if parts is not None:  # as Arrow: one call per span, as with rows
            for part in parts:
                rt.push(target.dataflow, target.source, part, batch_size=max(1, part.num_rows))
        else:
            events = to_events(span)
            # A row msgpack cannot carry (a Decimal or a timestamp nested in a struct or
            # list, a duration) is refused alone, into the error output: the rest of the
            # span goes on, and the task neither fails nor retries a poison batch.
            rt.push(target.dataflow, target.source, events, batch_size=len(events))
    return len(plan.spans)
