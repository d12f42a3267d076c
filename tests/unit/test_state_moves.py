"""Live migration of keyed state: moving bins between two windowed operators
with `take_bins` / `put_state` gives the results of one operator that kept
every bin. Hand-made cases, then properties over random streams."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace as A
from typing import Any, Protocol

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors.operators.base import Output
from cameo_actors.operators.bins import stable_hash
from cameo_actors.operators.join import WindowJoinOperator
from cameo_actors.operators.state_store import IN_MEMORY, ROCKSDB, StateBackend, backend_folder
from cameo_actors.operators.windowed_operator import WindowedOperator
from cameo_actors.operators.windowers import SessionWindower
from cameo_actors.operators.windows import WindowOperator
from tests.shared.zoo import canon

INF = math.inf
COUNT = [A(name="n", fn="count", field=None)]
ALL = [A(name="n", fn="count", field=None), A(name="total", fn="sum", field="v"),
       A(name="lo", fn="min", field="v"), A(name="hi", fn="max", field="v"),
       A(name="mean", fn="avg", field="v")]
#: Event keys; a list stands for a tuple key (events hold msgpack types only).
KEYS: list[Any] = ["a", "b", 3, None, ["t", 1]]


#: Few bins, so that keys share them.
BINS = 4


def bin_of(key: Any, bins: int = BINS) -> int:
    return stable_hash(key) & (bins - 1)


def key_of(e: dict[str, Any]) -> Any:
    k = e["k"]
    return tuple(k) if isinstance(k, list) else k


def roundtrip(rows: list[Any]) -> list[Any]:
    """Rows as another process gets them."""
    return msgpack.unpackb(msgpack.packb(rows, use_bin_type=True), raw=False, strict_map_key=False)


#: The backends the aligned windows' properties run on: in memory, and in a store whose
#: cache holds one entry (nearly every access written back and read again).
BACKENDS = {"memory": IN_MEMORY, "rocksdb": StateBackend(ROCKSDB, backend_folder(None), 1)}


def window(kind: str, aggs: list[Any] = ALL, size: int = 100, slide: int = 50,
           gap: int = 50, bins: int = BINS, backend: str = "memory") -> WindowOperator:
    op = WindowOperator("w", kind=kind, size_ms=size, slide_ms=slide, gap_ms=gap,
                        aggregates=aggs, time_field="t", key_fn=key_of)
    op.use_bins(bins, BACKENDS[backend])
    return op


def join(kind: str = "tumbling", size: int = 100, slide: int = 50, bins: int = BINS,
         backend: str = "memory") -> WindowJoinOperator:
    op = WindowJoinOperator("j", kind=kind, size_ms=size, slide_ms=slide, left_key_fn=key_of,
                            right_key_fn=key_of, left_time_field="t", right_time_field="ts")
    op.use_bins(bins, BACKENDS[backend])
    return op


def take(op: WindowedOperator, keys: list[Any]) -> list[Any]:
    """The rows of the bins of `keys`."""
    rows, _ = op.take_bins(sorted({bin_of(k) for k in keys}))
    return rows


def bins_agree(op: WindowedOperator, bins: int = BINS) -> bool:
    """The bins the operator lists are those of its keys."""
    return op.state_bins() == sorted({bin_of(k, bins) for k in op.state_keys()})


def ev(t: float, k: Any = "a", v: int = 1, port: int = 0) -> dict[str, Any]:
    return {"t" if port == 0 else "ts": t, "k": k, "v": v}


def fired_last_in_order(op: WindowedOperator) -> bool:
    windower = getattr(op, "_windower", None)
    if not isinstance(windower, SessionWindower):
        return True
    lasts = list(windower.fired_last.values())
    return lasts == sorted(lasts)


class Maker(Protocol):
    def __call__(self, bins: int = BINS) -> WindowedOperator: ...


MAKERS: dict[str, Maker] = {
    "tumbling-count": lambda bins=BINS: window("tumbling", COUNT, bins=bins),
    "tumbling": lambda bins=BINS: window("tumbling", bins=bins),
    "sliding": lambda bins=BINS: window("sliding", bins=bins),
    "session": lambda bins=BINS: window("session", bins=bins),
    "session-count": lambda bins=BINS: window("session", COUNT, bins=bins),
    "join": lambda bins=BINS: join("sliding", bins=bins),
    "tumbling-rocksdb": lambda bins=BINS: window("tumbling", bins=bins, backend="rocksdb"),
    "join-rocksdb": lambda bins=BINS: join("sliding", bins=bins, backend="rocksdb"),
}


def fill(op: WindowedOperator) -> None:
    """State for keys "a" and ("t", 1) in a few windows (both ports of a join)."""
    for port in range(op.n_inputs):
        op.on_batch([ev(t, k, port=port) for t in (10, 40, 130, 260) for k in ("a", ["t", 1])], port)


# -- hand-made cases --------------------------------------------------------------------------------
# "a" and ("t", 1) lie in different bins of BINS: each can move alone.
assert bin_of("a") != bin_of(("t", 1))


@pytest.mark.parametrize("name", list(MAKERS))
def test_taking_bins_without_state_returns_nothing_and_changes_nothing(name: str) -> None:
    op = MAKERS[name]()
    fill(op)
    before = op.snapshot()
    empty = sorted(set(range(BINS)) - {bin_of("a"), bin_of(("t", 1))})
    assert op.take_bins(empty) == ([], 0)
    assert op.snapshot() == before
    assert MAKERS[name]().take_bins(range(BINS)) == ([], 0)


@pytest.mark.parametrize("name", list(MAKERS))
def test_state_keys_and_bins_follow_the_moves(name: str) -> None:
    op1, op2 = MAKERS[name](), MAKERS[name]()
    assert op1.state_keys() == [] and op1.state_bins() == []
    fill(op1)
    assert sorted(set(op1.state_keys()), key=repr) == ["a", ("t", 1)]
    assert op1.state_bins() == sorted({bin_of("a"), bin_of(("t", 1))})
    rows, n = op1.take_bins([bin_of(("t", 1))])
    assert n > 0
    op2.put_state(roundtrip(rows), owned=True)
    assert set(op1.state_keys()) == {"a"} and set(op2.state_keys()) == {("t", 1)}
    assert op1.state_bins() == [bin_of("a")] and op2.state_bins() == [bin_of(("t", 1))]
    assert op1.take_bins([bin_of(("t", 1))]) == ([], 0)


@pytest.mark.parametrize("name", list(MAKERS))
def test_the_bin_count_is_set_before_state(name: str) -> None:
    op = MAKERS[name]()
    with pytest.raises(ValueError, match="power of two"):
        op.use_bins(6)
    fill(op)
    with pytest.raises(ValueError, match="before any state"):
        op.use_bins(8)


@pytest.mark.parametrize("name", list(MAKERS))
def test_a_snapshot_restores_into_another_bin_count(name: str) -> None:
    """A pool restarted with another bin count: each key goes to its bin there."""
    op, single = MAKERS[name](), MAKERS[name]()
    fill(op)
    fill(single)
    wider = MAKERS[name](16)
    wider.restore(msgpack.unpackb(msgpack.packb(op.snapshot(), use_bin_type=True), raw=False,
                                  strict_map_key=False))
    assert bins_agree(wider, 16)
    fired = [e for p in range(wider.n_inputs) for e in wider.on_watermark(INF, p).events]
    assert canon(fired) == canon([e for p in range(single.n_inputs)
                                  for e in single.on_watermark(INF, p).events])


@pytest.mark.parametrize("name", list(MAKERS))
def test_putting_a_key_present_here_raises_and_changes_nothing(name: str) -> None:
    op1, op2 = MAKERS[name](), MAKERS[name]()
    fill(op1)
    for port in range(op2.n_inputs):
        op2.on_batch([ev(20, "a", port=port)], port)
    before = op2.snapshot()
    rows = take(op1, ["a", ("t", 1)])  # ("t", 1) alone would fit
    with pytest.raises(ValueError, match="step .*already has"):
        op2.put_state(rows)
    assert op2.snapshot() == before


def test_aligned_put_checks_per_window() -> None:
    op1, op2 = window("tumbling"), window("tumbling")
    op1.on_batch([ev(10, "a")])
    op2.on_batch([ev(110, "a")])  # the next window: a key may be spread over windows
    op2.put_state(take(op1, ["a"]))
    assert canon(op2.on_watermark(INF).events) == canon([
        {"key": "a", "window_start": 0, "window_end": 100, "t": 99, "n": 1, "total": 1, "lo": 1,
         "hi": 1, "mean": 1.0},
        {"key": "a", "window_start": 100, "window_end": 200, "t": 199, "n": 1, "total": 1, "lo": 1,
         "hi": 1, "mean": 1.0}])
    op2.put_state([[100, bin_of("b"), {"b": [1, 1, 1, 1]}]])
    with pytest.raises(ValueError, match="already has state in the window ending at 100"):
        op2.put_state([[100, bin_of("c"), {"c": [1, 2, 2, 2]}],
                       [100, bin_of("b"), ["b", [1, 2, 2, 2]]]])
    assert set(op2.state_keys()) == {"b"}  # nothing of the refused rows


@pytest.mark.parametrize("name", ["tumbling-count", "sliding", "join"])
def test_a_window_emptied_by_a_take_fires_nothing(name: str) -> None:
    op1, op2 = MAKERS[name](), MAKERS[name]()
    fill(op1)
    op2.put_state(take(op1, ["a", ("t", 1)]))
    assert op1.state_keys() == []
    windows = op1._state.windows if isinstance(op1, WindowJoinOperator) else op1._windows  # type: ignore[attr-defined]
    assert windows and not any(windows.values())  # emptied, still scheduled
    for port in range(op1.n_inputs):
        assert op1.on_watermark(INF, port).events == []
    assert op1.state_keys() == [] and op1.state_bins() == []


def test_rows_are_copies_unless_owned() -> None:
    op1, op2, op3 = window("tumbling"), window("tumbling"), window("tumbling")
    op1.on_batch([ev(10, "a", 5)])
    rows = take(op1, ["a"])
    assert rows == [[100, bin_of("a"), {"a": [1, 5, 5, 5]}]]
    op2.put_state(rows)
    op2.on_batch([ev(20, "a", 7)])
    assert rows == [[100, bin_of("a"), {"a": [1, 5, 5, 5]}]]
    op3.put_state(rows, owned=True)  # kept as they are, as after unpacking
    op3.on_batch([ev(20, "a", 7)])
    assert rows[0][2]["a"][0] == 2


def test_keys_msgpack_carries_as_they_are_go_as_a_dict_the_others_flat() -> None:
    op = window("tumbling", COUNT, bins=1)
    op.on_batch([ev(10, "a"), ev(10, 3), ev(20, "a")])
    assert op.take_bins([0]) == ([[100, 0, {"a": 2, 3: 1}]], 2)
    op.on_batch([ev(10, "a"), ev(10, ["t", 1]), ev(10, None)])
    rows, n = op.take_bins([0])
    assert rows == [[100, 0, ["a", 1, ["t", 1], 1, None, 1]]] and n == 3


def test_session_rows_and_a_merge_after_the_move() -> None:
    op1, op2, single = window("session", gap=100), window("session", gap=100), window("session", gap=100)
    assert bin_of("a") != bin_of("b")
    before, after = [ev(0), ev(150), ev(500, "b")], [ev(80)]  # 80 bridges [0] and [150]
    for op in (op1, single):
        op.on_batch(before)
    rows = take(op1, ["a"])
    assert rows == [["session", "a", 0, 0, [1, 1, 1, 1]], ["session", "a", 150, 150, [1, 1, 1, 1]]]
    op2.put_state(roundtrip(rows))
    op2.on_batch(after)
    single.on_batch(after)
    moved = op1.on_watermark(INF).events + op2.on_watermark(INF).events
    assert canon(moved) == canon(single.on_watermark(INF).events)
    assert [(r["key"], r["window_start"], r["window_end"], r["n"]) for r in moved] == [
        ("b", 500, 600, 1), ("a", 0, 250, 3)]


def test_a_fired_session_moves_with_its_key() -> None:
    # An event within gap of a session already fired is late: the receiver must know it.
    op1, op2 = window("session", gap=100), window("session", gap=100)
    op1.on_batch([ev(0), ev(5, "b")])
    for op in (op1, op2):
        op.on_watermark(105)
    rows = take(op1, ["a"])
    assert rows == [["fired", "a", 0]]
    op2.put_state(roundtrip(rows))
    out = op2.on_batch([ev(50)])
    assert [e.kind for e in out.errors] == ["late"] and "already fired" in out.errors[0].message
    assert op1.on_batch([ev(50)]).errors == []  # op1 no longer knows the key


def test_fired_last_stays_ordered_by_last_event_time() -> None:
    op1, op2 = window("session", COUNT, gap=10, bins=64), window("session", COUNT, gap=10, bins=64)
    assert len({bin_of(k, 64) for k in ("a", "b", 3, None)}) == 4
    op1.on_batch([ev(t, k) for t, k in [(0, "a"), (2, "b"), (4, 3), (6, None)]])
    op2.on_batch([ev(t, k) for t, k in [(1, "x"), (3, "y"), (5, "z"), (7, "w")]])
    for op in (op1, op2):
        op.on_watermark(17.5)  # every session fired, none pruned yet
    rows, _ = op1.take_bins(sorted({bin_of(k, 64) for k in ("b", 3, "a")}))
    op2.put_state(roundtrip(rows))
    windower = op2._windower
    assert isinstance(windower, SessionWindower)
    assert list(windower.fired_last.items()) == [
        ("a", 0), ("x", 1), ("b", 2), ("y", 3), (3, 4), ("z", 5), ("w", 7)]
    op2.on_watermark(23)  # prunes last + 2 * gap <= 23, oldest first
    assert list(windower.fired_last) == [3, "z", "w"]


# -- properties: two operators with moves equal one operator -------------------------------------
def time_of(e: dict[str, Any]) -> int:
    return e["t"] if "t" in e else e["ts"]


Step = tuple[str, int, Any]


@st.composite
def scripts(draw: st.DrawFn, on_time: bool, ports: int = 1, keys: list[Any] = KEYS) -> list[Step]:
    """Events in time order with a little disorder, in batches, watermarks between
    them (on_time: never past a later event) and moves of random bins: one at a
    random point, more after some steps (a bin can go back and forth)."""
    n = draw(st.integers(0, 40))
    base = sorted(draw(st.lists(st.integers(0, 300), min_size=n, max_size=n)))
    disorder = 20 if on_time else 60
    events: list[tuple[int, dict[str, Any]]] = []
    for i, b in enumerate(base):
        port = draw(st.integers(0, ports - 1))
        e = ev(b - draw(st.integers(0, disorder)), draw(st.sampled_from(keys)), draw(st.integers(-50, 50)),
               port)
        events.append((port, {"id": i, **e}))
    moves = st.lists(st.integers(0, BINS - 1), unique=True)  # bins without state too
    steps: list[Step] = []
    i = 0
    while i < n:
        j = i + draw(st.integers(1, 6))
        for port in range(ports):
            batch = [e for p, e in events[i:j] if p == port]
            if batch:
                steps.append(("batch", port, batch))
        i = j
        if draw(st.booleans()):
            rest = [time_of(e) for _, e in events[i:]]
            # Else a little past later events: some late, some within gap of a fired session.
            high = min(rest, default=400) + (0 if on_time else 60)
            steps.append(("wm", 0, draw(st.integers(min(-30, high), high))))
        if draw(st.integers(0, 2)) == 0:
            steps.append(("move", 0, draw(moves)))
    steps.insert(draw(st.integers(0, len(steps))), ("move", 0, draw(moves)))
    return steps


def run(make: Callable[[], WindowedOperator], steps: list[Step], split: bool) -> tuple[list[str], list[Any]]:
    """Results and errors of one operator (split False) or of two, where each move
    hands the chosen bins to the other operator (split True)."""
    ops = [make(), make()] if split else [make()]
    owner: dict[int, int] = {}  # bin -> index in ops; 0 until moved
    outs: list[Output] = []
    for what, port, arg in steps:
        if what == "batch":
            for i, op in enumerate(ops):
                mine = [e for e in arg if owner.get(bin_of(key_of(e)), 0) == i]
                if mine:
                    outs.append(op.on_batch(mine, port))
        elif what == "wm":
            outs += [op.on_watermark(arg, p) for op in ops for p in range(op.n_inputs)]
        elif split:
            leaving = [[b for b in arg if owner.get(b, 0) == src] for src in (0, 1)]
            for src, bins in enumerate(leaving):
                rows, _ = ops[src].take_bins(bins)
                ops[1 - src].put_state(roundtrip(rows), owned=True)
                assert not set(bins) & set(ops[src].state_bins())
                owner.update((b, 1 - src) for b in bins)
            assert not set(ops[0].state_keys()) & set(ops[1].state_keys())
            assert all(fired_last_in_order(op) and bins_agree(op) for op in ops)
    outs += [op.on_watermark(INF, p) for op in ops for p in range(op.n_inputs)]
    assert all(op.state_keys() == [] for op in ops)
    results = [r for o in outs for r in o.events]
    errors = sorted((e.kind, e.event["id"]) for o in outs for e in o.errors)
    assert sum(op.late_count for op in ops) == len(errors)
    return canon(results), errors


def assert_moves_change_nothing(make: Callable[..., WindowedOperator], steps: list[Step],
                                on_time: bool, backend: str = "memory") -> None:
    """Moves change no result; on a store, neither does the backend (against memory)."""
    single = run(lambda: make(backend), steps, split=False)
    assert run(lambda: make(backend), steps, split=True) == single
    if backend != "memory":
        assert run(lambda: make("memory"), steps, split=False) == single
    if on_time:
        assert single[1] == []


FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("aggs", [COUNT, ALL], ids=["count", "all"])
@given(data=st.data(), size=st.integers(1, 120), on_time=st.booleans())
def test_property_tumbling_moves(aggs: list[Any], backend: str, data: st.DataObject, size: int,
                                 on_time: bool) -> None:
    steps = data.draw(scripts(on_time))
    assert_moves_change_nothing(lambda b: window("tumbling", aggs, size=size, backend=b), steps,
                                on_time, backend)


@FAST
@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("aggs", [COUNT, ALL], ids=["count", "all"])
@given(data=st.data(), size=st.integers(1, 120), slide_frac=st.floats(0.05, 1), on_time=st.booleans())
def test_property_sliding_moves(aggs: list[Any], backend: str, data: st.DataObject, size: int,
                                slide_frac: float, on_time: bool) -> None:
    slide = max(1, int(size * slide_frac))
    steps = data.draw(scripts(on_time))
    assert_moves_change_nothing(lambda b: window("sliding", aggs, size=size, slide=slide, backend=b),
                                steps, on_time, backend)


@FAST
@pytest.mark.parametrize("aggs", [COUNT, ALL], ids=["count", "all"])
@given(data=st.data(), gap=st.integers(1, 80), on_time=st.booleans())
def test_property_session_moves(aggs: list[Any], data: st.DataObject, gap: int, on_time: bool) -> None:
    steps = data.draw(scripts(on_time))
    assert_moves_change_nothing(lambda _: window("session", aggs, gap=gap), steps, on_time)


@FAST
@given(data=st.data(), gap=st.integers(1, 80))
def test_property_session_moves_around_fired_sessions(data: st.DataObject, gap: int) -> None:
    """Two keys and late events: often one within gap of a session that fired
    before its key moved, late only if the fired session moved along."""
    steps = data.draw(scripts(on_time=False, keys=KEYS[:2]))
    assert_moves_change_nothing(lambda _: window("session", COUNT, gap=gap), steps, on_time=False)


@FAST
@pytest.mark.parametrize("backend", list(BACKENDS))
@given(data=st.data(), size=st.integers(1, 120), slide_frac=st.floats(0.05, 1), sliding=st.booleans(),
       on_time=st.booleans())
def test_property_join_moves(backend: str, data: st.DataObject, size: int, slide_frac: float,
                             sliding: bool, on_time: bool) -> None:
    slide = max(1, int(size * slide_frac)) if sliding else size
    steps = data.draw(scripts(on_time, ports=2))
    assert_moves_change_nothing(
        lambda b: join("sliding" if sliding else "tumbling", size, slide, backend=b), steps,
        on_time, backend)


@pytest.mark.parametrize("name", list(MAKERS))
@pytest.mark.parametrize("budget", [1, 3, 64])
def test_taking_bins_in_small_steps_splits_the_state_by_label(name: str, budget: int) -> None:
    """`take_bins` a few bins at a time, each bin to the operator of its label: each
    ends up with exactly the keys of its bins, and together they fire what one would."""
    def make() -> WindowedOperator:
        return MAKERS[name](64)

    source, single = make(), make()
    stream = [ev(t, f"k{t % 7}", t, port) for t in range(0, 300, 3) for port in range(source.n_inputs)]
    for op in (source, single):
        for e in stream:
            op.on_batch([e], 0 if "t" in e else 1)
    kept = bin_of("k0", 64)
    moving = [b for b in source.state_bins() if b != kept]
    label = {b: ("x" if i % 2 else "y") for i, b in enumerate(moving)}
    parts = {"x": make(), "y": make()}
    for i in range(0, len(moving), budget):
        for b in moving[i:i + budget]:
            rows, _ = source.take_bins([b])
            parts[label[b]].put_state(roundtrip(rows), owned=True)
    assert source.state_bins() == [kept]
    for lab, op in parts.items():
        assert op.state_bins() == sorted(b for b in moving if label[b] == lab) and bins_agree(op, 64)
    fired = []
    for op in (source, *parts.values()):
        for port in range(op.n_inputs):
            fired += op.on_watermark(INF, port).events
    expected = [e for port in range(single.n_inputs) for e in single.on_watermark(INF, port).events]
    assert canon(fired) == canon(expected)


# -- a checkpoint's snapshot in steps -------------------------------------------------------------
@FAST
@pytest.mark.parametrize("name", list(MAKERS))
@given(data=st.data())
def test_a_snapshot_packed_in_steps_equals_the_whole_snapshot(name: str, data: st.DataObject
                                                             ) -> None:
    """`begin_snapshot`, steps of random budgets, `end_snapshot` (the runtime runs nothing
    else at the activation meanwhile) restore what `snapshot` does; the next cut starts
    afresh."""
    ports = MAKERS[name]().n_inputs
    op = MAKERS[name]()
    for what, port, arg in data.draw(scripts(True, ports)):
        if what == "batch":
            op.on_batch(arg, port)
        elif what == "wm":
            op.on_watermark(arg, port)
    whole = roundtrip([op.snapshot()])[0]
    for _ in range(2):  # a cut, then another
        head = op.begin_snapshot()
        steps = 0
        while not op.snapshot_step(data.draw(st.integers(1, 3))):
            steps += 1
        # each step packs something (a session's key may also have a fired_last row)
        assert steps <= len(op.state_keys()) + len(whole.get("fired_last", ()))
        stepped = roundtrip([op.end_snapshot(head)])[0]
        results = []
        for snap in (stepped, whole):
            fresh = MAKERS[name]()
            fresh.restore(snap)
            assert bins_agree(fresh)
            results.append(canon([e for p in range(ports)
                                  for e in fresh.on_watermark(INF, p).events]))
        assert results[0] == results[1]


# -- incremental snapshots ------------------------------------------------------------------------
def cut(op: WindowedOperator, incremental: bool, budget: int) -> dict[str, Any]:
    """A checkpoint's snapshot in steps, as another process gets it."""
    head = op.begin_snapshot(incremental)
    while not op.snapshot_step(budget):
        pass
    return roundtrip([op.end_snapshot(head)])[0]  # type: ignore[no-any-return]


