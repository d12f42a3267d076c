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
`_Evaluator`.

Pure: no Ray, no Spark.
"""

from __future__ import annotations

import ast
import contextlib
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cameo_actors.dataflow.expressions import Expression
from cameo_actors.dataflow.spec import schema_type
from cameo_actors.errors import UserError
from cameo_actors.operators.bins import stable_hash

Columns: TypeAlias = pa.RecordBatch
#: The media type of an Arrow IPC stream (the HTTP API's body for columns).
ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: Ints beside floats are exact in float64 up to here.
_EXACT_FLOAT_INT = 2**53


def is_columns(events: Any) -> bool:
    return events.__class__ is pa.RecordBatch


def rows(events: Any) -> list[dict[str, Any]]:
    """The events as a list of dicts (a list is returned as it is)."""
    return events.to_pylist() if events.__class__ is pa.RecordBatch else events


# -- the edge: an Arrow body checked against the source's schema --------------------------
class ColumnsRefused(UserError):
    """A columnar batch that does not fit the source's schema; nothing of it was applied.
    The message names the source and the column, what was expected, what arrived, the fix."""

    def __init__(self, source: str, column: str | None, expected: str, got: str, fix: str) -> None:
        self.source, self.column = source, column
        super().__init__(source, expected, _Shown(got), fix)

    @property
    def where(self) -> str:
        column = f": column {self.column!r}" if self.column is not None else ""
        return f"source {self.source!r}{column}"

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        return (type(self), (self.source, self.column, self.expected, str(self.got), self.fix))


class _Shown(str):
    """What arrived, shown as it is (not quoted)."""

    def __repr__(self) -> str:
        return str(self)


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
        return pa.types.is_integer(t)
    if base == "float":
        return (pa.types.is_floating(t) and not pa.types.is_float16(t)) or pa.types.is_integer(t)
    if base == "str":
        return pa.types.is_string(t) or pa.types.is_large_string(t)
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


def to_ipc(data: pa.RecordBatch | pa.Table) -> bytes:
    """An Arrow IPC stream of a batch or a table (what travels in ingest calls, links and
    the HTTP API's bodies)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write(data)
    return sink.getvalue().to_pybytes()


def from_ipc(blob: bytes) -> pa.RecordBatch:
    """The batch of `to_ipc`'s stream (zero-copy over `blob`); several batches are combined."""
    reader = pa.ipc.open_stream(pa.py_buffer(blob))
    batches = list(reader)
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches, reader.schema).combine_chunks()
    got = table.to_batches()
    return got[0] if got else pa.RecordBatch.from_pylist([], schema=reader.schema)


def read_stream(source: str, body: bytes) -> pa.Table:
    """An HTTP body of media type `ARROW_STREAM`; ColumnsRefused if it is not one."""
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        return reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as exc:
        raise ColumnsRefused(source, None, f"an Arrow IPC stream ({ARROW_STREAM})",
                             f"{len(body)} bytes that are not one ({exc})",
                             "write the body with pyarrow.ipc.new_stream (not the file format), "
                             "or send JSON") from None


# -- results read as columns ----------------------------------------------------------------
class ResultsNotColumnar(UserError):
    """Results whose values do not form Arrow columns (a field of mixed kinds, say): read
    them as rows (JSON or msgpack)."""


#: The times a result table carries after the results' own columns.
RESULT_TIMES = ("_ingest_ms", "_egress_ms")


def concat_results(tables: Sequence[pa.Table]) -> pa.Table:
    """Result tables as one (a column some lack is null there; ints beside floats become
    floats), the times last. ResultsNotColumnar if a column's kinds do not mix."""
    if not tables:
        return pa.table({name: pa.array([], pa.float64()) for name in RESULT_TIMES})
    try:
        merged = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise _not_columnar(exc) from None
    return merged.select([n for n in merged.column_names if n not in RESULT_TIMES]
                         + list(RESULT_TIMES))


def results_table(chunks: Sequence[tuple[Any, float, float]]) -> pa.Table:
    """Result chunks (events, ingest_ms, egress_ms) as one table: the events' columns (those
    of rows inferred over every row; ints beside floats become floats), then `_ingest_ms`
    and `_egress_ms`. ResultsNotColumnar if the values do not form columns.

    >>> results_table([([{"k": 1}], 1.0, 2.0), ([{"k": 2, "v": "x"}], 1.0, 3.0)]).to_pylist()[1]
    {'k': 2, 'v': 'x', '_ingest_ms': 1.0, '_egress_ms': 3.0}
    """
    tables = []
    try:
        for events, ingest_ms, egress_ms in chunks:
            if not is_columns(events):
                events = pa.RecordBatch.from_struct_array(pa.array(events))
            n = len(events)
            tables.append(pa.Table.from_batches([events])
                          .append_column("_ingest_ms", pa.array(np.full(n, float(ingest_ms))))
                          .append_column("_egress_ms", pa.array(np.full(n, float(egress_ms)))))
        return concat_results(tables)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise _not_columnar(exc) from None


