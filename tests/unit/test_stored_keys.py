"""State kept per key in the rocksdb backend (`operators/stored_keys.py`,
`operators/process_timers.py`, `operators/stored_sessions.py`): a keyed process's states
and timers, an interval join's events and a session window's sessions, in a store with
a cache of hot keys, checkpointed by the store's files, moved by bin; the same results
as in memory."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cameo_actors.operators import stored_keys
from cameo_actors.operators.base import Output
from cameo_actors.operators.bins import stable_hash
from cameo_actors.operators.interval_join import IntervalJoinOperator
from cameo_actors.operators.process import ProcessContext, ProcessOperator
from cameo_actors.operators.process_timers import StoredTimers, TimerHeap
from cameo_actors.operators.state_store import IN_MEMORY, ROCKSDB, StateBackend
from cameo_actors.operators.stored_keys import StoredKeys, StoredState, StoreHome
from cameo_actors.operators.stored_sessions import StoredSessions
from cameo_actors.operators.windows import WindowOperator
from tests.shared.zoo import canon
from tests.udfs import BucketCount
from tests.unit.test_nexmark_operators import EVENT_AGGS, Toggle

BINS = 8


def stored(tmp_path: Path, cache: int = 2) -> StoredKeys:
    return StoredKeys(BINS, StoreHome(StateBackend(ROCKSDB, str(tmp_path), cache)), b"s")


def bin_of(key: Any) -> int:
    return stable_hash(key) & (BINS - 1)


def unpacked(pieces: list[Any]) -> list[Any]:
    """A part's pieces as a restore reads them (each piece one msgpack object)."""
    return [msgpack.unpackb(b"".join(map(bytes, p)) if isinstance(p, list) else p, raw=False)
            for p in pieces]


def checkpoint(keys: StoredKeys, incremental: bool = False) -> list[Any]:
    state = StoredState(keys.home, [keys])
    state.start_packing(incremental)
    while not state.pack_some(8):
        pass
    return unpacked(state.packed())


def restored(tmp_path: Path, pieces: list[Any]) -> StoredKeys:
    keys = stored(tmp_path)
    StoredState(keys.home, [keys]).load(pieces)
    return keys


def test_the_cache_keeps_its_bound_and_what_left_it_is_read_back(tmp_path: Path) -> None:
    keys = stored(tmp_path)
    for i in range(50):
        keys[f"k{i}"] = {"n": i}
        keys.after_batch()
    assert keys.cached() <= 2 + 1 and keys.stored
    del keys["k3"]  # a key that left the cache, deleted: stays deleted once written
    keys.after_batch()
    assert keys.get("k3") is None and "k3" not in keys
    assert keys.get("k7") == {"n": 7} and keys.get(("t", 1)) is None
    assert sorted(keys) == sorted(f"k{i}" for i in range(50) if i != 3)
    assert keys.bins() == sorted({bin_of(f"k{i}") for i in range(50) if i != 3})


def test_changed_keys_are_written_back_beyond_what_a_cut_may_find(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stored_keys, "DIRTY_KEYS", 5)
    monkeypatch.setattr(stored_keys, "TRICKLE_KEYS", 3)
    keys = stored(tmp_path, cache=100)
    for i in range(4):
        keys[i] = {"v": i}
    keys.after_batch()
    assert len(keys.dirty) == 4 and not keys.stored  # few: left for the cut
    for i in range(4, 10):
        keys[i] = {"v": i}
    keys.after_batch()
    assert len(keys.dirty) == 7 and keys.stored  # 3 of the 10 written
    keys.after_batch()
    assert len(keys.dirty) == 5  # down to what a cut may find
    keys.after_batch()
    assert len(keys.dirty) == 5 and keys.cached() == 10


def test_taking_bins_hands_on_the_stores_bytes_and_removes_them(tmp_path: Path) -> None:
    keys, other = stored(tmp_path), stored(tmp_path)
    for k in ("a", "b", ("t", 1), 7):
        keys[k] = {"k": k if not isinstance(k, tuple) else list(k)}
    b = bin_of("a")
    taken = keys.take([b])
    assert sorted(map(repr, (k for k, _ in taken))) == sorted(
        repr(k) for k in ("a", "b", ("t", 1), 7) if bin_of(k) == b)
    assert all(isinstance(blob, bytes) for _, blob in taken)
    assert b not in keys.bins() and keys.get("a") is None
    other.put_packed(taken)
    assert other.get("a") == {"k": "a"} and other.bins() == [b]


