"""Results read back from what an output query wrote, as the values the runtime made.

Each result column carries its cameo type in its Spark field metadata
(`schema.TYPE_KEY`, "cameo.type"), and Spark stores that schema in every Parquet
file it writes (footer key `org.apache.spark.sql.parquet.row.metadata`). A reader
of the Parquet sees:

| cameo type | Parquet column | value read back |
|---|---|---|
| int, int? | int64 | int |
| float, float? | double | float |
| str, str? | string | str |
| bool, bool? | boolean | bool |
| any, any? | string: JSON text | `json.loads` of it: the number, text, object, list or None |

plus `_log` (string), `_offset` (int64), `_ingest_ms` and `_egress_ms` (double).
A result whose fields the spec does not tell (a Python function's output) is one
JSON column `event`. A null cell is a missing or null value.

`read_results(path)` reads with pyarrow (no Spark) the files the sink's log
(`_spark_metadata`) lists as committed, and decodes the JSON columns;
`decode_rows(df)` does the same for a Spark DataFrame read with `spark.read`.

>>> import pyarrow as pa
>>> schema = pa.schema([pa.field("k", pa.string(), metadata={b"cameo.type": b"any"}),
...                     pa.field("n", pa.int64())])
>>> column_types(schema)
{'k': 'any', 'n': None}
>>> decode([{"k": '455728', "n": 1}, {"k": '"455728"', "n": 2}], column_types(schema))
[{'k': 455728, 'n': 1}, {'k': '455728', 'n': 2}]
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from spark_ingest.schema import META_COLUMNS, TYPE_KEY, base_type
from spark_ingest.storage import entries, filesystem

#: The Parquet footer key where Spark keeps the schema it wrote (its fields' metadata too).
SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"
SINK_LOG = "_spark_metadata"


def column_types(schema: pa.Schema) -> dict[str, str | None]:
    """name -> cameo type of each column (None: not a cameo result column), from the
    Arrow fields' metadata or from the Spark schema in a Parquet file's footer."""
    found: dict[str, str | None] = {}
    spark = (schema.metadata or {}).get(SPARK_ROW_METADATA)
    if spark:
        for f in json.loads(spark).get("fields", []):
            found[f["name"]] = (f.get("metadata") or {}).get(TYPE_KEY)
    for f in schema:
        own = (f.metadata or {}).get(TYPE_KEY.encode())
        if own is not None:
            found[f.name] = own.decode()
        found.setdefault(f.name, None)
    return {f.name: found[f.name] for f in schema}


def decode(rows: list[dict[str, Any]], types: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """Decode the JSON text of `any` columns in rows (in place; returns them)."""
    json_columns = [n for n, t in types.items() if t is not None and base_type(t) == "any"]
    for row in rows:
        for name in json_columns:
            text = row.get(name)
            if text is not None:
                row[name] = json.loads(text)
    return rows


def committed_files(path: str) -> list[str]:
    """The data files of a Spark file sink under `path` that its log lists as committed
    (every Parquet file there when it has no log: written by a batch job)."""
    fs, root = filesystem(path)
    log = f"{root.rstrip('/')}/{SINK_LOG}"
    names = [n for n in entries(log) if not n.startswith(".")]
    if not names:
        return sorted(f"{root.rstrip('/')}/{n}" for n in entries(path)
                      if n.endswith(".parquet") and not n.startswith((".", "_")))
    batches = {int(n.split(".")[0]): n for n in names if n.split(".")[0].isdigit()}
    compacts = [b for b, n in batches.items() if n.endswith(".compact")]
    first = max(compacts) if compacts else min(batches, default=0)
    files: dict[str, bool] = {}
    for b in sorted(batches):
        if b < first:
            continue
        with fs.open_input_stream(f"{log}/{batches[b]}") as f:
            lines = f.read().decode().splitlines()[1:]  # the first line is the version, "v1"
        for line in lines:
            entry = json.loads(line)
            files[_local(entry["path"])] = entry.get("action", "add") == "add"
    return sorted(p for p, added in files.items() if added)


def read_results(path: str, *, metadata: bool = False) -> list[dict[str, Any]]:
    """The rows an output query wrote to Parquet under `path`, JSON columns decoded.

    Args:
        path: the sink's `path` option (a folder, or a URL pyarrow.fs knows).
        metadata: keep the `_log`, `_offset`, `_ingest_ms`, `_egress_ms` columns.
    """
    import pyarrow.parquet as pq

    fs, _ = filesystem(path)
    files = committed_files(path)
    if not files:
        return []
    tables = [pq.read_table(f, filesystem=fs) for f in files]
    rows: list[dict[str, Any]] = []
    for table in tables:
        rows += decode(table.to_pylist(), column_types(table.schema))
    return rows if metadata else _without_meta(rows)


def decode_rows(df: Any, *, metadata: bool = False) -> list[dict[str, Any]]:
    """Collect a Spark DataFrame of results (`spark.read.parquet(path)`), JSON columns
    decoded by the cameo types in its schema's metadata."""
    types = {f.name: f.metadata.get(TYPE_KEY) for f in df.schema.fields}
    rows = decode([r.asDict(recursive=True) for r in df.collect()], types)
    return rows if metadata else _without_meta(rows)


def _without_meta(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    meta = {name for name, _ in META_COLUMNS}
    return [{k: v for k, v in r.items() if k not in meta} for r in rows]


def _local(uri: str) -> str:
    """A sink log's file URI as a path of its file system ("file:/x" -> "/x")."""
    return str(filesystem(uri)[1])
