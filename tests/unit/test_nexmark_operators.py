"""The operators Nexmark needs: the interval join, the keyed process (state and
timers per key) and the max_by / top aggregates. Each against brute force
(hypothesis), through snapshot/restore and key moves, with its error records,
spec forms and an in-process run."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from types import SimpleNamespace as A
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cameo_actors
from cameo_actors import Dataflow, DataflowSpec, KeyedProcess, SpecError, count, max_by, top
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import AggSpec, JoinStep, ProcessStep, WindowStep
from cameo_actors.dataflow.streams import stream_time_field
from cameo_actors.dataflow.validate import check_pool_limits
from cameo_actors.operators.aggregates import (
    MalformedEvent,
    canonical_bytes,
    compile_aggregates,
)
from cameo_actors.operators.base import Output
from cameo_actors.operators.bins import DEFAULT_BINS, stable_hash
from cameo_actors.operators.build import build_operator
from cameo_actors.operators.interval_join import IntervalJoinOperator
from cameo_actors.operators.process import ProcessContext, ProcessOperator, make_process
from cameo_actors.operators.state_store import BACKENDS
from cameo_actors.operators.windowed_operator import WindowedOperator
from cameo_actors.operators.windows import WindowOperator
from cameo_actors.runtime._private.controller.plans import STRATEGIES
from cameo_actors.runtime._private.executor.activation import _window_timing, frontier_timing
from cameo_actors.runtime._private.placement import is_keyed_step
from cameo_actors.testing import Watermark, run_local
from tests.shared.zoo import SCHEMA, canon, events
from tests.unit.test_migration import run_with_migrations
from tests.unit.test_state_moves import assert_moves_change_nothing, scripts, window

INF = math.inf
HERE = __name__  # user classes below are named by import path: f"{HERE}:RunningCount"
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Event keys; a list stands for a tuple key (events hold msgpack types only).
KEYS: list[Any] = ["a", "b", 3, None, ["t", 1]]
#: Bins of the operators of `run`: few, so that some keys share a bin ("a" and 3 share
#: bin 3, "b" and None bin 1; ("t", 1) is alone in bin 0).
BINS = 4


def key_of(e: dict[str, Any]) -> Any:
    k = e["k"]
    return tuple(k) if isinstance(k, list) else k


def roundtrip(data: Any) -> Any:
    """Data as another process gets it."""
    return msgpack.unpackb(msgpack.packb(data, use_bin_type=True), raw=False)


def restored(op: WindowedOperator, fresh: WindowedOperator) -> WindowedOperator:
    fresh.restore(roundtrip(op.snapshot()))
    return fresh


def bin_of(key: Any, bins: int = DEFAULT_BINS) -> int:
    return stable_hash(key) & (bins - 1)


def assert_index_follows_state(op: WindowedOperator, bins: int = DEFAULT_BINS) -> None:
    """The operator's bins are exactly those of the keys that have state."""
    assert op.state_bins() == sorted({bin_of(k, bins) for k in op.state_keys()})


# == a script runner: one operator, two with key moves, or restored at each cut ==============
Step = tuple[str, int, Any]


@st.composite
def streams(draw: st.DrawFn, ports: int, time_field: Callable[[int], str]) -> list[Step]:
    """Events of random keys in rough time order (some late) on `ports` ports, in
    batches; a watermark on a random port now and then; "cut" steps (a move of
    random keys, or a snapshot and restore)."""
    n = draw(st.integers(0, 40))
    base = sorted(draw(st.lists(st.integers(0, 300), min_size=n, max_size=n)))
    steps: list[Step] = []
    i = 0
    while i < n:
        j = min(n, i + draw(st.integers(1, 5)))
        batches: list[list[dict[str, Any]]] = [[] for _ in range(ports)]
        for m in range(i, j):
            port = draw(st.integers(0, ports - 1))
            batches[port].append({"id": m, time_field(port): base[m] - draw(st.integers(0, 40)),
                                  "k": draw(st.sampled_from(KEYS)), "v": draw(st.integers(-5, 5))})
        steps += [("batch", port, batch) for port, batch in enumerate(batches) if batch]
        i = j
        if draw(st.booleans()):
            steps.append(("wm", draw(st.integers(0, ports - 1)),
                          base[min(i, n - 1)] - draw(st.integers(0, 30))))
        if draw(st.integers(0, 2)) == 0:
            steps.append(("cut", 0, draw(st.lists(st.sampled_from(KEYS), unique_by=repr))))
    return steps


def run(make: Callable[[], WindowedOperator], steps: list[Step], mode: str
        ) -> tuple[list[str], list[tuple[str, int]]]:
    """(results, sorted (error kind, event id)) of `steps`: on one operator ("single"),
    restored from its snapshot at each cut ("restore"), or on two operators where each
    cut moves the bins of the chosen keys to the other one ("split"). The operators
    have `BINS` bins; after every step, their bins are those of their keys."""

    def made() -> WindowedOperator:
        op = make()
        op.use_bins(BINS)
        return op

    ops = [made(), made()] if mode == "split" else [made()]
    owner: dict[int, int] = {}  # bin -> the operator that has it (default 0)
    outs: list[Output] = []
    for n_step, (what, port, arg) in enumerate(steps):
        if what == "batch":
            for i, op in enumerate(ops):
                mine = [e for e in arg if owner.get(bin_of(key_of(e), BINS), 0) == i]
                if mine:
                    outs.append(op.on_batch(mine, port))
        elif what == "wm":
            outs += [op.on_watermark(arg, port) for op in ops]
        elif mode == "restore":
            ops = [restored(ops[0], made())]
        elif mode == "split":
            bins = sorted({bin_of(key_of({"k": k}), BINS) for k in arg})
            leaving = [[b for b in bins if owner.get(b, 0) == src] for src in (0, 1)]
            for src, bs in enumerate(leaving):
                keys = {k for k in ops[src].state_keys() if bin_of(k, BINS) in bs}
                rows, n = ops[src].take_bins(bs)
                assert n == len(keys)
                # Rows just unpacked are the receiver's to keep; every other cut, a copy.
                ops[1 - src].put_state(roundtrip(rows), owned=n_step % 2 == 0)
                assert not set(bs) & set(ops[src].state_bins())
                assert not keys & set(ops[src].state_keys())
                assert keys <= set(ops[1 - src].state_keys())
                owner.update((b, 1 - src) for b in bs)
            assert not set(ops[0].state_keys()) & set(ops[1].state_keys())
        for op in ops:
            assert_index_follows_state(op, BINS)
    outs += [op.on_watermark(INF, p) for op in ops for p in range(op.n_inputs)]
    for op in ops:
        assert_index_follows_state(op, BINS)
    errors = sorted((e.kind, e.event["id"]) for o in outs for e in o.errors)
    assert sum(op.late_count for op in ops) == len(errors)
    return canon([r for o in outs for r in o.events]), errors


def assert_same_in_every_mode(make: Callable[[], WindowedOperator], steps: list[Step],
                              expected: tuple[list[str], list[tuple[str, int]]]) -> None:
    assert run(make, steps, "single") == expected
    assert run(make, steps, "restore") == expected
    assert run(make, steps, "split") == expected


# == 1. the interval join =========================================================================
LEFT, RIGHT = 0, 1


def ijoin(lower: float = -10, upper: float = 20) -> IntervalJoinOperator:
    return IntervalJoinOperator("ij", lower_ms=lower, upper_ms=upper, left_key_fn=key_of,
                                right_key_fn=key_of, left_time_field="t", right_time_field="ts")


