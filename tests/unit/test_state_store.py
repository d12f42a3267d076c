"""The rocksdb state backend (`operators/stored_windows.py`, `operators/state_store.py`):
its cache stays bounded, a restore opens files without unpacking a key, a checkpoint
carries only the store's new files, and checkpoints move between the two backends. The
properties shared with the memory backend (moves, snapshots in steps, incremental
chains, checkpoints and crashes in the cores) run on both in test_state_moves.py,
test_checkpoint.py, test_migration.py and test_lease_runtime.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgpack
import pytest

from cameo_actors.dataflow.spec import AggSpec
from cameo_actors.operators.state_store import (
    MEMORY,
    ROCKSDB,
    KeyStore,
    StateBackend,
    end_bytes,
    joined,
    key_bytes,
    key_of,
)
from cameo_actors.operators.stored_windows import EVICT_ENTRIES, StoredWindows
from cameo_actors.operators.windowed_operator import WindowedOperator
from cameo_actors.operators.windows import WindowOperator
from cameo_actors.runtime._private.checkpoint.parts import Content, unpack_part

INF = float("inf")


def window(tmp_path: Path, kind: str = ROCKSDB, cache: int = 1_000) -> WindowOperator:
    aggs = [AggSpec("n", "count"), AggSpec("total", "sum", "v")]
    op = WindowOperator("w", kind="tumbling", size_ms=100, aggregates=aggs, time_field="t",
                        key_fn=lambda e: e["k"])
    op.use_bins(64, StateBackend(kind, str(tmp_path / "stores"), cache))
    return op


def state(op: WindowOperator) -> StoredWindows:
    aligned = op._aligned_state()
    assert isinstance(aligned, StoredWindows)
    return aligned


def feed(op: WindowOperator, keys: int, t: int = 10, v: int = 1) -> None:
    for first in range(0, keys, 500):
        op.on_batch([{"t": t, "k": f"k{i}", "v": v} for i in range(first, min(keys, first + 500))])


def cut(op: WindowedOperator, incremental: bool = True) -> dict[str, Any]:
    """A checkpoint's snapshot as the writer thread writes it and a restore reads it."""
    head = op.begin_snapshot(incremental)
    while not op.snapshot_step(10_000):
        pass
    snap = op.end_snapshot(head)
    pieces = snap.pop("pieces")
    frames = Content(msgpack.packb({"operator": snap}), pieces, [], None).frames()
    part = unpack_part([bytes(f) for f in frames])
    return {**part["state"]["operator"], "pieces": part["state"]["operator"].get("pieces", [])}


def fired(op: WindowedOperator) -> list[tuple[Any, ...]]:
    return sorted((r["key"], r["n"], r["total"]) for r in op.on_watermark(INF).events)


def test_the_cache_stays_within_its_bound_and_what_left_it_is_read_back(tmp_path: Path) -> None:
    op = window(tmp_path, cache=1_000)
    feed(op, 20_000)
    assert state(op).cached() <= 1_000 + 500  # a batch's new keys, before its eviction
    feed(op, 20_000, v=2)  # every key again: most read back from the store
    assert fired(op) == sorted((f"k{i}", 2, 3) for i in range(20_000))


def test_a_restore_opens_the_files_and_unpacks_no_key_until_asked(tmp_path: Path) -> None:
    op = window(tmp_path)
    feed(op, 3_000)
    snap = cut(op, incremental=False)
    again = window(tmp_path)
    again.restore(snap)
    assert state(again).cached() == 0
    feed(again, 10, v=5)  # ten keys asked for: ten cached
    assert state(again).cached() == 10
    expected = sorted([(f"k{i}", 2, 6) for i in range(10)] +
                      [(f"k{i}", 1, 1) for i in range(10, 3_000)])
    warmed = window(tmp_path, cache=2_000)
    warmed.restore(snap)
    feed(warmed, 10, v=5)
    steps = 1
    while not warmed.index_step(800):  # the runtime's steps after a restore: warm the cache
        steps += 1
    # 1,990 entries warmed at 100 a step, then one step finds the cache full
    assert state(warmed).cached() == 2_000 and steps == 21
    assert fired(again) == fired(warmed) == expected