def test_a_restore_opens_the_files_and_unpacks_no_key_until_asked(tmp_path: Path) -> None:
    keys = stored(tmp_path)
    for i in range(100):
        keys[i] = {"v": i}
    keys.after_batch()
    again = restored(tmp_path, checkpoint(keys))
    assert again.cached() == 0
    assert again.get(42) == {"v": 42} and again.cached() == 1
    assert sorted(again) == list(range(100))


def test_an_incremental_part_carries_only_the_new_table_files(tmp_path: Path) -> None:
    keys = stored(tmp_path)
    for i in range(200):
        keys[i] = {"v": i}
    full = checkpoint(keys)
    keys[500] = {"v": 500}
    delta = checkpoint(keys, incremental=True)
    files = [p["file"] for p in full if "file" in p and p["file"].endswith(".sst")]
    new = [p["file"] for p in delta if "file" in p and p["file"].endswith(".sst")]
    assert files and new and not set(files) & set(new)
    again = restored(tmp_path, full + delta)  # a chain: the full part's pieces first
    assert again.get(500) == {"v": 500} and again.get(3) == {"v": 3}


def test_a_state_msgpack_cannot_carry_names_the_key_and_the_fix(tmp_path: Path) -> None:
    keys = stored(tmp_path, cache=0)
    keys["a"] = {"when": object()}
    with pytest.raises(ValueError, match="key 'a' or its state cannot be packed.*state_backend"):
        keys.after_batch()


# -- a keyed process on both backends ---------------------------------------------------------
class Cumulative(BucketCount):
    """`BucketCount`, each bucket's count emitted with the key's total so far: a timer's
    result depends on what earlier timers wrote."""

    def on_timer(self, state: dict[str, Any], time: float, ctx: ProcessContext) -> Any:
        out = super().on_timer(state, time, ctx)
        state["total"] = out["total"] = state.get("total", 0) + out["n"]
        return out


def backend_of(name: str, tmp_path: Path) -> StateBackend:
    """The backend named; rocksdb with a cache of one entry, so nearly every key is read
    from the store."""
    return IN_MEMORY if name == "memory" else StateBackend(ROCKSDB, str(tmp_path), 1)


def process(backend: str, tmp_path: Path, cls: type = Cumulative) -> ProcessOperator:
    op = ProcessOperator("p", cls(), key_fn=lambda e: e["k"], time_field="ts")
    op.use_bins(BINS, backend_of(backend, tmp_path))
    return op


def cut(op: Any, fresh: Any, chain: list[Any]) -> Any:
    """A checkpoint's cut in steps of 5, restored into `fresh` as the runtime restores a
    chain: the last part's head, every part's pieces in order (`chain` gathers them)."""
    head = op.begin_snapshot(incremental=bool(chain))
    while not op.snapshot_step(5):
        pass
    part = msgpack.unpackb(msgpack.packb(
        {**op.end_snapshot(head), "pieces": []}, use_bin_type=True), raw=False)
    pieces = unpacked(head["pieces"])
    if not part.get("delta"):
        chain.clear()
    chain.extend(pieces)
    fresh.restore({**part, "pieces": list(chain)})
    return fresh


def run(make: Callable[[], Any], steps: list[Any], rows: bool = False) -> list[str]:
    """Results and errors of `steps` on two operators from `make`, each key on the owner
    of its bin: a "cut" restores each from its checkpoint (a chain of parts on the
    store), a "move" hands bins to the other one (through msgpack). A batch or a
    watermark may name its port (third item). With `rows`, also each operator's state
    rows before the end of the stream (what it still holds, not only what it emits)."""
    ops = [make(), make()]
    owner = {b: b % 2 for b in range(BINS)}
    chains: list[list[Any]] = [[], []]
    outs: list[Output] = []
    for what, arg, *port in steps:
        if what == "batch":
            for i, op in enumerate(ops):
                outs.append(op.on_batch([e for e in arg if owner[bin_of(key(e))] == i], *port))
        elif what == "wm":
            outs += [op.on_watermark(arg, *port) for op in ops]
        elif what == "cut":
            ops = [cut(op, make(), chains[i]) for i, op in enumerate(ops)]
        else:
            for src in (0, 1):
                bins = [b for b in arg if owner[b] == src]
                rows, n = ops[src].take_bins(bins)
                # (n: keys; a session window has a row per session)
                assert n <= len(rows) and not set(bins) & set(ops[src].state_bins())
                ops[1 - src].put_state(msgpack.unpackb(msgpack.packb(rows), raw=False),
                                       owned=True)
            owner.update((b, 1 - owner[b]) for b in arg)
            for op in ops:  # (listing bins writes every dirty key: not after every step)
                assert op.state_bins() == sorted({bin_of(k) for k in op.state_keys()})
    held = [held_rows(op) for op in ops] if rows else []
    for port in range(ops[0].n_inputs):
        outs += [op.on_watermark(float("inf"), port) for op in ops]
    return canon([e for o in outs for e in o.events]) + sorted(
        f"{e.kind}: {e.message}" for o in outs for e in o.errors) + [str(held)]


