"""State kept per key in the rocksdb backend (`operators/stored_keys.py`,
`operators/process_timers.py`): a keyed process's states and timers in a store with a
cache of hot keys, checkpointed by the store's files, moved by bin as the store's bytes;
the same results as in memory."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cameo_actors.operators import stored_keys
from cameo_actors.operators.base import Output
from cameo_actors.operators.bins import stable_hash
from cameo_actors.operators.process import ProcessContext, ProcessOperator
from cameo_actors.operators.process_timers import StoredTimers, TimerHeap
from cameo_actors.operators.state_store import IN_MEMORY, ROCKSDB, StateBackend
from cameo_actors.operators.stored_keys import StoredKeys, StoredState, StoreHome
from tests.shared.zoo import canon
from tests.udfs import BucketCount
from tests.unit.test_nexmark_operators import Toggle

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


def process(backend: str, tmp_path: Path, cls: type = Cumulative) -> ProcessOperator:
    op = ProcessOperator("p", cls(), key_fn=lambda e: e["k"], time_field="ts")
    op.use_bins(BINS, IN_MEMORY if backend == "memory"
                else StateBackend(ROCKSDB, str(tmp_path), 1))  # nearly every key stored
    return op


def cut(op: ProcessOperator, fresh: ProcessOperator, chain: list[Any]) -> ProcessOperator:
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


def run(backend: str, steps: list[Any], tmp_path: Path, cls: type = Cumulative) -> list[str]:
    """Results and errors of `steps` on two operators, each key on the owner of its bin: a "cut"
    restores each from its checkpoint (a chain of parts on the store), a "move" hands
    bins to the other one (through msgpack)."""
    ops = [process(backend, tmp_path, cls), process(backend, tmp_path, cls)]
    owner = {b: b % 2 for b in range(BINS)}
    chains: list[list[Any]] = [[], []]
    outs: list[Output] = []
    for what, arg in steps:
        if what == "batch":
            for i, op in enumerate(ops):
                outs.append(op.on_batch([e for e in arg if owner[bin_of(e["k"])] == i]))
        elif what == "wm":
            outs += [op.on_watermark(arg) for op in ops]
        elif what == "cut":
            ops = [cut(op, process(backend, tmp_path, cls), chains[i]) for i, op in enumerate(ops)]
        else:
            for src in (0, 1):
                bins = [b for b in arg if owner[b] == src]
                rows, n = ops[src].take_bins(bins)
                assert n == len(rows) and not set(bins) & set(ops[src].state_bins())
                ops[1 - src].put_state(msgpack.unpackb(msgpack.packb(rows), raw=False),
                                       owned=True)
            owner.update((b, 1 - owner[b]) for b in arg)
            for op in ops:  # (listing bins writes every dirty key: not after every step)
                assert op.state_bins() == sorted({bin_of(k) for k in op.state_keys()})
    outs += [op.on_watermark(float("inf")) for op in ops]
    return canon([e for o in outs for e in o.events]) + sorted(
        f"{e.kind}: {e.message}" for o in outs for e in o.errors)


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
    assert run("rocksdb", steps, tmp_path, cls) == run("memory", steps, tmp_path, cls)


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
