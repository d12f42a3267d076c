"""Dirigo's lessees of a window (`operators.lease`): a lessor with lessees gives the
results of one window fed every event, and no partial is lost."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors.dataflow.builder import Dataflow, count
from cameo_actors.dataflow.spec import AggSpec, JoinStep, WindowStep
from cameo_actors.operators.base import END_OF_STREAM, ErrorRecord, Output
from cameo_actors.operators.lease import LesseeWindow, build_lessee, can_lease
from cameo_actors.operators.windowing import encode_key
from cameo_actors.operators.windows import WindowOperator

COUNT = [AggSpec("n", "count")]
STATS = [AggSpec("n", "count"), AggSpec("total", "sum", "v"), AggSpec("lo", "min", "v"),
         AggSpec("hi", "max", "v"), AggSpec("mean", "avg", "v")]
EVENTS = [AggSpec("best", "max_by", "v"), AggSpec("top2", "top", "v", 2), AggSpec("n", "count")]
SHAPES = [("tumbling", 10, None), ("sliding", 10, 5), ("sliding", 10, 4)]


def key_of(e: dict[str, Any]) -> Any:
    k = e["k"]
    return ("t", 1) if k == "t" else k  # a tuple key: it must survive msgpack


def make(cls: type[WindowOperator], shape: tuple[str, int, int | None], aggs: list[AggSpec],
         keyed: bool) -> Any:
    kind, size, slide = shape
    return cls("w", kind=kind, size_ms=size, slide_ms=slide, aggregates=aggs, time_field="t",
               key_fn=key_of if keyed else None)


def wire(value: Any) -> Any:
    """Through msgpack, as the runtime sends it."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False,
                           strict_map_key=False)