def test_an_incremental_part_carries_only_the_new_table_files(tmp_path: Path) -> None:
    op = window(tmp_path, cache=100_000)
    feed(op, 50_000)
    full = cut(op, incremental=False)
    feed(op, 100, v=3)
    delta = cut(op, incremental=True)
    assert delta["delta"] and not full.get("delta")

    def table_bytes(snap: dict[str, Any]) -> int:
        return sum(len(p["data"]) for p in snap["pieces"] if str(p.get("file", "")).endswith(".sst"))

    assert 0 < table_bytes(delta) < table_bytes(full) / 10
    again = window(tmp_path)
    again.restore({**delta, "pieces": [*full["pieces"], *delta["pieces"]]})
    expected = sorted([(f"k{i}", 2, 4) for i in range(100)] +
                      [(f"k{i}", 1, 1) for i in range(100, 50_000)])
    assert fired(again) == expected
    alone = window(tmp_path)
    with pytest.raises(ValueError, match="lacks its file"):
        alone.restore(delta)  # its chain's full part is missing


@pytest.mark.parametrize(("source", "target"), [(MEMORY, ROCKSDB), (ROCKSDB, MEMORY)])
def test_a_checkpoint_restores_into_the_other_backend(tmp_path: Path, source: str,
                                                      target: str) -> None:
    op = window(tmp_path, source, cache=100)
    feed(op, 2_000)
    feed(op, 50, t=150)  # a second window
    snap = cut(op, incremental=False)
    again = window(tmp_path, target, cache=100)
    again.restore(snap)
    assert fired(again) == fired(op)


def test_keys_of_every_kind_go_through_the_store(tmp_path: Path) -> None:
    for key in ["a", "", "ünï", 7, -3, 2.5, None, True, ("t", 1), ("n", ("e", 2))]:
        assert key_of(key_bytes(key)) == key
    assert end_bytes(-5) < end_bytes(0) < end_bytes(0.5) < end_bytes(100) < end_bytes(1e15)
    op = WindowOperator("w", kind="tumbling", size_ms=100,
                        aggregates=[AggSpec("n", "count")], time_field="t",
                        key_fn=lambda e: tuple(e["k"]) if isinstance(e["k"], list) else e["k"])
    op.use_bins(8, StateBackend(ROCKSDB, str(tmp_path / "stores"), 1))
    keys = ["a", 7, ["t", 1], None]
    op.on_batch([{"t": 1, "k": k} for k in keys * 3])
    got = [repr((r["key"], r["n"])) for r in op.on_watermark(INF).events]
    assert sorted(got) == sorted(map(repr, [("a", 3), (7, 3), (("t", 1), 3), (None, 3)]))


def test_a_state_msgpack_cannot_carry_names_the_key_and_the_fix(tmp_path: Path) -> None:
    op = window(tmp_path, cache=1)
    windows = state(op)
    w = windows.open(100)
    odd = object()  # a key of a user type, in a dataflow run in-process
    w[odd], w["ok"] = [1, 2.0], [1, 2.0]
    windows.changed_in(100).update((odd, "ok"))  # as the operators' loops mark them
    with pytest.raises(ValueError, match="state_backend='memory'"):
        windows.evict(EVICT_ENTRIES)


def test_a_piece_still_in_frames_is_joined() -> None:
    frames = [b"\x82\xa4file\xa1x\xa4data\xc6\x00\x00\x00\x02", memoryview(b"ab")]
    assert joined(frames) == {"file": "x", "data": b"ab"}
    assert joined([100, {"k": 1}]) == [100, {"k": 1}]


def test_stores_left_by_a_dead_process_are_removed_by_the_next_one(tmp_path: Path) -> None:
    root = tmp_path / "stores"
    dead = root / "store-999999999-abc"  # no process has that id
    dead.mkdir(parents=True)
    (dead / "000001.sst").write_bytes(b"x")
    mine = root / f"store-{os.getpid()}-def"
    mine.mkdir()
    KeyStore(str(root)).close()
    assert not dead.exists() and mine.exists()
