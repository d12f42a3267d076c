"""The windowed join: hand-computed cases, then a property against a nested loop."""

from __future__ import annotations

import math
import operator
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors.operators.base import END_OF_STREAM, Output
from cameo_actors.operators.join import WindowJoinOperator

INF = math.inf
LEFT, RIGHT = 0, 1


def join(kind: str = "tumbling", size_ms: int = 1000, slide_ms: int | None = None,
         key: str = "id") -> WindowJoinOperator:
    return WindowJoinOperator("j1", kind=kind, size_ms=size_ms, slide_ms=slide_ms,
                              left_key_fn=operator.itemgetter(key),
                              right_key_fn=operator.itemgetter(key),
                              left_time_field="t", right_time_field="ts")


def L(t: Any, key: Any, **more: Any) -> dict[str, Any]:
    return {"t": t, "id": key, **more}


def R(ts: Any, key: Any, **more: Any) -> dict[str, Any]:
    return {"ts": ts, "id": key, **more}


def pair(s: int, e: int, key: Any, left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "window_start": s, "window_end": e, "t": e - 1, "left": left, "right": right}


def both(op: WindowJoinOperator, wm: float) -> Output:
    """Move both ports' watermarks to `wm`; the second call is the one that fires."""
    first = op.on_watermark(wm, LEFT)
    assert first.events == []
    return op.on_watermark(wm, RIGHT)


def roundtrip(op: WindowJoinOperator, fresh: WindowJoinOperator) -> WindowJoinOperator:
    fresh.restore(msgpack.unpackb(msgpack.packb(op.snapshot(), use_bin_type=True), raw=False))
    return fresh


@pytest.mark.parametrize("kw, match", [
    ({"kind": "session", "size_ms": 10}, "kind"),
    ({"kind": "tumbling", "size_ms": 0}, "size_ms"),
    ({"kind": "sliding", "size_ms": 10, "slide_ms": 20}, "slide_ms must be <= size_ms"),
    ({"kind": "sliding", "size_ms": 10, "slide_ms": None}, "slide_ms"),
    ({"kind": "tumbling", "size_ms": 10, "left_key_fn": None}, "left key function"),
    ({"kind": "tumbling", "size_ms": 10, "left_time_field": "left"}, "clashes"),
])
def test_bad_parameters_raise(kw: dict[str, Any], match: str) -> None:
    args = {"left_key_fn": len, "right_key_fn": len, "left_time_field": "t", "right_time_field": "t", **kw}
    with pytest.raises(ValueError, match=match):
        WindowJoinOperator("j1", **args)


def test_tumbling_inner_join_per_window_and_key() -> None:
    op = join()
    l1, l2, l3 = L(10, 1, x="l1"), L(20, 1, x="l2"), L(30, 2, x="l3")
    r1, r2, r3 = R(900, 1, y="r1"), R(1100, 1, y="r2"), R(40, 3, y="r3")
    assert op.on_batch([l1, l2, l3], LEFT).events == []
    assert op.on_batch([r1, r2, r3], RIGHT).events == []
    # key 2 has no right, key 3 no left, r2 is in the next window: only key 1 pairs.
    out = both(op, 1000)
    assert out.events == [pair(0, 1000, 1, l1, r1), pair(0, 1000, 1, l2, r1)]
    assert out.watermark == 1000
    assert both(op, END_OF_STREAM).events == []


def test_fires_only_when_both_ports_pass_the_window_end() -> None:
    op = join()
    op.on_batch([L(5, "k")], LEFT)
    op.on_batch([R(6, "k")], RIGHT)
    assert op.on_watermark(5000, LEFT).events == []
    assert op.watermark == -INF
    out = op.on_watermark(999, RIGHT)
    assert out.events == [] and out.watermark == 999
    # The left port is far ahead, yet a left event on time for the join's watermark is fine.
    assert op.on_batch([L(7, "k")], LEFT).errors == []
    out = op.on_watermark(1000, RIGHT)
    assert [(e["left"]["t"], e["right"]["ts"]) for e in out.events] == [(5, 6), (7, 6)]


