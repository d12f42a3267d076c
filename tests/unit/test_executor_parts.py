"""The parts `ExecutorCore` hands its calls to, each alone on real hosting and a real
scheduler, with the message path replaced by a recorder: what a plan change or a
checkpoint puts on the path, what a source admits, what an executor reports."""

from __future__ import annotations

from typing import Any

from cameo_actors import Dataflow, count
from cameo_actors.clock import FakeClock
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime._private.checkpoint.parts import CHECKPOINT, Part
from cameo_actors.runtime._private.exchange.channels import Channels
from cameo_actors.runtime._private.exchange.epochs import MERGE, REROUTE
from cameo_actors.runtime._private.executor.checkpointing import RESTORING, Checkpointing
from cameo_actors.runtime._private.executor.counters import Statistics
from cameo_actors.runtime._private.executor.egress import Egress
from cameo_actors.runtime._private.executor.flow import FlowControl
from cameo_actors.runtime._private.executor.hosting import Hosting
from cameo_actors.runtime._private.executor.ingress import Ingress
from cameo_actors.runtime._private.executor.plan_changes import PlanChanges
from cameo_actors.runtime._private.executor.reports import Reports
from cameo_actors.runtime._private.placement import Placement, place
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.scheduling import Message, Scheduler

SOURCE, WINDOW0, WINDOW1, SINK = "d/s/0", "d/window_2/0", "d/window_2/1", "d/o/0"


def keyed() -> DataflowSpec:
    return (Dataflow("d", latency_target_ms=50).source("s", schema={"ts": "int", "k": "str"},
                                                       event_time="ts")
            .key_by("k").window(tumbling_ms=10, parallelism=2).aggregate(n=count()).sink("o")).spec


class Path:
    """The message path, recorded (and hosting as the core does it, for plan changes)."""

    def __init__(self, hosting: Hosting, sched: Scheduler) -> None:
        self.hosting, self.sched = hosting, sched
        self.controls: list[tuple[str, list[Any], bool]] = []
        self.routed: list[tuple[str, Message]] = []
        self.barriers: list[tuple[str, list[Any]]] = []
        self.unhosted: list[str] = []

    def route(self, sender: str, msg: Message) -> None:
        self.routed.append((sender, msg))

    def control(self, spec: DataflowSpec, target: str, payload: list[Any], now: float,
                first: bool = False) -> None:
        self.controls.append((target, payload, first))

    def send_barriers(self, spec: DataflowSpec, sender: str, sends: list[Any], now: float) -> None:
        self.barriers.append((sender, sends))

    def host(self, spec: DataflowSpec, placement: Placement, new: list[str], generation: int,
             deployment: str) -> set[str] | None:
        built = self.hosting.build(spec, placement, set(new))
        self.hosting.add(spec, placement, built)
        return {a.id for a in built}

    def unhost(self, dataflow: str, ids: list[str]) -> list[str]:
        here = self.hosting.forget(dataflow, ids)
        self.unhosted += here
        return here


class Executor:
    """Hosting, scheduler, flow and egress of one executor, `keyed()` deployed on it."""

    def __init__(self) -> None:
        self.clock = FakeClock(1_000.0)
        self.spec = keyed()
        self.placement = place(self.spec, [0], {})
        self.hosting = Hosting(0, FunctionResolver())
        self.sched = Scheduler("cameo")
        self.flow = FlowControl(100, 100, self.sched.hold, self.sched.release)
        self.egress = Egress(100, hold=lambda sink: None, release=lambda sink: None)
        self.stats = Statistics(0)
        built = self.hosting.build(self.spec, self.placement)
        self.hosting.add(self.spec, self.placement, built)
        for part in (self.flow, self.egress, self.stats):
            part.open(self.spec, built)
        for act in built:
            self.sched.add_activation(act.id, dataflow="d", tenant="t", latency_target_ms=50)
        self.path = Path(self.hosting, self.sched)
        self.ingress = Ingress(3, 5.0, self.hosting, self.sched, self.flow, self.egress, self.stats,
                               None, self.clock.now_ms)
        self.persisted: list[tuple[str, int, str]] = []
        self.checkpointing = Checkpointing(
            RuntimeConfig(), self.hosting, self.sched, self.flow, self.egress, self.ingress,
            self.clock.now_ms, self.path, lambda d, c, a, blob, pos, bases: self.persisted.append((d, c, a)))


def message(target: str, payload: Any, upstream: str, *, watermark: bool = False) -> Message:
    msg = Message.ingress(target, payload, dataflow="d", tenant="t", ingest_ms=0.0,
                          is_watermark=watermark)
    msg.upstream = upstream
    return msg


# -- plan changes ----------------------------------------------------------------------------
def test_a_reroute_reaches_each_upstream_of_the_step_as_a_control_message() -> None:
    ex = Executor()
    plan = PlanChanges(ex.hosting, ex.sched, ex.clock.now_ms, ex.path)
    assert plan.reroute("d", "window_2", 2, [0, 1], [0, 1]) == 1
    assert ex.path.controls == [("d/key_by_1/0", [REROUTE, "window_2", 2, [0, 1], [0, 1]], False)]
    assert plan.reroute("gone", "window_2", 2, [0], [0]) == 0  # cancelled meanwhile
    assert plan.epochs("d", "window_2").keys() == {WINDOW0, WINDOW1}
    assert plan.epochs("gone", "window_2") == {}


