"""Files read by the writer: Spark lists a file source's new files and hands over their
bytes; pyarrow reads them into the source's columns. Pure: pyarrow only.

Why: through Spark's own Parquet and JSON readers every value goes through the JVM's
rows and back out as Arrow, which is most of the tier's cost per event
(docs/spark.md, "Reading files"). Spark's `binaryFile` source keeps what matters of
a file source (its log of the files each micro-batch took, so exactly once; the
file-source options) and carries each file whole as one value.

An input query reads this way (`cameo.read`, `read_mode`) where pyarrow reads the
files as Spark would: Parquet or JSON lines, fields of int, float, str and bool, and
only file-source options. A JSON file that pyarrow cannot read as the schema says is
read again line by line, as Spark's PERMISSIVE mode does: a line that is not an
object of the schema's types keeps its text in the corrupt-record column, and the
runtime reports it in the error output.

>>> body = b'{"ts": 1, "level": "INFO"}\\n{"ts": "x"}\\nnot json\\n'
>>> read_file("json", "in/a.json", body, [("ts", "int"), ("level", "str")], "_bad").to_pylist()
[{'ts': 1, 'level': 'INFO', '_bad': None}, {'ts': None, 'level': None, '_bad': '{"ts": "x"}'}, \
{'ts': None, 'level': None, '_bad': 'not json'}]
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from spark_ingest.schema import base_type

#: The formats the writer reads itself.
FORMATS = ("parquet", "json")
#: The field types it reads as Spark does.
TYPES = ("int", "float", "str", "bool")
#: Options of Spark's file sources (lower case) that `binaryFile` honours as Spark's
#: Parquet and JSON readers do: any other option is a reader's, and Spark reads.
FILE_SOURCE_OPTIONS = frozenset({
    "path", "maxfilespertrigger", "latestfirst", "filenameonly", "maxfileage", "cleansource",
    "sourcearchivedir", "pathglobfilter", "recursivefilelookup", "modifiedbefore",
    "modifiedafter", "maxcachedfiles", "discardcachedinputratio"})
#: The schema Spark's `binaryFile` source reads with.
BINARY_FILE_DDL = "path STRING, modificationTime TIMESTAMP, length BIGINT, content BINARY"
#: Compressed JSON files pyarrow opens by their name, as Hadoop's codecs do.
_CODECS = {".gz": "gzip", ".zst": "zstd"}
_ARROW = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
_INT64 = (-(2**63), 2**63 - 1)


def read_mode(asked: str, fmt: str, options: Mapping[str, str],
              fields: Iterable[tuple[str, str]], *, typed_time: bool = False) -> tuple[str, str]:
    """Who reads an input's files: ("arrow" or "spark", why not arrow where it is not).

    `asked`: the connector's `cameo.read` (auto, arrow or spark); `typed_time`: the
    event-time column is read as a Spark TIMESTAMP (`cameo.event_time_type`).

    >>> read_mode("auto", "parquet", {"path": "in"}, [("ts", "int")])
    ('arrow', '')
    >>> read_mode("auto", "json", {"path": "in", "multiLine": "true"}, [("ts", "int")])
    ('spark', "Spark's option 'multiLine'")
    """
    asked = asked.lower()
    if asked not in ("auto", "arrow", "spark"):
        raise ValueError(f"connector option cameo.read: expected auto, arrow or spark, got {asked!r}")
    if asked == "spark":
        return "spark", "cameo.read=spark"
    why = ""
    if fmt not in FORMATS:
        why = f"format {fmt!r} (arrow reads {', '.join(FORMATS)})"
    elif extra := sorted(k for k in options if k.lower() not in FILE_SOURCE_OPTIONS):
        why = f"Spark's option {extra[0]!r}"
    elif typed_time:
        why = "cameo.event_time_type=timestamp"
    elif odd := [f"{n} ({t})" for n, t in fields if base_type(t) not in TYPES]:
        why = f"field {odd[0]} (arrow reads {', '.join(TYPES)})"
    return ("spark", why) if why else ("arrow", "")


def read_files(batch: pa.RecordBatch, fmt: str, fields: Sequence[tuple[str, str]],
               corrupt_column: str | None) -> pa.RecordBatch | None:
    """The rows of the files of one of `binaryFile`'s batches (columns `path`, `content`,
    and any other, such as `landed_ms`, repeated on each of the file's rows), as one batch
    of `fields`, and for JSON the corrupt-record column; None when the files are empty."""
    names = batch.schema.names
    paths = batch.column(names.index("path")).to_pylist()
    contents = batch.column(names.index("content"))
    extra = [n for n in names if n not in ("path", "content", "modificationTime", "length")]
    tables = []
    for i, path in enumerate(paths):
        table = read_file(fmt, path, contents[i].as_buffer() or b"", fields, corrupt_column)
        for name in extra:
            column = pa.repeat(batch.column(names.index(name))[i], table.num_rows)
            at = table.schema.get_field_index(name)  # a field of the source: this value
            table = table.set_column(at, name, column) if at >= 0 \
                else table.append_column(name, column)
        tables.append(table)
    rows = pa.concat_tables(tables) if tables else None
    if rows is None or rows.num_rows == 0:
        return None
    return rows.combine_chunks().to_batches()[0]


def read_file(fmt: str, path: str, content: pa.Buffer | bytes,
              fields: Sequence[tuple[str, str]], corrupt_column: str | None) -> pa.Table:
    """One file's rows as a table of `fields` (a field a file lacks is null; one its
    path names, `.../name=value/...`, takes that value, as Spark's partitions do)."""
    schema = pa.schema([(name, _ARROW[base_type(typ)]) for name, typ in fields])
    if fmt == "parquet":
        table = _parquet(path, content, schema)
    elif fmt == "json":
        table = _json(path, _decompressed(path, content), schema, corrupt_column)
    else:
        raise ValueError(f"read_file: expected a format of {FORMATS}, got {fmt!r}")
    for name, value in partition_values(path).items():
        if name in schema.names:
            column = _cast_text([value] * table.num_rows, schema.field(name).type, path, name)
            table = table.set_column(table.schema.get_field_index(name), name, column)
    return table