def _not_columnar(exc: Exception) -> ResultsNotColumnar:
    return ResultsNotColumnar("results", "fields that each hold one kind of value",
                              _Shown(f"values that do not form Arrow columns ({exc})"),
                              "read these results as JSON or msgpack")


# -- the source's checks, in columns -----------------------------------------------------------
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


# -- safe expressions on columns ---------------------------------------------------------
class Declined(Exception):
    """This batch runs as rows: a kernel could differ from Python here."""


_COMPARE = {ast.Eq: pc.equal, ast.NotEq: pc.not_equal, ast.Lt: pc.less, ast.LtE: pc.less_equal,
            ast.Gt: pc.greater, ast.GtE: pc.greater_equal}
_ARITH = {ast.Add: (pc.add_checked, pc.add), ast.Sub: (pc.subtract_checked, pc.subtract),
          ast.Mult: (pc.multiply_checked, pc.multiply)}
_KINDS = {pa.int64(): "int", pa.float64(): "float", pa.string(): "str", pa.bool_(): "bool"}
_LITERAL_KINDS = {int: "int", float: "float", str: "str", bool: "bool"}
_NUMERIC = ("int", "float")


class _Evaluator:
    """One expression's tree evaluated over one batch: (value, kind) per node, the value
    an Arrow array or a Python literal, the kind int, float, str or bool."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch
        self.names = batch.schema.names

    def column(self, node: ast.expr, plain: bool = False) -> tuple[Any, str] | None:
        """A top-level field's column; `plain`: read as it is (any type, nulls too)."""
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str)):
            return None
        name = node.slice.value
        if name not in self.names:
            raise Declined  # the row path names the missing field in each error record
        col = self.batch.column(self.names.index(name))
        if plain:
            return col, "plain"
        kind = _KINDS.get(col.type)
        if kind is None or col.null_count:
            raise Declined
        return col, kind

    def eval(self, node: ast.expr) -> tuple[Any, str]:
        got = self.column(node)
        if got is not None:
            return got
        if isinstance(node, ast.Constant):
            value = node.value
            kind = _LITERAL_KINDS.get(type(value))
            if kind is None or (isinstance(value, int) and abs(value) > _EXACT_FLOAT_INT):
                raise Declined
            return value, kind
        if isinstance(node, ast.Compare):
            return self.compare(node), "bool"
        if isinstance(node, ast.BoolOp):
            values = [self.eval(v) for v in node.values]
            if any(k != "bool" for _, k in values):
                raise Declined  # `and`/`or` of non-booleans yield operands, not truth
            fn = pc.and_ if isinstance(node.op, ast.And) else pc.or_
            out = values[0][0]
            for v, _ in values[1:]:
                out = fn(out, v)
            return out, "bool"
        if isinstance(node, ast.UnaryOp):
            value, kind = self.eval(node.operand)
            if isinstance(node.op, ast.Not) and kind == "bool":
                return pc.invert(value), "bool"
            if isinstance(node.op, ast.USub) and kind in _NUMERIC:
                return (pc.negate_checked if kind == "int" else pc.negate)(value), kind
            if isinstance(node.op, ast.UAdd) and kind in _NUMERIC:
                return value, kind
            raise Declined
        if isinstance(node, ast.BinOp):
            return self.arith(type(node.op), node.left, node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "_mul":  # `*` where a side could be a string
                return self.arith(ast.Mult, node.args[0], node.args[1])
            if node.func.id == "_mod":  # `%` where the left side could be a string
                return self.arith(ast.Mod, node.args[0], node.args[1])
            if node.func.id == "abs" and len(node.args) == 1:
                value, kind = self.eval(node.args[0])
                if kind in _NUMERIC:
                    return (pc.abs_checked if kind == "int" else pc.abs)(value), kind
        raise Declined

    def numbers(self, a: tuple[Any, str], b: tuple[Any, str]) -> tuple[Any, Any, str]:
        """Two numeric operands in one kind: floats if either is (ints exact as floats)."""
        (va, ka), (vb, kb) = a, b
        if ka not in _NUMERIC or kb not in _NUMERIC:
            raise Declined
        if ka == kb:
            return va, vb, ka
        return self.as_float(va, ka), self.as_float(vb, kb), "float"

    def as_float(self, value: Any, kind: str) -> Any:
        if kind == "float":
            return value
        if isinstance(value, int):
            return float(value)
        low, high = pc.min_max(value).values()
        if len(value) and max(abs(low.as_py()), abs(high.as_py())) > _EXACT_FLOAT_INT:
            raise Declined
        return value.cast(pa.float64())

    def arith(self, op: type[ast.operator], left: ast.expr, right: ast.expr) -> tuple[Any, str]:
        a, b, kind = self.numbers(self.eval(left), self.eval(right))
        if op is ast.Div:  # Python's / of ints is a float: exact for ints within 2**53
            a, b = self.as_float(a, kind), self.as_float(b, kind)
            return pc.divide_checked(a, b), "float"  # refuses zero, as Python does
        if op in (ast.FloorDiv, ast.Mod):
            if kind != "int":
                raise Declined  # floats: Python's floor rounds its own way near ties
            return _floor_int(op, a, b), "int"
        fns = _ARITH.get(op)
        if fns is None:
            raise Declined
        checked, plain = fns
        return (checked if kind == "int" else plain)(a, b), kind

    def compare(self, node: ast.Compare) -> Any:
        left = self.eval(node.left)
        out = None
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)):
                got = self.member(left, right_node)
                got = pc.invert(got) if isinstance(op, ast.NotIn) else got
                right = None
            else:
                right = self.eval(right_node)
                a, b = self.comparable(left, right, type(op))
                got = _COMPARE[type(op)](a, b)
            out = got if out is None else pc.and_(out, got)
            left = right if right is not None else left
        if not isinstance(out, (pa.Array, pa.ChunkedArray)):
            raise Declined  # literals only
        return out

    def comparable(self, a: tuple[Any, str], b: tuple[Any, str], op: type) -> tuple[Any, Any]:
        (va, ka), (vb, kb) = a, b
        if ka in _NUMERIC and kb in _NUMERIC:
            x, y, _ = self.numbers(a, b)
            return x, y
        if ka == kb == "str" or (ka == kb == "bool" and op in (ast.Eq, ast.NotEq)):
            return va, vb
        raise Declined  # mixed kinds: Python raises for < and says False for ==

    def member(self, left: tuple[Any, str], node: ast.expr) -> Any:
        value, kind = left
        if not isinstance(node, (ast.Tuple, ast.List)) or not isinstance(value, pa.Array):
            raise Declined
        items = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        if len(items) != len(node.elts) or any(_LITERAL_KINDS.get(type(i)) != kind for i in items):
            raise Declined  # a literal of another kind: Python's == between kinds
        return pc.is_in(value, value_set=pa.array(items, type=value.type))