def L(t: Any, k: Any = "a", **more: Any) -> dict[str, Any]:
    return {"t": t, "k": k, **more}


def R(ts: Any, k: Any = "a", **more: Any) -> dict[str, Any]:
    return {"ts": ts, "k": k, **more}


def pair(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    return {"key": key_of(left), "t": max(left["t"], right["ts"]), "left": left, "right": right}


@pytest.mark.parametrize("kw, match", [
    ({"lower_ms": 5, "upper_ms": 1}, "lower_ms .* must be <= upper_ms"),
    ({"lower_ms": INF}, "lower_ms must be a finite number"),
    ({"upper_ms": "10"}, "upper_ms must be a finite number"),
    ({"left_key_fn": None}, "left key function"),
    ({"left_time_field": "right"}, "clashes"),
    ({"right_time_field": ""}, "right_time_field"),
])
def test_interval_join_bad_parameters_raise(kw: dict[str, Any], match: str) -> None:
    args = {"lower_ms": 0, "upper_ms": 10, "left_key_fn": key_of, "right_key_fn": key_of,
            "left_time_field": "t", "right_time_field": "ts", **kw}
    with pytest.raises(ValueError, match=match):
        IntervalJoinOperator("ij", **args)


def test_interval_join_emits_a_pair_as_soon_as_both_are_there() -> None:
    op = ijoin(lower=-10, upper=20)
    l1, l2 = L(100, x=1), L(100, "b")
    assert op.on_batch([l1, l2], LEFT).events == []
    r1, r2, r3, r4 = R(89), R(90, y=2), R(120), R(121)  # tl - 10 <= tr <= tl + 20
    assert op.on_batch([r1, r2, r3, r4], RIGHT).events == [pair(l1, r2), pair(l1, r3)]
    l3 = L(130)  # joins rights in [120, 150]: r3, r4
    assert op.on_batch([l3], LEFT).events == [pair(l3, r3), pair(l3, r4)]
    assert pair(l1, r3)["t"] == 120 and pair(l3, r3)["t"] == 130  # max(tl, tr)
    op.on_watermark(INF, LEFT)
    assert op.on_watermark(INF, RIGHT).events == []  # nothing fires at a watermark
    assert op.state_keys() == []


def test_interval_join_late_and_malformed_events_are_reported() -> None:
    op = ijoin()
    op.on_watermark(100, LEFT)
    assert op.watermark == -INF  # the minimum over both ports
    out = op.on_batch([L(50)], LEFT)  # not late yet: the right port is behind
    assert out.errors == []
    op.on_watermark(100, RIGHT)
    bad = [L(99), L(None), L(True), {"k": "a"}, "text", L(150, {1}), L(150, {"u": 1})]
    out = op.on_batch(bad, LEFT)
    assert [e.kind for e in out.errors] == ["late"] + ["malformed"] * 6
    assert "behind the watermark 100" in out.errors[0].message
    assert "time field 't'" in out.errors[1].message
    assert "unhashable set" in out.errors[5].message
    assert (op.late_count, op.malformed_count) == (1, 6)
    raising = IntervalJoinOperator("ij", lower_ms=0, upper_ms=1, left_key_fn=lambda e: e["nope"],
                                   right_key_fn=key_of, left_time_field="t",
                                   right_time_field="ts")
    out = raising.on_batch([L(1)], LEFT)
    assert [e.kind for e in out.errors] == ["malformed"]
    assert "left key function raised KeyError" in out.errors[0].message
    assert out.errors[0].step == "ij"


def test_interval_join_state_is_dropped_once_it_cannot_match() -> None:
    op = ijoin(lower=-10, upper=20)
    op.on_batch([L(100), L(200), L(200, "b")], LEFT)
    op.on_batch([R(100), R(111), R(300, "b")], RIGHT)
    for port in (LEFT, RIGHT):
        op.on_watermark(121, port)  # left 100 expires at 120 < 121; right 100 at 110, 111 at 121
    state = op._keys["a"]
    assert state.times == ([200], [111])
    for port in (LEFT, RIGHT):
        op.on_watermark(221, port)
    assert state.times == ([], []) and "a" not in op._keys
    assert op._keys["b"].times == ([], [300])
    assert op.state_keys() == ["b"]


def brute_force_interval_join(steps: list[Step], lower: int, upper: int
                              ) -> tuple[list[str], list[tuple[str, int]]]:
    """Every pair of events that were not late on arrival, by a nested loop."""
    port_wms = [-INF, -INF]
    on_time: list[list[dict[str, Any]]] = [[], []]
    late: list[tuple[str, int]] = []
    for what, port, arg in steps:
        if what == "wm":
            port_wms[port] = max(port_wms[port], arg)
        elif what == "batch":
            tf = "t" if port == 0 else "ts"
            for e in arg:
                if e[tf] < min(port_wms):
                    late.append(("late", e["id"]))
                else:
                    on_time[port].append(e)
    pairs = [pair(lft, rgt) for lft in on_time[0] for rgt in on_time[1]
             if key_of(lft) == key_of(rgt) and lft["t"] + lower <= rgt["ts"] <= lft["t"] + upper]
    return canon(pairs), sorted(late)


@FAST
@given(data=st.data(), lower=st.integers(-60, 60), width=st.integers(0, 80))
def test_property_interval_join_is_the_nested_loop(data: st.DataObject, lower: int,
                                                   width: int) -> None:
    steps = data.draw(streams(2, lambda port: "t" if port == 0 else "ts"))
    upper = lower + width
    expected = brute_force_interval_join(steps, lower, upper)
    assert_same_in_every_mode(lambda: ijoin(lower, upper), steps, expected)


def test_interval_join_snapshot_checks_the_configuration_and_rows_are_copies() -> None:
    op = ijoin()
    op.on_batch([L(10)], LEFT)
    snap = op.snapshot()
    op.on_batch([L(11)], LEFT)
    assert snap["keys"] == [["a", [L(10)], []]]
    with pytest.raises(ValueError, match="snapshot is of a join configured as"):
        ijoin(0, 5).restore(snap)
    rows, n = op.take_bins([bin_of("a")])
    assert n == 1 and op.state_keys() == [] and op.state_bins() == []
    other = ijoin()
    other.put_state(rows)
    other.on_batch([L(12)], LEFT)
    assert rows == [["a", [L(10), L(11)], []]]
    assert other.state_bins() == [bin_of("a")]
    with pytest.raises(ValueError, match="step 'ij': key 'a' already has state here"):
        other.put_state(rows)
    # Owned rows are kept as they are: no copy.
    kept = ijoin()
    kept.put_state(rows, owned=True)
    assert kept._keys["a"].events[0] is rows[0][1]


def test_interval_join_index_follows_the_state() -> None:
    op = ijoin(lower=-10, upper=20)
    op.use_bins(8)
    assert op.state_bins() == []
    op.on_batch([L(100), L(200, "b"), L(100, ("t", 1)), L(150, 3)], LEFT)
    op.on_batch([R(100), R(300, None)], RIGHT)
    assert_index_follows_state(op, 8)
    assert sorted(map(repr, op.state_keys())) == sorted(map(repr, ["a", "b", ("t", 1), 3, None]))
    for port in (LEFT, RIGHT):
        op.on_watermark(121, port)  # a, ("t", 1) expire; 3, b, None stay
    assert sorted(map(repr, op.state_keys())) == sorted(map(repr, ["b", 3, None]))
    assert_index_follows_state(op, 8)
    again = ijoin(lower=-10, upper=20)
    again.use_bins(8)
    restored(op, again)
    assert again.state_bins() == op.state_bins()
    assert_index_follows_state(again, 8)
    rows, n = op.take_bins([bin_of("b", 8)])
    assert n == len(rows) >= 1 and "b" not in op.state_keys()
    assert_index_follows_state(op, 8)
    op.put_state(roundtrip(rows), owned=True)
    assert "b" in op.state_keys()
    assert_index_follows_state(op, 8)
    again.restore(roundtrip(ijoin(lower=-10, upper=20).snapshot()))  # replaces, not adds
    assert again.state_keys() == [] and again.state_bins() == []
    for port in (LEFT, RIGHT):
        op.on_watermark(INF, port)
    assert op.state_keys() == [] and op.state_bins() == []
    fresh = ijoin()
    fresh.on_batch([L(1)], LEFT)
    with pytest.raises(ValueError, match="the bin count is set before any state"):
        fresh.use_bins(16)


# == 2. the keyed process =========================================================================
class RunningCount(KeyedProcess):
    """Per key: the running count of its events, and a total once it is idle for 100 ms
    (an inactivity timer moved by every event); then the key is forgotten."""

    def on_event(self, state: dict[str, Any], event: dict[str, Any], ctx: ProcessContext) -> Any:
        state["n"] = state.get("n", 0) + 1
        if "due" in state:
            ctx.cancel_timer(state["due"])
        state["due"] = event["ts"] + 100
        ctx.set_timer(state["due"])
        return [{"key": ctx.key, "ts": event["ts"], "n": state["n"]}]

    def on_timer(self, state: dict[str, Any], time: float, ctx: ProcessContext) -> Any:
        total = state["n"]
        state.clear()
        return {"key": ctx.key, "ts": time, "total": total}


class Chain(KeyedProcess):
    """An event sets a timer at its time; each timer emits and sets the next one 10 ms
    later while the event's "v" allows (timers set by timers)."""

    def on_event(self, state: dict[str, Any], event: dict[str, Any], ctx: ProcessContext) -> Any:
        state["left"] = event["v"]
        ctx.set_timer(event["ts"])
        return None

    def on_timer(self, state: dict[str, Any], time: float, ctx: ProcessContext) -> Any:
        state["left"] -= 1
        if state["left"] > 0:
            ctx.set_timer(time + 10)
        else:
            state.clear()
        yield {"key": ctx.key, "ts": time, "wm": ctx.watermark}


class Forever(KeyedProcess):
    """A timer that re-arms itself: at its own time, and at the watermark."""

    def on_event(self, state: dict[str, Any], event: dict[str, Any], ctx: ProcessContext) -> Any:
        ctx.set_timer(event["ts"])

    def on_timer(self, state: dict[str, Any], time: float, ctx: ProcessContext) -> Any:
        ctx.set_timer(time)
        ctx.set_timer(ctx.watermark)
        ctx.set_timer(time + 1)
        return [{"ts": time}]


class Faulty(KeyedProcess):
    def on_event(self, state: dict[str, Any], event: dict[str, Any], ctx: ProcessContext) -> Any:
        v = event["v"]
        state["seen"] = state.get("seen", 0) + 1
        if v == 0:
            raise ZeroDivisionError("v is 0")
        if v == 1:
            return 5
        if v == 2:
            return [{"ok": 1}, "nope"]
        if v == 3:
            ctx.set_timer(-1)
        if v == 4:
            ctx.set_timer("soon")
        if v == 5:
            state["thing"] = object()
        return ({"ok": i} for i in range(2))

    def on_timer(self, state: dict[str, Any], time: float, ctx: ProcessContext) -> Any:
        raise RuntimeError("boom")


class NoArgs:
    def __init__(self, x: int) -> None:
        self.x = x


class NoOnEvent:
    pass


def not_a_class(e: dict[str, Any]) -> dict[str, Any]:
    return e


def process(cls: type = RunningCount, time_field: str | None = "ts") -> ProcessOperator:
    return ProcessOperator("p", cls(), key_fn=key_of, time_field=time_field)


def P(ts: Any, k: Any = "a", v: int = 1, **more: Any) -> dict[str, Any]:
    return {"ts": ts, "k": k, "v": v, **more}


def test_process_keeps_state_per_key_and_fires_timers_in_time_then_key_order() -> None:
    op = process()
    out = op.on_batch([P(0), P(5, "b"), P(10), P(5, ("t", 1))])
    assert out.events == [{"key": "a", "ts": 0, "n": 1}, {"key": "b", "ts": 5, "n": 1},
                          {"key": "a", "ts": 10, "n": 2}, {"key": ("t", 1), "ts": 5, "n": 1}]
    assert sorted(op._timers.items(), key=repr) == [
        ("a", {110}), ("b", {105}), (("t", 1), {105})]  # a's timer moved from 100 to 110
    out = op.on_watermark(110)
    # Timers at 105: ("t", 1) (msgpack: a list, 92 ...) before "b" (a str, a1 62); then "a".
    assert out.events == [{"key": ("t", 1), "ts": 105, "total": 1},
                          {"key": "b", "ts": 105, "total": 1},
                          {"key": "a", "ts": 110, "total": 2}]
    assert out.watermark == 110
    assert op.state_keys() == []  # empty state, no timers: forgotten


def test_process_timers_set_by_timers_fire_in_the_same_advance() -> None:
    op = process(Chain)
    op.on_batch([P(0, v=4), P(3, "b", v=2)])
    out = op.on_watermark(25)
    assert [(e["key"], e["ts"], e["wm"]) for e in out.events] == [
        ("a", 0, 25), ("b", 3, 25), ("a", 10, 25), ("b", 13, 25), ("a", 20, 25)]
    assert op._timers == {"a": {30}}
    assert op.on_watermark(100).events == [{"key": "a", "ts": 30, "wm": 100}]
    assert op.state_keys() == []


def test_process_timer_loops_end() -> None:
    # A timer set again at its own time (or at the watermark) fires at the next advance;
    # at the end of the stream, a later one set by a timer stays pending.
    op = process(Forever)
    op.on_batch([P(5)])
    assert [e["ts"] for e in op.on_watermark(7).events] == [5, 6, 7]
    assert op._timers == {"a": {5, 6, 7, 8}}
    assert [e["ts"] for e in op.on_watermark(8).events] == [5, 6, 7, 8]
    assert [e["ts"] for e in op.on_watermark(INF).events] == [5, 6, 7, 8, 9]
    assert op._timers == {"a": {5, 6, 7, 8, 9, 10, INF}}


def test_process_a_guard_holds_over_an_entry_a_cancelled_timer_left() -> None:
    # 82 is set and cancelled (its queue entry stays, stale), 81 set; at the end of the
    # stream 81 fires and sets 82 again, later than itself: pending, though the stale
    # entry of the cancelled 82 comes due in the same advance.
    op = process(Toggle)
    op.on_batch([P(72, v=2), P(72, v=3), P(71, v=2)])
    assert [e["ts"] for e in op.on_watermark(INF).events] == [81]
    assert op._timers == {"a": {82}}


def test_process_late_malformed_and_user_function_errors() -> None:
    op = process(Faulty)
    op.on_watermark(10)
    out = op.on_batch([P(5), {"k": "a", "v": 9}, P(10, v=0), P(10, v=1), P(10, v=2),
                       P(10, v=3), P(10, v=4), P(10, {1}, v=9), P(11, v=9)])
    kinds = [e.kind for e in out.errors]
    assert kinds == ["late", "malformed", "user_function", "user_function", "user_function",
                     "user_function", "malformed"]
    messages = [e.message for e in out.errors]
    assert "behind the watermark 10" in messages[0]
    assert "Faulty.on_event raised ZeroDivisionError: v is 0" in messages[2]
    assert "returned int 5, expected an event dict" in messages[3]
    assert "returned str 'nope'" in messages[4]
    assert "set_timer: expected a finite int or float time" in messages[5]
    assert messages[5].endswith("got str 'soon'")
    assert out.errors[2].event == P(10, v=0) and out.errors[2].step == "p"
    # v=2's good event, then two of the generator (v=3 and the last one)
    assert out.events == [{"ok": 1}, {"ok": 0}, {"ok": 1}, {"ok": 0}, {"ok": 1}]
    assert (op.late_count, op.malformed_count, op.user_function_count) == (1, 2, 4)
    assert op.state_keys() == ["a"] and op._states["a"] == {"seen": 6}  # kept despite raising
    out = op.on_watermark(20)  # the timer at -1 (v=3) fires and raises
    assert [(e.kind, e.event) for e in out.errors] == [("user_function", {"timer": -1, "key": "a"})]
    assert "Faulty.on_timer raised RuntimeError: boom" in out.errors[0].message
    assert out.watermark == 20
    assert op.user_function_count == 5


def test_process_without_time_field_has_no_late_events() -> None:
    op = process(time_field=None)
    op.on_watermark(1000)
    out = op.on_batch([P(5), {"k": "b", "ts": 1}])
    assert out.errors == [] and [e["n"] for e in out.events] == [1, 1]


def test_process_state_that_is_not_plain_data_is_refused_at_snapshot_and_take() -> None:
    op = process(Faulty)
    op.on_batch([P(1, v=5), P(1, "b", v=9)])
    with pytest.raises(ValueError, match=r"step 'p': the state of key 'a' cannot be saved .*"
                                         r"keep only plain data in state"):
        op.snapshot()
    bins = op.state_bins()
    assert bins == sorted([bin_of("a"), bin_of("b")]) and len(bins) == 2
    with pytest.raises(ValueError, match="state of key 'a'"):
        op.take_bins(bins)
    assert sorted(op.state_keys()) == ["a", "b"] and op.state_bins() == bins  # nothing taken
    rows, n = op.take_bins([bin_of("b")])
    assert (rows, n) == ([["b", msgpack.packb({"seen": 1}), []]], 1)
    assert op.state_keys() == ["a"] and op.state_bins() == [bin_of("a")]


def test_process_snapshot_and_moves_carry_state_timers_and_counters() -> None:
    op = process()
    op.on_batch([P(0), P(5, ("t", 1)), P(7, "b")])
    op.on_watermark(3)
    op.on_batch([P(1)])  # late
    snap = roundtrip(op.snapshot())
    assert snap["late_count"] == 1 and snap["config"] == ["process", "RunningCount", "ts"]
    again = restored(op, process())
    assert again.watermark == 3 and again.late_count == 1
    moved = process()
    assert len({bin_of(k) for k in ("a", "b", ("t", 1), "zz")}) == 4
    rows, n = again.take_bins([bin_of(("t", 1)), bin_of("zz")])
    assert n == 1 and [r[0] for r in rows] == [["t", 1]]
    moved.put_state(roundtrip(rows), owned=True)
    assert moved.state_keys() == [("t", 1)] and set(again.state_keys()) == {"a", "b"}
    assert moved.state_bins() == [bin_of(("t", 1))]
    assert again.state_bins() == sorted([bin_of("a"), bin_of("b")])
    fired = again.on_watermark(200).events + moved.on_watermark(200).events
    assert canon(fired) == canon(op.on_watermark(200).events)
    with pytest.raises(ValueError, match="snapshot is of a process configured as"):
        ProcessOperator("p", RunningCount(), key_fn=key_of, time_field=None).restore(snap)
    with pytest.raises(ValueError, match=r"step 'p': key \('t', 1\) already has state here"):
        moved.put_state([[["t", 1], None, [5]], [["t", 1], None, [6]]])


def brute_force_running_count(steps: list[Step]) -> tuple[list[str], list[tuple[str, int]]]:
    """RunningCount computed directly: counts per key, totals when the watermark passes
    the key's last event + 100."""
    wm = -INF
    keys: dict[Any, list[Any]] = {}  # key -> [n, due]
    results: list[dict[str, Any]] = []
    late: list[tuple[str, int]] = []

    def advance(to: float) -> None:
        for k, (n, due) in sorted(keys.items(), key=lambda kv: kv[1][1]):
            if due <= to:
                results.append({"key": k, "ts": due, "total": n})
                del keys[k]

    for what, _port, arg in steps:
        if what == "wm" and arg > wm:
            wm = arg
            advance(wm)
        elif what == "batch":
            for e in arg:
                if e["ts"] < wm:
                    late.append(("late", e["id"]))
                    continue
                k = key_of(e)
                n = keys.get(k, [0])[0] + 1
                keys[k] = [n, e["ts"] + 100]
                results.append({"key": k, "ts": e["ts"], "n": n})
    advance(INF)
    return canon(results), sorted(late)


@FAST
@given(data=st.data())
def test_property_process_is_the_direct_computation(data: st.DataObject) -> None:
    steps = data.draw(streams(1, lambda port: "ts"))
    assert_same_in_every_mode(process, steps, brute_force_running_count(steps))


class Toggle(KeyedProcess):
    """Each event's "v" says what to do to the key's state and timers, so that a key
    can have state only, timers only, both or neither: 0 sets state, 1 clears it, 2
    sets a timer 10 ms on, 3 cancels the key's timers. A timer clears the state when
    it is the key's last one, and sets a timer again once in three."""

    def on_event(self, state: dict[str, Any], event: dict[str, Any], ctx: ProcessContext) -> Any:
        v = event["v"]
        if v == 0:
            state["x"] = event["ts"]
        elif v == 1:
            state.clear()
        elif v == 2:
            ctx.set_timer(event["ts"] + 10)
        else:
            for t in ctx.timers():
                ctx.cancel_timer(t)

    def on_timer(self, state: dict[str, Any], time: float, ctx: ProcessContext) -> Any:
        if int(time) % 3 == 0:
            ctx.set_timer(time + 1)
        elif not ctx.timers():
            state.clear()
        return {"key": ctx.key, "ts": time}


def test_process_index_follows_the_state() -> None:
    op = process(Toggle)
    op.use_bins(8)
    assert op.state_bins() == []

    def check(*keys: Any) -> None:
        assert sorted(map(repr, op.state_keys())) == sorted(map(repr, keys))
        assert_index_follows_state(op, 8)

    op.on_batch([P(0, "a", v=0), P(0, "b", v=2), P(0, ("t", 1), v=0), P(0, ("t", 1), v=2)])
    check("a", "b", ("t", 1))  # state only, a timer only, both
    op.on_batch([P(1, "a", v=1), P(1, "b", v=3), P(1, 3, v=2), P(1, 3, v=3)])
    check(("t", 1))  # state cleared; timer cancelled; a key that came and went in one batch
    op.on_batch([P(2, None, v=2), P(2, None, v=0), P(2, None, v=1)])
    check(("t", 1), None)  # state set and cleared, the timer stays
    op.on_watermark(11)  # ("t", 1)'s timer at 10 fires and clears its state; None's at 12 waits
    check(None)
    op.on_batch([P(11, "c", v=2), P(12, "c", v=0)])  # c's timer at 21: 21 % 3 == 0
    op.on_watermark(21)  # None: timer at 12 fires, 12 % 3 == 0, so one at 13, which fires too
    check("c")  # c has state and a timer at 22
    again = restored(op, process(Toggle))
    assert again.state_bins() == [bin_of("c")]  # the default bins
    assert_index_follows_state(again)
    rows, n = op.take_bins(op.state_bins())
    assert n == 1 and rows == [["c", msgpack.packb({"x": 12}), [22]]]
    check()
    op.put_state(roundtrip(rows), owned=True)
    check("c")
    again.restore(roundtrip(process(Toggle).snapshot()))  # replaces, not adds
    assert again.state_keys() == [] and again.state_bins() == []
    op.on_watermark(INF)
    check()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(actions=st.lists(st.one_of(
    st.tuples(st.just("ev"), st.sampled_from(KEYS), st.integers(0, 3), st.integers(0, 60)),
    st.tuples(st.just("wm"), st.integers(0, 80)),
    st.tuples(st.just("move"), st.lists(st.sampled_from(KEYS), unique_by=repr)),
    st.tuples(st.just("restore"), st.integers(0, 1))), max_size=40))
def test_property_process_index_follows_the_state(actions: list[Any]) -> None:
    """Two Toggle operators with 4 bins, events of any key to either, watermarks, bin
    moves both ways, restores: each one's bins are always those of its keys."""

    def made() -> ProcessOperator:
        op = process(Toggle, time_field=None)
        op.use_bins(BINS)
        return op

    ops = [made(), made()]
    for action in actions:
        if action[0] == "ev":
            _, k, v, ts = action
            ops[ts % 2].on_batch([P(ts, k, v=v)])
        elif action[0] == "wm":
            for op in ops:
                op.on_watermark(max(op.watermark, action[1]))
        elif action[0] == "move":
            bins = sorted({bin_of(key_of({"k": k}), BINS) for k in action[1]})
            keys = {k for k in ops[0].state_keys() if bin_of(k, BINS) in bins}
            rows, n = ops[0].take_bins(bins)
            assert n == len(keys) == len(rows)
            # A key may have state on both: move only the keys the receiver lacks.
            there = set(ops[1].state_keys())
            ops[1].put_state(roundtrip([r for r in rows if key_of({"k": r[0]}) not in there]))
        else:
            fresh = made()
            fresh.restore(roundtrip(ops[action[1]].snapshot()))
            ops[action[1]] = fresh
        for op in ops:
            assert_index_follows_state(op, BINS)
            assert len(op.state_keys()) == len(set(map(repr, op.state_keys())))


def test_make_process_instantiates_classes_and_refuses_the_rest() -> None:
    resolver = FunctionResolver(None)
    inst = make_process(resolver.resolve(f"{HERE}:RunningCount", "p"), "p", "x")
    assert isinstance(inst, RunningCount)
    for name, match in (("not_a_class", "a KeyedProcess class"),
                        ("NoArgs", "can be made with no arguments"),
                        ("NoOnEvent", "an on_event method")):
        with pytest.raises(SpecError, match=match) as info:
            make_process(resolver.resolve(f"{HERE}:{name}", "p"), "p", f"{HERE}:{name}")
        assert info.value.step == "p"
    with pytest.raises(NotImplementedError, match="must define on_event"):
        KeyedProcess().on_event({}, {}, ProcessContext(process()))


# == 3. the max_by and top aggregates =============================================================
EVENT_AGGS = [A(name="n", fn="count", field=None), A(name="best", fn="max_by", field="v"),
              A(name="top3", fn="top", field="v", n=3), A(name="top1", fn="top", field="v", n=1),
              A(name="hi", fn="max", field="v")]


def expected_aggs(evs: list[dict[str, Any]]) -> dict[str, Any]:
    best = max(e["v"] for e in evs)
    ranked = sorted(evs, key=lambda e: (-e["v"], canonical_bytes(e)))
    return {"n": len(evs), "best": sorted([e for e in evs if e["v"] == best], key=canonical_bytes),
            "top3": ranked[:3], "top1": ranked[:1], "hi": best}


values = st.one_of(st.integers(-3, 3), st.floats(-3, 3, allow_nan=False))
agg_events = st.lists(st.fixed_dictionaries({"v": values, "i": st.integers(0, 5)}),
                      min_size=1, max_size=30)


@FAST
@given(evs=agg_events, data=st.data())
def test_property_max_by_and_top_are_sorted(evs: list[dict[str, Any]], data: st.DataObject) -> None:
    aggs = compile_aggregates(EVENT_AGGS)
    expected = expected_aggs(evs)
    # Any arrival order, any split into merged parts, any msgpack round trip in between.
    order = data.draw(st.permutations(evs))
    cut = data.draw(st.integers(1, len(order)))
    parts = []
    for part in (order[:cut], order[cut:]):
        if part:
            acc = aggs.new(part[0])
            for e in part[1:]:
                aggs.add(acc, e)
            parts.append(roundtrip(acc) if data.draw(st.booleans()) else acc)
    acc = aggs.merge(*parts) if len(parts) == 2 else parts[0]
    r: dict[str, Any] = {}
    aggs.fill(r, acc)
    assert r == expected


def test_max_by_and_top_malformed_values_and_bad_specs() -> None:
    aggs = compile_aggregates(EVENT_AGGS)
    acc = aggs.new({"v": 1})
    for bad, match in (({"w": 1}, "field 'v' is missing"), ({"v": "1"}, "must be a number"),
                       ({"v": True}, "must be a number"), ({"v": math.nan}, "is NaN")):
        with pytest.raises(MalformedEvent, match=match):
            aggs.add(acc, bad)
    assert r_of(aggs, acc)["best"] == [{"v": 1}]  # untouched
    for specs, match in (([A(name="t", fn="top", field="v", n=None)], "top needs n"),
                         ([A(name="t", fn="top", field="v", n=1001)], "from 1 to 1000"),
                         ([A(name="t", fn="top", field="v", n=True)], "top needs n"),
                         ([A(name="m", fn="max_by", field="v", n=2)], "only top takes n"),
                         ([A(name="m", fn="max_by", field=None)], "needs an input field")):
        with pytest.raises(ValueError, match=match):
            compile_aggregates(specs)
    # The spec layer's AggSpec without n works as before.
    assert compile_aggregates([AggSpec("m", "max_by", "v")]).names == ("m",)


def r_of(aggs: Any, acc: Any) -> dict[str, Any]:
    r: dict[str, Any] = {}
    aggs.fill(r, acc)
    return r


def test_the_spec_and_operator_layers_know_the_same_aggregates() -> None:
    from cameo_actors.dataflow import spec, validate
    from cameo_actors.operators import aggregates

    assert spec.AGGREGATE_FUNCTIONS == aggregates.AGGREGATE_FUNCTIONS
    assert validate.MAX_TOP_N == aggregates.MAX_TOP_N


def test_window_snapshots_of_event_aggregates_are_copies() -> None:
    # Tuple keys: the snapshot is built as rows (not packed whole), with `copy`.
    op = WindowOperator("w", kind="tumbling", size_ms=100, time_field="t",
                        aggregates=EVENT_AGGS, key_fn=lambda e: (e["k"], 1))
    op.on_batch([{"t": 1, "k": "a", "v": 5}])
    snap = op.snapshot()
    assert snap["aligned"]["windows"] and not snap["aligned"]["packed"]
    op.on_batch([{"t": 2, "k": "a", "v": 5}, {"t": 3, "k": "a", "v": 9}])
    fresh = WindowOperator("w", kind="tumbling", size_ms=100, time_field="t",
                           aggregates=EVENT_AGGS, key_fn=lambda e: (e["k"], 1))
    fresh.restore(snap)
    [r] = fresh.on_watermark(INF).events
    assert r["n"] == 1 and r["best"] == [{"t": 1, "k": "a", "v": 5}]
    [r] = op.on_watermark(INF).events
    assert r["n"] == 3 and r["top3"] == [{"t": 3, "k": "a", "v": 9}, {"t": 1, "k": "a", "v": 5},
                                          {"t": 2, "k": "a", "v": 5}]


@FAST
@given(evs=st.lists(st.fixed_dictionaries({"t": st.integers(0, 300), "k": st.sampled_from("ab"),
                                           "v": st.integers(0, 4)}), max_size=40),
       size=st.integers(1, 120), slide_frac=st.floats(0.1, 1))
def test_property_windows_of_max_by_and_top_are_brute_force(evs: list[dict[str, Any]], size: int,
                                                            slide_frac: float) -> None:
    slide = max(1, int(size * slide_frac))
    op = WindowOperator("w", kind="sliding", size_ms=size, slide_ms=slide, time_field="t",
                        aggregates=EVENT_AGGS, key_fn=lambda e: e["k"])
    op.on_batch(evs)
    got = op.on_watermark(INF).events
    expected = []
    for end in sorted({e["t"] - e["t"] % slide + size - i * slide for e in evs
                       for i in range(size // slide + 2)}):
        for k in "ab":
            inside = [e for e in evs if end - size <= e["t"] < end and e["k"] == k]
            if inside:
                expected.append({"key": k, "window_start": end - size, "window_end": end,
                                 "t": end - 1, **expected_aggs(inside)})
    assert canon(got) == canon(expected)


def test_session_merges_keep_max_by_and_top() -> None:
    op = WindowOperator("s", kind="session", gap_ms=10, time_field="t", aggregates=EVENT_AGGS,
                        key_fn=lambda e: e["k"])
    evs = [{"t": 0, "k": "a", "v": 2}, {"t": 15, "k": "a", "v": 3}, {"t": 16, "k": "a", "v": 3},
           {"t": 8, "k": "a", "v": 1}]  # the last bridges [0] and [15, 16]
    op.on_batch(evs)
    [r] = op.on_watermark(INF).events
    assert (r["window_start"], r["window_end"]) == (0, 26)
    assert {k: r[k] for k in ("n", "best", "top3", "top1", "hi")} == expected_aggs(evs)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), gap=st.integers(1, 80), on_time=st.booleans())
def test_property_session_moves_with_event_aggregates(data: st.DataObject, gap: int,
                                                      on_time: bool) -> None:
    steps = data.draw(scripts(on_time))
    assert_moves_change_nothing(lambda _: window("session", EVENT_AGGS, gap=gap), steps, on_time)


def session(bins: int = DEFAULT_BINS) -> WindowOperator:
    op = WindowOperator("s", kind="session", gap_ms=10, time_field="t",
                        aggregates=[A(name="n", fn="count", field=None)], key_fn=key_of)
    op.use_bins(bins)
    return op


def test_session_index_follows_the_state() -> None:
    op = session(8)

    def check(*keys: Any) -> None:
        assert sorted(map(repr, op.state_keys())) == sorted(map(repr, keys))
        assert_index_follows_state(op, 8)

    op.on_batch([L(0, "a"), L(5, "b"), L(30, "a"), L(2, ("t", 1))])
    check("a", "b", ("t", 1))
    out = op.on_watermark(15)  # a's [0], t's [2] and b's [5] fire; fired_last keeps them
    assert [(r["key"], r["window_start"]) for r in out.events] == [("a", 0), (("t", 1), 2),
                                                                   ("b", 5)]
    check("a", "b", ("t", 1))
    op.on_batch([L(20, "b")])  # b: a new session while its fired one is remembered
    check("a", "b", ("t", 1))
    op.on_watermark(25)  # the fired sessions are forgotten: t has no state left
    assert dict(op._windower.fired_last) == {}  # type: ignore[attr-defined]
    check("a", "b")
    again = restored(op, session(2))  # restored with other bins: indexed anew
    assert again.state_bins() == sorted({bin_of("a", 2), bin_of("b", 2)})
    again.restore(roundtrip(session().snapshot()))  # replaces, not adds
    assert again.state_keys() == [] and again.state_bins() == []
    rows, n = op.take_bins([bin_of("a", 8)])
    assert n == 1 and rows == [["session", "a", 30, 30, 1]]
    check("b")
    op.put_state(roundtrip(rows), owned=True)
    check("a", "b")
    op.on_watermark(35)  # b's [20] fires, remembered until 40; a's [30] is open
    check("a", "b")
    rows, n = op.take_bins(op.state_bins())
    assert n == 2 and rows == [["session", "a", 30, 30, 1], ["fired", "b", 20]]
    check()
    op.put_state(rows)
    check("a", "b")
    op.on_watermark(INF)
    check()


# == spec, builder and validation ==================================================================
def nexmark_like() -> Dataflow:
    df = Dataflow("nx", latency_target_ms=1000)
    bids = df.source("bids", schema={"ts": "int", "auction": "int", "price": "int"},
                     event_time="ts")
    auctions = df.source("auctions", schema={"at": "int", "id": "int", "seller": "int"},
                         event_time="at")
    (auctions.key_by("id").join(bids.key_by("auction"), interval_ms=(0, 1000), id="ij",
                                parallelism=2)
     .map({"ts": "at", "seller": "left.seller", "price": "right.price"}).sink("pairs"))
    (bids.key_by("auction").process(f"{HERE}:RunningCount", time_field="ts", id="proc",
                                    parallelism=3)
     .sink("counts"))
    (bids.key_by("auction").window(sliding_ms=100, slide_ms=20, id="hot").aggregate(n=count())
     .window(tumbling_ms=20, id="hottest").aggregate(best=max_by("n"), top2=top("n", 2))
     .sink("q5"))
    return df


def test_spec_round_trip_of_the_new_steps() -> None:
    spec = nexmark_like().spec
    assert DataflowSpec.from_json(spec.to_json()) == spec
    assert DataflowSpec.from_msgpack(spec.to_msgpack()) == spec
    steps = {s["id"]: s for s in json.loads(spec.to_json())["steps"]}
    assert steps["ij"] | {"inputs": None} == {
        "op": "join", "id": "ij", "inputs": None, "parallelism": 2, "kind": "interval",
        "size_ms": 0, "slide_ms": None, "left_time_field": "at", "right_time_field": "ts",
        "lower_ms": 0, "upper_ms": 1000}
    assert steps["proc"] | {"inputs": None} == {"op": "process", "id": "proc", "inputs": None,
                                                "parallelism": 3, "function": f"{HERE}:RunningCount",
                             "time_field": "ts"}
    # n only where it is set: the JSON of the other aggregates stays as it was.
    assert steps["hottest"]["aggregates"] == [
        {"name": "best", "fn": "max_by", "field": "n"},
        {"name": "top2", "fn": "top", "field": "n", "n": 2}]
    assert steps["hot"]["aggregates"] == [{"name": "n", "fn": "count", "field": None}]
    assert spec.step("hottest") == WindowStep(
        id="hottest", inputs=("hot",), kind="tumbling", size_ms=20, time_field="ts",
        aggregates=(AggSpec("best", "max_by", "n"), AggSpec("top2", "top", "n", 2)))
    assert stream_time_field(spec, "proc") == "ts"
    proc = spec.step("proc")
    assert proc == ProcessStep(id="proc", inputs=proc.inputs, parallelism=3,
                               function=f"{HERE}:RunningCount", time_field="ts")


def test_the_new_steps_are_keyed_and_fire_nothing_at_watermarks() -> None:
    spec = nexmark_like().spec
    assert is_keyed_step(spec, spec.step("ij")) and is_keyed_step(spec, spec.step("proc"))
    assert _window_timing(spec, spec.step("ij")) is None
    assert _window_timing(spec, spec.step("proc")) is None
    assert frontier_timing(spec, spec.step("proc")) is None
    assert _window_timing(spec, spec.step("hot")) is not None
    wide = JoinStep(id="ij", inputs=("a", "b"), kind="interval", lower_ms=-10**9, upper_ms=10**9)
    check_pool_limits(DataflowSpec("x", 1, (wide,)), max_windows_per_event=1,
                      max_state_bytes=1)  # no windows: nothing to bound
    assert isinstance(build_operator(spec, spec.step("ij")), IntervalJoinOperator)
    proc = build_operator(spec, spec.step("proc"))
    assert isinstance(proc, ProcessOperator) and proc.name == f"{HERE}:RunningCount"


def test_the_spark_tier_types_the_new_results() -> None:
    from spark_ingest.schema import stream_fields

    spec = nexmark_like().spec
    assert stream_fields(spec, "ij") == {"key": "int", "at": "int", "left": "any", "right": "any"}
    fields = stream_fields(spec, "hottest")
    assert fields is not None and fields["best"] == fields["top2"] == "any"
    assert stream_fields(spec, "proc") is None  # a Python function's output


def spec_with(step: dict[str, Any], upstream_keyed: bool = True) -> dict[str, Any]:
    """A spec around `step` (id "x"), reading two sources keyed by "k" (or unkeyed)."""
    src = {"schema": {"t": "int", "k": "str"}, "event_time": "t"}
    steps: list[dict[str, Any]] = [{"op": "source", "id": "a", **src},
                                    {"op": "source", "id": "b", **src}]
    ins = ["a", "b"]
    if upstream_keyed:
        steps += [{"op": "key_by", "id": "ka", "inputs": ["a"], "key": "k"},
                  {"op": "key_by", "id": "kb", "inputs": ["b"], "key": "k"}]
        ins = ["ka", "kb"]
    n = 2 if step["op"] == "join" else 1
    steps += [{"id": "x", "inputs": ins[:n], **step}, {"op": "sink", "id": "o", "inputs": ["x"]}]
    if n == 1:
        steps.append({"op": "sink", "id": "o2", "inputs": [ins[1]]})
    return {"name": "d", "latency_target_ms": 100, "steps": steps}


INTERVAL = {"op": "join", "kind": "interval", "lower_ms": -5, "upper_ms": 5}
WIN = {"op": "window", "kind": "tumbling", "size_ms": 10, "time_field": "t"}


@pytest.mark.parametrize("step, expected, fix", [
    ({**INTERVAL, "size_ms": 10}, "no size_ms for an interval join", "remove size_ms"),
    ({**INTERVAL, "slide_ms": 5}, "no slide_ms for an interval join", "remove slide_ms"),
    ({**INTERVAL, "lower_ms": 6}, "lower_ms <= upper_ms", "swap the bounds"),
    ({**INTERVAL, "upper_ms": None}, "upper_ms for an interval join", "tl + lower_ms <= tr"),
    ({**INTERVAL, "lower_ms": "0"}, "lower_ms for an interval join", "give 'lower_ms'"),
    ({**INTERVAL, "lower_ms": True}, "lower_ms for an interval join", "give 'lower_ms'"),
    ({"op": "join", "kind": "tumbling", "size_ms": 10, "upper_ms": 5},
     "no upper_ms for a tumbling join", "set 'kind' to interval"),
    ({"op": "join", "kind": "session", "size_ms": 10}, "tumbling, sliding or interval",
     "interval (with lower_ms and upper_ms)"),
    ({**INTERVAL, "left_time_field": "right"}, "a left time field other than", "rename"),
    ({**WIN, "aggregates": [{"name": "t3", "fn": "top", "field": "t"}]}, "n for top",
     '"n": 3'),
    ({**WIN, "aggregates": [{"name": "t3", "fn": "top", "field": "t", "n": 0}]},
     "from 1 to 1000", '"n": 3'),
    ({**WIN, "aggregates": [{"name": "t3", "fn": "top", "field": "t", "n": 1001}]},
     "from 1 to 1000", '"n": 3'),
    ({**WIN, "aggregates": [{"name": "m", "fn": "max_by", "field": "t", "n": 2}]},
     "no n for max_by", "remove 'n'"),
    ({**WIN, "aggregates": [{"name": "m", "fn": "count", "n": 2}]}, "no n for count",
     "remove 'n'"),
    ({**WIN, "aggregates": [{"name": "m", "fn": "max_by"}]}, "a field for max_by", "'field'"),
    ({**WIN, "aggregates": [{"name": "m", "fn": "median", "field": "t"}]}, "'max_by', 'top'",
     "max_by or top"),
    ({"op": "process", "function": "no path"}, "'package.module:Name'", "KeyedProcess"),
    ({"op": "process", "function": "m:C", "time_field": ""}, "time_field", "leave it out"),
])
def test_spec_errors_name_step_expected_got_and_fix(step: dict[str, Any], expected: str,
                                                   fix: str) -> None:
    with pytest.raises(SpecError) as info:
        DataflowSpec.from_dict(spec_with(step))
    err = info.value
    assert err.step == "x" and expected in err.expected and fix in err.fix, str(err)


def test_process_needs_a_keyed_input() -> None:
    with pytest.raises(SpecError, match="key_by before process") as info:
        DataflowSpec.from_dict(spec_with({"op": "process", "function": "m:C"}, upstream_keyed=False))
    assert info.value.step == "x"
    with pytest.raises(SpecError, match="key_by before process"):
        _ = (Dataflow("d", latency_target_ms=10).source("s", schema={"t": "int"}, event_time="t")
             .process("m:C").sink("o").spec)


def test_builder_join_takes_exactly_one_shape() -> None:
    df = Dataflow("d", latency_target_ms=10)
    a = df.source("a", schema={"t": "int", "k": "str"}, event_time="t").key_by("k")
    b = df.source("b", schema={"t": "int", "k": "str"}, event_time="t").key_by("k")
    for kw, match in (({"tumbling_ms": 10, "interval_ms": (0, 1)}, "exactly one of"),
                      ({}, "exactly one of"),
                      ({"interval_ms": (0, 1, 2)}, "a pair"),
                      ({"interval_ms": 5}, "a pair"),
                      ({"interval_ms": (0, 1), "slide_ms": 5}, "slide_ms only with sliding_ms"),
                      ({"interval_ms": (3, 1)}, "lower_ms <= upper_ms")):
        with pytest.raises(SpecError, match=match):
            a.join(b, **kw)
    assert cameo_actors.max_by is max_by and cameo_actors.top is top
    assert cameo_actors.KeyedProcess is KeyedProcess


# == the runtime's live migration (the controller's, in-process): bins of the new steps move ==
def migrating_flows(name: str, p: int) -> list[Dataflow]:
    def df(suffix: str) -> Dataflow:
        return Dataflow(f"{name}-{suffix}", latency_target_ms=200)

    def src(d: Dataflow, sid: str = "s") -> Any:
        return d.source(sid, schema=SCHEMA, event_time="ts", allowed_lateness_ms=40)

    d1 = df("interval")
    left = src(d1, "l").filter("level == 'ERROR'").key_by("key")
    right = src(d1, "r").filter("level != 'ERROR'").key_by("key")
    (left.join(right, interval_ms=(-20, 30), parallelism=p)
     .map({"key": "key", "ts": "ts", "lv": "left.value", "rv": "right.value"}).sink("o"))
    d2 = df("process")
    (src(d2).key_by("key").process("tests.udfs:BucketCount", time_field="ts", parallelism=p)
     .sink("o"))
    d3 = df("maxby")
    (src(d3).key_by("key").window(sliding_ms=60, slide_ms=20, parallelism=p)
     .aggregate(best=max_by("value"), t3=top("value", 3)).sink("o"))
    return [d1, d2, d3]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 3), p=st.integers(1, 3), seed=st.integers(0, 1000),
       bins=st.sampled_from([4, 64]), strategy=st.sampled_from(STRATEGIES),
       backend=st.sampled_from(BACKENDS))