def test_sliding_join_emits_a_pair_once_per_shared_window() -> None:
    op = join("sliding", size_ms=1000, slide_ms=500)
    left, right = L(600, "k"), R(900, "k")
    op.on_batch([left], LEFT)
    op.on_batch([right], RIGHT)
    out = both(op, INF)
    assert out.events == [pair(0, 1000, "k", left, right), pair(500, 1500, "k", left, right)]


def test_out_of_order_and_window_end_order() -> None:
    op = join()
    op.on_batch([L(2500, "a"), L(100, "b"), L(1500, "a")], LEFT)
    op.on_batch([R(1999, "a"), R(2001, "a"), R(0, "b")], RIGHT)
    out = both(op, 3000)
    assert [(e["window_end"], e["key"], e["left"]["t"], e["right"]["ts"]) for e in out.events] == [
        (1000, "b", 100, 0), (2000, "a", 1500, 1999), (3000, "a", 2500, 2001)]


def test_late_events_per_side_are_counted() -> None:
    op = join()
    both(op, 1000)
    out = op.on_batch([L(999, 1), L(1000, 1)], LEFT)
    out2 = op.on_batch([R(3, 1)], RIGHT)
    assert [(e.kind, e.event) for e in out.errors + out2.errors] == [("late", L(999, 1)), ("late", R(3, 1))]
    assert "right event at ts=3" in out2.errors[0].message
    assert op.late_count == 2


@pytest.mark.parametrize("port, event, match", [
    (LEFT, {"id": 1}, "time field 't' is missing"),
    (RIGHT, L(5, 1), "time field 'ts' is missing"),  # a left event on the right port
    (RIGHT, R(False, 1), "got bool False"),
    (LEFT, {"t": 5}, "left key function raised KeyError"),
    (RIGHT, R(5, {"a": 1}), "unhashable dict"),
])
def test_malformed_events(port: int, event: Any, match: str) -> None:
    op = join()
    out = op.on_batch([event], port)
    assert [e.kind for e in out.errors] == ["malformed"] and match in out.errors[0].message
    assert op.malformed_count == 1
    op.on_batch([L(1, 1)], LEFT)
    op.on_batch([R(1, 1)], RIGHT)
    assert len(both(op, INF).events) == 1


def test_hints_use_the_port_time_field() -> None:
    op = join("sliding", size_ms=1000, slide_ms=500)
    assert op.window_id(1200) == 1500
    assert op.earliest_window_end([L(1200, 1), L(2600, 1)], LEFT) == 1500
    assert op.earliest_window_end([L(1200, 1)], RIGHT) is None  # no "ts" field
    assert op.earliest_window_end([R(1200, 1)], RIGHT) == 1500
    both(op, 1500)
    assert op.earliest_window_end([R(1200, 1)], RIGHT) == 2000
    assert op.earliest_window_end([R(900, 1)], RIGHT) is None


def test_snapshot_mid_stream_restores_to_the_same_results() -> None:
    # Keys are tuples made by the key functions (events themselves hold msgpack types).
    keys = [1, None, 3, "x"]
    lefts = [L(t, keys[t % 4], n=t) for t in range(0, 3000, 37)]
    rights = [R(t, keys[t % 4], n=t) for t in range(0, 3000, 53)]
    marks = [700, 1400, 2100, END_OF_STREAM]

    def make() -> WindowJoinOperator:
        return WindowJoinOperator("j1", kind="sliding", size_ms=1000, slide_ms=250,
                                  left_key_fn=lambda e: ("L", e["id"]), right_key_fn=lambda e: ("L", e["id"]),
                                  left_time_field="t", right_time_field="ts")

    def run(cut: int | None) -> list[Output]:
        op = make()
        outs = []
        for i, mark in enumerate(marks):
            lo = i * 750
            outs.append(op.on_batch([e for e in lefts if lo <= e["t"] < lo + 750] + [L(-9, 1)], LEFT))
            outs.append(op.on_batch([e for e in rights if lo <= e["ts"] < lo + 750] + [{"id": 1}], RIGHT))
            if i == cut:
                op = roundtrip(op, make())
            outs.append(op.on_watermark(mark, LEFT))
            outs.append(op.on_watermark(mark, RIGHT))
        outs.append(Output(events=[{"late": op.late_count, "malformed": op.malformed_count}]))
        return outs

    straight = run(None)
    assert sum(len(o.events) for o in straight) > 100
    for cut in range(len(marks)):
        assert run(cut) == straight
    with pytest.raises(ValueError, match="configured"):
        join("tumbling").restore(join("sliding", slide_ms=500).snapshot())


