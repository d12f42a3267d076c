"""Columnar batches: events as Arrow record batches, and the kernels that run on them.

A message's events are a list of dicts (rows) or a `pyarrow.RecordBatch` (columns).
Columns come from the edges (an Arrow push by a client, the HTTP API or the Spark
tier: `conform` checks them against the source's schema there) and stay columns
through the steps with a kernel for them: the source's checks, filters and
projections of safe expressions, key_by and keyed routing on a field, union and sink
(whose result log keeps the columns), and a tumbling window's count, sum, min, max,
avg, max_by and top (`tumbling_groups`; of max_by and top only the events that can
be among the best become dicts). A step
without one reads the batch as rows (`rows`), once, and goes on with rows; so does a
batch of fewer than `base.MIN_COLUMN_EVENTS` events.

A kernel gives exactly what the rows would. Where Arrow and Python could differ, it
declines and the batch runs as rows, so results and error records are the row path's:
a null in a column an expression reads (Python raises or compares None, Arrow
propagates null), an int beyond 2**53 beside a float (Python compares exactly, Arrow
through float64), an overflow or a division by zero (Arrow's checked kernels raise
where Python raises or grows the int), and any construct or type not listed in
`column_expressions`.

This module holds the batch type, its row view and the extremes of a column; the
rest lives beside it, one job each: `column_schema` (the edge: a source's schema),
`column_ipc` (Arrow IPC streams), `column_results` (result tables),
`column_expressions` (filters and projections), `column_keys` (keys and routing) and
`column_groups` (a tumbling window's groups).

Pure: no Ray, no Spark.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

Columns: TypeAlias = pa.RecordBatch
#: Ints beside floats are exact in float64 up to here.
EXACT_FLOAT_INT = 2**53


def is_columns(events: Any) -> bool:
    return events.__class__ is pa.RecordBatch


def rows(events: Any) -> list[dict[str, Any]]:
    """The events as a list of dicts (a list is returned as it is)."""
    got: list[dict[str, Any]] = (events.to_pylist() if events.__class__ is pa.RecordBatch
                                 else events)
    return got


def max_of(batch: pa.RecordBatch, name: str | None) -> Any:
    """The largest value of a numeric column, None if it has none (or no such column)."""
    return _extreme(batch, name, pc.max)


def span_of(batch: pa.RecordBatch, name: str | None) -> tuple[Any, Any] | None:
    """The smallest and largest value of a numeric column, None if it has none (or no such
    column)."""
    got = _extreme(batch, name, pc.min_max)
    return None if got is None or got["min"] is None else (got["min"], got["max"])


def _extreme(batch: pa.RecordBatch, name: str | None, which: Any) -> Any:
    if name is None or name not in batch.schema.names:
        return None
    col = batch.column(name)
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        return None
    return which(col).as_py()
