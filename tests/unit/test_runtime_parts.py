"""The executor's parts, one at a time, without Ray: channels, flow control,
egress, hosting, statistics, and the records of the runtime's boundary."""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile

import msgpack
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors import Dataflow, count
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.errors import SpecError
from cameo_actors.operators.base import ErrorRecord
from cameo_actors.operators.exceptions import ResultsNotColumnar
from cameo_actors.runtime._private.exchange.channels import Channels
from cameo_actors.runtime._private.exchange.wire import decode_message
from cameo_actors.runtime._private.executor.counters import Statistics
from cameo_actors.runtime._private.executor.egress import (
    ERROR_LOG_CAPACITY,
    FIRST_ROW_BYTES,
    Egress,
    ResultLog,
)
from cameo_actors.runtime._private.executor.flow import RESULTS_FULL, FlowControl
from cameo_actors.runtime._private.executor.hosting import Hosting
from cameo_actors.runtime._private.placement import moved_off, place
from cameo_actors.runtime._private.stats import dataflow_stats
from cameo_actors.runtime.boundary import ActivationId, DataflowInfo
from cameo_actors.scheduling import Message, Scheduler


def keyed(name: str = "d", p: int = 2) -> Dataflow:
    return (Dataflow(name, latency_target_ms=50).source("s", schema={"ts": "int", "k": "str"},
                                                        event_time="ts")
            .key_by("k").window(tumbling_ms=10, parallelism=p).aggregate(n=count()).sink("o"))


# -- boundary -------------------------------------------------------------------------------
def test_activation_id_keeps_its_parts_and_crosses_processes() -> None:
    a = ActivationId("flow", "win", 3)
    assert str(a) == "flow/win/3" and (a.dataflow, a.step, a.instance) == ("flow", "win", 3)
    assert pickle.loads(pickle.dumps(a)) == a
    assert ActivationId.of_step("flow", "win", 2) == [ActivationId("flow", "win", 0),
                                                      ActivationId("flow", "win", 1)]


# -- channels -------------------------------------------------------------------------------
def test_instances_of_executors_gone_move_together_to_the_least_loaded_left() -> None:
    spec = keyed(p=3).spec
    load: dict[int, int] = {}
    placement = place(spec, [0, 1, 2], load)
    load[2] += 5  # another dataflow's instances
    moved = moved_off(placement, {1}, [0, 2], load)
    assert moved.on(1) == [] and set(moved.on(0)) == set(placement.on(0) + placement.on(1))
    assert moved.on(2) == placement.on(2) and moved.tables == placement.tables
    assert load[0] == len(moved.on(0))  # counted where they went
    assert moved_off(placement, {7}, [0], dict(load)) == placement  # not there: no change


def chain(name: str, target_ms: float) -> Dataflow:
    """A chain of one instance per step (source -> filter -> sink): three instances."""
    return (Dataflow(name, latency_target_ms=target_ms)
            .source("s", schema={"ts": "int", "k": "str"}, event_time="ts")
            .filter("ts >= 0").sink("o"))


def test_a_tight_target_is_placed_apart_from_tighter_ones_within_one_dataflows_load() -> None:
    load: dict[int, int] = {}
    urgency: dict[int, float] = {}

    def put(flow: Dataflow) -> int:
        placed = place(flow.spec, [0, 1], load, urgency=urgency)
        (ex,) = placed.executors()
        urgency[ex] = urgency.get(ex, 0.0) + 1 / flow.spec.latency_target_ms
        return ex

    assert put(chain("f50", 50)) == 0 and put(chain("p100", 100)) == 1
    # Loads even: the 300 ms chain joins the 100 ms one, not the 50 ms one.
    assert put(chain("w300", 300)) == 1
    # Executor 1 now hosts a dataflow's instances more than executor 0: the next goes
    # to the least loaded, urgent or not.
    assert load == {0: 3, 1: 6}
    assert put(chain("b1000", 1000)) == 0
    # Without urgency, the least loaded comes first, as before.
    assert place(chain("x", 20).spec, [0, 1], {0: 3, 1: 4}).executors() == {0}