def test_retired_instances_end_their_streams_then_leave_hosting_and_routing() -> None:
    ex = Executor()
    plan = PlanChanges(ex.hosting, ex.sched, ex.clock.now_ms, ex.path)
    assert plan.retire("d", [WINDOW1]) == [WINDOW1]
    assert [sender for sender, _ in ex.path.barriers] == [WINDOW1]
    assert ex.path.unhosted == [WINDOW1] and WINDOW1 not in ex.hosting.activations
    assert plan.retire("gone", [WINDOW0]) == []


# -- checkpoints -------------------------------------------------------------------------------
def test_a_checkpoint_starts_at_each_source_first_in_its_mailbox() -> None:
    ex = Executor()
    ex.hosting.activations[SOURCE].positions["client"] = 4
    assert ex.checkpointing.checkpoint("d", 7) == 1
    assert ex.path.controls == [(SOURCE, [CHECKPOINT, 7, {"client": 4}], True)]


def test_the_first_barrier_goes_on_and_the_part_is_written_once_every_channel_is_in() -> None:
    ex = Executor()
    act = ex.hosting.activations[WINDOW0]
    up = "d/key_by_1/0"
    ex.checkpointing.on_barrier(act, message(WINDOW0, [CHECKPOINT, 1, {}], up, watermark=True))
    assert [(s, m.target) for s, m in ex.path.routed] == [(WINDOW0, SINK)]
    assert ex.persisted == [("d", 1, WINDOW0)]  # its only channel: complete at once
    assert act.part is not None and act.part.state == b""  # handed over
    assert act.part.handed is not None and act.part.handed.nbytes == 0  # not packed here


def test_only_messages_of_channels_still_waiting_for_their_barrier_are_recorded() -> None:
    ex = Executor()
    act = ex.hosting.activations[WINDOW0]
    act.part = Part(1, b"state", {(0, "a"), (0, "b")})
    ex.checkpointing.record(act, message(WINDOW0, [{"k": 1}], "a"))
    ex.checkpointing.record(act, message(WINDOW0, [{"k": 2}], "elsewhere"))
    ex.checkpointing.record(act, message(WINDOW0, [REROUTE, "x"], "a", watermark=True))
    ex.checkpointing.record(act, message(WINDOW0, [MERGE, []], "a", watermark=True))
    assert [payload for _, _, _, payload in act.part.inflight] == [[{"k": 1}], [MERGE, []]]
    ex.checkpointing.record(act, message(WINDOW0, END_OF_STREAM, "a", watermark=True))
    assert act.part.pending == {(0, "b")} and ex.persisted == []  # no barrier will come on a
    ex.checkpointing.record(act, message(WINDOW0, END_OF_STREAM, "b", watermark=True))
    assert ex.persisted == [("d", 1, WINDOW0)]


def test_restored_activations_are_held_until_resume() -> None:
    ex = Executor()
    ids = ex.hosting.ids("d")
    ex.checkpointing.restore(ex.spec, ids, {}, None)
    assert all(RESTORING in ex.flow.held[a] for a in ids)
    ex.checkpointing.resume("d")
    assert ex.flow.held == {}


# -- ingress ------------------------------------------------------------------------------------
def test_a_call_is_applied_in_order_once_and_cut_into_messages() -> None:
    ex = Executor()
    events = [{"ts": i, "k": "a"} for i in range(7)]
    ex.ingress.ingest("c", 1, SOURCE, [events[:1]], 0.0)  # early: parked
    assert ex.sched.pending(SOURCE) == 0
    ex.ingress.ingest("c", 0, SOURCE, [events[1:]], 0.0)
    # A watermark ahead of the events, 6 events in messages of at most 3, then 1 (no watermark
    # ahead: it is behind the first call's)
    assert ex.sched.pending(SOURCE) == 4
    ex.ingress.ingest("c", 0, SOURCE, [events], 0.0)  # applied already: dropped
    assert ex.sched.pending(SOURCE) == 4 and ex.stats.dataflows["d"].events_in == 7
    assert ex.hosting.activations[SOURCE].positions == {"c": 2}


def test_a_watermark_goes_ahead_of_a_call_s_events_when_its_earliest_event_time_is_new() -> None:
    ex = Executor()
    ran: list[Any] = []

    def record(aid: str, msg: Message) -> None:
        ran.append(msg.payload if msg.is_watermark else [e["ts"] for e in msg.payload])

    for seq, times in enumerate([(5, 3, 9), (12, 10), (8,), (9, 14)]):
        ex.ingress.ingest("c", seq, SOURCE, [[{"ts": t, "k": "a"} for t in times]], 0.0)
    while ex.sched.run_once(record, ex.clock):
        pass
    # (8,) and (9, 14) start behind the 12 a call before left: nothing to put ahead of them
    assert ran == [3.0, [5, 3, 9], 10.0, [12, 10], [8], [9, 14]]