def held_rows(op: Any) -> list[str]:
    """An operator's state rows (a join's per key, a session window's open and fired
    sessions), in no order."""
    snap = op.snapshot()
    return sorted(f"{field}: {row!r}" for field in ("keys", "sessions", "fired_last")
                  for row in snap.get(field, ()))


def key(e: dict[str, Any]) -> Any:
    """An event's key: a list in the event (as msgpack gives it back) is a tuple key."""
    k = e["k"]
    return tuple(k) if isinstance(k, list) else k


@st.composite
def scripts(draw: st.DrawFn) -> list[Any]:
    steps: list[Any] = []
    t = 0
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["batch", "batch", "wm", "cut", "move"]))
        if kind == "batch":
            evs = draw(st.lists(st.tuples(st.integers(0, 60), st.sampled_from(
                ["a", "b", "c", "d", ("t", 1), 5]), st.integers(0, 3)), max_size=12))
            steps.append(("batch", [{"ts": t + dt, "k": k, "v": v} for dt, k, v in evs]))
        elif kind == "wm":
            t += draw(st.integers(0, 80))
            steps.append(("wm", t))
        elif kind == "move":
            steps.append(("move", draw(st.lists(st.integers(0, BINS - 1), unique=True))))
        else:
            steps.append(("cut", None))
    return steps


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(steps=scripts())
@example(steps=[  # a timer fired between two parts of a chain
    ("batch", [{"ts": 1, "k": "a", "v": 2}, {"ts": 60, "k": "a", "v": 0}]), ("cut", None),
    ("wm", 55), ("cut", None), ("wm", 200)])
@pytest.mark.parametrize("cls", [Cumulative, Toggle], ids=["cumulative", "toggle"])
def test_property_a_stored_process_gives_the_results_it_gives_in_memory(
        cls: type, steps: list[Any], tmp_path: Path) -> None:
    """Checkpoints (incremental chains of the store's files), restores and bin moves
    change no result, and the store changes none against memory: states, timers set and
    cancelled by events, timers set by timers within the same advance."""
    assert run(lambda: process("rocksdb", tmp_path, cls), steps) == \
        run(lambda: process("memory", tmp_path, cls), steps)


def test_a_stored_process_keeps_its_states_in_the_store(tmp_path: Path) -> None:
    op = process("rocksdb", tmp_path)
    op.on_batch([{"ts": 1, "k": f"k{i}"} for i in range(100)])
    assert op.disk_bytes() == 0  # not yet flushed out of RocksDB's write buffer
    again = cut(op, process("rocksdb", tmp_path), [])
    assert op.disk_bytes() > 0 and again.disk_bytes() > 0  # a checkpoint's files
    assert sorted(again.state_keys()) == sorted(f"k{i}" for i in range(100))


@pytest.mark.parametrize("source, target", [("rocksdb", "memory"), ("memory", "rocksdb")])
def test_a_process_checkpoint_restores_into_the_other_backend(tmp_path: Path, source: str,
                                                              target: str) -> None:
    op = process(source, tmp_path)
    op.on_batch([{"ts": t, "k": k} for t in (1, 60) for k in ("a", "b", ("t", 1))])
    again = cut(op, process(target, tmp_path), [])
    assert canon(again.on_watermark(float("inf")).events) == \
        canon(op.on_watermark(float("inf")).events)


def test_timers_in_the_store_fire_in_the_heaps_order_and_an_advance_cut_short_keeps_the_rest(
        tmp_path: Path) -> None:
    home = StoreHome(StateBackend(ROCKSDB, str(tmp_path), 2))
    queues: list[Any] = [TimerHeap(), StoredTimers(home, b"u")]
    for q in queues:
        for t, k in [(5, "b"), (5, "a"), (3, ("t", 1)), (9, "a"), (math.inf, "z")]:
            q.push(t, k)

    def fire(q: Any, wm: float, at_most: int = 99) -> list[Any]:
        q.begin(wm)
        out = []
        while len(out) < at_most and (due := q.pop_due()) is not None:
            out.append(due)
            if due == (3, ("t", 1)):
                q.push(4, "c")  # due in the same advance, in its order
        q.end()
        return out

    assert [fire(q, 6, at_most=2) for q in queues] == [[(3, ("t", 1)), (4, "c")]] * 2
    assert [q.next_time() for q in queues] == [5, 5]
    assert [fire(q, 10) for q in queues] == [[(5, "a"), (5, "b"), (9, "a")]] * 2
    assert [fire(q, math.inf) for q in queues] == [[(math.inf, "z")]] * 2
    assert [q.next_time() for q in queues] == [None, None]


