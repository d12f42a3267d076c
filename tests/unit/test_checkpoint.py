"""Checkpoints and restores on the in-process cluster (no Ray, no sleep).

1. The barrier protocol (`checkpoint.py`) on one or two cores, each step by hand.
2. Every operator kind restored after a crash: a reader that reads exactly once across
   the crash gets run_local's results, nothing missing and nothing twice. Also: crashes
   before any checkpoint completed, several crashes, one core failing while the others
   survive.
3. The same as a property: random batches, checkpoints started, completed or abandoned
   at random points, failures at random points (several in a run; before any checkpoint
   completed or after).
4. A source applies each client's calls once, in the client's order.

A "crash" loses every core (what they held in memory and in transit); what survives
is the checkpoint storage, the ingress logs on disk and the client (its call numbers, and
the reader's offsets). The cluster comes back fresh with the same config and deployment,
restores from the last completed checkpoint and replays the ingress logs after it. When
one core fails (`fail_one`), the others survive with what they hold, and the dataflow is
restored on all of them.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors import Dataflow, count
from cameo_actors.dataflow.spec import AggSpec
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.operators.state_store import BACKENDS, MEMORY
from cameo_actors.operators.windows import WindowOperator
from cameo_actors.runtime._private.checkpoint.parts import (
    CHECKPOINT,
    FRAME_ROWS,
    SNAPSHOT,
    SNAPSHOT_ENTRIES,
    Content,
    unpack_part,
)
from cameo_actors.runtime._private.controller.checkpoints import CHECKPOINT_TIMEOUT_S, Cut
from cameo_actors.runtime._private.exchange.wire import decode_message, unpack_link
from cameo_actors.runtime._private.placement import Placement, place
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.scheduling import Message
from cameo_actors.testing import run_local
from tests.shared.gateway import ControlPlane, StoredCluster
from tests.shared.inprocess import InProcessCluster
from tests.shared.zoo import SCHEMA, events, flows

KINDS = ["filter", "tumbling", "sliding", "session", "join", "interval", "union", "process"]
#: A stored state's cache in these tests: most entries written back and read again.
SMALL_CACHE = 2


def config(folder: Path, credits: int = 10_000, **kw: Any) -> RuntimeConfig:
    """Checkpoints on (the core needs a checkpoint_url to turn them on; it writes nothing
    there), exactly-once delivery unless told otherwise, ingress logs under `folder`."""
    return RuntimeConfig(checkpoint_interval_s=1.0, checkpoint_url=str(folder / "checkpoints"),
                         ingress_log_dir=str(folder / "ingress"), credit_events=credits, **kw)


def canon(rows: list[dict[str, Any]]) -> list[str]:
    """Rows as a multiset: sorted JSON texts. Floats rounded to 9 significant digits: the
    scheduler may run a window's events in another order than run_local (by deadline), so
    a float sum may differ in its last bits; a row missing or twice still shows."""
    def norm(v: Any) -> Any:
        return float(f"{v:.9g}") if isinstance(v, float) else v
    return sorted(json.dumps({k: norm(v) for k, v in r.items()}, sort_keys=True) for r in rows)


def flow(kind: str, name: str, p: int) -> Dataflow:
    if kind == "process":  # state kept per key, with timers (not in the shared zoo)
        d = Dataflow(f"{name}-process", latency_target_ms=200, tenant="tprocess")
        (d.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40).key_by("key")
         .process("tests.udfs:BucketCount", time_field="ts", parallelism=p).sink("o"))
        return d
    if kind == "interval":  # an interval join of two sources (not in the shared zoo)
        d = Dataflow(f"{name}-interval", latency_target_ms=200, tenant="tinterval")
        left, right = (d.source(sid, schema=SCHEMA, event_time="ts", allowed_lateness_ms=40)
                       .filter(cond).key_by("key") for sid, cond in
                       (("l", "level == 'ERROR'"), ("r", "level != 'ERROR'")))
        (left.join(right, interval_ms=(-20, 30), parallelism=p)
         .map({"key": "key", "ts": "ts", "lv": "left.value", "rv": "right.value"}).sink("o"))
        return d
    return next(d for d in flows(name, p) if d.name == f"{name}-{kind}")


def assert_persisted_once(cluster: InProcessCluster) -> None:
    twice = [k for k, n in Counter(cluster.persisted).items() if n > 1]
    assert not twice, f"parts persisted more than once: {twice}"


# == 1. the barrier protocol ===========================================================
def complete(cluster: InProcessCluster, dataflow: str, ckpt: int) -> bool:
    """A checkpoint's last step, played by hand in these barrier-level tests (the
    checkpoint coordinator's `commit` in a running pool): if every activation's part is
    in, every core hears that `ckpt` completed (the results before it become readable)."""
    got = cluster.parts.get((dataflow, ckpt), {})
    if not set(cluster.placements[dataflow].hosts) <= set(got):
        return False
    positions = {aid: got[aid][1] for aid in cluster.sources(dataflow)}
    for c in cluster.cores:
        c.checkpointing.checkpointed(dataflow, ckpt, positions)
    return True


def run_core(cluster: InProcessCluster, i: int) -> None:
    """Core `i` alone runs until it has nothing to do; what it sends stays in transit."""
    core = cluster.cores[i]
    while core.run_slice():
        cluster.clock.advance(0.1)
    core.flush()


def deliver(cluster: InProcessCluster, batches: list[tuple[int, bytes]]) -> None:
    for host, blob in batches:
        cluster.cores[host].receive(blob)


def take_transit(cluster: InProcessCluster) -> list[tuple[int, bytes]]:
    out, cluster.in_transit = cluster.in_transit, []
    return out


def messages(batches: list[tuple[int, bytes]]) -> list[Message]:
    return [decode_message(t) for _, blob in batches for t in unpack_link(blob)[4]]


def part(cluster: InProcessCluster, dataflow: str, ckpt: int, aid: str) -> dict[str, Any]:
    return unpack_part(cluster.parts[(dataflow, ckpt)][aid][0])


def ev(ts: int, v: int = 0) -> dict[str, Any]:
    return {"ts": ts, "v": v}


def union_on_two(tmp_path: Path) -> tuple[InProcessCluster, dict[str, int]]:
    """Sources a and b into a union, into sink o: b on core 1, the rest on core 0."""
    d = Dataflow("u", latency_target_ms=100)
    schema = {"ts": "int", "v": "int"}
    a = d.source("a", schema=schema, event_time="ts")
    b = d.source("b", schema=schema, event_time="ts")
    a.union(b).sink("o")
    placed = place(d.spec, [0], {}, 16)
    placement = Placement({aid: int(aid.step == "b") for aid in placed.instances},
                          placed.tables, placed.bins)
    cluster = InProcessCluster(2, config(tmp_path), seed=0)
    return cluster, cluster.deploy(d.spec, deployment="u1", placement=placement)


def test_the_first_barrier_snapshots_and_goes_on_to_every_target(tmp_path: Path) -> None:
    d = flow("tumbling", "fb", 2)
    cluster = InProcessCluster(2, config(tmp_path), seed=0)
    hosts = cluster.deploy(d.spec, bins=16, deployment="d1")
    name = d.name
    win0, win1, sink = f"{name}/window_2/0", f"{name}/window_2/1", f"{name}/o/0"
    assert (hosts[f"{name}/key_by_1/0"], hosts[win0], hosts[win1], hosts[sink]) == (0, 0, 1, 0)
    data = events(200, seed=1)
    cluster.ingest(hosts, f"{name}/s/0", [data[:120]])
    run_core(cluster, 0)
    cluster.ingest(hosts, f"{name}/s/0", [data[120:]])  # still in the source's mailbox
    acts = cluster.cores[0].hosting.activations
    before = {aid: acts[aid].operator.watermark for aid in (f"{name}/key_by_1/0", win0)}
    assert cluster.checkpoint(name, 1) == 1  # one source
    run_core(cluster, 0)
    # The source's barrier overtook the events in its mailbox, which its part records;
    # the key_by's barrier went to both window instances after the events it had sent
    # them, ahead of those.
    sent = take_transit(cluster)
    to_win1 = [m for m in messages(sent) if m.target == win1]
    cut = next(i for i, m in enumerate(to_win1) if m.payload == [CHECKPOINT, 1])
    assert any(not m.is_watermark for m in to_win1[:cut]), "events before the barrier"
    assert any(not m.is_watermark for m in to_win1[cut + 1:]), "events overtaken"
    assert [m for m in to_win1 if m.payload == [CHECKPOINT, 1]] == [to_win1[cut]]
    recorded = part(cluster, name, 1, f"{name}/s/0")["inflight"]
    assert [e for _, _, wm, p in recorded if not wm for e in p] == data[120:]
    # Every activation with one channel in is done at its first barrier, snapshot and all:
    # as it was before the overtaken events.
    for aid in (f"{name}/s/0", f"{name}/key_by_1/0", win0):
        assert acts[aid].part is not None and acts[aid].part.written
    for aid, watermark in before.items():
        state = part(cluster, name, 1, aid)["state"]
        assert state["operator"]["watermark"] == watermark < acts[aid].operator.watermark
    assert part(cluster, name, 1, win0)["state"]["operator"]["pieces"], \
        "open windows kept"
    # The sink got the barrier from window 0 only: it snapshot, and waits for window 1's.
    sink_part = acts[sink].part
    assert sink_part is not None and sink_part.ckpt == 1 and not sink_part.written
    assert sink_part.pending == {(0, win1)}
    assert (name, 1) in cluster.parts and sink not in cluster.parts[(name, 1)]
    deliver(cluster, sent)
    cluster.run()
    assert complete(cluster, name, 1)
    assert_persisted_once(cluster)


def test_messages_before_a_channels_barrier_are_recorded_in_flight(tmp_path: Path) -> None:
    cluster, hosts = union_on_two(tmp_path)
    cluster.ingest(hosts, "u/a/0", [[ev(1), ev(2)]])
    cluster.ingest(hosts, "u/b/0", [[ev(3)]])
    run_core(cluster, 1)  # b's events are on their way to the union, before b's barrier
    from_b = take_transit(cluster)
    run_core(cluster, 0)  # a's are in the union (a's barrier would overtake them at a)
    cluster.cores[0].checkpointing.checkpoint("u", 1)
    run_core(cluster, 0)
    union = cluster.cores[0].hosting.activations["u/union_1/0"]
    assert union.part is not None and union.part.pending == {(1, "u/b/0")}
    deliver(cluster, from_b)
    run_core(cluster, 0)
    # b's event and the watermark after it came on a channel whose barrier is still to come
    assert union.part.inflight == [(1, "u/b/0", False, [ev(3)]), (1, "u/b/0", True, 3.0)]
    assert "u/union_1/0" not in cluster.parts[("u", 1)], "still waiting for b's barrier"
    cluster.cores[1].checkpointing.checkpoint("u", 1)
    cluster.run()
    assert complete(cluster, "u", 1)
    got = part(cluster, "u", 1, "u/union_1/0")
    assert got["inflight"] == [[1, "u/b/0", False, [ev(3)]], [1, "u/b/0", True, 3.0]]
    # The state is the union's at its first barrier: a's watermark in, b's not yet.
    assert got["state"]["channels"] == [[0, "u/a/0", 2.0], [1, "u/b/0", float("-inf")]]
    # The sink's part holds its result log as it was at its barrier: b's event came after.
    sink = part(cluster, "u", 1, "u/o/0")
    base, chunks, seen = sink["results"]  # a chunk per message the sink appended
    assert (base, [e for events, _, _ in chunks for e in events], seen) == (0, [ev(1), ev(2)], None)
    assert sorted(cluster.results("u"), key=lambda e: e["ts"]) == [ev(1), ev(2)], \
        "exactly once: the rows before checkpoint 1's barrier are readable, not the one after"
    assert_persisted_once(cluster)


def test_a_channel_at_its_end_counts_as_done(tmp_path: Path) -> None:
    cluster, hosts = union_on_two(tmp_path)
    cluster.ingest(hosts, "u/a/0", [[ev(1)]])
    cluster.ingest(hosts, "u/b/0", [[ev(2)], END_OF_STREAM])
    run_core(cluster, 1)
    from_b = take_transit(cluster)
    cluster.cores[0].checkpointing.checkpoint("u", 1)
    run_core(cluster, 0)
    deliver(cluster, from_b)  # b's event, then its end: no barrier will follow
    run_core(cluster, 0)
    union = "u/union_1/0"
    assert union in cluster.parts[("u", 1)], "complete at b's end, without b's barrier"
    assert part(cluster, "u", 1, union)["inflight"] == [
        [1, "u/b/0", False, [ev(2)]], [1, "u/b/0", True, 2.0], [1, "u/b/0", True, END_OF_STREAM]]
    cluster.cores[1].checkpointing.checkpoint("u", 1)  # b's barrier comes all the same: nothing changes
    cluster.run()
    assert complete(cluster, "u", 1)
    assert_persisted_once(cluster)
    # A channel at its end before the first barrier is not waited for at all.
    cluster.cores[0].checkpointing.checkpoint("u", 2)
    run_core(cluster, 0)
    assert union in cluster.parts[("u", 2)]
    assert_persisted_once(cluster)


def test_a_sources_part_holds_its_positions_when_its_barrier_runs_and_the_calls_it_overtook(
        tmp_path: Path) -> None:
    d = flow("filter", "pos", 1)
    cluster = InProcessCluster(1, config(tmp_path), seed=0)
    hosts = cluster.deploy(d.spec, deployment="d1")
    source = f"{d.name}/s/0"
    data = events(30, seed=2)
    cluster.ingest(hosts, source, [data[:10]], client="x")
    cluster.ingest(hosts, source, [data[10:20]], client="y")
    cluster.ingest(hosts, source, [data[20:25]], client="x")
    cluster.checkpoint(d.name, 1)
    # After the barrier was put in, before it ran: before the cut, overtaken too.
    cluster.ingest(hosts, source, [data[25:]], client="y")
    act = cluster.cores[0].hosting.activations[source]
    assert act.positions == {"x": 2, "y": 2}
    cluster.run()
    assert complete(cluster, d.name, 1)
    blob, positions = cluster.parts[(d.name, 1)][source]
    assert positions == {"x": 2, "y": 2}
    got = unpack_part(blob)
    assert got["state"]["positions"] == {"x": 2, "y": 2}
    # every call the barrier overtook, in the mailbox's order, with the watermarks after
    # each; a restore runs them first, then the ingress log from the positions on
    assert [e for _, _, wm, p in got["inflight"] if not wm for e in p] == data
    assert all(wm for _, _, wm, p in got["inflight"] if not isinstance(p, list))
    assert part(cluster, d.name, 1, f"{d.name}/o/0")["results"][0] == 0
    assert_persisted_once(cluster)


def test_a_part_is_packed_in_frames_of_bounded_rows_and_reads_back_the_same() -> None:
    # A sink's result log of 1,000 rows and 40 recorded messages, packed as the writer
    # thread packs them: no frame of more than FRAME_ROWS rows, save one message of more
    # (a message is never cut), and unpacked as they went in.
    log = [([{"k": i, "n": j} for j in range(5)], float(i), float(i) + 1) for i in range(190)]
    log.append(([{"k": -1, "n": j} for j in range(FRAME_ROWS * 2 + 50)], 7.0, 8.0))
    inflight = [(0, f"up/{i % 2}", False, [{"v": i}] * 30) for i in range(40)]
    inflight.append((1, "up/0", False, [{"v": -1}] * (FRAME_ROWS + 1)))
    inflight.append((0, "up/1", True, 12.5))
    content = Content(msgpack.packb({"operator": {}}), [], list(inflight), (10, list(log), None))
    frames = content.frames()
    assert content.nbytes == sum(map(len, frames)) and content.inflight == []  # let go
    def rows(item: list[Any]) -> int:  # a recorded message (4 fields) or a log chunk (3)
        payload = item[3] if len(item) == 4 else item[0]
        return len(payload) if isinstance(payload, list) else 1
    sizes = [sum(map(rows, msgpack.unpackb(f, raw=False))) for f in frames[1:]]
    assert len(sizes) > 10 and [n for n in sizes if n > FRAME_ROWS] == [FRAME_ROWS + 1]
    back = unpack_part(frames)
    assert [tuple(m) for m in back["inflight"]] == inflight
    base, chunks, seen = back["results"]
    assert base == 10 and seen is None
    assert [r for c in chunks for r in c[0]] == [r for c in log for r in c[0]]
    assert {(c[1], c[2]) for c in chunks} == {(c[1], c[2]) for c in log}


def test_a_sources_overtaken_columns_are_packed_as_rows_a_frame_at_a_time() -> None:
    # Kept as the Arrow batch they came in; the writer thread makes them rows FRAME_ROWS
    # at a time (one conversion holds the interpreter's lock), each slice a message.
    batch = pa.RecordBatch.from_pylist([{"k": i, "v": i / 4} for i in range(FRAME_ROWS * 2 + 7)])
    inflight = [(0, "", False, batch), (0, "", True, 3.0)]
    content = Content(msgpack.packb({"operator": {}}), [], list(inflight), None)
    back = unpack_part(content.frames())["inflight"]
    assert [len(m[3]) for m in back[:-1]] == [FRAME_ROWS, FRAME_ROWS, 7]
    assert [r for m in back[:-1] for r in m[3]] == batch.to_pylist()
    assert back[-1] == [0, "", True, 3.0]


def test_a_part_of_the_version_before_frames_still_reads() -> None:
    # Its head held the recorded messages and the result log (a rolling upgrade restores
    # parts the old executors wrote).
    state = msgpack.packb({"operator": {"pieces": None}})
    old = [msgpack.packb({"state": state, "inflight": [[0, "up/0", False, [{"v": 1}]]],
                          "results": [3, [[[{"k": 1}], 1.0, 2.0]], None], "pieces": 1}),
           msgpack.packb({"piece": 1})]
    part = unpack_part(old)
    assert part["inflight"] == [[0, "up/0", False, [{"v": 1}]]]
    assert part["results"] == [3, [[[{"k": 1}], 1.0, 2.0]], None]
    assert part["state"]["operator"]["pieces"] == [{"piece": 1}]


# == 2. restoring every operator kind ===================================================
class Driver:
    """One dataflow run by the controller's own managers on in-process cores
    (`tests/shared/gateway.py`), a client pushing to it and a reader reading its sinks
    with offsets. Checkpoints are begun, completed (once their parts are in) or abandoned
    by the checkpoint coordinator; a failure of one executor is noticed and handled by
    recovery, a failure of every process by a new controller that resumes the registry."""

    def __init__(self, d: Dataflow, folder: Path, n: int, seed: int, bins: int = 16,
                 credits: int = 10_000, max_steps: int = 40, backend: str = MEMORY,
                 standby: int = 0) -> None:
        self.spec = d.spec
        self.name = d.name
        self.seed = seed
        self.rng = random.Random(seed)
        self.max_steps = max_steps
        # Failures may follow each other with no checkpoint between (the crash-loop guard,
        # max_recoveries, is not what these tests are about).
        self.plane = ControlPlane(n + standby,
                                  config(folder, credits, bins=bins, max_recoveries=10,
                                         state_backend=backend, store_dir=str(folder / "stores"),
                                         state_cache_entries=SMALL_CACHE,
                                         standby_executors=standby),
                                  seed, steps_per_call=0)
        self.plane.lifecycle.deploy(self.spec.to_dict())
        self.offsets: dict[str, int] = {}
        self.rows: list[dict[str, Any]] = []
        self.pending: Cut | None = None  # the checkpoint under way
        self.completed: list[int] = []  # the checkpoints completed, in order
        self.restored_from: list[int | None] = []  # per failure: the checkpoint restored
        self.read_at_crash: list[int] = []  # per failure: rows read before it

    @property
    def cluster(self) -> StoredCluster:
        return self.plane.cluster

    @property
    def hosts(self) -> dict[str, int]:
        return self.plane.registry.placements[self.name].hosts

    def calls(self, data: list[dict[str, Any]], sizes: list[int], turn: int = 1
              ) -> list[tuple[str, list[Any]]]:
        """Each source's share of the stream: the same batches to every source, `turn`
        batches to each in turn, then the end of every source's stream. (Results do not
        depend on how the sources interleave: the data is never later than the allowed
        lateness at its own source.)"""
        placement = self.plane.registry.placements[self.name]
        targets = [str(a) for s in self.spec.sources for a in placement.of_step(s.id)]
        batches, i, k = [], 0, 0
        while i < len(data):
            batches.append(data[i:i + sizes[k % len(sizes)]])
            i += sizes[k % len(sizes)]
            k += 1
        return [(t, [b]) for r in range(0, len(batches), turn) for t in targets
                for b in batches[r:r + turn]] + [(t, [END_OF_STREAM]) for t in targets]

    def push(self, target: str, items: list[Any], steps: int | None = None) -> None:
        """One call, then a little processing (none at times: backlogs build up, and
        barriers find messages on their channels' way)."""
        self.cluster.ingest(self.hosts, target, items)
        if steps is None:
            steps = self.rng.choice([0, 0, self.rng.randrange(self.max_steps)])
        for _ in range(steps):
            self.cluster.step()

    def last(self) -> int | None:
        """The last checkpoint completed (the storage's manifest; 0 is the deploy's)."""
        storage = self.cluster.storage
        assert storage is not None
        info = self.plane.registry.record(self.name)
        manifest = storage.latest(self.name, info["deployment"])
        return manifest["checkpoint"] or None if manifest else None

    def read(self) -> None:
        """The reader's next rows; never past where its sink's log ended at its barrier of
        the last completed checkpoint (exactly once: what no failure can take back)."""
        self.rows += self.cluster.read(self.name, self.offsets)
        done = self.last()
        for aid, offset in self.offsets.items():
            cut = 0
            if done is not None:
                base, chunks, _ = unpack_part(self.cluster.parts[(self.name, done)][aid][0])["results"]
                cut = base + sum(len(events) for events, _, _ in chunks)
            assert offset <= cut, f"{aid}: read to {offset}, past checkpoint {done}'s cut {cut}"

    def start(self) -> None:
        if self.pending is None:
            self.pending = self.plane.checkpoints.begin(self.name)

    def abandon(self) -> None:
        """The checkpoint under way timed out (its barriers may still be on their way):
        the next one starts."""
        self.pending = None
        self.start()

    def try_complete(self) -> None:
        """Complete the checkpoint under way if its parts are in now."""
        if self.pending is not None:
            written = self.plane.checkpoints.collect(self.pending, 0.0)
            if set(written) == set(self.pending.placement.hosts):
                self._commit(written)

    def finish(self) -> None:
        """Step until the checkpoint under way completes."""
        if self.pending is not None:
            self._commit(self.plane.checkpoints.collect(self.pending, CHECKPOINT_TIMEOUT_S))

    def _commit(self, written: dict[str, Any]) -> None:
        assert self.pending is not None
        assert self.plane.checkpoints.commit(self.pending, written), \
            f"checkpoint {self.pending.ckpt}: parts of {sorted(written)}"
        self.completed.append(self.pending.ckpt)
        self.pending = None
        self.read()

    def crash(self) -> None:
        """Every process dies; a new controller reads the registry and restores."""
        self.read()
        self.read_at_crash.append(len(self.rows))
        assert_persisted_once(self.cluster)
        self.restored_from.append(self.last())
        storage = self.cluster.storage
        assert storage is not None
        fresh = self.cluster.crash()
        assert isinstance(fresh, StoredCluster)
        self.plane = ControlPlane(len(fresh.cores), fresh.config, steps_per_call=0,
                                  cluster=fresh)
        self.plane.recovery.resume(storage.load_registry() or {})
        self.pending = None  # abandoned

    def fail_one(self) -> None:
        """One core dies and comes back empty; the others survive with what they hold
        (batches in transit between them too). Recovery notices and restores."""
        self.read()
        self.read_at_crash.append(len(self.rows))
        self.restored_from.append(self.last())
        self.cluster.restart_core(self.rng.randrange(len(self.cluster.cores)))
        self.plane.recovery.check_executors()
        self.pending = None  # abandoned

    def end(self) -> list[dict[str, Any]]:
        """Run to the end, then a last checkpoint: every result readable; what was read."""
        self.cluster.run()
        self.pending = None  # one under way may have been abandoned by a crash
        self.start()
        self.finish()
        self.cluster.run()  # barriers still on their way after the last part was written
        self.read()
        assert_persisted_once(self.cluster)
        assert self.plane.registry.record(self.name)["state"] == "running"
        for c in self.cluster.cores:
            assert c.idle()[0] and not c.flow.held
            if self.name in c.hosting.dataflows:
                assert c.reports.ended(self.name)
        return self.rows


def expected_rows(d: Dataflow, data: list[dict[str, Any]]) -> list[str]:
    return canon(run_local(d, {s.id: data for s in d.spec.sources}).sinks["o"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_operator_kind_is_restored_exactly_once(kind: str, backend: str,
                                                      tmp_path: Path) -> None:
    d = flow(kind, "rk", 2)
    data = events(400, seed=11)
    run = Driver(d, tmp_path, n=2, seed=0, backend=backend)
    calls = run.calls(data, [37])
    half = len(calls) // 2
    # At the cut, a backlog at the last source (the others' barriers run ahead of it):
    # its events reach a join or union after the other input's barrier, in flight.
    last = calls[-1][0]
    burst = [k for k in range(half, len(calls)) if calls[k][0] == last][:4]
    calls = calls[:half] + [calls[k] for k in burst] + \
        [c for k, c in enumerate(calls[half:], half) if k not in burst]
    for k, (target, items) in enumerate(calls[:half + len(burst)]):
        run.push(target, items, steps=0 if k >= half else None)
    run.start()
    run.finish()
    parts = [unpack_part(blob) for blob, _ in run.cluster.parts[(d.name, run.completed[-1])].values()]
    if len(d.spec.sources) > 1:
        assert any(not wm for p in parts for _, _, wm, _ in p["inflight"]), "events in flight"
    cut = half + len(burst)
    for target, items in calls[cut:cut + 4]:  # work after the cut, lost in the crash
        run.push(target, items)
    run.read()
    before = len(run.rows)
    run.crash()
    assert run.restored_from == run.completed[:1]
    for target, items in calls[cut + 4:]:
        run.push(target, items)
    assert canon(run.end()) == expected_rows(d, data), kind
    assert len(run.rows) > before


def test_a_crash_before_any_checkpoint_completed_replays_everything(tmp_path: Path) -> None:
    d = flow("tumbling", "nc", 2)
    data = events(300, seed=4)
    run = Driver(d, tmp_path, n=2, seed=2)
    calls = run.calls(data, [23, 5, 41])
    for target, items in calls[:len(calls) // 2]:
        run.push(target, items)
    run.start()  # under way at the crash: abandoned
    run.read()
    assert run.rows == [], "nothing readable before a checkpoint completed"
    run.crash()
    assert run.restored_from == [None]
    for target, items in calls[len(calls) // 2:]:
        run.push(target, items)
    run.crash()  # again, still before any checkpoint: the logs of two runs replayed
    assert canon(run.end()) == expected_rows(d, data)


def test_crashes_after_checkpoints_resume_where_the_reader_left_off(tmp_path: Path) -> None:
    d = flow("join", "mc", 2)
    data = events(400, seed=9)
    run = Driver(d, tmp_path, n=3, seed=8, credits=10)
    calls = run.calls(data, [17, 29])
    third = len(calls) // 3
    for k, (target, items) in enumerate(calls):
        if k in (third, 2 * third):
            run.start()
            run.finish()
            run.push(target, items)
            run.crash()
        else:
            run.push(target, items)
    assert run.restored_from == run.completed[:2]
    assert canon(run.end()) == expected_rows(d, data)


def test_a_batch_between_survivors_sent_before_the_restore_is_not_applied(
        tmp_path: Path) -> None:
    """One executor dies; recovery restores the dataflow on every executor involved, the
    two survivors too, while a batch one survivor sent the other before the restore is
    still in transit. It belongs to the lost run and must be dropped: applied to the
    restored window, its events would count twice (they are replayed from the ingress
    log too)."""
    d = flow("tumbling", "sv", 3)
    data = events(300, seed=1)
    plane = ControlPlane(3, config(tmp_path, bins=16), seed=1, steps_per_call=0)
    plane.lifecycle.deploy(d.spec.to_dict())
    cluster, source = plane.cluster, f"{d.name}/s/0"
    hosts = plane.registry.placements[d.name].hosts
    cluster.ingest(hosts, source, [data[:150]])
    assert plane.checkpoints.take(d.name)
    cluster.run()
    offsets: dict[str, int] = {}
    rows = cluster.read(d.name, offsets)
    cluster.ingest(hosts, source, [data[150:200]])
    run_core(cluster, 0)  # the key_by's output to windows 1 and 2 is on its way
    assert {host for host, _ in cluster.in_transit} == {1, 2}
    cluster.restart_core(2)
    plane.recovery.check_executors()
    assert plane.registry.record(d.name)["recoveries"] == 1
    cluster.ingest(hosts, source, [data[200:], END_OF_STREAM])
    cluster.run()
    assert plane.checkpoints.take(d.name)
    cluster.run()
    rows += cluster.read(d.name, offsets)
    assert canon(rows) == expected_rows(d, data)


def test_a_spare_takes_a_lost_executors_instances_at_once_and_the_lost_one_is_the_next_spare(
        tmp_path: Path) -> None:
    """With a standby executor, the dataflows of a lost executor are restored on the spare
    without waiting for the lost one (it is still restarting when they run again); once
    back, the lost one is the spare. Results stay exact, and a second loss uses it."""
    d = flow("tumbling", "sb", 2)
    data = events(300, seed=3)
    run = Driver(d, tmp_path, n=2, seed=5, standby=1)
    plane, cluster = run.plane, run.cluster
    assert plane.pool.standby == {2} and 2 not in plane.registry.placements[d.name].executors()
    calls = run.calls(data, [29])
    third = len(calls) // 3
    for target, items in calls[:third]:
        run.push(target, items)
    run.start()
    run.finish()
    waited: list[tuple[int, bool]] = []
    restore = plane.recovery._recover

    def recover(name: str, why: str, again: bool = False) -> bool:
        waited.append((0, 0 in plane.pool.restarting))
        return restore(name, why, again)

    plane.recovery._recover = recover  # type: ignore[method-assign]
    run.read()
    cluster.restart_core(0)
    plane.recovery.check_executors()
    assert waited == [(0, True)], "restored while the lost executor was still restarting"
    assert plane.registry.placements[d.name].executors() == {1, 2}
    assert plane.pool.standby == {0} and not plane.pool.replaced
    assert plane.registry.record(d.name)["checkpoints"]["last_restore"]["waited_s"] < 1
    for target, items in calls[third:2 * third]:
        run.push(target, items)
    run.start()
    run.finish()
    cluster.restart_core(2)
    plane.recovery.check_executors()
    assert plane.registry.placements[d.name].executors() == {0, 1}
    assert plane.pool.standby == {2}
    for target, items in calls[2 * third:]:
        run.push(target, items)
    assert canon(run.end()) == expected_rows(d, data)


# == 3. the property ====================================================================
@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["tumbling", "join", "filter", "union"]), n=st.integers(1, 3),
       p=st.integers(1, 3), seed=st.integers(0, 10_000), size=st.integers(100, 1000),
       sizes=st.lists(st.integers(1, 50), min_size=1, max_size=5),
       turn=st.integers(1, 6), credits=st.sampled_from([10, 10_000]), lag=st.integers(1, 60),
       checkpoints=st.integers(0, 6), crashes=st.integers(1, 4),
       backend=st.sampled_from(BACKENDS), standby=st.integers(0, 1))
def test_any_checkpoints_and_crashes_give_each_result_exactly_once(
        tmp_path_factory: pytest.TempPathFactory, kind: str, n: int, p: int, seed: int,
        size: int, sizes: list[int], turn: int, credits: int, lag: int, checkpoints: int,
        crashes: int, backend: str, standby: int) -> None:
    """Checkpoints start at random points of the input; each completes once its parts
    are in (checked after every call), or is stepped to completion a little later, or is
    abandoned (timed out) for the next one. Failures at random points too, of every core
    (`crash`) or of one (`fail_one`: the others survive, batches between them in transit):
    checkpoints under way or not, before the first one completed or after."""
    d = flow(kind, f"pr{seed}", p)
    data = events(size, seed=seed)
    run = Driver(d, tmp_path_factory.mktemp("prop"), n=n, seed=seed, credits=credits,
                 max_steps=lag, backend=backend, standby=standby)
    calls = run.calls(data, sizes, turn)
    rng = random.Random(seed)
    starts = [rng.random() for _ in range(checkpoints)]
    plan = sorted([(at, "start") for at in starts] +
                  [(at + rng.choice([0.0, rng.uniform(0, 0.3)]),
                    rng.choice(["finish", "finish", "abandon"])) for at in starts] +
                  [(rng.random(), rng.choice(["crash", "fail_one"])) for _ in range(crashes)])
    todo = [(at * len(calls), action) for at, action in plan]
    for k, (target, items) in enumerate(calls):
        while todo and todo[0][0] <= k:
            getattr(run, todo.pop(0)[1])()
        run.push(target, items)
        run.try_complete()
    for _, action in todo:
        getattr(run, action)()
    assert canon(run.end()) == expected_rows(d, data), \
        (kind, n, p, plan, run.restored_from, backend, standby)


# == 4. each client's calls once, in order ===============================================
def plain(tmp_path: Path | None) -> tuple[StoredCluster, dict[str, int], str]:
    """A source into a sink on one executor, deployed by the controller's lifecycle."""
    d = Dataflow("once", latency_target_ms=100)
    d.source("s", schema={"ts": "int", "v": "int"}, event_time="ts").sink("o")
    cfg = config(tmp_path) if tmp_path is not None else RuntimeConfig()
    plane = ControlPlane(1, cfg, steps_per_call=0)
    plane.lifecycle.deploy(d.spec.to_dict())
    return plane.cluster, plane.registry.placements["once"].hosts, "once/s/0"


@pytest.mark.parametrize("logged", [False, True])
def test_a_resent_call_is_applied_once_and_an_early_one_waits(tmp_path: Path,
                                                              logged: bool) -> None:
    cluster, hosts, source = plain(tmp_path if logged else None)
    core = cluster.cores[0]
    act = core.hosting.activations[source]
    assert (source in core.ingress_logs) is logged

    def call(client: str, seq: int, *ts: int) -> None:
        cluster.call(0, client, seq, source, [[ev(t) for t in ts]])

    call("c", 0, 1)
    call("c", 0, 1)  # resent: dropped
    call("c", 2, 3)  # early: parked until call 1
    call("c", 2, 3)  # resent while parked: parked once
    call("d", 0, 10)  # another client has its own order
    cluster.run()
    assert list(act.parked) == ["c"] and list(act.parked["c"]) == [2]
    assert act.parked["c"][2][0] == [[ev(3)]]
    assert not core.idle()[0], "a source holding an early call is not idle"
    assert act.positions == {"c": 1, "d": 1}
    call("c", 1, 2)
    cluster.run()
    assert act.parked == {} and act.positions == {"c": 3, "d": 1}
    assert core.idle()[0]
    if not logged:
        assert [e["ts"] for e in cluster.results("once")] == [1, 10, 2, 3]
        return
    assert cluster.results("once") == [], "exactly once: nothing readable before a checkpoint"
    # The log holds every call as it came, resends too; a replay applies each once.
    log = [(c, s) for c, s, _ in core.ingress_logs[source].records()]
    assert log == [("c", 0), ("c", 0), ("c", 2), ("c", 2), ("d", 0), ("c", 1)]
    # Every process dies; a new controller restores it from nothing (no checkpoint yet):
    # the whole log again.
    plane = ControlPlane(1, cluster.config, steps_per_call=0, cluster=cluster.crash())
    plane.recovery.resume(plane.cluster.storage.load_registry() or {})
    plane.cluster.run()
    again = plane.cluster.cores[0].hosting.activations[source]
    assert again.positions == {"c": 3, "d": 1} and again.parked == {}
    assert plane.checkpoints.take("once")
    assert [e["ts"] for e in plane.results("once")] == [1, 10, 2, 3]
    # The log is kept back to the oldest checkpoint kept (recovery falls back to it
    # when a newer one is damaged): once that one covers every call, it is retired.
    log = plane.cluster.cores[0].ingress_logs[source]
    assert len(list(log.records())) == 6
    assert plane.checkpoints.take("once")
    assert list(log.records()) == []


def test_a_large_snapshot_is_packed_in_steps_that_let_a_neighbour_run(tmp_path: Path) -> None:
    """A window's state of 50,000 keys is packed in `SNAPSHOT` steps, each first in the
    window's mailbox: nothing of the window's own runs until the last (its state stays as
    at the cut), while a neighbour's due events run between steps; the part then restores
    the state as it was."""
    bulk = Dataflow("bulk", latency_target_ms=1000)
    (bulk.source("s", schema={"ts": "int", "key": "str"}, event_time="ts").key_by("key")
     .window(tumbling_ms=10**9, id="w").aggregate(n=count()).sink("o"))
    near = Dataflow("near", latency_target_ms=20)
    near.source("s", schema={"ts": "int", "v": "int"}, event_time="ts").sink("o")
    cluster = InProcessCluster(1, config(tmp_path), seed=0)
    hosts = {**cluster.deploy(bulk.spec, deployment="b1"), **cluster.deploy(near.spec, deployment="n1")}
    keys = 2 * SNAPSHOT_ENTRIES + 10_000
    cluster.ingest(hosts, "bulk/s/0", [[{"ts": i, "key": f"k{i}"} for i in range(keys)]])
    cluster.run()
    core = cluster.cores[0]
    ran: list[tuple[str, Any]] = []
    execute = core._execute_message

    def recording(aid: str, msg: Message) -> None:
        kind = msg.payload[0] if msg.is_watermark and isinstance(msg.payload, list) \
            else "events" if not msg.is_watermark else "watermark"
        ran.append((aid, kind))
        execute(aid, msg)
        if aid == "bulk/w/0" and kind == CHECKPOINT:
            # At the next message boundary the neighbour's input comes in, and an event
            # for the window itself (as from another executor).
            core.inbox.append(lambda: cluster.ingest(hosts, "near/s/0", [[{"ts": 1, "v": 1}]]))
            core.inbox.append(lambda: core.sched.enqueue(Message.ingress(
                "bulk/w/0", [{"ts": keys, "key": "k0"}], dataflow="bulk", tenant="default",
                ingest_ms=cluster.clock.now_ms()), cluster.clock.now_ms()))

    core._execute_message = recording  # type: ignore[method-assign]
    assert cluster.checkpoint("bulk", 1) == 1
    cluster.run()
    window = [(i, kind) for i, (aid, kind) in enumerate(ran) if aid == "bulk/w/0"]
    first = next(i for i, kind in window if kind == CHECKPOINT)
    last = max(i for i, kind in window if kind == SNAPSHOT)
    during = [kind for i, kind in window if first < i < last]
    assert set(during) == {SNAPSHOT} and len(during) >= 1, window[:10]
    assert any(aid.startswith("near/") for aid, _ in ran[first:last]), "the neighbour ran between"
    assert any(kind == "events" for i, kind in window if i > last), "its own events after"
    state = part(cluster, "bulk", 1, "bulk/w/0")["state"]["operator"]
    restored = WindowOperator("w", kind="tumbling", size_ms=10**9, time_field="ts",
                              aggregates=[AggSpec(name="n", fn="count")], key_fn=lambda e: e["key"])
    restored.restore(state)
    assert len(restored.state_keys()) == keys and len(state["pieces"]) > 2


def test_the_parts_modules_examples_hold() -> None:
    import doctest

    from cameo_actors.runtime._private.checkpoint import parts
    assert doctest.testmod(parts).failed == 0