def test_batches_of_a_restarted_executor_are_dropped_and_the_link_counts_from_zero() -> None:
    sent: list[bytes] = []
    old = Channels(1, lambda host, blob: sent.append(blob))
    old.incarnation = "a"
    receiver = Channels(0, lambda host, blob: None)
    receiver.incarnation = "r"
    old.relink(0, "r")
    old.ack(0, ("up", "down", 1, 0.0))
    old.flush()
    receiver.relink(1, "b")  # executor 1 restarted as incarnation "b"
    applied: list[object] = []
    receiver.from_executor(sent[0], lambda m, a: applied.append(a))
    assert applied == [] and receiver.stale == 1  # the old incarnation's batch
    new = Channels(1, lambda host, blob: sent.append(blob))
    new.incarnation = "b"
    new.relink(0, "r")
    new.ack(0, ("up", "down", 2, 0.0))
    new.flush()
    receiver.from_executor(sent[1], lambda m, a: applied.append(a))
    assert applied == [[["up", "down", 2, 0.0]]] and receiver.seq_in[1] == 1


@given(st.permutations(range(6)))
def test_executor_batches_apply_in_the_senders_order(order: list[int]) -> None:
    sent: list[tuple[int, bytes]] = []
    sender = Channels(1, lambda host, blob: sent.append((host, blob)))
    for i in range(6):  # one batch per flush, each with one ack
        sender.ack(0, (f"up{i}", "down", i, 0.0))
        sender.flush()
    assert [h for h, _ in sent] == [0] * 6 and dict(sender.seq_out) == {0: 6}
    receiver = Channels(0, lambda host, blob: None)
    applied: list[str] = []
    for i in order:
        receiver.from_executor(sent[i][1], lambda msgs, acks: applied.extend(a[0] for a in acks))
        if i != 0 and 0 not in order[:order.index(i) + 1]:
            assert not receiver.idle()  # batches wait behind the first one
    assert applied == [f"up{i}" for i in range(6)]
    assert receiver.idle() and dict(receiver.seq_in) == {1: 6}


def test_messages_for_one_executor_travel_in_one_call() -> None:
    sent: list[tuple[int, bytes]] = []
    ch = Channels(0, lambda host, blob: sent.append((host, blob)))
    for i in range(3):
        ch.message(1, Message.ingress("d/s/0", [{"i": i}], dataflow="d", tenant="t", ingest_ms=1.0))
    ch.message(2, Message.ingress("d/s/1", [{"i": 9}], dataflow="d", tenant="t", ingest_ms=1.0))
    assert not ch.idle()
    ch.flush()
    assert sorted(h for h, _ in sent) == [1, 2] and ch.idle()
    got: list[Message] = []
    Channels(1, lambda h, b: None).from_executor(
        dict(sent)[1], lambda msgs, acks: got.extend(decode_message(m) for m in msgs))
    assert [m.payload for m in got] == [[{"i": 0}], [{"i": 1}], [{"i": 2}]]


# -- flow control ---------------------------------------------------------------------------
def test_a_sender_is_held_over_its_credits_and_released_at_half() -> None:
    held: list[str] = []
    flow = FlowControl(10, 100, held.append, held.remove)
    flow.sent("a", "b", 10)
    assert held == []  # at the limit, not over it
    flow.sent("a", "b", 1)
    assert held == ["a"] and flow.held == {"a": {"b"}}
    flow.acked("a", "b", 5)
    assert held == ["a"]  # 6 outstanding: above half
    flow.acked("a", "b", 1)
    assert held == [] and not flow.held


def test_a_held_activation_runs_again_only_when_every_reason_is_gone() -> None:
    held: list[str] = []
    flow = FlowControl(1, 100, held.append, held.remove)
    flow.sent("sink", "next", 2)
    flow.hold("sink", RESULTS_FULL)
    flow.acked("sink", "next", 2)
    assert held == ["sink", "sink"] and flow.held == {"sink": {RESULTS_FULL}}
    flow.release("sink", RESULTS_FULL)
    assert "sink" not in flow.held


