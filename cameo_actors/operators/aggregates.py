"""Window aggregates compiled into accumulator functions for the hot path.

A window keeps one accumulator per (window, key). `compile_aggregates` turns a
list of aggregate specs (count, sum, min, max, avg) into four functions that
share one accumulator layout:

- ``new(event) -> acc``: the accumulator of a single event;
- ``add(acc, event)``: fold one more event in, in place;
- ``merge(a, b) -> a``: fold accumulator ``b`` into ``a`` (session merges);
- ``fill(result, acc)``: write the aggregate values into a result dict.

``new`` and ``add`` check every input field they need *before* they touch any
state and raise `MalformedEvent` for a missing or non-numeric value, so a bad
event never half-updates an accumulator.

Layout: when every aggregate is a count, the accumulator is a plain ``int``
(no per-event allocation; the window operator counts inline). Otherwise it is
a list ``[count, <per field: sum?, min?, max?>]`` of numbers, which is
msgpack-able as is. avg is sum / count, so it costs one sum slot.

The functions are generated from fixed templates: field and aggregate names
are bound as values in the generated code's namespace and never appear in
its source text, so no user text is ever compiled.

>>> from types import SimpleNamespace as A
>>> aggs = compile_aggregates([A(name="n", fn="count", field=None),
...                            A(name="mean", fn="avg", field="v")])
>>> acc = aggs.new({"v": 1}); aggs.add(acc, {"v": 4})
>>> r = {}; aggs.fill(r, acc); r
{'n': 2, 'mean': 2.5}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: The aggregate functions a window can compute.
AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max", "avg")


class AggSpecLike(Protocol):
    """What an aggregate spec provides (the spec layer's `AggSpec` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def fn(self) -> str: ...

    @property
    def field(self) -> str | None: ...


class MalformedEvent(Exception):
    """An event lacks a value an aggregate needs; the message says which."""


def is_number(value: Any) -> bool:
    """True for an int or float value (bool is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_time(value: Any) -> bool:
    """True for a valid event time: a finite int or float, not a bool."""
    return is_number(value) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class CompiledAggregates:
    """Accumulator functions for one window's aggregates (see the module doc).

    Attributes:
        names: output field names, in spec order.
        count_only: the accumulator is an int (every aggregate is a count).
        new: event -> accumulator of that event alone (checks the event).
        add: fold an event into an accumulator in place (checks first).
            For count_only accumulators (ints) callers add 1 themselves.
        merge: fold the second accumulator into the first and return it.
        fill: write the aggregate values into a result dict.
    """

    names: tuple[str, ...]
    count_only: bool
    new: Callable[[Any], Any]
    add: Callable[[Any, Any], None]
    merge: Callable[[Any, Any], Any]
    fill: Callable[[dict[str, Any], Any], None]


def compile_aggregates(specs: Sequence[AggSpecLike]) -> CompiledAggregates:
    """Compile aggregate specs into accumulator functions.

    Args:
        specs: objects with ``name`` (output field), ``fn`` (one of
            `AGGREGATE_FUNCTIONS`) and ``field`` (input field; ignored for
            count, which counts events).

    Returns:
        The compiled functions; several aggregates share one accumulator and
        one pass over each event.

    Raises:
        ValueError: an unknown function, a missing field for sum/min/max/avg,
            or a name that is empty or used twice.
    """
    names: list[str] = []
    # Distinct input fields in first-use order, and which stats each needs.
    fields: dict[str, set[str]] = {}
    for spec in specs:
        name, fn, fld = spec.name, spec.fn, spec.field
        if fn not in AGGREGATE_FUNCTIONS:
            raise ValueError(f"aggregate {name!r}: expected a function from {list(AGGREGATE_FUNCTIONS)}, "
                             f"got {fn!r}")
        if not isinstance(name, str) or not name or name in names:
            raise ValueError(f"aggregate names must be unique non-empty strings, got {name!r}")
        names.append(name)
        if fn == "count":
            continue
        if not isinstance(fld, str) or not fld:
            raise ValueError(f"aggregate {name!r}: {fn} needs an input field name, got {fld!r}")
        fields.setdefault(fld, set()).add("sum" if fn == "avg" else fn)

    if not fields:
        return _compile_count_only(tuple(names))

    # Slot 0 counts events; then each field's stats in a fixed order.
    slots: dict[tuple[str, str], int] = {}
    for fld, stats in fields.items():
        for stat in ("sum", "min", "max"):
            if stat in stats:
                slots[fld, stat] = len(slots) + 1

    ns: dict[str, Any] = {"_int": int, "_float": float, "_bad": _bad_value_raiser(specs)}
    field_var = {fld: f"v{i}" for i, fld in enumerate(fields)}
    for fld, var in field_var.items():
        ns["F_" + var] = fld

    # The value checks: a missing field or a non-number raises before any write.
    check: list[str] = []
    for var in field_var.values():
        check += [
            "    try:",
            f"        {var} = ev[F_{var}]",
            "    except Exception:",
            f"        _bad(F_{var}, ev, None)",
            f"    if {var}.__class__ is not _int and {var}.__class__ is not _float:",
            f"        _bad(F_{var}, ev, {var})",
        ]

    new_slots = ["1"] + [field_var[fld] for fld, _stat in slots]
    add_body: list[str] = ["    acc[0] += 1"]
    merge_body: list[str] = ["    a[0] += b[0]"]
    for (fld, stat), i in slots.items():
        var = field_var[fld]
        if stat == "sum":
            add_body.append(f"    acc[{i}] += {var}")
            merge_body.append(f"    a[{i}] += b[{i}]")
        else:
            op = "<" if stat == "min" else ">"
            add_body.append(f"    if {var} {op} acc[{i}]: acc[{i}] = {var}")
            merge_body.append(f"    if b[{i}] {op} a[{i}]: a[{i}] = b[{i}]")

    fill_body: list[str] = []
    for j, spec in enumerate(specs):
        ns[f"N{j}"] = spec.name
        fld = spec.field or ""
        if spec.fn == "count":
            expr = "acc[0]"
        elif spec.fn == "avg":
            expr = f"acc[{slots[fld, 'sum']}] / acc[0]"
        else:
            expr = f"acc[{slots[fld, spec.fn]}]"
        fill_body.append(f"    r[N{j}] = {expr}")

    src = "\n".join([
        "def new(ev):", *check, f"    return [{', '.join(new_slots)}]",
        "def add(acc, ev):", *check, *add_body,
        "def merge(a, b):", *merge_body, "    return a",
        "def fill(r, acc):", *fill_body,
    ])
    exec(compile(src, "<cameo aggregates>", "exec"), ns)  # noqa: S102  # template-only source
    return CompiledAggregates(tuple(names), False, ns["new"], ns["add"], ns["merge"], ns["fill"])


def _compile_count_only(names: tuple[str, ...]) -> CompiledAggregates:
    def new(ev: Any) -> int:
        return 1

    def add(acc: Any, ev: Any) -> None:
        raise TypeError("count-only accumulators are ints: add 1 instead")

    def merge(a: int, b: int) -> int:
        return a + b

    def fill(r: dict[str, Any], acc: int) -> None:
        for name in names:
            r[name] = acc

    return CompiledAggregates(names, True, new, add, merge, fill)


def _bad_value_raiser(specs: Sequence[AggSpecLike]) -> Callable[[str, Any, Any], None]:
    """The slow path of the generated checks: accept odd numeric types (int
    and float subclasses), otherwise raise `MalformedEvent` naming the field."""
    users: dict[str, list[str]] = {}
    for spec in specs:
        if spec.fn != "count" and spec.field:
            users.setdefault(spec.field, []).append(f"{spec.name}={spec.fn}({spec.field})")

    def bad(field: str, ev: Any, value: Any) -> None:
        if value is not None and is_number(value):
            return  # an int/float subclass: fine, just not the fast path
        needed_by = ", ".join(users[field])
        if value is None and not (isinstance(ev, dict) and field in ev):
            raise MalformedEvent(f"field {field!r} is missing (needed by {needed_by})")
        raise MalformedEvent(f"field {field!r} must be a number (int or float) for {needed_by}, "
                             f"got {type(value).__name__} {value!r}")

    return bad