# -- reports ------------------------------------------------------------------------------------
def test_unsettled_counts_queued_messages_and_parked_calls() -> None:
    ex = Executor()
    reports = Reports(ex.hosting, ex.sched, ex.flow, ex.egress, ex.stats,
                      Channels(0, lambda host, blob: None), [])
    ex.ingress.ingest("c", 0, SOURCE, [[{"ts": 1, "k": "a"}]], 0.0)
    ex.ingress.ingest("c", 2, SOURCE, [[{"ts": 2, "k": "a"}]], 0.0)
    work = reports.unsettled(["d", "gone"])["dataflows"]
    # queued: the first call's events and the watermark ahead of them
    assert list(work) == ["d"] and work["d"]["queued"] == 2 and work["d"]["parked"] == 1
    assert reports.ended("d") is False
    usage = reports.usage()
    assert usage["dataflows"]["d"]["events_in"] == 1
    # both calls are charged, the parked one too: receiving it cost what the first did
    assert ex.hosting.activations[SOURCE].calls_in == 2
    assert usage["cpu"]["process_ms"] >= usage["cpu"]["worker_ms"] >= 0
    assert usage["dataflows"]["d"]["cpu_ms"] == 0.0  # the first reading only sets the mark


# -- the exchange: links sent when due, keys' owners remembered -----------------------------------
def _message(target: str, size: int) -> Message:
    from cameo_actors.scheduling import PriorityContext

    return Message(target, 0, [{"k": i} for i in range(size)], False,
                   PriorityContext("d", "t", 0.0), "d/up/0", size)


def test_a_link_is_sent_when_its_most_urgent_message_is_due_or_its_events_fill_a_call() -> None:
    sent: list[int] = []
    ch = Channels(0, lambda host, blob: sent.append(host), batch_events=100)
    ch.message(1, _message("d/w/1", 10), due_ms=50.0)
    ch.message(1, _message("d/w/1", 10), due_ms=20.0)  # the most urgent sets the link's time
    ch.message(2, _message("d/w/2", 10), due_ms=90.0)
    assert ch.flush_due(10.0) == 0 and sent == []  # nothing due: both links gather on
    assert ch.flush_due(20.0) == 1 and sent == [1]
    ch.message(2, _message("d/w/2", 95), due_ms=90.0)  # 105 events: a call's worth
    assert ch.flush_due(21.0) == 1 and sent == [1, 2]
    ch.ack(3, ("d/up/0", "d/w/3", 5, 0.0), due_ms=500.0)
    assert ch.flush() == 1 and sent == [1, 2, 3]  # an idle worker sends everything
    assert ch.idle() and ch.sent["calls"] == 3 and ch.sent["events"] == 125
    assert ch.sent["messages"] == 4 and ch.sent["acks"] == 1


def test_a_busy_worker_lets_a_message_linger_by_its_slack_and_an_idle_one_sends_it() -> None:
    from tests.shared.inprocess import InProcessCluster

    d = (Dataflow("x", latency_target_ms=1000)
         .source("s", schema={"ts": "int", "k": "str"}, event_time="ts", parallelism=2)
         .key_by("k").window(tumbling_ms=10, parallelism=2).aggregate(n=count()).sink("o"))
    cluster = InProcessCluster(2, RuntimeConfig(exchange_linger_ms=10.0), seed=0)
    hosts = cluster.deploy(d.spec)
    core = cluster.cores[0]
    cluster.ingest(hosts, "x/s/0", [[{"ts": i, "k": f"k{i}"} for i in range(40)]])
    while core.run_slice():
        core.flush_after_slice(True)  # busy: the keys of the other instance wait
    assert cluster.in_transit == [] and not core.channels.idle()
    cluster.clock.advance(9.0)
    core.flush_after_slice(True)
    assert cluster.in_transit == []  # 1 s of slack: it may wait 10 ms (the linger's cap)
    cluster.clock.advance(1.0)
    core.flush_after_slice(True)
    assert len(cluster.in_transit) == 1 and core.channels.idle()
    cluster.ingest(hosts, "x/s/0", [[{"ts": 50 + i, "k": f"k{i}"} for i in range(40)]])
    while core.run_slice():
        pass
    core.flush_after_slice(False)  # nothing more to run: sent at once
    assert len(cluster.in_transit) == 2


def test_a_keyed_route_remembers_str_and_int_owners_until_its_table_changes() -> None:
    from cameo_actors.operators.bins import stable_hash
    from cameo_actors.runtime._private.exchange.routes import Route

    route = Route("w", 0, ("a", "b"))
    route.set_table(["a", "b"] * 8)
    mask = 15
    for key in ("k1", "k2", 7, 2**70, 1.0, ("t", 1)):
        assert route.owner_of(key, mask) == ["a", "b"][stable_hash(key) & 1]
    assert set(route.memo) == {"k1", "k2", 7, 2**70}  # a float or tuple key is hashed each time
    route.set_table(["b", "a"] * 8)
    assert route.memo == {} and route.owner_of("k1", mask) == ["b", "a"][stable_hash("k1") & 1]