def in_order(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results by window end (the order windows fire in), keys sorted within a window
    (a window lists its keys in first-seen order, which lessees change)."""
    ends = [r["window_end"] for r in results]
    assert ends == sorted(ends)
    return sorted(results, key=lambda r: (r["window_end"], repr(r.get("key"))))


def errors(records: list[ErrorRecord]) -> list[str]:
    return sorted(repr(r.to_dict()) for r in records)


# -- scripts: events, each for the lessor (0) or a lessee (1, 2), and rising watermarks --
event = st.fixed_dictionaries({
    "t": st.one_of(st.integers(-5, 40), st.just("soon")),  # "soon": a malformed time
    "k": st.sampled_from(["hot", "hot", "hot", "a", "b", "t"]),
    "v": st.one_of(st.integers(-20, 20), st.just(None)),  # None: malformed for sum etc.
}).map(lambda e: {k: v for k, v in e.items() if v is not None})
to_one = st.tuples(st.just("event"), event, st.integers(0, 2))
step = st.one_of(
    to_one, to_one, to_one,  # mostly events: a key often has state at the lessor and a lessee
    st.tuples(st.just("watermark"), st.integers(0, 15)),  # how far it rises
    st.tuples(st.just("snapshot"), st.integers(1, 2)),  # restore a lessee from its snapshot
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), aggs=st.sampled_from([COUNT, STATS, EVENTS]),
       keyed=st.booleans(), n_lessees=st.integers(1, 2), script=st.lists(step, max_size=60))
def test_a_lessor_with_lessees_gives_the_results_of_one_window(
        shape: Any, aggs: list[AggSpec], keyed: bool, n_lessees: int, script: list[Any]) -> None:
    alone = make(WindowOperator, shape, aggs, keyed)
    lessor = make(WindowOperator, shape, aggs, keyed)
    lessees = [make(LesseeWindow, shape, aggs, keyed) for _ in range(n_lessees)]
    want, got = Output(), Output()

    def collect(into: Output, out: Output) -> None:
        into.events += out.events
        into.errors += out.errors

    def watermark(wm: float) -> None:
        collect(want, alone.on_watermark(wm))
        for lessee in lessees:
            out = lessee.on_watermark(wm)
            assert out.events == [] and lessee.watermark == alone.watermark  # fires nothing
            rows = wire(lessee.take_partials())
            assert all(encode_key(lessee.key_of_row(r)) == r[1] for r in rows)
            lessor.merge_partials(rows, got)
            assert lessee.take_partials() == []
        collect(got, lessor.on_watermark(wm))

    wm = 0
    for kind, *args in script:
        if kind == "event":
            ev, to = args
            collect(want, alone.on_batch([ev]))
            target = lessor if to == 0 else lessees[(to - 1) % n_lessees]
            collect(got, target.on_batch([ev]))
        elif kind == "watermark":
            wm += args[0]
            watermark(wm)
        else:
            i = (args[0] - 1) % n_lessees
            fresh = make(LesseeWindow, shape, aggs, keyed)
            fresh.restore(wire(lessees[i].snapshot()))
            lessees[i] = fresh
    watermark(END_OF_STREAM)

    assert in_order(got.events) == in_order(want.events)
    assert errors(got.errors) == errors(want.errors)
    assert lessor._windows == {} and all(lessee._windows == {} for lessee in lessees)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("aggs", [COUNT, STATS, EVENTS], ids=["count", "stats", "events"])
def test_partials_cover_every_window_of_an_event_and_restore_from_a_snapshot(
        shape: Any, aggs: list[AggSpec]) -> None:
    lessee = make(LesseeWindow, shape, aggs, True)
    lessee.on_batch([{"t": 12, "k": "t", "v": 3}, {"t": 13, "k": "hot", "v": 4}])
    fresh = make(LesseeWindow, shape, aggs, True)
    fresh.restore(wire(lessee.snapshot()))
    rows = fresh.take_partials()
    assert rows == lessee.take_partials() == wire(rows)
    # Every window holding t=12 and t=13, as the lessor would have them.
    ends = {(10, None): [20], (10, 5): [15, 20], (10, 4): [14, 18, 22]}[shape[1:]]
    assert sorted({r[0] for r in rows}) == ends
    assert [r[1] for r in rows[:2]] == [["t", 1], "hot"]  # a tuple key, encoded
    assert {LesseeWindow.key_of_row(r) for r in rows} == {("t", 1), "hot"}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("aggs", [COUNT, STATS, EVENTS], ids=["count", "stats", "events"])
def test_partials_merge_into_the_lessors_own_state(shape: Any, aggs: list[AggSpec]) -> None:
    alone, lessor, lessee = (make(cls, shape, aggs, True)
                             for cls in (WindowOperator, WindowOperator, LesseeWindow))
    mine = [{"t": 12, "k": "hot", "v": 3}, {"t": 1, "k": "a", "v": 5}]
    lent = [{"t": 13, "k": "hot", "v": 7}, {"t": 14, "k": "hot", "v": 3}, {"t": 2, "k": "b", "v": 1}]
    alone.on_batch(mine + lent)
    lessor.on_batch(mine)
    lessee.on_batch(lent)
    lessor.merge_partials(wire(lessee.take_partials()), Output())
    want = alone.on_watermark(END_OF_STREAM).events
    assert in_order(lessor.on_watermark(END_OF_STREAM).events) == in_order(want)


def test_a_partial_after_its_window_fired_is_a_late_error_not_lost() -> None:
    lessor, lessee = (make(cls, SHAPES[0], STATS, True) for cls in (WindowOperator, LesseeWindow))
    lessee.on_batch([{"t": 5, "k": "hot", "v": 1}, {"t": 15, "k": "hot", "v": 2}])
    assert lessor.on_watermark(10).events == []  # the runtime forgot the lessee: fired empty
    out = Output()
    lessor.merge_partials(wire(lessee.take_partials()), out)
    assert [(e.kind, e.event[:2]) for e in out.errors] == [("late", [10, "hot"])]
    assert "a lessee's partial" in out.errors[0].message
    assert "after the window fired" in out.errors[0].message
    assert lessor.late_count == 1
    assert [r["total"] for r in lessor.on_watermark(20).events] == [2]  # the other one merged


def test_a_lessee_admits_like_the_window() -> None:
    lessee = make(LesseeWindow, SHAPES[0], STATS, True)
    lessee.on_watermark(10)
    out = lessee.on_batch([{"t": 3, "k": "a", "v": 1}, {"k": "a", "v": 1},
                           {"t": 11, "k": "a", "v": "x"}, {"t": 11, "k": ["x"], "v": 1}])
    assert [e.kind for e in out.errors] == ["late", "malformed", "malformed", "malformed"]
    assert (lessee.late_count, lessee.malformed_count) == (1, 3)
    assert lessee.take_partials() == []


def test_a_lessee_snapshot_restores_only_into_a_lessee() -> None:
    lessee = make(LesseeWindow, SHAPES[0], COUNT, True)
    with pytest.raises(ValueError, match="configured as"):
        make(WindowOperator, SHAPES[0], COUNT, True).restore(lessee.snapshot())


def test_can_lease_tumbling_and_sliding_but_not_sessions() -> None:
    assert can_lease(WindowStep(id="w", inputs=("k",), kind="tumbling", size_ms=10)) is None
    assert can_lease(WindowStep(id="w", inputs=("k",), kind="sliding", size_ms=10,
                                slide_ms=5)) is None
    why = can_lease(WindowStep(id="s", inputs=("k",), kind="session", gap_ms=10))
    assert why is not None and "'s'" in why and "session" in why and "re-merging" in why
    join = can_lease(JoinStep(id="j", inputs=("a", "b"), size_ms=10))
    assert join is not None and "only window steps" in join
    with pytest.raises(ValueError, match="cannot have lessees"):
        LesseeWindow("s", kind="session", gap_ms=10, aggregates=COUNT, time_field="t")
    with pytest.raises(ValueError, match="session"):
        WindowOperator("s", kind="session", gap_ms=10, aggregates=COUNT,
                       time_field="t").merge_partials([], Output())


def test_build_lessee_builds_the_step_as_the_window_is_built() -> None:
    def spec(tumbling_ms: int | None = None, session_gap_ms: int | None = None) -> Any:
        return (Dataflow("d", latency_target_ms=1000)
                .source("in", schema={"ts": "int", "user": "str"}, event_time="ts")
                .key_by("user").window(tumbling_ms=tumbling_ms, session_gap_ms=session_gap_ms)
                .aggregate(n=count())
                .sink("out")).spec

    tumbling = spec(tumbling_ms=10)
    lessee = build_lessee(tumbling, tumbling.step("window_2"))
    assert isinstance(lessee, LesseeWindow) and lessee.size_ms == 10
    lessee.on_batch([{"ts": 1, "user": "u"}])
    assert lessee.take_partials() == [[10, "u", 1]]
    session = spec(session_gap_ms=10)
    with pytest.raises(ValueError, match="session window"):
        build_lessee(session, session.step("window_2"))

