"""The definition layer: builder -> spec, wire round trips, and bad specs."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors import CameoError, Dataflow, DataflowSpec, SpecError, avg, count, max_, min_, sum_
from cameo_actors.dataflow.spec import (
    DELIVERY_MODES,
    FaultToleranceSpec,
    JoinStep,
    KeyByStep,
    WindowStep,
)

LOG_SCHEMA = {"ts": "int", "level": "str", "key": "str", "value": "float"}


def errors_flow() -> Dataflow:
    return (Dataflow("errors", latency_target_ms=50, tenant="ops")
            .source("logs", schema=LOG_SCHEMA, event_time="ts")
            .filter("level == 'ERROR'")
            .sink("alerts"))


def bulk_flow() -> Dataflow:
    return (Dataflow("bulk", latency_target_ms=1000, tenant="analytics", weight=2.0,
                     rate_limit_eps=50_000)
            .source("events", schema=LOG_SCHEMA, event_time="ts", allowed_lateness_ms=100,
                    connector={"format": "json", "path": "/data/in"})
            .key_by("key")
            .window(tumbling_ms=1000)
            .aggregate(total=sum_("value"), n=count(), lo=min_("value"), hi=max_("value"),
                       mean=avg("value"))
            .sink("totals", connector={"format": "parquet", "path": "/data/out",
                                       "checkpoint": "/data/ckpt", "trigger_ms": 500}))


def join_flow() -> Dataflow:
    df = Dataflow("joined", latency_target_ms=200)
    clicks = df.source("clicks", schema={"ts": "int", "user": "str"}, event_time="ts").key_by("user")
    views = df.source("views", schema={"ts": "int", "user": "str", "page": "str"},
                      event_time="ts").key_by("user")
    merged = clicks.union(df.source("taps", schema={"ts": "int", "user": "str"},
                                    event_time="ts").key_by("user"))
    merged.join(views, tumbling_ms=500).map({"user": "key", "page": "right.page", "ts": "ts"}).sink("out")
    return df


def test_builder_compiles_steps_and_edges() -> None:
    spec = bulk_flow().spec
    assert [s.id for s in spec.steps] == ["events", "key_by_1", "window_2", "totals"]
    window = spec.step("window_2")
    assert isinstance(window, WindowStep)
    assert window.inputs == ("key_by_1",)
    assert window.time_field == "ts"  # inherited from the source's event_time
    assert [a.name for a in window.aggregates] == ["total", "n", "lo", "hi", "mean"]
    assert spec.scheduling.weight == 2.0 and spec.scheduling.rate_limit_eps == 50_000
    sink = spec.sinks[0]
    assert sink.connector is not None and sink.connector.checkpoint == "/data/ckpt"
    assert dict(sink.connector.options) == {"path": "/data/out"}


def test_dag_with_union_and_join() -> None:
    spec = join_flow().spec
    join = next(s for s in spec.steps if isinstance(s, JoinStep))
    assert join.inputs[0].startswith("union_") and join.inputs[1].startswith("key_by_")
    assert join.left_time_field == "ts" and join.right_time_field == "ts"
    assert len(spec.sources) == 3


@pytest.mark.parametrize("make", [errors_flow, bulk_flow, join_flow])
def test_json_and_msgpack_round_trip_exactly(make) -> None:  # type: ignore[no-untyped-def]
    spec = make().spec
    assert DataflowSpec.from_json(spec.to_json()) == spec
    assert DataflowSpec.from_msgpack(spec.to_msgpack()) == spec
    assert DataflowSpec.from_json(spec.to_json()).to_json() == spec.to_json()


# -- property: random valid dataflows round-trip ------------------------------------

names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)


@st.composite
def dataflows(draw: st.DrawFn) -> DataflowSpec:
    df = Dataflow(draw(names), latency_target_ms=draw(st.integers(1, 10_000) | st.floats(0.5, 9e3)),
                  tenant=draw(names), weight=draw(st.floats(0.1, 10)),
                  rate_limit_eps=draw(st.none() | st.floats(1, 1e6)))
    df.fault_tolerance(
        checkpoint_interval_ms=draw(st.none() | st.just(0) | st.integers(100, 3_600_000)
                                    | st.floats(100, 3_600_000)),
        delivery=draw(st.none() | st.sampled_from(DELIVERY_MODES)),
        incremental=draw(st.none() | st.booleans()))
    stream = df.source("src", schema={"ts": "int", "k": "str", "v": "float"}, event_time="ts",
                       allowed_lateness_ms=draw(st.integers(0, 1000)))
    for _ in range(draw(st.integers(0, 4))):
        choice = draw(st.sampled_from(["filter", "project", "window"]))
        if choice == "filter":
            stream = stream.filter(f"v > {draw(st.integers(-100, 100))}")
        elif choice == "project":
            stream = stream.map({"ts": "ts", "k": "k", "v": "v * 2"})
        else:
            size = draw(st.integers(1, 5000))
            stream = stream.key_by("k").window(
                sliding_ms=size, slide_ms=draw(st.integers(1, size))).aggregate(
                v=sum_("v"), n=count()).map({"ts": "ts", "k": "key", "v": "v"})
    return stream.sink("out").spec


@settings(max_examples=60, deadline=None)
@given(dataflows())
def test_random_specs_round_trip(spec: DataflowSpec) -> None:
    assert DataflowSpec.from_json(spec.to_json()) == spec
    assert DataflowSpec.from_msgpack(spec.to_msgpack()) == spec


# -- bad specs: one exception type, a message that names step, expected, got, fix ----------

def raw() -> dict:  # type: ignore[type-arg]
    return json.loads(bulk_flow().spec.to_json())


def assert_spec_error(exc: pytest.ExceptionInfo[SpecError], step: str | None, *fragments: str) -> None:
    err = exc.value
    assert isinstance(err, CameoError) and isinstance(err, SpecError)
    assert err.step == step
    text = str(err)
    assert "expected" in text and "got" in text and "Fix:" in text
    for f in fragments:
        assert f in text, text


def test_unknown_operator() -> None:
    data = raw()
    data["steps"][1]["op"] = "explode"
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_dict(data)
    assert_spec_error(exc, "key_by_1", "'op' one of", "explode", "use a known operator")


def test_missing_field() -> None:
    data = raw()
    del data["latency_target_ms"]
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_dict(data)
    assert_spec_error(exc, None, "latency_target_ms", "add 'latency_target_ms'")


def test_unknown_field_is_refused() -> None:
    data = raw()
    data["steps"][2]["size"] = 10
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_dict(data)
    assert_spec_error(exc, "window_2", "['size']")


@pytest.mark.parametrize("size", [0, -5])
def test_window_size_must_be_positive(size: int) -> None:
    with pytest.raises(SpecError) as exc:
        Dataflow("d", latency_target_ms=10).source(
            "s", schema={"ts": "int"}, event_time="ts").window(tumbling_ms=size, id="w")
    assert_spec_error(exc, "w", "size_ms > 0", str(size))


def test_window_size_checked_over_the_wire_too() -> None:
    data = raw()
    data["steps"][2]["size_ms"] = 0
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_dict(data)
    assert_spec_error(exc, "window_2", "size_ms > 0")


def test_slide_larger_than_size() -> None:
    with pytest.raises(SpecError) as exc:
        (Dataflow("d", latency_target_ms=10).source("s", schema={"ts": "int"}, event_time="ts")
         .window(sliding_ms=100, slide_ms=200, id="w").aggregate(n=count()))
    assert_spec_error(exc, "w", "slide_ms <= size_ms (100)", "200")


@pytest.mark.parametrize(("predicate", "fragment"), [
    ("level ==", "level =="),
    ("__import__('os')", "__import__"),
    ("open('x')", "open"),
])
def test_bad_expressions(predicate: str, fragment: str) -> None:
    with pytest.raises(SpecError) as exc:
        Dataflow("d", latency_target_ms=10).source("s", schema={"level": "str"}).filter(
            predicate, id="f")
    assert_spec_error(exc, "f", fragment)


def test_edge_to_missing_step() -> None:
    data = raw()
    data["steps"][2]["inputs"] = ["nowhere"]
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_dict(data)
    assert_spec_error(exc, "window_2", "nowhere", "known:")


def test_cycle() -> None:
    data = raw()
    data["steps"][1]["inputs"] = ["window_2"]  # key_by <- window <- key_by
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_dict(data)
    assert_spec_error(exc, "key_by_1", "acyclic", "cycle through ['key_by_1', 'window_2']")


def test_duplicate_step_id() -> None:
    data = raw()
    data["steps"][1]["id"] = "events"
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_dict(data)
    assert_spec_error(exc, "events", "unique step ids")
    with pytest.raises(SpecError) as exc2:
        Dataflow("d", latency_target_ms=1).source("s", schema={"a": "int"}).filter("a > 1", id="s")
    assert_spec_error(exc2, "s", "unique step ids", "id=")


def test_dangling_step_and_missing_sink() -> None:
    df = Dataflow("d", latency_target_ms=1)
    df.source("s", schema={"a": "int"}).filter("a > 1", id="f")
    with pytest.raises(SpecError) as exc:
        _ = df.spec
    assert_spec_error(exc, None, "at least one source and one sink")


def test_join_needs_keyed_inputs() -> None:
    df = Dataflow("d", latency_target_ms=1)
    a = df.source("a", schema={"ts": "int", "u": "str"}, event_time="ts")
    b = df.source("b", schema={"ts": "int", "u": "str"}, event_time="ts").key_by("u")
    a.join(b, tumbling_ms=10, id="j").sink("out")
    with pytest.raises(SpecError) as exc:
        _ = df.spec
    assert_spec_error(exc, "j", "keyed left input", "add a key_by step on the left input")


def test_projection_dropping_time_field_before_window() -> None:
    df = Dataflow("d", latency_target_ms=1)
    (df.source("s", schema={"ts": "int", "k": "str"}, event_time="ts").map({"k": "k"}, id="m")
     .window(tumbling_ms=10, time_field="ts", id="w").aggregate(n=count()).sink("o"))
    with pytest.raises(SpecError) as exc:
        _ = df.spec
    assert_spec_error(exc, "w", "keep 'ts' in the fields of 'm'")


def test_wire_garbage() -> None:
    with pytest.raises(SpecError, match="invalid JSON"):
        DataflowSpec.from_json("{not json")
    with pytest.raises(SpecError, match="undecodable"):
        DataflowSpec.from_msgpack(b"\xc1")
    with pytest.raises(SpecError, match="a spec object"):
        DataflowSpec.from_dict(["a"])
    bad_version = {**raw(), "version": 99}
    with pytest.raises(SpecError, match="spec version 1"):
        DataflowSpec.from_dict(bad_version)
    assert msgpack.unpackb(bulk_flow().spec.to_msgpack())["name"] == "bulk"


def test_schema_types_and_event_time_are_checked() -> None:
    with pytest.raises(SpecError) as exc:
        Dataflow("d", latency_target_ms=1).source("s", schema={"ts": "datetime"})
    assert_spec_error(exc, "s", "field types from", "ts: 'datetime'")
    with pytest.raises(SpecError) as exc2:
        Dataflow("d", latency_target_ms=1).source("s", schema={"ts": "str"}, event_time="ts")
    assert_spec_error(exc2, "s", "int or float")


def test_key_by_keeps_key_through_filter() -> None:
    spec = (Dataflow("d", latency_target_ms=1).source("s", schema={"ts": "int", "k": "str"}, event_time="ts")
            .key_by("k").filter("ts > 0").window(tumbling_ms=5).aggregate(n=count()).sink("o")).spec
    from cameo_actors.dataflow.streams import stream_key

    assert stream_key(spec, spec.steps[2].id) == "k"
    assert isinstance(spec.steps[1], KeyByStep)


def test_parallel_window_needs_keys() -> None:
    df = Dataflow("d", latency_target_ms=1)
    (df.source("s", schema={"ts": "int"}, event_time="ts")
     .window(tumbling_ms=10, id="w", parallelism=2).aggregate(n=count()).sink("o"))
    with pytest.raises(SpecError) as exc:
        _ = df.spec
    assert_spec_error(exc, "w", "keyed input", "parallelism 2")


# -- fault tolerance ---------------------------------------------------------------------------

def test_fault_tolerance_defaults_to_the_pools() -> None:
    spec = errors_flow().spec
    assert spec.fault_tolerance == FaultToleranceSpec()
    assert spec.fault_tolerance.checkpoint_interval_ms is None
    assert spec.fault_tolerance.delivery is None
    assert spec.to_dict()["fault_tolerance"] == {"checkpoint_interval_ms": None, "delivery": None,
                                                  "incremental": None}


@pytest.mark.parametrize(("interval", "delivery", "incremental"), [
    (0, None, None), (100, "exactly_once", True), (2500.5, "at_least_once", False),
    (3_600_000, None, None), (None, "at_least_once", True),
])
def test_fault_tolerance_round_trips(interval: float | None, delivery: str | None,
                                     incremental: bool | None) -> None:
    spec = errors_flow().fault_tolerance(checkpoint_interval_ms=interval, delivery=delivery,
                                         incremental=incremental).spec
    assert spec.fault_tolerance == FaultToleranceSpec(interval, delivery, incremental)
    assert spec.to_dict()["fault_tolerance"] == {"checkpoint_interval_ms": interval,
                                                  "delivery": delivery,
                                                  "incremental": incremental}
    assert DataflowSpec.from_dict(spec.to_dict()) == spec
    assert DataflowSpec.from_json(spec.to_json()) == spec
    assert DataflowSpec.from_msgpack(spec.to_msgpack()) == spec


def test_fault_tolerance_builder_chains_anywhere_and_the_last_call_wins() -> None:
    df = Dataflow("d", latency_target_ms=10).fault_tolerance(delivery="exactly_once")
    assert isinstance(df, Dataflow)
    chained = df.source("s", schema={"a": "int"}).sink("o").fault_tolerance(
        checkpoint_interval_ms=500, delivery="at_least_once")
    assert chained is df
    assert df.spec.fault_tolerance == FaultToleranceSpec(500, "at_least_once")


def test_a_spec_without_fault_tolerance_still_parses() -> None:
    data = raw()
    del data["fault_tolerance"]
    spec = DataflowSpec.from_dict(data)
    assert spec.fault_tolerance == FaultToleranceSpec()
    assert spec == bulk_flow().spec
    assert DataflowSpec.from_dict({**raw(), "fault_tolerance": None}) == spec
    assert DataflowSpec.from_dict({**raw(), "fault_tolerance": {"delivery": "at_least_once"}}
                                  ).fault_tolerance == FaultToleranceSpec(None, "at_least_once")


BAD_INTERVALS = [-5, 50, 99.9, 3_600_001, "fast", True, float("nan"), float("inf")]
BAD_DELIVERIES = ["twice", "EXACTLY_ONCE", "", 1, ["exactly_once"]]


@pytest.mark.parametrize("interval", BAD_INTERVALS)
def test_a_bad_checkpoint_interval_is_refused_over_the_wire(interval: object) -> None:
    data = {**raw(), "fault_tolerance": {"checkpoint_interval_ms": interval}}
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_msgpack(msgpack.packb(data))
    assert_spec_error(exc, None, "fault_tolerance.checkpoint_interval_ms", "from 100 to 3600000",
                      repr(interval), "0 to turn checkpoints off")


@pytest.mark.parametrize("interval", BAD_INTERVALS)
def test_a_bad_checkpoint_interval_fails_on_the_builder_line(interval: object) -> None:
    df = Dataflow("d", latency_target_ms=10)
    with pytest.raises(SpecError) as exc:
        df.fault_tolerance(checkpoint_interval_ms=interval)  # type: ignore[arg-type]
    assert_spec_error(exc, None, "fault_tolerance.checkpoint_interval_ms", repr(interval))
    assert df.source("s", schema={"a": "int"}).sink("o").spec.fault_tolerance == FaultToleranceSpec()


@pytest.mark.parametrize("delivery", BAD_DELIVERIES)
def test_a_bad_delivery_is_refused(delivery: object) -> None:
    data = {**raw(), "fault_tolerance": {"delivery": delivery}}
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_dict(data)
    assert_spec_error(exc, None, "fault_tolerance.delivery", "'exactly_once', 'at_least_once'",
                      repr(delivery), "leave it out for the pool's default")
    with pytest.raises(SpecError) as exc2:
        Dataflow("d", latency_target_ms=10).fault_tolerance(delivery=delivery)  # type: ignore[arg-type]
    assert_spec_error(exc2, None, "fault_tolerance.delivery", repr(delivery))


@pytest.mark.parametrize("incremental", [1, "yes", 0.0, []])
def test_a_bad_incremental_is_refused(incremental: object) -> None:
    data = {**raw(), "fault_tolerance": {"incremental": incremental}}
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_dict(data)
    assert_spec_error(exc, None, "fault_tolerance.incremental", "true, false or null",
                      repr(incremental), "leave it out for the pool's default")


@pytest.mark.parametrize(("section", "fragment"), [
    ({"retries": 3}, "['retries']"),
    ("exactly_once", "'fault_tolerance' as an object"),
])
def test_fault_tolerance_of_the_wrong_shape_is_refused(section: object, fragment: str) -> None:
    with pytest.raises(SpecError) as exc:
        DataflowSpec.from_dict({**raw(), "fault_tolerance": section})
    assert_spec_error(exc, None, fragment)


def test_stateless_steps_run_as_many_instances_as_their_input() -> None:
    # Chained to their input on its executor (forward hops), unless told otherwise.
    df = Dataflow("wide", latency_target_ms=100)
    spec = (df.source("s", schema=LOG_SCHEMA, event_time="ts", parallelism=4)
            .filter("level == 'ERROR'", id="f").map({"ts": "ts", "key": "key"}, id="m")
            .key_by("key", id="k").window(tumbling_ms=1000, id="w").aggregate(n=count())
            .map({"n": "n", "ts": "ts"}, id="after", parallelism=1).sink("o")).spec
    assert {s.id: s.parallelism for s in spec.steps} == {
        "s": 4, "f": 4, "m": 4, "k": 4, "w": 1, "after": 1, "o": 1}
    # The wire form names every parallelism: a spec read back is the same.
    assert DataflowSpec.from_json(spec.to_json()) == spec


def test_a_source_knows_whether_its_event_time_reaches_the_steps_that_judge_lateness() -> None:
    import doctest

    from cameo_actors.dataflow import streams
    from cameo_actors.dataflow.streams import time_reaches_as_is

    def source(df: Dataflow, name: str = "s") -> Any:
        return df.source(name, schema={"t": "int", "k": "str", "u": "int"}, event_time="t")

    def flow(build: Any) -> DataflowSpec:
        return build(Dataflow("d", latency_target_ms=100)).spec

    kept = flow(lambda df: source(df).filter("u > 1").key_by("k").window(tumbling_ms=10)
                .aggregate(n=count()).sink("o"))
    renamed_twice = flow(lambda df: source(df).map({"a": "t", "k": "k"})
                         .map({"b": " a ", "k": "k"}).key_by("k").process("m:f", time_field="b")
                         .sink("o"))
    other_field = flow(lambda df: source(df).window(tumbling_ms=10, time_field="u")
                       .aggregate(n=count()).sink("o"))
    python_map = flow(lambda df: source(df).map(function="m:f").window(tumbling_ms=10)
                      .aggregate(n=count()).sink("o"))
    dropped = flow(lambda df: source(df).map({"k": "k"}).key_by("k").process("m:f").sink("o"))
    to_sinks_only = flow(lambda df: source(df).map({"v": "u * 2"}).sink("o"))
    assert [time_reaches_as_is(spec, "s") for spec in (kept, renamed_twice, to_sinks_only)] \
        == [True, True, True]
    assert [time_reaches_as_is(spec, "s") for spec in (other_field, python_map, dropped)] \
        == [False, False, False]

    def joined(right_time: str) -> DataflowSpec:
        df = Dataflow("d", latency_target_ms=100)
        left = source(df, "l").key_by("k")
        right = source(df, "r").map({"t": right_time, "k": "k"}).key_by("k")
        return left.join(right, tumbling_ms=10).sink("o").spec

    assert time_reaches_as_is(joined("t"), "r") and time_reaches_as_is(joined("t + 1"), "l")
    assert not time_reaches_as_is(joined("t + 1"), "r")  # the join's right port
    assert doctest.testmod(streams).failed == 0
