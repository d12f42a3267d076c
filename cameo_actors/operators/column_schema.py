"""A source's schema, in columns: Arrow bodies checked and converted at the edge
(`conform`), the Arrow schema of a source's events (`arrow_schema`), and whether a
batch passes the source's checks as it is (`source_columns`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from cameo_actors.dataflow.spec import schema_type
from cameo_actors.operators.exceptions import ColumnsRefused

_TARGET = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
_CAST_TO = {"int": "int64", "float": "float64", "str": "string", "bool": "bool"}
_EXPECTED = {"int": "an integer column (int8 .. int64, uint8 .. uint64)",
             "float": "a floating-point or integer column",
             "str": "a string column (string, large_string, or dictionary of strings)",
             "bool": "a boolean column"}


def _json_like(t: pa.DataType) -> bool:
    """Whether Arrow gives JSON-like Python values for `t` (what events hold)."""
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_boolean(t) or pa.types.is_null(t)
            or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        return not pa.types.is_float16(t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _json_like(t.value_type)
    if pa.types.is_struct(t):
        return all(_json_like(t.field(i).type) for i in range(t.num_fields))
    return False


def _fits(base: str, t: pa.DataType) -> bool:
    if base == "int":
        return bool(pa.types.is_integer(t))
    if base == "float":
        return (pa.types.is_floating(t) and not pa.types.is_float16(t)) or pa.types.is_integer(t)
    if base == "str":
        return bool(pa.types.is_string(t) or pa.types.is_large_string(t))
    return pa.types.is_boolean(t) if base == "bool" else _json_like(t)


def conform(source: str, data: pa.RecordBatch | pa.Table, schema: Sequence[tuple[str, str]]
            ) -> list[pa.RecordBatch]:
    """`data`'s batches with the schema's columns in the types events have: integers as
    int64 (uint64 where a value needs it), floats and integers of a float field as
    float64, strings as string, a missing nullable column as nulls; other columns kept.
    Nulls in a column that is not nullable, floats that are not finite and long
    strings are data errors the source finds (the error output), as with JSON.

    Raises:
        ColumnsRefused: a column of the schema is missing (not nullable), or of a type
            that cannot hold the field; a column of a type events cannot hold; names
            twice. Nothing of `data` is applied then.
    """
    names = data.schema.names
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ColumnsRefused(source, twice[0], "each column once", "it twice",
                             "rename or drop the duplicate column")
    if isinstance(data, pa.Table):
        data = data.combine_chunks()
        batches = data.to_batches()
        if not batches:  # a table of no rows
            batches = [pa.RecordBatch.from_pylist([], schema=data.schema)]
    else:
        batches = [data]
    declared = dict(schema)
    missing: dict[str, pa.Array] = {}
    for name, typ in schema:
        base, nullable = schema_type(typ)
        if name not in names:
            if not nullable:
                raise ColumnsRefused(source, name, f"a column for field {name!r} ({typ})",
                                     f"columns {names}", "add the column, or declare the field "
                                     f"nullable ({base}?) in the source's schema")
            missing[name] = pa.nulls(0, _TARGET.get(base, pa.null()))
            continue
        t = data.schema.field(name).type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if not _fits(base, t) and not (pa.types.is_null(t) and nullable):
            raise ColumnsRefused(source, name, _EXPECTED.get(base, "a column of JSON-like values "
                                 "(numbers, strings, booleans, binary, lists and structs of "
                                 "them)"), str(data.schema.field(name).type),
                                 f"cast it to {_CAST_TO.get(base, 'int64, float64 or string')} "
                                 "before pushing")
    for name in names:
        if name not in declared and not _json_like(_value_type(data.schema.field(name).type)):
            raise ColumnsRefused(source, name, "a column of JSON-like values (numbers, strings, "
                                 "booleans, binary, lists and structs of them)",
                                 str(data.schema.field(name).type),
                                 "cast it (a timestamp to int64 epoch ms, a decimal to float64) "
                                 "or drop it")
    return [_conform_batch(b, schema, missing) for b in batches]


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def _conform_batch(batch: pa.RecordBatch, schema: Sequence[tuple[str, str]],
                   missing: dict[str, pa.Array]) -> pa.RecordBatch:
    arrays, names = list(batch.columns), list(batch.schema.names)
    for name, typ in schema:
        base, _ = schema_type(typ)
        if name in missing:
            arrays.append(pa.nulls(batch.num_rows, missing[name].type))
            names.append(name)
            continue
        i = names.index(name)
        col = arrays[i]
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        want = _TARGET.get(base)
        if want is not None and col.type != want:
            if base == "int" and pa.types.is_uint64(col.type):
                # values beyond 2**63 stay uint64, as an event's int may hold them
                with contextlib.suppress(pa.ArrowInvalid):
                    col = col.cast(want)  # safe: refuses values beyond int64
            else:
                col = col.cast(want, safe=base != "float")  # int -> float rounds, as float() does
        arrays[i] = col
    return pa.RecordBatch.from_arrays(arrays, names=names)


def arrow_schema(schema: Sequence[tuple[str, str]]) -> pa.Schema:
    """The Arrow schema of a source's events (an `any` field as null: give it a type of
    your own). Build tables of dicts with it: `pa.Table.from_pylist(events, schema=...)`;
    without a schema pyarrow infers the columns from the first event alone, so a field
    the first event lacks would be dropped (and read as null where nullable)."""
    return pa.schema([(name, _TARGET.get(schema_type(typ)[0], pa.null())) for name, typ in schema])


def source_columns(batch: pa.RecordBatch, schema: Sequence[tuple[str, str]],
                   max_string_chars: int) -> bool:
    """Whether every event of `batch` passes the source's checks as it is (the types
    `conform` gives, no null but in nullable fields, finite floats, short strings).
    False: the row path sorts the batch out event by event, with its error records."""
    names = batch.schema.names
    for name, typ in schema:
        base, nullable = schema_type(typ)
        if name not in names:
            return False
        col = batch.column(names.index(name))
        if col.null_count and not nullable:
            return False
        want = _TARGET.get(base)
        if want is None:
            continue  # any
        t = col.type
        if t != want and not (base == "int" and pa.types.is_uint64(t)) \
                and not (nullable and pa.types.is_null(t)):
            return False
        if base == "float" and col.null_count < len(col) \
                and not pc.all(pc.is_finite(col)).as_py():
            return False
        if base == "str" and len(col) and col.null_count < len(col) \
                and pc.max(pc.utf8_length(col)).as_py() > max_string_chars:
            return False
    return True
