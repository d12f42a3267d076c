"""Window aggregates compiled into accumulator functions for the hot path.

A window keeps one accumulator per (window, key). `compile_aggregates` turns a
list of aggregate specs (count, sum, min, max, avg, max_by, top) into functions
that share one accumulator layout:

- ``new(event) -> acc``: the accumulator of a single event;
- ``add(acc, event)``: fold one more event in, in place;
- ``merge(a, b) -> a``: fold accumulator ``b`` into ``a`` (session merges);
- ``fill(result, acc)``: write the aggregate values into a result dict;
- ``copy(acc) -> acc``: a copy that shares nothing updated in place (snapshots).

``new`` and ``add`` check every input field they need *before* they touch any
state and raise `MalformedEvent` for a missing or non-numeric value, so a bad
event never half-updates an accumulator.

Layout: when every aggregate is a count, the accumulator is a plain ``int``
(no per-event allocation; the window operator counts inline). Otherwise it is
a list ``[count, <per field: sum?, min?, max?>, <per max_by / top: a list>]``,
which is msgpack-able as is. avg is sum / count, so it costs one sum slot.

Events as values: ``max_by(field)`` is every event with the greatest value of
`field` (ties all kept), its slot ``[best value, event, event, ...]``;
``top(field, n)`` is up to n events with the largest values, largest first,
its slot ``[[value, event], ...]`` kept in result order. Ties are ordered by
`canonical_bytes` (msgpack of the event), so a result never depends on the
order events arrived in. A NaN value is malformed for these two (it has no
order).

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
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgpack

#: The aggregate functions a window can compute.
AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max", "avg", "max_by", "top")
#: Aggregates whose value is a list of events.
EVENT_AGGREGATES = ("max_by", "top")
#: The largest n of a top(field, n).
MAX_TOP_N = 1000


class AggSpecLike(Protocol):
    """What an aggregate spec provides (the spec layer's `AggSpec` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def fn(self) -> str: ...

    @property
    def field(self) -> str | None: ...

    # ``n`` (top's count) is optional: read with getattr(spec, "n", None).


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
        copy: an accumulator -> a copy sharing nothing that is updated in place.
    """

    names: tuple[str, ...]
    count_only: bool
    new: Callable[[Any], Any]
    add: Callable[[Any, Any], None]
    merge: Callable[[Any, Any], Any]
    fill: Callable[[dict[str, Any], Any], None]
    copy: Callable[[Any], Any] = list
    #: (field, "sum" | "min" | "max") of accumulator slots 1.. (after the count)
    stats: tuple[tuple[str, str], ...] = ()
    #: (field, "max_by" | "top", n) of the event slots after them (lists of events)
    events: tuple[tuple[str, str, int | None], ...] = ()


def compile_aggregates(specs: Sequence[AggSpecLike]) -> CompiledAggregates:
    """Compile aggregate specs into accumulator functions.

    Args:
        specs: objects with ``name`` (output field), ``fn`` (one of
            `AGGREGATE_FUNCTIONS`), ``field`` (input field; ignored for
            count, which counts events) and, for top, ``n`` (1 to `MAX_TOP_N`).

    Returns:
        The compiled functions; several aggregates share one accumulator and
        one pass over each event.

    Raises:
        ValueError: an unknown function, a missing field for sum/min/max/avg/
            max_by/top, a bad n, or a name that is empty or used twice.
    """
    names: list[str] = []
    # Distinct input fields in first-use order, and which stats each needs.
    fields: dict[str, set[str]] = {}
    # The event aggregates' slots: (field, fn, n) in first-use order.
    event_aggs: list[tuple[str, str, int | None]] = []
    for spec in specs:
        name, fn, fld = spec.name, spec.fn, spec.field
        n = getattr(spec, "n", None)
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
        if fn == "top":
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_TOP_N:
                raise ValueError(f"aggregate {name!r}: top needs n, a whole number from 1 to "
                                 f"{MAX_TOP_N}, got {n!r}")
        elif n is not None:
            raise ValueError(f"aggregate {name!r}: only top takes n, got n={n!r} for {fn}")
        fields.setdefault(fld, set()).add("sum" if fn == "avg" else fn)
        if fn in EVENT_AGGREGATES and (fld, fn, n) not in event_aggs:
            event_aggs.append((fld, fn, n))

    if not fields:
        return _compile_count_only(tuple(names))

    # Slot 0 counts events; then each field's stats in a fixed order.
    slots: dict[tuple[str, str], int] = {}
    for fld, stats in fields.items():
        for stat in ("sum", "min", "max"):
            if stat in stats:
                slots[fld, stat] = len(slots) + 1
    # Then the event aggregates' slots (lists, updated in place: `copy` copies them).
    event_slots = {agg: len(slots) + 1 + i for i, agg in enumerate(event_aggs)}

    ns: dict[str, Any] = {"_int": int, "_float": float, "_bad": _bad_value_raiser(specs),
                          "_nan": _nan_raiser(specs), "_top_add": top_add,
                          "_top_merge": top_merge, "_by_canon": sorted_canonically,
                          "_canon": canonical_bytes, "_list": list}
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
    for fld, var in field_var.items():
        if fields[fld] & set(EVENT_AGGREGATES):  # ordered by value: NaN has no place
            check += [f"    if {var} != {var}:", f"        _nan(F_{var}, ev)"]

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
    for (fld, fn, n), i in event_slots.items():
        var = field_var[fld]
        if fn == "max_by":  # [best, event, ...]: a greater value replaces, an equal one joins
            new_slots.append(f"[{var}, ev]")
            add_body += [f"    s = acc[{i}]",
                         f"    if {var} > s[0]: acc[{i}] = [{var}, ev]",
                         f"    elif {var} == s[0]: s.append(ev)"]
            merge_body += [f"    s, t = a[{i}], b[{i}]",
                           f"    if t[0] > s[0]: a[{i}] = _list(t)",
                           "    elif t[0] == s[0]: s += t[1:]"]
        else:  # top: [[value, event], ...] in result order, at most n
            ns[f"K{i}"] = n
            new_slots.append(f"[[{var}, ev]]")
            add_body.append(f"    _top_add(acc[{i}], {var}, ev, K{i})")
            merge_body.append(f"    a[{i}] = _top_merge(a[{i}], b[{i}], K{i})")

    fill_body: list[str] = []
    for j, spec in enumerate(specs):
        ns[f"N{j}"] = spec.name
        fld = spec.field or ""
        if spec.fn == "count":
            expr = "acc[0]"
        elif spec.fn == "avg":
            expr = f"acc[{slots[fld, 'sum']}] / acc[0]"
        elif spec.fn == "max_by":
            expr = f"_by_canon(acc[{event_slots[fld, 'max_by', None]}][1:])"
        elif spec.fn == "top":
            expr = f"[e for _, e in acc[{event_slots[fld, 'top', getattr(spec, 'n', None)]}]]"
        else:
            expr = f"acc[{slots[fld, spec.fn]}]"
        fill_body.append(f"    r[N{j}] = {expr}")

    # A copy shares no list updated in place: the event slots are copied too (their
    # elements, [value, event] pairs and events, are never changed in place).
    copy_slots = [f"_list(acc[{i}])" if i in event_slots.values() else f"acc[{i}]"
                  for i in range(len(new_slots))]
    src = "\n".join([
        "def new(ev):", *check, f"    return [{', '.join(new_slots)}]",
        "def add(acc, ev):", *check, *add_body,
        "def merge(a, b):", *merge_body, "    return a",
        "def fill(r, acc):", *fill_body,
        "def copy(acc):", f"    return [{', '.join(copy_slots)}]",
    ])
    exec(compile(src, "<cameo aggregates>", "exec"), ns)  # noqa: S102  # template-only source
    copy = ns["copy"] if event_slots else list
    return CompiledAggregates(tuple(names), False, ns["new"], ns["add"], ns["merge"], ns["fill"],
                              copy, tuple(slots), tuple(event_slots))


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

    return CompiledAggregates(names, True, new, add, merge, fill, _same)


def _same(acc: Any) -> Any:
    return acc  # an int: nothing to copy


# -- events as values: max_by and top ---------------------------------------------------
def canonical_bytes(event: Any) -> bytes:
    """The order of tied events in max_by and top results: msgpack of the event (a
    value msgpack cannot carry falls back to its repr, after every packable one)."""
    try:
        return msgpack.packb(event, use_bin_type=True)  # type: ignore[no-any-return]
    except Exception:  # a type msgpack refuses, an int beyond 64 bits, deep nesting
        return b"\xff" + repr(event).encode("utf-8", "backslashreplace")


def sorted_canonically(events: list[Any]) -> list[Any]:
    """Events in canonical order (ties of a max_by)."""
    return sorted(events, key=canonical_bytes) if len(events) > 1 else list(events)


def _neg_value(entry: list[Any]) -> Any:
    return -entry[0]


def top_add(top: list[list[Any]], value: Any, event: Any, n: int) -> None:
    """Put (value, event) into a top-n slot, a list ``[[value, event], ...]`` sorted
    largest value first, ties in canonical order, at most n long (in place)."""
    if len(top) >= n and value < top[-1][0]:
        return  # the common case once the slot is full: not among the best
    key = -value
    lo = bisect_left(top, key, key=_neg_value)
    hi = bisect_right(top, key, lo=lo, key=_neg_value)
    if lo < hi:  # equal values: the canonical order places it
        mine = canonical_bytes(event)
        while lo < hi and canonical_bytes(top[lo][1]) <= mine:
            lo += 1
    if lo < n:
        top.insert(lo, [value, event])
        if len(top) > n:
            top.pop()


def top_merge(a: list[list[Any]], b: list[list[Any]], n: int) -> list[list[Any]]:
    """Fold top-n slot `b` into `a` (in place) and return it."""
    for value, event in b:
        top_add(a, value, event, n)
    return a


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


def _nan_raiser(specs: Sequence[AggSpecLike]) -> Callable[[str, Any], None]:
    """Raise `MalformedEvent` for a NaN value of a field max_by or top orders by."""
    users: dict[str, list[str]] = {}
    for spec in specs:
        if spec.fn in EVENT_AGGREGATES and spec.field:
            users.setdefault(spec.field, []).append(f"{spec.name}={spec.fn}({spec.field})")

    def nan(field: str, ev: Any) -> None:
        raise MalformedEvent(f"field {field!r} is NaN, which has no order (needed by "
                             f"{', '.join(users[field])}); send a number, or filter the event out")

    return nan