def test_migrations_of_the_new_steps_keep_results_equal_run_local(
        n: int, p: int, seed: int, bins: int, strategy: str, backend: str) -> None:
    data = events(400, seed=seed)
    for d in migrating_flows(f"nx{seed}", p):
        expected = run_local(d, {s.id: data for s in d.spec.sources}).sinks["o"]
        assert expected
        plane, done = run_with_migrations(d.spec, data, n, seed, 10, bins, strategy, 2, backend)
        assert canon(plane.results(d.name)) == canon(expected), \
            (d.name, n, p, bins, strategy, backend)
        assert [m["state"] for m in done] == ["done", "done"]


# == run_local: one dataflow per new step ==========================================================
def test_run_local_interval_join() -> None:
    df = Dataflow("ij", latency_target_ms=100)
    left = df.source("l", schema={"t": "int", "k": "str", "x": "int"}, event_time="t").key_by("k")
    right = df.source("r", schema={"ts": "int", "k": "str"}, event_time="ts").key_by("k")
    left.join(right, interval_ms=(-5, 10)).sink("o")
    lefts = [{"t": 10, "k": "a", "x": 1}, {"t": 20, "k": "b", "x": 2}, Watermark(100),
             {"t": 50, "k": "a", "x": 3}]  # late once the right side passes 100 too
    rights = [{"ts": 5, "k": "a"}, {"ts": 21, "k": "a"}, {"ts": 30, "k": "b"}, Watermark(200)]
    result = run_local(df, {"r": rights, "l": lefts})
    assert canon(result["o"]) == canon([
        {"key": "a", "t": 10, "left": {"t": 10, "k": "a", "x": 1}, "right": {"ts": 5, "k": "a"}},
        {"key": "b", "t": 30, "left": {"t": 20, "k": "b", "x": 2}, "right": {"ts": 30, "k": "b"}}])
    assert result.error_counts() == {("join_3", "late"): 1}