def _floor_int(op: type[ast.operator], a: Any, b: Any) -> Any:
    """Python's `//` or `%` of ints (floored, the sign of the divisor), in numpy, whose
    int64 floor_divide and mod round the same way. Declined where Python raises (a zero
    divisor) or int64 cannot hold the result (-2**63 // -1)."""
    x, y = _numbers(a), _numbers(b)
    if np.any(y == 0) or np.any((x == np.iinfo(np.int64).min) & (y == -1)):
        raise Declined
    got = np.floor_divide(x, y) if op is ast.FloorDiv else np.mod(x, y)
    return pa.array(got) if isinstance(got, np.ndarray) else int(got)


def _numbers(value: Any) -> Any:
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        return value.to_numpy()
    return np.int64(value)


def as_array(value: Any, n: int) -> pa.Array:
    if isinstance(value, pa.ChunkedArray):
        return value.combine_chunks()
    if isinstance(value, pa.Array):
        return value
    return pa.array([value] * n)  # a literal output field


def filter_columns(expression: Expression, batch: pa.RecordBatch) -> pa.RecordBatch:
    """The events of `batch` the predicate keeps; Declined when it runs as rows."""
    value, kind = _Evaluator(batch).eval(expression.tree)
    if kind != "bool" or not isinstance(value, (pa.Array, pa.ChunkedArray)):
        raise Declined  # truthiness of other kinds, or a constant predicate
    return batch.filter(value)


def project_columns(expressions: dict[str, Expression], batch: pa.RecordBatch) -> pa.RecordBatch:
    """The projection's new events; Declined when it runs as rows."""
    ev = _Evaluator(batch)
    arrays = []
    for expression in expressions.values():
        got = ev.column(expression.tree, plain=True)
        value = got[0] if got is not None else ev.eval(expression.tree)[0]
        arrays.append(as_array(value, batch.num_rows))
    return pa.RecordBatch.from_arrays(arrays, names=list(expressions))


def key_field(key_fn: Any) -> str | None:
    """The field a key function reads as it is (`compile_scalar` of a field name), or None."""
    if isinstance(key_fn, operator.itemgetter):
        args = key_fn.__reduce__()[1]
        if len(args) == 1 and isinstance(args[0], str):
            return args[0]
    return None


def hashable_column(batch: pa.RecordBatch, name: str) -> bool:
    """Whether every value of a column is a key (hashable) as Python reads it."""
    if name not in batch.schema.names:
        return False
    t = batch.schema.field(name).type
    return not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_struct(t))


