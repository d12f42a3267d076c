"""Arrow <-> runtime events, in the writer's and reader's Python workers (pyarrow only).

Into the runtime: Spark hands the writer Arrow record batches; `to_events`
turns the rows of one message into event dicts (msgpack-able: timestamps
become epoch ms, decimals floats, dates ISO text) and routes rows Spark could
not parse (the corrupt-record column) as events the source will report as
malformed, raw text included. A VARIANT column (an `any` field read from JSON)
is decoded to the value `json.loads` gives (numbers stay numbers: a decimal
becomes an int when integral in the text, else a float); a SQL NULL there is a
field the row did not have, so the event lacks it, as one sent to
`Runtime.push` would.

Out of the runtime: `results_batch` builds one Arrow record batch per read
range (results or error records), each value coerced to its column's type;
`results_columns` does the same from the results read as columns, without an
object per row, where each column's values need no coercion beyond a cast that
`coerce` would make too.

>>> import pyarrow as pa
>>> rb = pa.record_batch({"ts": [1, None], "_corrupt_record": [None, "{bad"]})
>>> to_events(prepare(rb, "_corrupt_record"))
[{'ts': 1}, {'_corrupt_record': '{bad'}]
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cameo_actors.operators.column_schema import conform
from cameo_actors.operators.exceptions import ColumnsRefused
from spark_ingest.schema import Column, base_type, coerce

_ARROW_TYPES = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_(),
                "any": pa.string()}
#: How Spark marks a VARIANT column in Arrow: struct<value: binary, metadata: binary> whose
#: `metadata` child carries this field metadata.
_VARIANT_MARK = (b"variant", b"true")
#: Marks a row Spark could not parse: its raw text is all the event has.
CORRUPT = "__cameo_corrupt__"


def prepare(batch: pa.RecordBatch, corrupt_column: str | None) -> pa.RecordBatch:
    """Make a Spark batch's columns msgpack-able; mark unparsable rows.

    Top-level columns only: a timestamp, date or decimal inside a struct, list or map,
    and durations (day-time intervals), stay Python objects that msgpack cannot carry;
    `Runtime.push` refuses such a row alone, into the error output (kind "unencodable").
    """
    cols, names = [], []
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        t = col.type
        if pa.types.is_timestamp(t):
            col = pc.cast(pc.cast(col, pa.timestamp("ms", tz=t.tz)), pa.int64())
        elif pa.types.is_date(t):
            col = pc.cast(col, pa.string())
        elif pa.types.is_decimal(t):
            col = pc.cast(col, pa.float64())
        if name == corrupt_column:
            name = CORRUPT
        cols.append(col)
        names.append(name)
    return pa.RecordBatch.from_arrays(cols, names=names)  # a VARIANT's mark is in its type


def is_variant(field: pa.Field) -> bool:
    """Whether an Arrow field is a Spark VARIANT: struct<value: binary, metadata: binary>,
    its `metadata` child marked `variant: true`."""
    t = field.type
    if not pa.types.is_struct(t) or sorted(t.field(i).name for i in range(t.num_fields)) != \
            ["metadata", "value"]:
        return False
    mark = t.field("metadata").metadata or {}
    return bool(mark.get(_VARIANT_MARK[0]) == _VARIANT_MARK[1])


def from_variant(value: bytes, metadata: bytes) -> Any:
    """A Spark VARIANT's value as `json.loads` gives it for JSON input (see `plain`).

    >>> from pyspark.sql.variant_utils import VariantUtils
    >>> from_variant(*VariantUtils.parse_json('{"p": 455728, "q": [2.50, 1e2, null, "455728"]}'))
    {'p': 455728, 'q': [2.5, 100.0, None, '455728']}
    """
    from pyspark.sql.variant_utils import VariantUtils  # pure Python: no JVM

    return plain(VariantUtils.to_python(bytes(value), bytes(metadata)))


def plain(value: Any) -> Any:
    """A decoded VARIANT value made msgpack-able, as `json.loads` reads its JSON text:
    a decimal (Spark keeps JSON numbers with a fraction, and integers beyond 64 bits,
    as decimals) becomes an int when it has no fraction digits, else a float; a
    timestamp epoch ms and a date ISO text, as top-level columns (`prepare`)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, Decimal):
        exponent = value.as_tuple().exponent
        return int(value) if isinstance(exponent, int) and exponent >= 0 else float(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:  # TIMESTAMP_NTZ: read as UTC
            value = value.replace(tzinfo=datetime.UTC)
        return round(value.timestamp() * 1000)
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def event_times(batch: pa.RecordBatch | pa.Table, field: str | None) -> np.ndarray | None:
    """The event-time column as float ms (NaN where missing), or None if there is none.

    >>> event_times(pa.table({"ts": [3, None]}), "ts").tolist()
    [3.0, nan]
    """
    if field is None or field not in batch.schema.names:
        return None
    col = batch.column(field)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        return None  # not a time: the source reports such rows as malformed
    return np.asarray(pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)


def to_columns(batch: pa.RecordBatch | pa.Table, source: str, schema: Sequence[tuple[str, str]]
               ) -> list[pa.RecordBatch] | None:
    """A batch as the runtime's columns (`Runtime.push` of Arrow, without an object per
    row), or None when its rows must go as events: a corrupt row (the source reports it
    alone), a VARIANT (decoded per row), or columns that do not fit the source's schema
    (the source reports each row that does not, as it does for rows)."""
    names = batch.schema.names
    if CORRUPT in names:
        corrupt = batch.column(names.index(CORRUPT))
        if corrupt.null_count < len(corrupt):
            return None
        batch = batch.drop_columns([CORRUPT])
    if any(is_variant(f) for f in batch.schema):
        return None
    try:
        return conform(source, batch, schema)
    except ColumnsRefused:
        return None


def to_events(batch: pa.RecordBatch | pa.Table) -> list[dict[str, Any]]:
    """Rows -> event dicts. A row with corrupt text becomes {"_corrupt_record": text}
    (the source operator reports it as malformed); the column is dropped from the others."""
    names = batch.schema.names
    variants = [f.name for f in batch.schema if is_variant(f)]
    if CORRUPT not in names:
        return _decoded(batch.to_pylist(), variants)
    i = names.index(CORRUPT)
    corrupt = batch.column(i)
    rest = batch.remove_column(i)
    if corrupt.null_count == len(corrupt):
        return _decoded(rest.to_pylist(), variants)
    events = _decoded(rest.to_pylist(), variants)
    for row, text in enumerate(corrupt.to_pylist()):
        if text is not None:
            events[row] = {"_corrupt_record": text}
    return events


def _decoded(events: list[dict[str, Any]], variants: Sequence[str]) -> list[dict[str, Any]]:
    """Decode the VARIANT fields of events in place; drop the SQL NULL ones (not in the row)."""
    for name in variants:
        for e in events:
            v = e[name]
            if v is None:
                del e[name]
            else:
                e[name] = from_variant(v["value"], v["metadata"])
    return events


def arrow_schema(columns: Sequence[Column]) -> pa.Schema:
    return pa.schema([(name, _ARROW_TYPES[base_type(typ)]) for name, typ in columns])


def results_batch(rows: Sequence[tuple[Any, float, float]], first: int, log: str,
                  columns: Sequence[Column], schema: pa.Schema, *, event_column: bool) -> pa.RecordBatch:
    """Result rows (event, ingest_ms, egress_ms) read from `log` at offsets first.. as one batch.

    Args:
        columns: (name, kind) of the schema's fields; kind is a cameo type, or "raw".
        event_column: the whole event goes into the "event" column (fields unknown).
    """
    data: dict[str, list[Any]] = {name: [] for name, _ in columns}
    for i, (event, ingest_ms, egress_ms) in enumerate(rows):
        meta = {"_log": log, "_offset": first + i, "_ingest_ms": ingest_ms, "_egress_ms": egress_ms}
        for name, kind in columns:
            if name in meta:
                value = meta[name]
            elif event_column and name == "event":
                value = event
            else:
                value = event.get(name) if isinstance(event, dict) else None
            data[name].append(value if kind == "raw" else coerce(value, kind))
    return pa.RecordBatch.from_pydict(data, schema=schema)


def results_columns(table: pa.Table, first: int, log: str, columns: Sequence[Column],
                    schema: pa.Schema) -> pa.RecordBatch | None:
    """`results_batch` of results read as columns (`Runtime.read_result_columns`), or None
    where a column would need `coerce` per value (JSON text, a float into an int column,
    a type Spark's column does not have): read those results as rows."""
    n = table.num_rows
    meta = {"_log": pa.array([log] * n, pa.string()),
            "_offset": pa.array(np.arange(first, first + n, dtype=np.int64)),
            "_ingest_ms": table["_ingest_ms"], "_egress_ms": table["_egress_ms"]}
    arrays = []
    for (name, kind), target in zip(columns, schema, strict=True):
        if name in meta:
            col = meta[name]
        elif name not in table.column_names or pa.types.is_null(table[name].type):
            col = pa.nulls(n, target.type)
        else:
            col = table[name]
            base = base_type(kind)
            if base not in ("int", "float", "str", "bool") or col.type != target.type and \
                    not (base == "float" and pa.types.is_integer(col.type)):
                return None  # JSON text, an int from a float, a bool from another type: per value
            col = col.cast(target.type, safe=False)  # ints to floats round as float() does
        arrays.append(col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