# -- property: the join equals a nested loop ---------------------------------------------------
KEYS = [1, 2, "a", None, (0, "t")]


@st.composite
def join_scripts(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[str, int, Any]]]:
    """Left and right events in random order and batches, with per-port watermarks
    that never pass a later event of that port, and maybe a snapshot."""
    n = draw(st.integers(0, 30))
    events: list[tuple[int, dict[str, Any]]] = []
    for i in range(n):
        port = draw(st.sampled_from([LEFT, RIGHT]))
        t = draw(st.integers(-200, 800))
        e: dict[str, Any] = {"id": i, "key": draw(st.sampled_from(KEYS)), ("t" if port == LEFT else "ts"): t}
        events.append((port, e))
    script: list[tuple[str, int, Any]] = []
    i = 0
    while i < n:
        j = i + draw(st.integers(1, 6))
        for port in (LEFT, RIGHT):
            batch = [e for p, e in events[i:j] if p == port]
            if batch:
                script.append(("batch", port, batch))
        i = j
        for port in (LEFT, RIGHT):
            if draw(st.booleans()):
                rest: list[int] = [e["t"] if port == LEFT else e["ts"] for p, e in events[i:] if p == port]
                high = min(rest, default=1000)
                script.append(("wm", port, draw(st.integers(min(-300, high), high))))
    snapshot = draw(st.booleans())
    if script and snapshot:
        script.insert(draw(st.integers(0, len(script))), ("snapshot", 0, None))
    return [e for _, e in events], script


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=join_scripts(), size=st.integers(1, 300), slide_frac=st.floats(0.01, 1), sliding=st.booleans())
def test_property_join_equals_nested_loop(script: Any, size: int, slide_frac: float, sliding: bool) -> None:
    events, steps = script
    slide = max(1, int(size * slide_frac)) if sliding else size

    def make() -> WindowJoinOperator:
        return WindowJoinOperator("j1", kind="sliding" if sliding else "tumbling", size_ms=size,
                                  slide_ms=slide, left_key_fn=operator.itemgetter("key"),
                                  right_key_fn=operator.itemgetter("key"),
                                  left_time_field="t", right_time_field="ts")

    op = make()
    results: list[dict[str, Any]] = []
    for what, port, arg in steps:
        if what == "snapshot":
            op = roundtrip(op, make())
            continue
        out = op.on_batch(arg, port) if what == "batch" else op.on_watermark(arg, port)
        assert out.errors == []
        results += out.events
    results += op.on_watermark(INF, LEFT).events + op.on_watermark(INF, RIGHT).events
    ends = [r["window_end"] for r in results]
    assert ends == sorted(ends)

    # Brute force: every window over the range, every left x right pair inside it.
    lefts = [e for e in events if "t" in e]
    rights = [e for e in events if "ts" in e]
    expected = []
    times = [e["t"] if "t" in e else e["ts"] for e in events]
    if times:
        k = (min(times) - size) // slide
        while k * slide <= max(times):
            s, e = k * slide, k * slide + size
            for left in lefts:
                for right in rights:
                    if s <= left["t"] < e and s <= right["ts"] < e and left["key"] == right["key"]:
                        expected.append((s, e, e - 1, repr(left["key"]), left["id"], right["id"]))
            k += 1
    got = [(r["window_start"], r["window_end"], r["t"], repr(r["key"]), r["left"]["id"], r["right"]["id"])
           for r in results]
    assert sorted(got) == sorted(expected)