def test_run_local_process() -> None:
    df = Dataflow("p", latency_target_ms=100)
    (df.source("s", schema={"ts": "int", "k": "str"}, event_time="ts").key_by("k")
     .process(f"{HERE}:RunningCount", time_field="ts").sink("o"))
    events = [{"ts": 0, "k": "a"}, {"ts": 50, "k": "a"}, {"ts": 60, "k": "b"}, Watermark(155),
              {"ts": 100, "k": "b"}, {"ts": 155, "k": "a"}]
    result = run_local(df, {"s": events})
    assert result["o"] == [
        {"key": "a", "ts": 0, "n": 1}, {"key": "a", "ts": 50, "n": 2}, {"key": "b", "ts": 60, "n": 1},
        {"key": "a", "ts": 150, "total": 2},  # b's timer at 160 is still ahead
        {"key": "a", "ts": 155, "n": 1},  # a started over
        {"key": "b", "ts": 160, "total": 1}, {"key": "a", "ts": 255, "total": 1}]
    assert result.error_counts() == {("process_2", "late"): 1}
    resolver = FunctionResolver(["elsewhere."])
    with pytest.raises(SpecError, match="allowed module"):
        run_local(df, {"s": events}, resolver=resolver)


def test_run_local_max_by_and_top_over_a_sliding_count() -> None:
    """Nexmark Q5: the hottest key per sliding window. A window's results carry
    time = window end - 1, so a tumbling window of size = slide groups each sliding
    window's results; max_by of the counts is the per-window maximum."""
    df = Dataflow("q5", latency_target_ms=1000)
    (df.source("bids", schema={"ts": "int", "auction": "int"}, event_time="ts")
     .key_by("auction").window(sliding_ms=30, slide_ms=10).aggregate(n=count())
     .window(tumbling_ms=10).aggregate(hottest=max_by("n"), top2=top("n", 2)).sink("o"))
    bids = [{"ts": t, "auction": a} for t, a in [(0, 1), (1, 2), (5, 2), (12, 1), (13, 1),
                                                 (14, 3), (25, 3), (26, 3), (27, 3), (41, 1)]]
    result = run_local(df, {"bids": bids})
    counts: dict[int, dict[int, int]] = {}  # sliding window end -> auction -> count
    for b in bids:
        for end in range(b["ts"] - b["ts"] % 10 + 10, b["ts"] + 31, 10):
            counts.setdefault(end, {}).setdefault(b["auction"], 0)
            counts[end][b["auction"]] += 1
    got = {r["window_end"]: r for r in result["o"]}
    assert sorted(got) == sorted(counts)
    for end, per_auction in counts.items():
        best = max(per_auction.values())
        r = got[end]
        assert r["window_start"] == end - 10 and r["ts"] == end - 1
        assert sorted(e["key"] for e in r["hottest"]) == sorted(
            a for a, n in per_auction.items() if n == best)
        assert all(e["n"] == best and e["window_end"] == end for e in r["hottest"])
        assert [e["n"] for e in r["top2"]] == sorted(per_auction.values(), reverse=True)[:2]
    assert result.errors == []


