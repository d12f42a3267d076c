"""Spark schemas of the tier, derived from the dataflow spec. Pure: no Spark, no Ray.

- Into a dataflow: a source's schema becomes the DDL Spark reads files with
  (`source_ddl`), and `check_input` says early which DataFrame column cannot
  feed which declared field.
- Out of a dataflow: `result_columns` infers the fields a sink's results have
  (through filters, projections, windows and joins) so that Spark writes typed
  Parquet columns; what cannot be inferred (a Python function's output, a
  nested join side) becomes a JSON text column. `coerce` makes each value fit
  its column.
- A field typed `any` keeps its JSON value in every tier: a JSON input reads it
  as Spark's VARIANT (`input_spark_type`; the writer decodes it, `arrow.py`), and
  a result column of type `any` is JSON text that `spark_ingest.results` decodes
  (each result column carries its cameo type in its Spark metadata, `TYPE_KEY`).
- A nullable type ("int?") is its base type's column; every column is nullable,
  and the source refuses a null in a field without "?" (an error record).

>>> from cameo_actors import Dataflow, count, sum_
>>> df = (Dataflow("d", latency_target_ms=10)
...       .source("s", schema={"ts": "int", "k": "str", "v": "float"}, event_time="ts")
...       .key_by("k").window(tumbling_ms=100).aggregate(n=count(), total=sum_("v")).sink("o"))
>>> result_columns(df.spec)
[('key', 'str'), ('window_start', 'int'), ('window_end', 'int'), ('ts', 'int'), ('n', 'int'), ('total', 'float')]
>>> ddl(result_columns(df.spec) + META_COLUMNS)[:60]
'`key` STRING, `window_start` BIGINT, `window_end` BIGINT, `t'
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from cameo_actors.dataflow.spec import (
    NULLABLE,
    DataflowSpec,
    FilterStep,
    JoinStep,
    KeyByStep,
    MapStep,
    SinkStep,
    SourceStep,
    UnionStep,
    WindowStep,
    schema_type,
)
from cameo_actors.dataflow.streams import stream_key

#: A column: (name, cameo type: int | float | str | bool | any, each maybe nullable: "int?");
#: "any" is JSON text.
Column = tuple[str, str]
Fields = dict[str, str]

SPARK_TYPES = {"int": "BIGINT", "float": "DOUBLE", "str": "STRING", "bool": "BOOLEAN",
               "any": "STRING"}
#: Input formats whose `any` fields Spark reads as VARIANT. A STRING column would hold a
#: JSON number, object or list as its raw text, indistinguishable from a JSON string
#: (455728 and "455728" both read '455728'); a VARIANT keeps the JSON type, and null
#: apart from a missing field. CSV and text have no types: their `any` fields are text.
VARIANT_FORMATS = ("json",)
#: The key of a result column's Spark field metadata that holds its cameo type ("any":
#: the column holds JSON text; `spark_ingest.results` decodes it).
TYPE_KEY = "cameo.type"
#: Columns the source adds to each result row (include_metadata).
META_COLUMNS: list[Column] = [("_log", "str"), ("_offset", "int"), ("_ingest_ms", "float"),
                              ("_egress_ms", "float")]
#: The columns of the error output.
ERROR_COLUMNS: list[Column] = [("step", "str"), ("kind", "str"), ("message", "str"),
                               ("event", "any")]
#: The single column of results whose fields cannot be inferred.
EVENT_COLUMN: Column = ("event", "any")

#: Spark simple type names -> the cameo types a column of that type can feed.
_FEEDS = {
    "bigint": ("int", "float"), "int": ("int", "float"), "smallint": ("int", "float"),
    "tinyint": ("int", "float"), "double": ("float",), "float": ("float",),
    "string": ("str",), "boolean": ("bool",), "timestamp": ("int", "float"),
    "timestamp_ntz": ("int", "float"), "date": ("str",),
}


def base_type(typ: str) -> str:
    """A cameo type without its "?": the type its values have when present.

    >>> base_type("int?"), base_type("any")
    ('int', 'any')
    """
    return schema_type(typ)[0]


def spark_type(typ: str) -> str:
    """The Spark SQL type of a result column of cameo type `typ` (nullable or not: every
    column is nullable in Spark; the source refuses nulls where the schema does)."""
    return SPARK_TYPES[base_type(typ)]


def input_spark_type(typ: str, fmt: str) -> str:
    """The Spark SQL type an input of format `fmt` reads a field of cameo type `typ` as.

    >>> input_spark_type("any?", "json"), input_spark_type("any", "csv"), input_spark_type("int?", "json")
    ('VARIANT', 'STRING', 'BIGINT')
    """
    if base_type(typ) == "any" and fmt in VARIANT_FORMATS:
        return "VARIANT"
    return spark_type(typ)


def ddl(columns: Sequence[Column]) -> str:
    """Spark DDL for columns, e.g. "`ts` BIGINT, `level` STRING"."""
    return ", ".join(f"`{name}` {spark_type(typ)}" for name, typ in columns)


def source_ddl(spec: DataflowSpec, source: str, corrupt_column: str | None = "_corrupt_record",
               fmt: str = "json") -> str:
    """The DDL Spark reads a source's input of format `fmt` with; `corrupt_column` keeps
    unparsable records (JSON, CSV PERMISSIVE mode) so they reach the error output."""
    step = spec.step(source)
    if not isinstance(step, SourceStep):
        raise ValueError(f"step {source!r} of dataflow {spec.name!r} is not a source")
    cols = [f"`{name}` {input_spark_type(typ, fmt)}" for name, typ in step.schema]
    return ", ".join(cols + ([f"`{corrupt_column}` STRING"] if corrupt_column else []))


def check_input(spec: DataflowSpec, source: str, spark_columns: Mapping[str, str]) -> list[str]:
    """Problems feeding `source` from a DataFrame with these (name -> Spark simple type)
    columns; empty when it fits. Extra columns are fine (they travel with the events)."""
    step = spec.step(source)
    if not isinstance(step, SourceStep):
        raise ValueError(f"step {source!r} of dataflow {spec.name!r} is not a source")
    problems = []
    for name, typ in step.schema:
        given = spark_columns.get(name)
        if given is None:
            problems.append(f"column {name!r} ({typ}) is missing")
        elif base_type(typ) != "any" and \
                base_type(typ) not in _FEEDS.get(given.lower().split("(")[0], ()):
            problems.append(f"column {name!r} is {given}, the source declares {typ}")
    return problems


# -- what results look like ---------------------------------------------------------------
def result_columns(spec: DataflowSpec, sinks: Sequence[str] | None = None) -> list[Column]:
    """The columns of the results of `sinks` (default: all sinks), in field order.
    Sinks with different fields get the union; unknown fields give one JSON `event` column."""
    merged: Fields | None = {}
    for sink in sinks if sinks is not None else [s.id for s in spec.sinks]:
        fields = stream_fields(spec, sink)
        if fields is None or merged is None:
            merged = None
            continue
        for name, typ in fields.items():
            merged[name] = _unify(merged[name], typ) if name in merged else typ
    if merged is None:
        return [EVENT_COLUMN]
    return list(merged.items())


def stream_fields(spec: DataflowSpec, step_id: str) -> Fields | None:
    """field -> cameo type of the events a step outputs; None when unknown."""
    step = spec.step(step_id)
    if isinstance(step, SourceStep):
        return dict(step.schema)
    if isinstance(step, (FilterStep, KeyByStep, SinkStep)):
        return stream_fields(spec, step.inputs[0])
    if isinstance(step, UnionStep):
        parts = [stream_fields(spec, i) for i in step.inputs]
        if any(p is None for p in parts):
            return None
        out: Fields = {}
        for p in parts:
            for name, typ in (p or {}).items():
                out[name] = _unify(out[name], typ) if name in out else typ
        return out
    if isinstance(step, MapStep):
        upstream = stream_fields(spec, step.inputs[0])
        if step.fields is None or upstream is None:
            return None
        return {name: expression_type(text, upstream) for name, text in step.fields}
    if isinstance(step, WindowStep):
        upstream = stream_fields(spec, step.inputs[0])
        if upstream is None:
            return None
        time_type = "int" if base_type(upstream.get(step.time_field, "any")) == "int" else "float"
        out = {}
        key = stream_key(spec, step.inputs[0])
        if key is not None:
            out["key"] = expression_type(key, upstream)
        out.update({"window_start": time_type, "window_end": time_type, step.time_field: time_type})
        for agg in step.aggregates:
            field_type = base_type(upstream.get(agg.field or "", "any"))
            if agg.fn == "count":
                out[agg.name] = "int"
            elif agg.fn in ("max_by", "top"):  # a list of events
                out[agg.name] = "any"
            elif agg.fn == "avg":
                out[agg.name] = "float"
            else:  # sum, min, max keep an int or float field's type; an `any` field's
                # numbers stay what they are (max of ints is an int): JSON text
                out[agg.name] = field_type if field_type in ("int", "float") else "any"
        return out
    if isinstance(step, JoinStep):
        left = stream_fields(spec, step.inputs[0])
        key = stream_key(spec, step.inputs[0])
        time_type = "int" if base_type((left or {}).get(step.left_time_field, "any")) == "int" \
            else "float"
        if step.kind == "interval":  # max(tl, tr): int only if both times are
            right = stream_fields(spec, step.inputs[1])
            if base_type((right or {}).get(step.right_time_field, "any")) != "int":
                time_type = "float"
            windows: dict[str, str] = {}
        else:
            windows = {"window_start": time_type, "window_end": time_type}
        return {"key": expression_type(key, left) if key and left else "any", **windows,
                step.left_time_field: time_type, "left": "any", "right": "any"}
    return None  # flat_map, map by function, process: a Python function's output


# -- expression types -------------------------------------------------------------------
_FN_TYPES = {"len": "int", "int": "int", "float": "float", "str": "str", "bool": "bool",
             "lower": "str", "upper": "str", "strip": "str", "startswith": "bool",
             "endswith": "bool", "contains": "bool", "is_null": "bool", "floor": "int",
             "ceil": "int"}


def expression_type(text: str, fields: Mapping[str, str]) -> str:
    """The cameo type a safe expression yields over events with `fields` ("any" if unsure).

    >>> expression_type("round(value * 2, 1)", {"value": "float"})
    'float'
    >>> expression_type("key", {"key": "str"}), expression_type("a.b", {"a": "any"})
    ('str', 'any')
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return "any"
    return _type_of(node, fields)