# -- an interval join on both backends --------------------------------------------------------
def ijoin(backend: str, tmp_path: Path, lower: int = -10, upper: int = 20
          ) -> IntervalJoinOperator:
    op = IntervalJoinOperator("ij", lower_ms=lower, upper_ms=upper, left_key_fn=key,
                              right_key_fn=key, left_time_field="t", right_time_field="ts")
    op.use_bins(BINS, backend_of(backend, tmp_path))
    return op


@st.composite
def join_scripts(draw: st.DrawFn) -> list[Any]:
    """Batches and watermarks on either port, cuts, moves; keys as events carry them (a
    tuple key as a list, as msgpack gives it back)."""
    steps: list[Any] = []
    t = [0, 0]
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["batch", "batch", "batch", "wm", "cut", "move"]))
        port = draw(st.integers(0, 1))
        tf = ("t", "ts")[port]
        if kind == "batch":
            evs = draw(st.lists(st.tuples(st.integers(-5, 60), st.sampled_from(
                ["a", "b", "c", ["t", 1], 5]), st.integers(0, 3)), max_size=10))
            steps.append(("batch", [{tf: t[port] + dt, "k": k, "v": v} for dt, k, v in evs], port))
        elif kind == "wm":
            t[port] += draw(st.integers(0, 50))
            steps.append(("wm", t[port], port))
        elif kind == "move":
            steps.append(("move", draw(st.lists(st.integers(0, BINS - 1), unique=True))))
        else:
            steps.append(("cut", None))
    return steps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(steps=join_scripts(), lower=st.integers(-30, 30), width=st.integers(0, 40))
@example(steps=[  # a key pruned, then joined again, across a cut and a move
    ("batch", [{"t": 1, "k": "a", "v": 0}, {"t": 40, "k": "a", "v": 1}], 0),
    ("wm", 35, 0), ("wm", 35, 1), ("cut", None), ("move", [bin_of("a")]),
    ("batch", [{"ts": 45, "k": "a", "v": 2}], 1)], lower=0, width=10)
def test_property_a_stored_interval_join_gives_the_results_it_gives_in_memory(
        steps: list[Any], lower: int, width: int, tmp_path: Path) -> None:
    """Checkpoints (chains of the store's files), restores and bin moves change no pair,
    and the store changes none against memory: events buffered per key and dropped as
    the watermarks pass them (the store's expiry queue against the heap): the same pairs
    out, the same events held."""
    assert run(lambda: ijoin("rocksdb", tmp_path, lower, lower + width), steps, rows=True) == \
        run(lambda: ijoin("memory", tmp_path, lower, lower + width), steps, rows=True)


def test_a_stored_interval_join_keeps_its_events_in_the_store_and_drops_them_there(
        tmp_path: Path) -> None:
    op = ijoin("rocksdb", tmp_path)
    op.on_batch([{"t": 100 + i, "k": f"k{i}"} for i in range(50)], 0)
    op.on_batch([{"ts": 300, "k": "k0"}], 1)
    assert op._keys.cached() <= 2 and len(op.state_keys()) == 50  # (the cache holds 1)
    again = cut(op, ijoin("rocksdb", tmp_path), [])
    assert again.disk_bytes() > 0 and again._keys.cached() == 0  # nothing unpacked
    assert again.on_batch([{"ts": 110, "k": "k5"}], 1).events == [
        {"key": "k5", "t": 110, "left": {"t": 105, "k": "k5"}, "right": {"ts": 110, "k": "k5"}}]
    for port in (0, 1):
        again.on_watermark(140, port)  # lefts expire at t + 20 < 140: up to k19
    assert sorted(again.state_keys()) == sorted(["k0", *(f"k{i}" for i in range(20, 50))])
    rows, n = again.take_bins(range(BINS))
    assert n == 31 and all(isinstance(blob, bytes) for _, blob in rows)  # the store's bytes
    memory = ijoin("memory", tmp_path)
    memory.put_state(msgpack.unpackb(msgpack.packb(rows), raw=False), owned=True)
    assert memory._keys["k0"].times == ([], [300])