def from_chain(snaps: list[dict[str, Any]]) -> dict[str, Any]:
    """A full snapshot and the incremental ones after it as one: the last, with every
    one's pieces in order (what restoring a chain of parts gives the operator)."""
    if len(snaps) == 1:
        return snaps[0]
    return {**snaps[-1], "pieces": [p for s in snaps for p in s.get("pieces", ())]}


def fired(op: WindowedOperator) -> list[str]:
    return canon([e for p in range(op.n_inputs) for e in op.on_watermark(INF, p).events])


@FAST
@pytest.mark.parametrize("name", list(MAKERS))
@given(data=st.data())
def test_incremental_snapshots_on_a_full_one_restore_the_state_at_the_last(
        name: str, data: st.DataObject) -> None:
    """Cuts at random points of a script (events, watermarks that fire windows, bins
    taken away and put back, a lessee's partials merged), each incremental or not as
    drawn: every chain (the last full snapshot and the incremental ones since) restores
    what the operator holds at its last cut, and the script may go on with the restored
    operator (as a restored activation does). An operator whose state moved since the
    last cut (in memory), or that keeps its state per key, makes a full one."""
    make = MAKERS[name]
    op, ports = make(), make().n_inputs
    chain: list[dict[str, Any]] = []
    moved = True  # nothing cut yet

    def check_cut() -> None:
        nonlocal op, chain, moved
        live = roundtrip([op.snapshot()])[0]
        snap = cut(op, data.draw(st.booleans()), data.draw(st.integers(1, 4)))
        if snap.get("delta"):
            # a store's part is incremental by file: state moved since changes nothing
            assert chain and (not moved or name.endswith("rocksdb")) \
                and name not in ("session", "session-count")
            chain.append(snap)
        else:
            chain = [snap]
        moved = False
        restored, copy = make(), make()
        restored.restore(from_chain(chain))
        copy.restore(live)
        assert bins_agree(restored)
        assert sorted(map(repr, restored.state_keys())) == sorted(map(repr, copy.state_keys()))
        if data.draw(st.booleans()):
            op = restored  # goes on from the restored state
        else:
            assert fired(restored) == fired(copy)

    for what, port, arg in data.draw(scripts(True, ports)):
        if what == "batch":
            op.on_batch(arg, port)
            if name == "tumbling-count" and data.draw(st.booleans()):  # a lessee's partials
                windows = op._aligned_state().windows  # type: ignore[union-attr]
                if windows:
                    op.merge_partials([[data.draw(st.sampled_from(sorted(windows))),
                                        data.draw(st.sampled_from(KEYS)), 2]], Output())
        elif what == "wm":
            op.on_watermark(arg, port)
        else:
            rows, _ = op.take_bins(arg)
            moved = True
            if data.draw(st.booleans()):
                check_cut()
            if data.draw(st.booleans()):
                op.put_state(roundtrip(rows), owned=True)
                moved = True
        if data.draw(st.integers(0, 2)) == 0:
            check_cut()