def _type_of(node: ast.expr, fields: Mapping[str, str]) -> str:
    """The type of an expression; a nullable type ("int?") only where a field's value
    passes through as it is (a name, `coalesce` of nullables, a branch): arithmetic and
    calls raise on None (the event goes to the error output), so their results are set."""
    if isinstance(node, ast.Name):
        return fields.get(node.id, "any")
    if isinstance(node, ast.Constant):
        v = node.value
        return ("bool" if isinstance(v, bool) else "int" if isinstance(v, int)
                else "float" if isinstance(v, float) else "str" if isinstance(v, str) else "any")
    if isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp)
                                                       and isinstance(node.op, ast.Not)):
        # and/or return an operand, not a bool; only when both are bools is it a bool.
        if isinstance(node, ast.BoolOp):
            kinds = {_type_of(v, fields) for v in node.values}
            return kinds.pop() if len(kinds) == 1 else "any"
        return "bool"
    if isinstance(node, ast.UnaryOp):
        inner = base_type(_type_of(node.operand, fields))
        return inner if inner in ("int", "float") else "any"
    if isinstance(node, ast.BinOp):
        a, b = base_type(_type_of(node.left, fields)), base_type(_type_of(node.right, fields))
        if isinstance(node.op, ast.Add) and a == b == "str":
            return "str"
        if a in ("int", "float") and b in ("int", "float"):
            if isinstance(node.op, ast.Div):
                return "float"
            return "int" if a == b == "int" else "float"
        return "any"
    if isinstance(node, ast.IfExp):
        return _unify(_type_of(node.body, fields), _type_of(node.orelse, fields))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name, typed = node.func.id, [_type_of(a, fields) for a in node.args]
        args = [base_type(a) for a in typed]
        if name == "round":
            return "int" if len(args) == 1 else ("float" if args[0] == "float" else args[0]
                                                 if args[0] == "int" else "any")
        if name in ("abs",):
            return args[0] if args and args[0] in ("int", "float") else "any"
        if name == "coalesce":  # the first value that is not None: set if the last is
            out = typed[0] if typed else "any"
            for a in typed[1:]:
                out = _unify(out, a)
            return base_type(out) if typed and not schema_type(typed[-1])[1] else out
        if name in ("min", "max"):
            out = args[0] if args else "any"
            for a in args[1:]:
                out = _unify(out, a)
            return out if len(args) > 1 else "any"
        return _FN_TYPES.get(name, "any")
    return "any"  # subscripts, attributes, lists