@pytest.mark.parametrize("source, target", [("rocksdb", "memory"), ("memory", "rocksdb")])
def test_an_interval_join_checkpoint_restores_into_the_other_backend(
        tmp_path: Path, source: str, target: str) -> None:
    op = ijoin(source, tmp_path)
    op.on_batch([{"t": t, "k": k} for t in (1, 60) for k in ("a", "b", ["t", 1])], 0)
    again = cut(op, ijoin(target, tmp_path), [])
    rights = [{"ts": t, "k": k} for t in (5, 70) for k in ("a", ["t", 1])]
    expected = canon(op.on_batch(rights, 1).events)
    assert len(expected) == 4 and canon(again.on_batch(rights, 1).events) == expected


# -- session windows on both backends ---------------------------------------------------------
def sessions(backend: str, tmp_path: Path, gap: int = 10) -> WindowOperator:
    op = WindowOperator("s", kind="session", gap_ms=gap, time_field="ts", aggregates=EVENT_AGGS,
                        key_fn=key)
    op.use_bins(BINS, backend_of(backend, tmp_path))
    return op


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(steps=scripts(), gap=st.integers(1, 40))
@example(steps=[  # sessions bridged, fired, an event within gap of the fired one (late),
    # and its fired time kept across a cut and a move, then forgotten
    ("batch", [{"ts": 0, "k": "a", "v": 1}, {"ts": 15, "k": "a", "v": 2},
               {"ts": 8, "k": "a", "v": 3}]),
    ("wm", 30), ("cut", None), ("move", [bin_of("a")]),
    ("batch", [{"ts": 30, "k": "a", "v": 4}, {"ts": 60, "k": "a", "v": 5}]), ("wm", 200)], gap=10)
@example(steps=[  # a session that grew after it was queued: looked at early, queued again
    ("batch", [{"ts": 0, "k": "a", "v": 1}, {"ts": 5, "k": "a", "v": 1}]), ("wm", 12)], gap=10)
def test_property_stored_sessions_give_the_results_they_give_in_memory(
        steps: list[Any], gap: int, tmp_path: Path) -> None:
    """Checkpoints (chains of the store's files), restores and bin moves change no
    session, and the store changes none against memory: sessions opened, grown, bridged
    and fired, late events within gap of a fired one, the same state held."""
    # A tuple key comes as a list in the events: accumulators keep events, and a store
    # keeps them as msgpack does (lists).
    steps = [(what, [{**e, "k": list(e["k"]) if isinstance(e["k"], tuple) else e["k"]}
                     for e in arg]) if what == "batch" else (what, arg) for what, arg in steps]
    assert run(lambda: sessions("rocksdb", tmp_path, gap), steps, rows=True) == \
        run(lambda: sessions("memory", tmp_path, gap), steps, rows=True)


def test_stored_sessions_live_in_the_store_and_fire_in_the_order_memory_fires_them(
        tmp_path: Path) -> None:
    ops = [sessions("rocksdb", tmp_path), sessions("memory", tmp_path)]
    assert isinstance(ops[0]._windower, StoredSessions)
    evs = [{"ts": t, "k": k, "v": i} for i, (t, k) in enumerate(
        [(5, "b"), (0, "a"), (3, "c"), (2, "a"), (40, "a"), (5, "d")])]
    outs = [op.on_batch(evs) and op.on_watermark(20).events for op in ops]
    assert outs[0] == outs[1] and [r["key"] for r in outs[0]] == ["a", "c", "b", "d"]
    again = cut(ops[0], sessions("rocksdb", tmp_path), [])
    assert again.disk_bytes() > 0 and sorted(again.state_keys()) == ["a", "b", "c", "d"]
    assert again.on_batch([{"ts": 14, "k": "b", "v": 9}]).errors[0].kind == "late"
    assert again.on_watermark(100).events == ops[1].on_watermark(100).events
    assert again.state_keys() == []  # every fired time forgotten once it cannot matter


@pytest.mark.parametrize("source, target", [("rocksdb", "memory"), ("memory", "rocksdb")])
def test_a_session_checkpoint_restores_into_the_other_backend(
        tmp_path: Path, source: str, target: str) -> None:
    op = sessions(source, tmp_path)
    op.on_batch([{"ts": t, "k": k, "v": t} for t in (1, 4, 40) for k in ("a", "b", ["t", 1])])
    op.on_watermark(20)  # the first sessions fire; their fired times stay
    again = cut(op, sessions(target, tmp_path), [])
    late = [{"ts": 12, "k": "a", "v": 0}]  # within gap of a's fired session (last 4)
    assert [e.kind for e in again.on_batch(late).errors] == ["late"]
    assert canon(again.on_watermark(float("inf")).events) == \
        canon(op.on_watermark(float("inf")).events) != []