def partition_values(path: str) -> dict[str, str | None]:
    """The `name=value` folders of a path (Hive's layout, as Spark reads it).

    >>> partition_values("file:/in/day=2026-12-01/level=ERROR/part-0.json")
    {'day': '2026-12-01', 'level': 'ERROR'}
    """
    out: dict[str, str | None] = {}
    for part in path.split("/")[:-1]:
        name, eq, value = part.partition("=")
        if eq and name:
            value = unquote(value)
            out[unquote(name)] = None if value == "__HIVE_DEFAULT_PARTITION__" else value
    return out


def _cast_text(values: list[str | None], typ: pa.DataType, path: str, name: str) -> pa.Array:
    try:
        return pa.array(values, pa.string()).cast(typ)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise ValueError(f"file {path}: the folder's value of field {name!r} is not a {typ} "
                         f"({e}). Fix: name folders with values of the field's type") from e


def _parquet(path: str, content: pa.Buffer | bytes, schema: pa.Schema) -> pa.Table:
    import pyarrow.parquet as pq

    try:
        file = pq.ParquetFile(pa.BufferReader(content))
        present = [n for n in schema.names if n in file.schema_arrow.names]
        table = file.read(columns=present)
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"file {path} is not a readable Parquet file ({e}). Fix: remove or "
                         "replace it, or read the input with cameo.read=spark and Spark's "
                         "ignoreCorruptFiles") from e
    columns = []
    for field in schema:
        if field.name not in present:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        try:
            columns.append(column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise ValueError(f"file {path}: column {field.name!r} is {column.type}, the source "
                             f"reads it as {field.type} ({e}). Fix: write the column as "
                             f"{field.type}, or declare the field with the file's type") from e
    return pa.Table.from_arrays(columns, schema=schema)


def _decompressed(path: str, content: pa.Buffer | bytes) -> pa.Buffer | bytes:
    name = path.lower()
    for ext, codec in _CODECS.items():
        if name.endswith(ext):
            return pa.input_stream(pa.BufferReader(content), compression=codec).read_buffer()
    if name.endswith((".bz2", ".lz4", ".snappy", ".deflate")):
        raise ValueError(f"file {path} is compressed in a way the writer does not read (it "
                         "reads .gz and .zst). Fix: read the input with cameo.read=spark")
    return content


def _json(path: str, content: pa.Buffer | bytes, schema: pa.Schema,
          corrupt_column: str | None) -> pa.Table:
    import pyarrow.json as pj

    try:
        table = pj.read_json(pa.BufferReader(content), parse_options=pj.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="ignore"))
        table = table.select(schema.names)  # a field no line has is left out by pyarrow
    except (pa.ArrowInvalid, KeyError):
        return _json_lines(content, schema, corrupt_column)
    if corrupt_column is not None:
        table = table.append_column(corrupt_column, pa.nulls(table.num_rows, pa.string()))
    return table


def _json_lines(content: pa.Buffer | bytes, schema: pa.Schema,
                corrupt_column: str | None) -> pa.Table:
    """JSON lines one by one (pyarrow refused some): Spark's PERMISSIVE reading."""
    rows: list[dict[str, Any]] = []
    for raw in bytes(content).split(b"\n"):
        line = raw.strip()
        if not line:
            continue
        text = line.decode("utf-8", "replace")
        row = _row(text, schema)
        if row is None:
            if corrupt_column is None:
                continue  # no column to keep it in (Spark's DROPMALFORMED)
            row = {corrupt_column: text}
        rows.append(row)
    out = schema.append(pa.field(corrupt_column, pa.string())) if corrupt_column else schema
    return pa.Table.from_pylist(rows, schema=out)


def _row(text: str, schema: pa.Schema) -> dict[str, Any] | None:
    """A line's object as values of the schema's types; None if it is not one."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    row = {}
    for field in schema:
        value = obj.get(field.name)
        if value is not None:
            value = _value(value, field.type)
            if value is None:
                return None
        row[field.name] = value
    return row


def _value(value: Any, typ: pa.DataType) -> Any:
    """`value` as `typ` as Spark's JSON reader takes it; None where it would not."""
    if typ == pa.string():  # Spark keeps a non-string value's JSON text
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return value if typ == pa.bool_() else None
    if typ == pa.int64():
        return value if isinstance(value, int) and _INT64[0] <= value <= _INT64[1] else None
    if typ == pa.float64() and isinstance(value, (int, float)):
        fl = float(value)
        return fl if not math.isinf(fl) or isinstance(value, float) else None
    return None
