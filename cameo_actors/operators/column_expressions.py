"""Safe expressions on columns: a filter's or a projection's checked tree (`Expression.tree`)
evaluated over a whole batch with Arrow's compute kernels. Where Arrow and Python
could differ the evaluator raises `Declined` and the batch runs as rows."""

from __future__ import annotations

import ast
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cameo_actors.dataflow.expressions import Expression
from cameo_actors.operators.columns import EXACT_FLOAT_INT


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
            if kind is None or (isinstance(value, int) and abs(value) > EXACT_FLOAT_INT):
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
        if len(value) and max(abs(low.as_py()), abs(high.as_py())) > EXACT_FLOAT_INT:
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