def split_by_key(batch: pa.RecordBatch, name: str, owners: list[str], mask: int
                 ) -> dict[str, pa.RecordBatch]:
    """A batch's events by the owner of their key's bin (`owners[stable_hash(key) & mask]`,
    as the rows are routed), in order within each part. Each distinct key is hashed once."""
    encoded = pc.dictionary_encode(batch.column(name), null_encoding="encode")
    targets = [owners[stable_hash(v) & mask] for v in encoded.dictionary.to_pylist()]
    distinct = list(dict.fromkeys(targets))
    if len(distinct) == 1:
        return {distinct[0]: batch}
    number = {t: i for i, t in enumerate(distinct)}
    of_value = np.array([number[t] for t in targets], dtype=np.int64)
    of_row = of_value[encoded.indices.to_numpy(zero_copy_only=False)]
    order = np.argsort(of_row, kind="stable")
    bounds = np.searchsorted(of_row[order], np.arange(len(distinct) + 1))
    return {t: batch.take(pa.array(order[bounds[i]:bounds[i + 1]]))
            for i, t in enumerate(distinct)}


@dataclass(slots=True)
class Groups:
    """A message's events grouped by tumbling window and key, the groups in the order of
    their first event (the order the rows open windows and insert keys in)."""

    ends: list[Any]
    keys: list[Any]
    counts: list[int]
    #: the events' rows by group (group g: order[bounds[g]:bounds[g + 1]]), in order
    #: within a group; None when only counts were asked for
    order: Any = None
    bounds: list[int] | None = None


def tumbling_groups(batch: pa.RecordBatch, time_field: str, key: str | None, size: float,
                    watermark: float, with_rows: bool = False) -> Groups | None:
    """The groups of a tumbling window's input, each window's end computed as the rows
    compute it, `t - t % size + size`, in the time column's type. None (run the rows)
    when an event's time is not a finite number within 2**53, an event is late (its
    window ended by `watermark`), or a key is not a scalar the rows would read alike."""
    names = batch.schema.names
    if time_field not in names or (key is not None and key not in names) or not len(batch):
        return None
    times = batch.column(names.index(time_field))
    if times.null_count or times.type not in (pa.int64(), pa.float64()):
        return None
    t = times.to_numpy()
    if times.type == pa.float64() or isinstance(size, float):
        t = t.astype(np.float64)
        if not np.isfinite(t).all():
            return None
    if np.abs(t).max() > _EXACT_FLOAT_INT:
        return None
    ends = t - np.mod(t, size) + size
    if (ends <= watermark).any():
        return None  # late events: the rows report each
    if key is None:
        values: list[Any] = [None]
        of_key = np.zeros(len(batch), dtype=np.int64)
    else:
        col = batch.column(names.index(key))
        if not (pa.types.is_integer(col.type) or pa.types.is_string(col.type)
                or pa.types.is_boolean(col.type) or pa.types.is_large_string(col.type)):
            return None  # floats (NaN is a new key per event in a dict), lists, structs
        encoded = pc.dictionary_encode(col, null_encoding="encode")
        values = encoded.dictionary.to_pylist()
        of_key = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    unique_ends, of_end = np.unique(ends, return_inverse=True)  # a message spans few windows
    nk, end_list = len(values), unique_ends.tolist()
    # Hashed, not sorted: the dictionary holds each (window, key) in order of first event.
    encoded = pc.dictionary_encode(pa.array(of_end.astype(np.int64) * nk + of_key))
    codes = encoded.dictionary.to_numpy().tolist()
    counts = np.bincount(encoded.indices.to_numpy(), minlength=len(codes))
    groups = Groups([end_list[c // nk] for c in codes], [values[c % nk] for c in codes],
                    counts.tolist())
    if with_rows:
        groups.order = pc.sort_indices(encoded.indices).to_numpy()  # stable: rows in order
        groups.bounds = [0, *np.cumsum(counts).tolist()]
    return groups


def stat_columns(batch: pa.RecordBatch, stats: Sequence[tuple[str, str]], order: Any
                 ) -> dict[str, list[Any]] | None:
    """The values of the fields aggregates read, as Python numbers in `order` (by group);
    None (run the rows) when a field is missing, has a null or is not int64 or float64
    (the rows report such events), or holds a NaN or a -0.0 a min or max reads (the rows
    keep the first of equal values; an array's min does not say which)."""
    names = batch.schema.names
    out: dict[str, list[Any]] = {}
    for field, stat in stats:
        if field not in names:
            return None
        col = batch.column(names.index(field))
        if col.null_count or col.type not in (pa.int64(), pa.float64()):
            return None
        values = col.to_numpy()
        if stat != "sum" and col.type == pa.float64() and (
                np.isnan(values).any() or (np.signbit(values) & (values == 0)).any()):
            return None
        if field not in out:
            out[field] = values[order].tolist()
    return out