def roundtrip_op(op: WindowedOperator) -> WindowedOperator:
    """A copy of `op` (restored from its snapshot): firing it leaves `op` as it is."""
    copy = window("tumbling", COUNT, size=86_400_000)
    copy.restore(roundtrip([op.snapshot()])[0])
    return copy


def test_an_incremental_snapshot_holds_only_what_changed() -> None:
    """Of a day-long window of 1,000 keys, a cut after 10 keys changed packs those 10
    (and a window opened since, whole); with nothing changed, nothing but the envelope."""
    def sizes(snap: dict[str, Any]) -> list[int]:
        return sorted(len(msgpack.unpackb(p, strict_map_key=False)[1]) for p in snap["pieces"])

    op = window("tumbling", COUNT, size=86_400_000)
    op.on_batch([ev(1, f"k{i}") for i in range(1000)], 0)
    full = cut(op, True, 100)  # nothing known before the first cut: full
    assert not full.get("delta") and sizes(full) == [100] * 10
    op.on_batch([ev(2, f"k{i}") for i in range(10)] + [ev(86_400_001, "new")], 0)
    delta = cut(op, True, 100)
    assert delta["delta"] and sizes(delta) == [1, 10]
    assert cut(op, True, 100)["pieces"] == []
    restored = window("tumbling", COUNT, size=86_400_000)
    restored.restore(from_chain([full, delta]))
    assert fired(restored) == fired(roundtrip_op(op))
    for i in range(0, 700, 100):  # most keys change: untracked from the next batch on
        op.on_batch([ev(3, f"k{j}") for j in range(i, i + 100)], 0)
    state = op._aligned_state()
    assert state is not None and state.changed is not None and 86_400_000 not in state.changed
    assert sizes(cut(op, True, 100)) == [100] * 10  # that window whole, the other unchanged


