"""Window operators and their aggregates: hand-computed cases, then properties
checked against a brute-force recomputation."""

from __future__ import annotations

import math
import operator
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors.dataflow.spec import AggSpec
from cameo_actors.operators.aggregates import MalformedEvent, compile_aggregates
from cameo_actors.operators.base import END_OF_STREAM, Output
from cameo_actors.operators.windows import WindowOperator

INF = math.inf
COUNT = [AggSpec("n", "count")]
ALL = [
    AggSpec("n", "count"),
    AggSpec("total", "sum", "v"),
    AggSpec("lo", "min", "v"),
    AggSpec("hi", "max", "v"),
    AggSpec("mean", "avg", "v"),
]
by_k = operator.itemgetter("k")


def window(kind: str = "tumbling", aggs: list[AggSpec] = ALL, key_fn: Any = by_k, **kw: Any) -> WindowOperator:
    if kind == "tumbling":
        kw.setdefault("size_ms", 1000)
    elif kind == "sliding":
        kw.setdefault("size_ms", 1000)
        kw.setdefault("slide_ms", 500)
    else:
        kw.setdefault("gap_ms", 100)
    return WindowOperator("w1", kind=kind, aggregates=aggs, time_field="t", key_fn=key_fn, **kw)


def ev(t: Any, k: Any = "a", v: Any = 1, **more: Any) -> dict[str, Any]:
    return {"t": t, "k": k, "v": v, **more}


def res(s: float, e: float, key: Any = "a", keyed: bool = True, **aggs: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"key": key} if keyed else {}
    r.update(window_start=s, window_end=e, t=e - 1, **aggs)
    return r


def stats(*values: float) -> dict[str, Any]:
    return {"n": len(values), "total": sum(values), "lo": min(values), "hi": max(values),
            "mean": sum(values) / len(values)}


def roundtrip(op: WindowOperator, fresh: WindowOperator) -> WindowOperator:
    """Snapshot `op`, send it through msgpack as the runtime would, restore into `fresh`."""
    wire = msgpack.packb(op.snapshot(), use_bin_type=True)
    fresh.restore(msgpack.unpackb(wire, raw=False))
    return fresh