# == state kept per key, packed in bounded steps at a checkpoint's cut =========================
def _fed(name: str) -> WindowedOperator:
    """An interval join, a keyed process or a session window holding state for 40 keys."""
    keys = [f"k{i}" for i in range(40)]
    if name == "interval join":
        op: WindowedOperator = ijoin()
        op.on_batch([L(t, k) for t in (5, 9) for k in keys], 0)
        op.on_batch([{"ts": 7, "k": k} for k in keys], 1)
    elif name == "process":
        op = process(Toggle)
        op.on_batch([P(1, k, v) for k in keys for v in (0, 2)], 0)
    else:
        op = session()
        op.on_batch([{"t": t, "k": k} for t in (1, 3) for k in keys], 0)
        op.on_watermark(20, 0)  # fired: fired_last rows
        op.on_batch([{"t": 30, "k": k} for k in keys[:10]], 0)
    return op


@pytest.mark.parametrize("name", ["interval join", "process", "session"])
def test_state_kept_per_key_is_packed_in_steps_that_restore_the_whole(name: str) -> None:
    """A cut of an operator whose state is kept per key packs its rows `budget` at a time
    (each step a piece), and the pieces restore what the whole snapshot restores."""
    op = _fed(name)
    whole = roundtrip(op.snapshot())
    head = op.begin_snapshot()
    steps = 1
    while not op.snapshot_step(7):
        steps += 1
    stepped = roundtrip(op.end_snapshot(head))
    pieces = [msgpack.unpackb(p, raw=False) for p in stepped["pieces"]]
    rows = sum(len(v) for k, v in whole.items() if k in stepped["listed"])
    assert rows >= 40 and steps >= rows // 7 and all(len(p[1]) <= 7 for p in pieces)
    again = _fed(name)  # a fresh one of the same configuration, then replaced
    again.restore(stepped)
    assert roundtrip(again.snapshot()) == whole
    assert op.begin_snapshot() and op.snapshot_step(10**6)  # the next cut starts afresh