def test_source_backpressure_counts_events_and_forgets_cancelled_sources() -> None:
    flow = FlowControl(10, 100, lambda a: None, lambda a: None)
    flow.admitted("d/s/0", 150)
    flow.consumed("d/s/0", 40)
    assert flow.ingress_pending["d/s/0"] == 110
    # Over the limit, a writer waits until the timeout (0 here: no sleeping in unit tests).
    assert flow.wait_for_room("d/s/0", 7, lambda: True, timeout_s=0) == 110
    flow.arrived("d/s/0", 7)
    flow.sent("d/s/0", "d/o/0", 5)
    flow.close("d", ["d/s/0"])
    assert not flow.outstanding and "d/s/0" not in flow.ingress_pending


def test_calls_let_through_count_at_once_so_woken_writers_do_not_all_pass() -> None:
    flow = FlowControl(10, 100, lambda a: None, lambda a: None)
    # Room for the first call; the second finds the first's events counted, though the
    # worker thread has not taken them in yet, and waits (until the timeout: 0 here).
    assert flow.wait_for_room("d/s/0", 80, lambda: True, timeout_s=0) == 0
    assert flow.wait_for_room("d/s/0", 80, lambda: True, timeout_s=0) == 80
    assert flow.ingest_waiting == 0
    flow.admitted("d/s/0", 80)  # the worker enqueues the first call, then gives its room back
    flow.arrived("d/s/0", 80)
    assert flow.wait_for_room("d/s/0", 80, lambda: True, timeout_s=0) == 160
    flow.close("d", ["d/s/0"])
    flow.arrived("d/s/0", 80)  # a call taken in after the close: nothing left to give back
    assert "d/s/0" not in flow.ingress_reserved


# -- egress ---------------------------------------------------------------------------------
def make_egress(capacity: int = 4) -> tuple[Egress, list[str]]:
    held: list[str] = []
    egress = Egress(capacity, held.append, held.remove)
    spec = keyed().spec
    hosting = Hosting(0, FunctionResolver())
    built = hosting.build(spec, place(spec, [0], {}))
    egress.open(spec, built)
    return egress, held


def test_results_are_read_with_offsets_and_a_full_log_holds_its_sink() -> None:
    egress, held = make_egress(capacity=4)
    egress.results("d", "d/o/0", [{"n": 1}, {"n": 2}, {"n": 3}], 1.0, 2.0)
    assert held == [] and egress.result_offsets("d") == {"d/o/0": (0, 3)}
    egress.results("d", "d/o/0", [{"n": 4}], 1.0, 3.0)
    assert held == ["d/o/0"]
    assert [r[0]["n"] for r in egress.read_results("d", "d/o/0", 1, 3)] == [2, 3]
    egress.commit_results("d", "d/o/0", 3)
    assert held == []  # one left of 4: below half
    assert egress.result_offsets("d") == {"d/o/0": (3, 4)}
    with pytest.raises(ValueError, match="committed already"):
        egress.read_results("d", "d/o/0", 0, None)


def test_a_reader_waiting_for_results_is_told_of_rows_past_its_offsets() -> None:
    egress, _ = make_egress(capacity=100)
    assert not egress.readable_past("d", {})  # nothing yet
    egress.results("d", "d/o/0", [{"n": 1}, {"n": 2}], 1.0, 2.0)
    assert egress.readable_past("d", {}) and egress.readable_past("d", {"d/o/0": 1})
    assert not egress.readable_past("d", {"d/o/0": 2})  # read them all
    egress.dataflows["d"].results["d/o/0"].commit(2)
    assert not egress.readable_past("d", {})  # from the committed offset: nothing new
    assert egress.readable_past("gone", {})  # not here: the caller asks and learns why
    exactly = ResultLog(exactly_once=True)  # a result is readable once its checkpoint is
    egress.dataflows["d"].results["d/o/0"] = exactly
    exactly.append([{"n": 3}], 1.0, 2.0)
    exactly.marks[1] = 1
    assert not egress.readable_past("d", {})
    egress.checkpointed("d", 1)
    assert egress.readable_past("d", {})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("rows"), st.integers(0, 5)), st.tuples(st.just("columns"), st.integers(0, 5)),
    st.tuples(st.just("commit"), st.integers(0, 6)), st.tuples(st.just("restore"), st.just(0))),
    max_size=25), st.integers(0, 4), st.integers(0, 6))