# -- aggregates ------------------------------------------------------------------------
class TestAggregates:
    def test_all_functions_over_one_field(self) -> None:
        aggs = compile_aggregates(ALL)
        acc = aggs.new({"v": 3})
        for v in (-2, 10, 5):
            aggs.add(acc, {"v": v})
        r: dict[str, Any] = {}
        aggs.fill(r, acc)
        assert r == {"n": 4, "total": 16, "lo": -2, "hi": 10, "mean": 4.0}

    def test_several_fields_and_merge(self) -> None:
        aggs = compile_aggregates([AggSpec("a", "sum", "x"), AggSpec("b", "max", "y"),
                                   AggSpec("c", "avg", "x"), AggSpec("d", "count")])
        left = aggs.new({"x": 1, "y": 7})
        aggs.add(left, {"x": 2.5, "y": -1})
        right = aggs.new({"x": 10, "y": 9})
        merged = aggs.merge(left, right)
        r: dict[str, Any] = {}
        aggs.fill(r, merged)
        assert r == {"a": 13.5, "b": 9, "c": 4.5, "d": 3}

    def test_count_only_is_an_int(self) -> None:
        aggs = compile_aggregates([AggSpec("n", "count"), AggSpec("m", "count")])
        assert aggs.count_only and aggs.new({}) == 1 and aggs.merge(2, 3) == 5
        r: dict[str, Any] = {}
        aggs.fill(r, 4)
        assert r == {"n": 4, "m": 4}

    @pytest.mark.parametrize("bad", [{}, {"v": "3"}, {"v": None}, {"v": True}, "not an event"])
    def test_bad_value_raises_before_any_write(self, bad: Any) -> None:
        aggs = compile_aggregates(ALL)
        acc = aggs.new({"v": 1})
        with pytest.raises(MalformedEvent, match="'v'"):
            aggs.add(acc, bad)
        with pytest.raises(MalformedEvent):
            aggs.new(bad)
        assert acc == [1, 1, 1, 1]

    def test_int_and_float_subclasses_are_numbers(self) -> None:
        class Celsius(float):
            pass

        aggs = compile_aggregates([AggSpec("hi", "max", "v")])
        acc = aggs.new({"v": Celsius(2.5)})
        aggs.add(acc, {"v": 3})
        assert acc[1] == 3

    @pytest.mark.parametrize("specs, match", [
        ([AggSpec("x", "median", "v")], "median"),
        ([AggSpec("x", "sum")], "needs an input field"),
        ([AggSpec("x", "count"), AggSpec("x", "sum", "v")], "unique"),
    ])
    def test_bad_specs(self, specs: list[AggSpec], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            compile_aggregates(specs)


# -- construction ----------------------------------------------------------------------
@pytest.mark.parametrize("kw, match", [
    ({"kind": "hopping", "size_ms": 10}, "kind"),
    ({"kind": "tumbling", "size_ms": 0}, "size_ms"),
    ({"kind": "tumbling", "size_ms": None}, "size_ms"),
    ({"kind": "tumbling", "size_ms": True}, "size_ms"),
    ({"kind": "sliding", "size_ms": 100, "slide_ms": 200}, "slide_ms must be <= size_ms"),
    ({"kind": "sliding", "size_ms": 100}, "slide_ms"),
    ({"kind": "session", "gap_ms": -1}, "gap_ms"),
])
def test_bad_parameters_raise(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        WindowOperator("w1", aggregates=COUNT, time_field="t", **kw)


@pytest.mark.parametrize("name", ["key", "window_start", "window_end", "t"])
def test_aggregate_named_like_a_result_field_raises(name: str) -> None:
    with pytest.raises(ValueError, match="clashes"):
        window(aggs=[AggSpec(name, "count")])


# -- tumbling ----------------------------------------------------------------------------
class TestTumbling:
    def test_keyed_aggregates(self) -> None:
        op = window()
        assert op.on_batch([ev(0, "a", 4), ev(999, "a", -2), ev(500, "b", 7), ev(1000, "a", 1)]).events == []
        out = op.on_watermark(1000)
        assert out.events == [res(0, 1000, "a", **stats(4, -2)), res(0, 1000, "b", **stats(7))]
        assert out.watermark == 1000
        assert op.on_watermark(END_OF_STREAM).events == [res(1000, 2000, "a", **stats(1))]

    def test_unkeyed_has_no_key_field(self) -> None:
        op = window(key_fn=None, aggs=COUNT)
        op.on_batch([ev(1, "a"), ev(2, "b"), ev(1500, "c")])
        assert op.on_watermark(INF).events == [res(0, 1000, keyed=False, n=2),
                                               res(1000, 2000, keyed=False, n=1)]

    def test_out_of_order_within_the_watermark(self) -> None:
        op = window(aggs=COUNT)
        op.on_batch([ev(2500), ev(100), ev(1900)])
        op.on_watermark(1200)  # fires [0, 1000)
        op.on_batch([ev(1100), ev(2999), ev(1999)])  # behind 2500 but on time
        out = op.on_watermark(INF)
        assert out.events == [res(1000, 2000, n=3), res(2000, 3000, n=2)]

    def test_results_come_in_window_end_order_before_the_watermark(self) -> None:
        op = window(aggs=COUNT)
        op.on_batch([ev(3500, "x"), ev(10, "y"), ev(2100, "x"), ev(20, "z")])
        out = op.on_watermark(3000)
        assert [(r["window_end"], r["key"]) for r in out.events] == [(1000, "y"), (1000, "z"), (3000, "x")]
        assert out.watermark == 3000
        assert op.on_watermark(2000).events == []  # a lower watermark changes nothing

    def test_late_events_go_to_the_error_output_with_a_count(self) -> None:
        op = window(aggs=COUNT)
        op.on_batch([ev(10)])
        op.on_watermark(1000)
        out = op.on_batch([ev(999), ev(1000), ev(5)])
        assert [(e.kind, e.event["t"]) for e in out.errors] == [("late", 999), ("late", 5)]
        assert "watermark 1000" in out.errors[0].message and out.errors[0].step == "w1"
        assert op.late_count == 2
        assert op.on_watermark(INF).events == [res(1000, 2000, n=1)]

    def test_empty_windows_produce_nothing(self) -> None:
        op = window(aggs=COUNT)
        op.on_batch([ev(5), ev(7005)])
        out = op.on_watermark(INF)
        assert [(r["window_start"], r["n"]) for r in out.events] == [(0, 1), (7000, 1)]
        assert op.on_watermark(INF).events == []
        assert window(aggs=COUNT).on_watermark(INF).events == []

    def test_negative_and_float_times_align_to_zero(self) -> None:
        op = window(size_ms=10, aggs=[AggSpec("total", "sum", "v")])
        op.on_batch([ev(-0.5, v=1), ev(-10, v=2), ev(9.75, v=4), ev(0, v=8)])
        assert op.on_watermark(INF).events == [res(-10, 0, total=3), res(0, 10, total=12)]

    def test_end_of_stream_flushes_everything(self) -> None:
        op = window(aggs=COUNT)
        op.on_batch([ev(t, k) for t, k in [(1, "a"), (10_500, "b"), (99_999, "a")]])
        out = op.on_watermark(END_OF_STREAM)
        assert [r["window_end"] for r in out.events] == [1000, 11_000, 100_000]
        assert out.watermark == END_OF_STREAM
        late = op.on_batch([ev(10**12)])
        assert [e.kind for e in late.errors] == ["late"]

    @pytest.mark.parametrize("event, match", [
        ({"k": "a", "v": 1}, "time field 't' is missing"),
        (ev("12"), "time field 't' must be a finite int or float"),
        (ev(True), "got bool True"),
        (ev(None), "got NoneType"),
        (ev(math.nan), "finite"),
        (ev(math.inf), "finite"),
        (["t", 1], "expected an event object"),
        (ev(5, v="x"), "field 'v' must be a number"),
        (ev(5, v=False), "field 'v' must be a number"),
        ({"t": 5, "k": "a"}, "field 'v' is missing"),
        ({"t": 5, "v": 1}, "key function raised KeyError"),
        (ev(5, k=["un", "hashable"]), "unhashable list"),
    ])
    def test_malformed_events_are_errors_and_change_nothing(self, event: Any, match: str) -> None:
        for aggs in (ALL, COUNT):
            if aggs is COUNT and "'v'" in match:
                continue  # counting needs no value
            op = window(aggs=aggs)
            out = op.on_batch([ev(1, v=2), event, ev(2, v=3)])
            assert [e.kind for e in out.errors] == ["malformed"]
            assert match in out.errors[0].message
            assert out.errors[0].event is event
            assert op.malformed_count == 1
            expected = stats(2, 3) if aggs is ALL else {"n": 2}
            assert op.on_watermark(INF).events == [res(0, 1000, **expected)]

    def test_a_bug_in_the_operator_is_not_hidden_as_a_bad_key(self) -> None:
        op = window(aggs=COUNT, key_fn=lambda e: e["k"])
        # A hashable key whose window accumulator is broken: not the event's fault.
        op.on_batch([ev(1)])
        op._windows[1000]["a"] = "broken"
        with pytest.raises(TypeError):
            op.on_batch([ev(2)])

    @pytest.mark.parametrize("kind, aggs", [("tumbling", ALL), ("sliding", COUNT)])
    def test_a_bug_is_not_hidden_on_the_general_path_either(self, kind: str, aggs: list[AggSpec]) -> None:
        op = window(kind, aggs=aggs)
        op.on_batch([ev(1)])
        for w in op._windows.values():
            w["a"] = "broken"
        with pytest.raises(TypeError):
            op.on_batch([ev(2)])


# -- sliding -------------------------------------------------------------------------------
class TestSliding:
    def test_every_window_containing_the_event(self) -> None:
        op = window("sliding", aggs=ALL)  # size 1000, slide 500
        op.on_batch([ev(100, v=1), ev(600, v=2), ev(1200, v=4)])
        assert op.on_watermark(INF).events == [
            res(-500, 500, **stats(1)),
            res(0, 1000, **stats(1, 2)),
            res(500, 1500, **stats(2, 4)),
            res(1000, 2000, **stats(4)),
        ]

    def test_size_not_a_multiple_of_slide(self) -> None:
        op = window("sliding", size_ms=1000, slide_ms=300, aggs=COUNT)
        op.on_batch([ev(950)])
        # starts 0, 300, 600, 900 hold 950; -300 ends at 700 and does not.
        assert [(r["window_start"], r["window_end"]) for r in op.on_watermark(INF).events] == [
            (0, 1000), (300, 1300), (600, 1600), (900, 1900)]

    def test_overlap_fires_progressively(self) -> None:
        op = window("sliding", aggs=COUNT, key_fn=None)
        op.on_batch([ev(700), ev(800)])
        assert op.on_watermark(1000).events == [res(0, 1000, keyed=False, n=2)]
        op.on_batch([ev(1400)])
        assert op.on_watermark(1500).events == [res(500, 1500, keyed=False, n=3)]
        assert op.on_watermark(INF).events == [res(1000, 2000, keyed=False, n=1)]

    def test_event_with_some_windows_fired_joins_the_open_ones(self) -> None:
        op = window("sliding", aggs=COUNT)
        op.on_batch([ev(900)])
        op.on_watermark(1000)  # [0, 1000) fired; [500, 1500) is open
        out = op.on_batch([ev(700)])
        assert out.errors == [] and op.late_count == 0
        assert op.on_watermark(INF).events == [res(500, 1500, n=2)]

    def test_late_only_when_every_window_fired(self) -> None:
        op = window("sliding", aggs=COUNT)
        op.on_watermark(1500)
        out = op.on_batch([ev(999), ev(1000)])
        assert [(e.kind, e.event["t"]) for e in out.errors] == [("late", 999)]
        assert "every window containing it already fired" in out.errors[0].message
        assert op.late_count == 1

    def test_malformed_value_touches_no_window(self) -> None:
        op = window("sliding", aggs=ALL)
        out = op.on_batch([ev(600, v=1), ev(700, v="oops")])
        assert len(out.errors) == 1
        assert op.on_watermark(INF).events == [res(0, 1000, **stats(1)), res(500, 1500, **stats(1))]


# -- session -------------------------------------------------------------------------------
class TestSession:
    def test_gaps_split_sessions_per_key(self) -> None:
        op = window("session", aggs=ALL)  # gap 100
        op.on_batch([ev(0, "a", 1), ev(99, "a", 2), ev(198, "a", 3), ev(298, "a", 4),
                     ev(50, "b", 5)])
        # 198 -> 298 is exactly the gap: not closer than it, so a new session.
        assert op.on_watermark(INF).events == [
            res(50, 150, "b", **stats(5)),
            res(0, 298, "a", **stats(1, 2, 3)),
            res(298, 398, "a", **stats(4)),
        ]

    def test_a_bridging_event_merges_two_sessions(self) -> None:
        op = window("session", aggs=ALL)
        op.on_batch([ev(0, v=1), ev(150, v=2), ev(300, v=4)])  # three sessions
        op.on_batch([ev(80, v=8)])  # bridges 0 and 150
        op.on_batch([ev(230, v=16)])  # bridges [0..150] and 300
        assert op.on_watermark(INF).events == [res(0, 400, **stats(1, 2, 4, 8, 16))]

    def test_out_of_order_event_extends_a_session_backwards(self) -> None:
        op = window("session", aggs=COUNT)
        op.on_batch([ev(500), ev(450), ev(401), ev(300)])
        assert op.on_watermark(INF).events == [res(300, 400, n=1), res(401, 600, n=3)]

    def test_fires_when_the_watermark_passes_last_plus_gap(self) -> None:
        op = window("session", aggs=COUNT)
        op.on_batch([ev(0), ev(60)])
        assert op.on_watermark(159).events == []
        op.on_batch([ev(150)])  # extends the session: it now ends at 250
        assert op.on_watermark(200).events == []
        out = op.on_watermark(250)
        assert out.events == [res(0, 250, n=3)] and out.watermark == 250

    def test_results_in_session_end_order_across_keys(self) -> None:
        op = window("session", aggs=COUNT)
        op.on_batch([ev(0, "a"), ev(90, "a"), ev(10, "b"), ev(500, "c"), ev(5, "d")])
        assert [(r["key"], r["window_end"]) for r in op.on_watermark(1000).events] == [
            ("d", 105), ("b", 110), ("a", 190), ("c", 600)]

    def test_late_events(self) -> None:
        op = window("session", aggs=COUNT)
        op.on_batch([ev(0, "a")])
        op.on_watermark(120)  # session a [0, 100) fired
        out = op.on_batch([
            ev(20, "b"),   # its own session [20, 120) has passed: late
            ev(50, "a"),   # within the gap of a's fired session: belongs to it, late
            ev(21, "b"),   # [21, 121) is still open: on time
            ev(100, "a"),  # exactly gap after a's last event: a new session, on time
        ])
        assert [(e.kind, e.event["t"]) for e in out.errors] == [("late", 20), ("late", 50)]
        assert "already fired" in out.errors[1].message
        assert op.late_count == 2
        assert op.on_watermark(INF).events == [res(21, 121, "b", n=1), res(100, 200, "a", n=1)]

    def test_unkeyed_and_malformed(self) -> None:
        op = window("session", key_fn=None, aggs=[AggSpec("total", "sum", "v")])
        out = op.on_batch([ev(0, v=1), ev(50, v="x"), ev(60, v=2), ev("later")])
        assert [e.kind for e in out.errors] == ["malformed", "malformed"]
        assert op.on_watermark(INF).events == [res(0, 160, keyed=False, total=3)]

    def test_bridge_with_a_bad_value_merges_nothing(self) -> None:
        op = window("session", aggs=[AggSpec("total", "sum", "v")])
        op.on_batch([ev(0, v=1), ev(150, v=2), ev(80, v=None)])
        assert op.on_watermark(INF).events == [res(0, 100, total=1), res(150, 250, total=2)]


# -- scheduling hints ------------------------------------------------------------------------
def test_window_id_and_earliest_window_end() -> None:
    tumbling, sliding, session = window(aggs=COUNT), window("sliding", aggs=COUNT), window("session", aggs=COUNT)
    assert tumbling.window_id(1500) == 2000 and sliding.window_id(1500) == 2000
    assert sliding.window_id(1499) == 1500 and session.window_id(1500) == 1600
    batch = [ev(2500), ev(1700), {"bad": 1}, ev(3100)]
    assert tumbling.earliest_window_end(batch) == 2000
    assert sliding.earliest_window_end(batch) == 2000  # [1000, 2000) holds 1700
    assert session.earliest_window_end(batch) == 1800
    assert tumbling.earliest_window_end([]) is None
    for op in (tumbling, sliding, session):
        op.on_watermark(2000)
    assert tumbling.earliest_window_end(batch) == 3000
    assert sliding.earliest_window_end(batch) == 2500  # [1500, 2500) holds 1700 and is open
    assert session.earliest_window_end(batch) == 2600
    assert tumbling.earliest_window_end([ev(1700)]) is None  # late


# -- snapshot / restore -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session"])
@pytest.mark.parametrize("aggs", [ALL, COUNT], ids=["all", "count"])
def test_snapshot_mid_stream_restores_to_the_same_results(kind: str, aggs: list[AggSpec]) -> None:
    keys = [("user", 1), None, 7, "a", ("nested", ("x", 2))]
    batches = [[ev(t, keys[t % 5], t % 13) for t in range(start, start + 400, 7)]
               for start in (0, 350, 900, 1300)]
    marks = [300, 800, 1250, END_OF_STREAM]

    def run(restore_after: int | None) -> list[Output]:
        op = window(kind, aggs=aggs)
        outs = []
        for i, (batch, mark) in enumerate(zip(batches, marks, strict=True)):
            outs.append(op.on_batch(batch + [ev(-5000), {"t": 1}]))  # one late, one malformed
            if i == restore_after:
                op = roundtrip(op, window(kind, aggs=aggs))
            outs.append(op.on_watermark(mark))
        outs.append(Output(events=[{"late": op.late_count, "malformed": op.malformed_count}]))
        return outs

    straight = run(None)
    assert any(o.events for o in straight)
    for cut in range(len(batches)):
        assert run(cut) == straight


def test_snapshot_is_a_copy_and_checks_the_configuration() -> None:
    op = window(aggs=ALL)
    op.on_batch([ev(1, v=1)])
    snap = op.snapshot()
    op.on_batch([ev(2, v=5)])
    # Packed whole (str keys): msgpack's copy, not the live accumulators.
    assert [[end, msgpack.unpackb(blob)] for end, blob in snap["aligned"]["packed"]] == \
        [[1000, {"a": [1, 1, 1, 1]}]]
    with pytest.raises(ValueError, match="configured"):
        window(aggs=COUNT).restore(snap)
    with pytest.raises(ValueError, match="configured"):
        window("sliding").restore(snap)


# -- properties: the operator equals a brute-force recomputation -----------------------------------
KEYS = ["a", "b", None, 3, ("t", 1)]


def brute_aligned(events: list[dict[str, Any]], size: int, slide: int, keyed: bool,
                  admitted: Any = lambda e, end: True) -> list[dict[str, Any]]:
    """Every window [k*slide, k*slide + size) over the events' range; an event
    counts in a window that contains it if `admitted(event, window end)`."""
    if not events:
        return []
    times = [e["t"] for e in events]
    out = []
    k = (min(times) - size) // slide
    while k * slide <= max(times):
        start, end = k * slide, k * slide + size
        for key in (KEYS if keyed else [None]):
            values = [e["v"] for e in events
                      if start <= e["t"] < end and (not keyed or e["k"] == key) and admitted(e, end)]
            if values:
                out.append(res(start, end, key, keyed, **stats(*values)))
        k += 1
    return out


def brute_sessions(events: list[dict[str, Any]], gap: int, keyed: bool) -> list[dict[str, Any]]:
    out = []
    for key in (KEYS if keyed else [None]):
        mine = sorted((e for e in events if not keyed or e["k"] == key), key=lambda e: e["t"])
        group: list[dict[str, Any]] = []
        for e in mine + [None]:  # type: ignore[list-item]
            if group and (e is None or e["t"] - group[-1]["t"] >= gap):
                first, last = group[0]["t"], group[-1]["t"]
                out.append(res(first, last + gap, key, keyed, **stats(*[g["v"] for g in group])))
                group = []
            if e is not None:
                group.append(e)
    return out


def canon(results: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted((r["window_end"], r["window_start"], repr(r.get("key")), sorted(r.items(), key=repr).__repr__())
                  for r in results)


@st.composite
def scripts(draw: st.DrawFn, on_time: bool) -> tuple[list[dict[str, Any]], list[tuple[str, Any]]]:
    """Events (random times, keys, values, order), cut into random batches, with
    watermarks between them. on_time: a watermark never passes a later event's time."""
    n = draw(st.integers(0, 40))
    events: list[dict[str, Any]] = [{"id": i, "t": draw(st.integers(-300, 900)), "k": draw(st.sampled_from(KEYS)),
               "v": draw(st.integers(-50, 50))} for i in range(n)]
    script: list[tuple[str, Any]] = []
    i = 0
    while i < n:
        j = i + draw(st.integers(1, 8))
        script.append(("batch", events[i:j]))
        i = j
        if draw(st.booleans()):
            rest = [e["t"] for e in events[i:]]
            high = min(rest) if on_time and rest else 1200
            script.append(("wm", draw(st.integers(-400, high)) if high > -400 else -400))
    snapshot = draw(st.booleans())
    if script and snapshot:
        script.insert(draw(st.integers(0, len(script))), ("snapshot", None))
    return events, script


def run_script(make: Any, script: list[tuple[str, Any]]) -> tuple[list[dict[str, Any]], list[Any], dict[int, float]]:
    """Run a script; returns all results, all errors, and the watermark each event met."""
    op = make()
    results: list[dict[str, Any]] = []
    errors: list[Any] = []
    met: dict[int, float] = {}
    for what, arg in script:
        if what == "snapshot":
            op = roundtrip(op, make())
            continue
        if what == "batch":
            met.update((e["id"], op.watermark) for e in arg)
            out = op.on_batch(arg)
        else:
            out = op.on_watermark(arg)
        results += out.events
        errors += out.errors
    out = op.on_watermark(END_OF_STREAM)
    results += out.events
    errors += out.errors
    assert op.late_count == len(errors)
    return results, errors, met


def assert_in_end_order(results: list[dict[str, Any]]) -> None:
    ends = [r["window_end"] for r in results]
    assert ends == sorted(ends)


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
sizes = st.integers(1, 400).flatmap(lambda size: st.tuples(st.just(size), st.integers(1, size)))


@FAST
@given(script=scripts(on_time=True), size_slide=sizes, tumbling=st.booleans(), keyed=st.booleans())
def test_property_aligned_windows_equal_brute_force(script: Any, size_slide: tuple[int, int],
                                                    tumbling: bool, keyed: bool) -> None:
    events, steps = script
    size, slide = size_slide
    if tumbling:
        slide = size
        make = lambda: window("tumbling", size_ms=size, key_fn=by_k if keyed else None)  # noqa: E731
    else:
        make = lambda: window("sliding", size_ms=size, slide_ms=slide, key_fn=by_k if keyed else None)  # noqa: E731
    results, errors, _ = run_script(make, steps)
    assert errors == []
    assert_in_end_order(results)
    assert canon(results) == canon(brute_aligned(events, size, slide, keyed))


@FAST
@given(script=scripts(on_time=False), size_slide=sizes, keyed=st.booleans())
def test_property_aligned_windows_with_late_events(script: Any, size_slide: tuple[int, int],
                                                   keyed: bool) -> None:
    """Any watermarks: an event counts exactly in the windows still open when it
    arrived, and is late exactly when none was."""
    events, steps = script
    size, slide = size_slide
    results, errors, met = run_script(
        lambda: window("sliding", size_ms=size, slide_ms=slide, key_fn=by_k if keyed else None), steps)

    def open_windows(e: dict[str, Any]) -> list[int]:
        k = (e["t"] - size) // slide
        ends = [s * slide + size for s in range(k, e["t"] // slide + 1) if s * slide <= e["t"] < s * slide + size]
        return [end for end in ends if end > met[e["id"]]]

    assert sorted(err.event["id"] for err in errors) == sorted(e["id"] for e in events if not open_windows(e))
    assert all(err.kind == "late" for err in errors)
    expected = brute_aligned(events, size, slide, keyed, admitted=lambda e, end: end > met[e["id"]])
    assert canon(results) == canon(expected)


@FAST
@given(script=scripts(on_time=True), gap=st.integers(1, 300), keyed=st.booleans())
def test_property_sessions_equal_brute_force(script: Any, gap: int, keyed: bool) -> None:
    events, steps = script
    results, errors, _ = run_script(lambda: window("session", gap_ms=gap, key_fn=by_k if keyed else None), steps)
    assert errors == []
    assert_in_end_order(results)
    assert canon(results) == canon(brute_sessions(events, gap, keyed))


@FAST
@given(script=scripts(on_time=False), gap=st.integers(1, 300), keyed=st.booleans())
def test_property_sessions_with_late_events(script: Any, gap: int, keyed: bool) -> None:
    """Any watermarks: the results are the sessions of the events let in, an event
    at or past the watermark is always let in, and a late event is either behind
    the watermark by a gap or within the gap of a session already emitted."""
    events, steps = script
    results, errors, met = run_script(lambda: window("session", gap_ms=gap, key_fn=by_k if keyed else None), steps)
    late = {err.event["id"] for err in errors}
    assert all(e["t"] < met[e["id"]] for e in events if e["id"] in late)
    admitted = [e for e in events if e["id"] not in late]
    assert canon(results) == canon(brute_sessions(admitted, gap, keyed))
    # The sessions that were emitted before each late event arrived are the full
    # results minus those still open; it is enough that some result explains it.
    for e in events:
        if e["id"] in late and e["t"] + gap > met[e["id"]]:
            assert any(r["window_end"] <= met[e["id"]] and r.get("key") == (e["k"] if keyed else None)
                       and r["window_end"] - gap <= e["t"] < r["window_end"] for r in results)


# -- the tumbling-count fast path equals the general path ------------------------------------------
class Celsius(float):
    pass


class Millis(int):
    pass


odd_events = st.one_of(
    st.builds(ev, st.integers(-500, 3000), st.sampled_from(KEYS)),
    st.builds(ev, st.floats(-500, 3000), st.sampled_from(KEYS)),
    st.builds(ev, st.integers(0, 3000).map(Millis)),  # valid, but not at first sight
    st.builds(ev, st.floats(0, 3000).map(Celsius)),
    st.builds(ev, st.sampled_from([None, "12", True, math.nan, math.inf])),
    st.builds(ev, st.integers(0, 3000), st.just(["un", "hashable"])),
    st.just({"k": "a", "v": 1}),  # no time
    st.just({"t": 5, "v": 1}),  # the key function raises
    st.just("not an event"),
)


@FAST
@given(steps=st.lists(st.one_of(st.lists(odd_events, max_size=12), st.integers(-600, 3500)), max_size=12))
def test_property_tumbling_count_fast_path_equals_general_path(steps: list[Any]) -> None:
    """Same results, errors (in order), counts and snapshots with and without the fast path."""
    fast, general = window(aggs=COUNT), window(aggs=COUNT)
    general._tumbling_counts = None  # every event through _admitted and AlignedWindower.add
    for step in steps + [END_OF_STREAM]:
        outs = [op.on_batch(step) if isinstance(step, list) else op.on_watermark(step)
                for op in (fast, general)]
        assert outs[0] == outs[1]
        assert fast.snapshot() == general.snapshot()
