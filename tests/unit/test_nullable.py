"""Nullable schema types ("int?"): a missing or null value is None, checked like the rest."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cameo_actors import Dataflow, DataflowSpec, SpecError, count, run_local
from cameo_actors.dataflow.spec import schema_type
from cameo_actors.operators.stateless import SourceOperator

#: A union-shaped stream: persons have no `auction`, bids no `name`.
SCHEMA = {"kind": "str", "ts": "int", "id": "int?", "name": "str?", "auction": "int?",
          "price": "float?", "paid": "bool?", "extra": "any?"}


def test_missing_and_null_values_become_none() -> None:
    op = SourceOperator("s", tuple(SCHEMA.items()), "ts")
    person = {"kind": "person", "ts": 1, "id": 7, "name": "ann"}
    bid = {"kind": "bid", "ts": 2, "auction": 3, "price": None, "extra": {"a": [1]}}
    out = op.on_batch([person, bid])
    assert out.errors == []
    assert out.events[0] == {**person, "auction": None, "price": None, "paid": None, "extra": None}
    assert out.events[1] == {**bid, "id": None, "name": None, "paid": None}


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("auction", "3", "expected int, got str '3'"),
    ("auction", True, "expected int, got bool True"),
    ("auction", 2**70, "within 64 bits"),
    ("price", float("nan"), "expected a finite float"),
    ("name", 5, "expected str, got int 5"),
    ("paid", 1, "expected bool, got int 1"),
])
def test_a_present_value_is_still_checked(field: str, value: object, expected: str) -> None:
    op = SourceOperator("s", tuple(SCHEMA.items()), "ts")
    good = {"kind": "bid", "ts": 1}
    out = op.on_batch([good, {"kind": "bid", "ts": 2, field: value}])
    assert out.events == [good] and len(out.errors) == 1
    assert out.errors[0].kind == "malformed" and expected in out.errors[0].message, out.errors[0]


def test_non_nullable_fields_keep_their_checks() -> None:
    op = SourceOperator("s", (("ts", "int"), ("v", "float"), ("x", "int?")), "ts")
    out = op.on_batch([{"ts": 1, "v": None}, {"ts": 2}, {"ts": 3, "v": 1.5}])
    assert [e["ts"] for e in out.events] == [3]
    assert [e.message for e in out.errors] == [
        "field 'v': expected float/int, got NoneType None",
        "field 'v' is missing (expected fields ['ts', 'v', 'x'])"]


values = st.one_of(st.none(), st.integers(-(2**64), 2**65), st.text(max_size=3),
                   st.booleans(), st.floats(allow_nan=True))
events = st.lists(st.dictionaries(st.sampled_from(["ts", "a", "b"]), values, max_size=3), max_size=8)
CHECKS = {"int": lambda v: type(v) is int and -(2**63) <= v <= 2**64 - 1,
          "float": lambda v: (type(v) is float and v - v == 0.0) or CHECKS["int"](v),
          "str": lambda v: type(v) is str, "bool": lambda v: type(v) is bool}


@given(events, st.sampled_from(["int?", "float?", "str?", "bool?"]),
       st.sampled_from(["int", "float", "str", "bool"]))
@example(batch=[{"b": 2**53 + 1}], a="int?", b="float")  # an int a float cannot hold exactly
def test_the_compiled_check_equals_a_plain_one(batch: list[dict], a: str, b: str) -> None:  # type: ignore[type-arg]
    op = SourceOperator("s", (("a", a), ("b", b)), None)

    def ok(e: dict) -> bool:  # type: ignore[type-arg]
        v = e.get("a")
        return (v is None or CHECKS[schema_type(a)[0]](v)) and "b" in e and CHECKS[b](e["b"])

    def checked(e: dict) -> dict:  # type: ignore[type-arg]
        out = {"a": None, **e}
        for name, typ in (("a", schema_type(a)[0]), ("b", b)):
            if typ == "float" and type(out[name]) is int:
                out[name] = float(out[name])  # as the source makes it (and Spark's JSON reader)
        return out

    expected = [checked(e) for e in batch if ok(e)]
    out = op.on_batch([dict(e) for e in batch])
    assert out.events == expected
    assert len(out.errors) == len(batch) - len(expected)


def test_branches_split_a_union_stream_and_expressions_see_none() -> None:
    df = Dataflow("nx", latency_target_ms=100)
    src = df.source("events", schema=SCHEMA, event_time="ts")
    src.filter("kind == 'bid' and is_null(name)").map({"ts": "ts", "a": "auction",
                                                       "p": "coalesce(price, 0.0)"}).sink("bids")
    (src.filter("kind == 'person'").key_by("id").window(tumbling_ms=10).aggregate(n=count())
     .sink("people"))
    stream = [{"kind": "person", "ts": 1, "id": 1, "name": "a"},
              {"kind": "bid", "ts": 2, "auction": 5, "price": 2.5},
              {"kind": "bid", "ts": 3, "auction": 6},
              {"kind": "person", "ts": 4, "id": 1, "name": None}]
    result = run_local(df, {"events": stream})
    assert result.errors == []
    assert result["bids"] == [{"ts": 2, "a": 5, "p": 2.5}, {"ts": 3, "a": 6, "p": 0.0}]
    assert result["people"] == [{"key": 1, "window_start": 0, "window_end": 10, "ts": 9, "n": 2}]


def test_spec_round_trip_and_errors() -> None:
    df = Dataflow("nx", latency_target_ms=100)
    df.source("events", schema=SCHEMA, event_time="ts").sink("out")
    assert DataflowSpec.from_json(df.spec.to_json()) == df.spec
    with pytest.raises(SpecError, match=r"with '\?' for a nullable field.*int\?\?"):
        Dataflow("d", latency_target_ms=1).source("s", schema={"x": "int??"}).sink("o").to_json()
    with pytest.raises(SpecError, match="not nullable"):
        Dataflow("d", latency_target_ms=1).source("s", schema={"t": "int?"}, event_time="t").sink(
            "o").to_json()


def test_an_int_in_a_float_field_becomes_a_float() -> None:
    # As the Spark tier's JSON reader makes it: `f * 2` is 4.0 whichever tier fed the event.
    op = SourceOperator("s", (("t", "int"), ("f", "float"), ("g", "float?")), "t")
    out = op.on_batch([{"t": 1, "f": 2, "g": 3}, {"t": 2, "f": 2.5}])
    assert [(type(e["f"]), type(e["g"])) for e in out.events] == [(float, float),
                                                                  (float, type(None))]