def test_a_result_log_of_rows_and_columns_reads_as_the_rows_appended(
        steps: list[tuple[str, int]], lo: int, span: int) -> None:
    """Chunks of rows and of columns, commits inside a chunk, a checkpoint's round trip
    (msgpack, columns as Arrow IPC): the log reads as a plain list of the rows would."""
    log, model, base, n = ResultLog(), [], 0, 0
    for kind, k in steps:
        if kind in ("rows", "columns"):
            events = [{"i": n + j, "x": (n + j) * 0.5} for j in range(k)]
            n += k
            log.append(pa.RecordBatch.from_pylist(events) if kind == "columns" else events,
                       float(n), float(n + 1))
            model += [(e, float(n), float(n + 1)) for e in events]
        elif kind == "commit":
            base = min(base + k, base + len(model))
            model = model[base - log.committed_offset:] if base > log.committed_offset else model
            log.commit(base)
        else:
            saved = msgpack.unpackb(msgpack.packb(log.snapshot(1), use_bin_type=True))
            log = ResultLog()
            log.restore(*saved)
        assert (log.committed_offset, log.end_offset, len(log)) == (base, base + len(model), len(model))
        assert log.bytes >= 0 and (log.bytes > 0) == bool(model)
    assert log.read(base) == model
    got = log.read(base + lo, base + lo + span)
    assert got == model[lo:lo + span]
    table = log.read_columns(base + lo, base + lo + span)
    assert table.to_pylist() == [{**e, "_ingest_ms": i, "_egress_ms": o} for e, i, o in got]


def test_a_result_log_of_many_small_chunks_reads_from_its_middle_and_drops_what_was_read() -> None:
    log = ResultLog()
    for i in range(300):  # a chunk per message: one row each, or a batch of two
        log.append(pa.RecordBatch.from_pylist([{"i": 2 * i}, {"i": 2 * i + 1}]) if i % 2
                   else [{"i": 2 * i}, {"i": 2 * i + 1}], 0.0, 1.0)
    assert [e["i"] for e, _, _ in log.read(301, 305)] == [301, 302, 303, 304]
    log.commit(401)
    assert (log.committed_offset, len(log)) == (401, 199)
    assert [e["i"] for e, _, _ in log.read(401, 404)] == [401, 402, 403]
    assert log.read_columns(590)["i"].to_pylist() == list(range(590, 600))
    log.commit(600)
    assert (len(log), log.bytes, log.read(600)) == (0, 0, [])


def test_a_result_log_with_ids_keeps_rows_and_reads_mixed_kinds_as_rows_only() -> None:
    log = ResultLog(ids=True)
    log.append(pa.RecordBatch.from_pylist([{"k": 1}, {"k": 1}]), 1.0, 2.0)
    ids = [e["_id"] for e, _, _ in log.read(0)]
    assert len(set(ids)) == 2  # identical rows get ids of their own
    mixed = ResultLog()
    mixed.append([{"v": 1}, {"v": "one"}], 1.0, 2.0)
    with pytest.raises(ResultsNotColumnar, match="read these results as JSON or msgpack"):
        mixed.read_columns(0)


def test_a_sinks_room_counts_its_queue_and_its_bytes_per_row() -> None:
    egress, held = make_egress(capacity=100)
    assert egress.room("d", {}) == {"d/o/0": 100}  # empty: by rows only
    egress.results("d", "d/o/0", [{"n": i} for i in range(40)], 1.0, 2.0)
    assert held == [] and egress.room("d", {}) == {"d/o/0": 60}
    assert egress.room("d", {"d/o/0": 15}) == {"d/o/0": 45}  # its mailbox is taken in too
    # By bytes: as many rows again as the log holds, at its bytes per row.
    egress.dataflows["d"].log_bytes = egress.dataflows["d"].results["d/o/0"].bytes * 2
    assert egress.room("d", {}) == {"d/o/0": 40}
    assert egress.room("d", {"d/o/0": 50}) == {"d/o/0": 0}