def test_a_restored_window_finds_its_keys_bins_in_steps_among_other_work() -> None:
    """After a restore the index is built in steps (`index_step`); events with new keys,
    a fired window and a move may come between, and the index ends as a fresh one's."""
    op, reference = window("sliding", COUNT, bins=64), window("sliding", COUNT, bins=64)
    batch = [ev(t, f"k{t % 37}") for t in range(0, 400, 2)]
    op.on_batch(batch, 0)
    restored = window("sliding", COUNT, bins=64)
    restored.restore(roundtrip([op.snapshot()])[0])
    assert not restored.index_step(5)
    later = [ev(t, f"n{t % 11}") for t in range(300, 420, 3)]
    for o in (restored, reference):
        o.on_batch(later if o is restored else batch + later, 0)
        o.on_watermark(150, 0)  # some windows fire
    for _ in range(10):
        assert not restored.index_step(5)
    moved = bin_of("k1", 64)  # a move before every bin is found finds the rest first
    assert canon_rows(restored.take_bins([moved])[0]) == \
        canon_rows(reference.take_bins([moved])[0]) != []
    assert restored.index_step(5)
    assert restored.state_bins() == reference.state_bins() and bins_agree(restored, 64)
    for b in restored.state_bins():
        assert canon_rows(restored.take_bins([b])[0]) == canon_rows(reference.take_bins([b])[0])


def canon_rows(rows: list[Any]) -> list[str]:
    return sorted(repr((end, b, sorted(map(repr, roundtrip([e])[0].items()))
                        if isinstance(e, dict) else e)) for end, b, e in rows)