def _unify(a: str, b: str) -> str:
    """The type of a value that is either an `a` or a `b` (nullable if either is)."""
    (a, a_null), (b, b_null) = schema_type(a), schema_type(b)
    nullable = NULLABLE if a_null or b_null else ""
    if a == b:
        return a + nullable
    if {a, b} == {"int", "float"}:
        return "float" + nullable
    return "any" + nullable


# -- values into columns ----------------------------------------------------------------
def coerce(value: Any, typ: str) -> Any:
    """A result value for a column of cameo type `typ`: ints and floats convert where
    exact, other types become JSON text in str/any columns, or None (null) if impossible.

    >>> coerce(3, "float"), coerce(2.0, "int"), coerce(2.5, "int"), coerce({"a": 1}, "any")
    (3.0, 2, None, '{"a": 1}')
    >>> coerce("455728", "any"), coerce(455728, "any"), coerce(7, "int?")
    ('"455728"', '455728', 7)
    """
    if value is None:
        return None
    typ = base_type(typ)
    if typ == "int":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        return None
    if typ == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value)
    if typ == "bool":
        return value if isinstance(value, bool) else None
    if typ == "str" and isinstance(value, str):
        return value
    return json.dumps(value, default=str, separators=(", ", ": "))


def spark_kind(spark_type: str) -> str:
    """The cameo type whose coercion fits a Spark column type (user-given schemas)."""
    t = spark_type.lower().split("(")[0]
    if t in ("bigint", "int", "smallint", "tinyint", "long", "integer", "short", "byte"):
        return "int"
    if t in ("double", "float", "decimal"):
        return "float"
    if t == "boolean":
        return "bool"
    if t == "string":
        return "str"
    return "raw"  # nested types: hand the value to Arrow as it is