def test_a_sinks_room_by_bytes_is_guessed_high_before_its_first_rows_and_kept_after_commits(
        ) -> None:
    egress, _ = make_egress(capacity=10**6)
    out = egress.dataflows["d"]
    out.log_bytes = 100 * FIRST_ROW_BYTES
    assert egress.room("d", {}) == {"d/o/0": 100}  # nothing known yet: the high guess
    egress.results("d", "d/o/0", [{"n": i} for i in range(10)], 1.0, 2.0)
    log = out.results["d/o/0"]
    per_row = log.bytes // 10
    assert per_row < FIRST_ROW_BYTES and egress.room("d", {}) == {
        "d/o/0": (out.log_bytes - log.bytes) // per_row}
    log.commit(10)  # an empty log keeps what its rows cost
    assert log.bytes == 0 and egress.room("d", {}) == {"d/o/0": out.log_bytes // per_row}


def test_the_error_output_keeps_counts_and_drops_the_oldest_unread_records() -> None:
    egress, _ = make_egress()
    errors = [ErrorRecord("s", "malformed", f"bad {i}", {"i": i}) for i in range(ERROR_LOG_CAPACITY + 5)]
    egress.errors("d", errors, 1.0, 2.0)
    committed, end, dropped = egress.error_offsets("d")
    assert (committed, end, dropped) == (5, ERROR_LOG_CAPACITY + 5, 5)
    first, rows = egress.read_errors("d", 0, 7)
    assert first == 5 and [r[0]["message"] for r in rows] == ["bad 5", "bad 6"]
    assert egress.error_counts("d") == {"s:malformed": ERROR_LOG_CAPACITY + 5}
    assert len(egress.error_records("d", 3)) == 3


# -- hosting --------------------------------------------------------------------------------
def test_a_refused_deploy_changes_nothing() -> None:
    spec = (Dataflow("f", latency_target_ms=5).source("s", schema={"x": "int"})
            .map(function="no_such_module_here:fn").sink("o")).spec
    hosting = Hosting(0, FunctionResolver())
    with pytest.raises(SpecError, match="importable module"):
        hosting.build(spec, place(spec, [0], {}))
    assert not hosting.activations and not hosting.dataflows and not hosting.hosts


def test_hosting_builds_only_its_instances_and_routes_to_all() -> None:
    spec = keyed(p=2).spec
    placement = place(spec, [0, 1], {})
    hosting = Hosting(1, FunctionResolver())
    built = hosting.build(spec, placement)
    hosting.add(spec, placement, built)
    assert sorted(hosting.activations) == sorted(str(a) for a in placement.on(1))
    assert hosting.hosts == placement.hosts  # routing knows where every instance is
    with pytest.raises(ValueError, match="already deployed"):
        hosting.build(spec, placement)
    hosting.mark_input_batch("d", "s@q", 4)
    hosting.mark_input_batch("d", "s@q", 2)
    assert hosting.input_batches("d") == {"s@q": 4}
    assert hosting.remove("d") is not None
    assert not hosting.activations and not hosting.hosts and hosting.remove("d") is None


# -- statistics -------------------------------------------------------------------------------
def test_parts_of_a_dataflow_merge_into_one_status() -> None:
    spec = keyed(p=2).spec
    placement = place(spec, [0, 1], {})
    sched = Scheduler("fifo")
    parts = []
    for ex in (0, 1):
        stats = Statistics(ex)
        stats.open(spec, [])
        counters = stats.dataflows["d"]
        counters.events_in, counters.events_out = 10 * (ex + 1), ex + 1
        counters.latency.record(20.0 + 80 * ex, 1)  # 20 ms on 0 (within 50), 100 ms on 1
        parts.append(stats.part("d", [], sched, {"s:late": 2}, [f"d/o/{ex}"]))
    info: DataflowInfo = {"name": "d", "spec": spec.to_dict(), "hosts": placement.hosts,
                          "executors": [0, 1], "state": "running", "submitted_at": 0.0}
    merged = dataflow_stats(info, parts)
    assert (merged["events_in"], merged["events_out"], merged["results"]) == (30, 3, 2)
    assert merged["within_target"] == 0.5 and merged["max_ms"] == 100.0
    assert merged["errors"] == {"s:late": 4} and merged["held"] == ["d/o/0", "d/o/1"]
    assert merged["sources"] == ["s"] and sum(merged["latency_buckets"]) == 2


def test_an_output_that_cannot_travel_is_reported_and_the_link_keeps_its_order() -> None:
    from decimal import Decimal

    from cameo_actors.runtime._private.exchange.wire import unpack_link
    from cameo_actors.scheduling import Message

    sent: list[bytes] = []
    told: list[tuple[str, list[object]]] = []
    ch = Channels(0, lambda host, blob: sent.append(blob),
                  lambda sender, events, why: told.append((sender, events)))
    ctx = Message.ingress("df/s/0", [], dataflow="df", tenant="t", ingest_ms=0.0).ctx
    msg = Message("df/o/0", 0, [{"v": 1}, {"v": Decimal("1.5")}, {"v": 2**70}], False, ctx,
                  "df/m/0", 3)
    ch.message(1, msg)
    ch.flush()
    ch.message(1, Message("df/o/0", 0, [{"v": 3}], False, ctx, "df/m/0", 1))
    ch.flush()
    links = [unpack_link(b) for b in sent]
    assert [link[3] for link in links] == [0, 1]  # no gap: the receiver is not wedged
    first = links[0][4][0]
    assert first[3] == [{"v": 1}] and first[6] == 3  # good events go on, credits come back
    assert told == [("df/m/0", [{"v": Decimal("1.5")}, {"v": 2**70}])]


def test_rays_folder_moves_to_a_short_path_when_its_sockets_would_not_fit() -> None:
    from cameo_actors.runtime.config import ray_temp_dir

    top = tempfile.mkdtemp(prefix="c")  # /tmp/cXXXXXXXX: short enough
    deep = os.path.join(top, "a-run-folder-nested-deep-enough" * 2)
    moved = ray_temp_dir(deep)
    try:
        assert ray_temp_dir(top) == os.path.join(top, "ray")
        assert not moved.startswith(deep) and os.path.isdir(moved)
        assert moved == ray_temp_dir(deep)  # one run folder, one Ray folder
        socket = os.path.join(moved, "session_2026-11-24_00-54-39_758884_4194304/sockets/plasma_store")
        assert len(socket.encode()) <= 107
    finally:
        shutil.rmtree(top)
        shutil.rmtree(moved)


def test_a_checkpoint_that_makes_a_full_log_readable_holds_its_sink_within_the_budget() -> None:
    """Exactly-once: rows become readable when the checkpoint after them completes, all at
    once. A fast sink's interval of rows then lies past the size that holds it; the sink is
    held (flow control), and the footprint the budget is checked against counts the log at
    most at that size (once, the monitor failed a dataflow whose reader was only behind)."""
    held: list[str] = []
    egress = Egress(10**9, held.append, held.remove, state_budget_bytes=8_000,
                    delivery=lambda spec: "exactly_once")
    spec = keyed().spec
    built = Hosting(0, FunctionResolver()).build(spec, place(spec, [0], {}))
    egress.open(spec, built)
    log_bytes = egress.dataflows["d"].log_bytes
    assert log_bytes == 4_000  # half the budget, one sink
    for i in range(50):  # far past log_bytes, none of it readable yet
        egress.results("d", "d/o/0", [{"n": i, "pad": "x" * 200}], 1.0, 2.0)
    assert held == [] and egress.footprint("d") == 0
    egress.dataflows["d"].results["d/o/0"].snapshot(1)  # the sink's barrier of checkpoint 1
    egress.checkpointed("d", 1)
    rows, size = egress.dataflows["d"].results["d/o/0"].unread()
    assert rows == 50 and size > 8_000  # over the whole budget, readable at once
    assert held == ["d/o/0"]  # held until a reader commits
    assert egress.footprint("d") == log_bytes  # not a state overrun
    egress.commit_results("d", "d/o/0", 50)
    assert held == [] and egress.footprint("d") == 0
