"""The Scheduler: yields, conservation, feasible EDF loads, cancel, errors, purity."""

from __future__ import annotations

import ast
import doctest
import importlib
import math
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cameo_actors.scheduling as sched_pkg
from cameo_actors.clock import FakeClock
from cameo_actors.scheduling import (
    DRAINED,
    PREEMPTED,
    QUANTUM,
    REMOVED,
    DuplicateActivationError,
    Message,
    Scheduler,
    UnknownActivationError,
    WindowTiming,
)
from cameo_actors.scheduling.activation import ActivationState
from cameo_actors.scheduling.queues import LATE_SLACK_FLOOR

POLICIES = ["cameo", "edf", "fifo", "sjf", "fair_share", "token_bucket"]


def job(
    target: str, t: float, uid: int, cost: float, *, dataflow: str | None = None, tenant: str = "t"
) -> Message:
    return Message.ingress(
        target,
        [{"uid": uid, "cost": cost}],
        dataflow=dataflow or target,
        tenant=tenant,
        ingest_ms=t,
    )


# -- yields only at message boundaries, and exactly when they should -----------------------


@given(st.data())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_slices_end_exactly_when_drained_quantum_spent_or_preempted(data: st.DataObject) -> None:
    policy = data.draw(st.sampled_from(POLICIES), label="policy")
    quantum = data.draw(st.sampled_from([0.0, 1.0, 3.0, 10.0]), label="quantum")
    n_acts = data.draw(st.integers(1, 5), label="activations")
    clock = FakeClock(0.0)
    params = {"rates": {"t1": 2000.0}, "burst": 3.0} if policy == "token_bucket" else None
    s = Scheduler(policy, quantum_ms=quantum, policy_params=params)
    acts = [f"a{i}" for i in range(n_acts)]
    for i, aid in enumerate(acts):
        s.add_activation(
            aid,
            dataflow=aid,
            tenant=f"t{i % 2}",
            latency_target_ms=data.draw(st.integers(1, 200)),
            weight=1 + i % 3,
        )
    uid = 0
    enqueued: list[int] = []

    def due(aid: str, now: float) -> Any:
        """When `aid` is due: its most urgent key; under a deadline policy, a passed
        deadline counts as due one latency target after it, but not before now + the
        floor's share of it (DeadlineRunQueue)."""
        key = s.urgent_key(aid)
        if s.policy.deadline_keys and key < now:
            target = s.profile(aid).latency_target_ms
            return max(key + target, now + LATE_SLACK_FLOOR * target)
        return key

    def send(now: float) -> None:
        nonlocal uid
        uid += 1
        aid = data.draw(st.sampled_from(acts))
        cost = data.draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0]))
        s.enqueue(job(aid, now, uid, cost, tenant=s.profile(aid).tenant), now)
        enqueued.append(uid)

    for _ in range(data.draw(st.integers(1, 15), label="initial")):
        send(0.0)
    budget = [data.draw(st.integers(0, 25), label="spawned")]
    executed: list[int] = []
    decisions: list[str | None] = []
    slice_start = [0.0]

    def execute(aid: str, msg: Message) -> None:
        assert msg.target == aid
        executed.append(msg.payload[0]["uid"])
        clock.advance(msg.payload[0]["cost"])
        while budget[0] and data.draw(st.booleans()):  # messages arriving mid-slice
            budget[0] -= 1
            send(clock.now_ms())
        # what the scheduler must decide at this boundary
        now = clock.now_ms()
        waiting = [due(b, now) for b in acts if b != aid and s.pending(b)]
        if s.pending(aid) == 0:
            decisions.append(DRAINED)
        elif now - slice_start[0] >= quantum:
            decisions.append(QUANTUM)
        elif waiting and min(waiting) < due(aid, now):
            decisions.append(PREEMPTED)
        else:
            decisions.append(None)

    while True:
        slice_start[0] = clock.now_ms()
        before = len(decisions)
        result = s.run_once(execute, clock)
        if result is None:
            break
        mine = decisions[before:]
        assert result.messages == len(mine) >= 1
        assert all(d is None for d in mine[:-1]), mine  # did not yield too late
        assert mine[-1] == result.reason  # yielded for the right reason
    assert sorted(executed) == enqueued  # nothing lost, nothing run twice
    assert s.backlog == 0 and not s.has_work()
    assert s.stats.executed == len(executed)


# -- a feasible EDF load meets every deadline ------------------------------------------------


@given(
    groups=st.lists(
        st.tuples(st.lists(st.integers(1, 20), min_size=1, max_size=4), st.integers(0, 30)),
        min_size=1,
        max_size=20,
    ),
    quantum=st.sampled_from([0.0, 2.0, 100.0]),
    order=st.randoms(use_true_random=False),
)
@settings(max_examples=200, deadline=None)
def test_feasible_edf_load_meets_every_deadline(
    groups: list[tuple[list[int], int]], quantum: float, order: Any
) -> None:
    # Each group is one activation with jobs released at t=0 and a common deadline.
    # Deadlines are built so that running the groups in the generated order meets all
    # of them, so the load is feasible (and sorted by deadline, all meet: Jackson).
    clock = FakeClock(0.0)
    s = Scheduler("edf", quantum_ms=quantum)
    elapsed = 0
    msgs = []
    deadline = {}
    for g, (costs, slack) in enumerate(groups):
        elapsed += sum(costs)
        aid = f"g{g}"
        deadline[aid] = float(elapsed + slack)
        s.add_activation(aid, dataflow=aid, tenant="t", latency_target_ms=deadline[aid])
        msgs += [job(aid, 0.0, 0, float(c)) for c in costs]
    msgs.sort(key=lambda m: m.target)  # per activation, arrival order is kept ...
    order.shuffle(msgs)  # ... but activations interleave arbitrarily
    for m in msgs:
        s.enqueue(m, 0.0)
    finished: dict[str, float] = {}

    def execute(aid: str, msg: Message) -> None:
        clock.advance(msg.payload[0]["cost"])
        finished[aid] = clock.now_ms()

    s.run_until_idle(execute, clock)
    assert set(finished) == set(deadline)
    for aid, t in finished.items():
        assert t <= deadline[aid], (aid, t, deadline[aid])


# -- preemption and quantum --------------------------------------------------------------------


def test_urgent_arrival_preempts_at_the_next_message_boundary() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("cameo", quantum_ms=1000.0)
    s.add_activation("bulk", dataflow="b", tenant="t", latency_target_ms=10_000.0)
    s.add_activation("alert", dataflow="a", tenant="t", latency_target_ms=10.0)
    for i in range(10):
        s.enqueue(job("bulk", 0.0, i, 1.0), 0.0)
    ran: list[str] = []

    def execute(aid: str, msg: Message) -> None:
        ran.append(aid)
        clock.advance(1.0)
        if len(ran) == 3:  # an alert arrives while bulk's third message runs
            s.enqueue(job("alert", clock.now_ms(), 99, 1.0), clock.now_ms())

    r = s.run_once(execute, clock)
    assert r is not None and (r.activation_id, r.messages, r.reason) == ("bulk", 3, PREEMPTED)
    r = s.run_once(execute, clock)
    assert r is not None and (r.activation_id, r.reason) == ("alert", DRAINED)
    assert s.peek() is not None and s.peek()[0] == "bulk"  # type: ignore[index]
    assert s.stats.preempted == 1


def test_quantum_round_robins_equal_activations() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("fifo", quantum_ms=2.0, policy_params={"order": "ingest"})
    for aid in ("x", "y"):
        s.add_activation(aid, dataflow=aid, tenant="t", latency_target_ms=10.0)
        for i in range(4):
            s.enqueue(job(aid, 0.0, i, 1.0), 0.0)
    slices = []
    while (r := s.run_once(lambda a, m: clock.advance(1.0), clock)) is not None:
        slices.append((r.activation_id, r.messages, r.reason))
    assert slices == [("x", 2, QUANTUM), ("y", 2, QUANTUM), ("x", 2, DRAINED), ("y", 2, DRAINED)]
    assert s.stats.quantum_expired == 2


def test_local_hops_to_the_running_activation_wait_for_its_slice_end() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("cameo", quantum_ms=100.0)
    s.add_activation("loop", dataflow="d", tenant="t", latency_target_ms=50.0)
    s.enqueue(job("loop", 0.0, 0, 1.0), 0.0)
    seen = []

    def execute(aid: str, msg: Message) -> None:
        seen.append(msg.payload[0]["uid"])
        clock.advance(1.0)
        if len(seen) < 5:
            s.enqueue(s.derive(msg, "loop", [{"uid": len(seen)}], clock.now_ms()), clock.now_ms())

    r = s.run_once(execute, clock)
    assert r is not None and r.messages == 5 and seen == [0, 1, 2, 3, 4]


def test_watermarks_are_barriers_in_the_scheduler() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("cameo")
    s.add_activation(
        "win", dataflow="d", tenant="t", latency_target_ms=100.0, window=WindowTiming.tumbling(10.0)
    )
    order = []
    for ev in (25.0, 5.0):
        s.enqueue(
            Message.ingress(
                "win", [{"ev": ev}], dataflow="d", tenant="t", ingest_ms=30.0, event_ms=ev
            ),
            30.0,
        )
    s.enqueue(
        Message.ingress("win", 10.0, dataflow="d", tenant="t", ingest_ms=30.0, is_watermark=True),
        30.0,
    )
    s.enqueue(
        Message.ingress(
            "win", [{"ev": 1.0}], dataflow="d", tenant="t", ingest_ms=30.0, event_ms=1.0
        ),
        30.0,
    )
    s.run_until_idle(
        lambda a, m: order.append("wm" if m.is_watermark else m.payload[0]["ev"]), clock
    )
    assert order == [5.0, 25.0, "wm", 1.0]  # window order inside an epoch, never across


# -- accounting --------------------------------------------------------------------------------


def test_queueing_delay_cost_late_starts_and_overhead_are_recorded() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("cameo", alpha=1.0)
    s.add_activation("op", dataflow="d", tenant="t", latency_target_ms=5.0)
    s.enqueue(job("op", 0.0, 0, 3.0), 0.0)
    s.enqueue(job("op", 0.0, 1, 3.0), 0.0)
    clock.set(4.0)
    s.run_until_idle(lambda a, m: clock.advance(m.payload[0]["cost"]), clock)
    p = s.profile("op")
    assert (p.messages, p.busy_ms, p.cost_ms(""), p.queue_delay_ms) == (2, 6.0, 3.0, 7.0)
    assert p.late_starts == 1  # the second started at 7 > deadline 5
    assert s.stats.busy_ms == 6.0 and s.stats.overhead_ms == 0.0  # a fake clock sees none
    assert s.stats.overhead_us_per_message == 0.0


def test_poll_runs_at_every_boundary() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("fifo", quantum_ms=100.0)
    s.add_activation("op", dataflow="d", tenant="t", latency_target_ms=5.0)
    for i in range(3):
        s.enqueue(job("op", 0.0, i, 1.0), 0.0)
    polls = []
    s.run_once(lambda a, m: clock.advance(1.0), clock, poll=lambda: polls.append(clock.now_ms()))
    assert polls == [1.0, 2.0, 3.0]


# -- cancel and errors -------------------------------------------------------------------------


def test_remove_activation_frees_mailbox_and_queue_entry() -> None:
    s = Scheduler("cameo")
    s.add_activation("a", dataflow="d", tenant="t", latency_target_ms=5.0)
    s.add_activation("b", dataflow="d", tenant="t", latency_target_ms=50.0)
    s.enqueue(job("a", 0.0, 1, 1.0, dataflow="d"), 0.0)
    s.enqueue(job("a", 0.0, 2, 1.0, dataflow="d"), 0.0)
    s.enqueue(job("b", 0.0, 3, 1.0, dataflow="d"), 0.0)
    dropped = s.remove_activation("a")
    assert [m.payload[0]["uid"] for m in dropped] == [1, 2]
    assert "a" not in s and len(s) == 1 and s.backlog == 1 and s.stats.dropped == 2
    assert s.peek() is not None and s.peek()[0] == "b"  # type: ignore[index]
    with pytest.raises(UnknownActivationError):
        s.enqueue(job("a", 0.0, 4, 1.0), 0.0)
    with pytest.raises(UnknownActivationError):
        s.remove_activation("a")
    assert s.on_feedback("a", sched_pkg.Feedback("x", 1.0), 0.0) is False
    s.add_activation("a", dataflow="d", tenant="t", latency_target_ms=5.0)  # id reusable


def test_remove_forgets_feedback_and_dataflow_state() -> None:
    s = Scheduler("cameo")
    for aid in ("src", "fast", "slow"):
        s.add_activation(aid, dataflow="d", tenant="t", latency_target_ms=50.0)
    s.on_feedback("src", sched_pkg.Feedback("fast", 2.0), 0.0)
    s.on_feedback("src", sched_pkg.Feedback("slow", 9.0), 0.0)
    assert s.profile("src").path_cost_ms == 9.0
    s.remove_activation("slow")
    assert s.profile("src").path_cost_ms == 2.0
    with pytest.raises(ValueError):  # a rejected activation leaves no dataflow state behind
        s.add_activation("bad", dataflow="other", tenant="t", latency_target_ms=-1.0)
    assert s.dataflow_profile("other") is None
    s.remove_activation("src")
    s.remove_activation("fast")
    assert s.dataflow_profile("d") is None and len(s) == 0


def test_activation_removed_while_running_stops_its_slice() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("cameo", quantum_ms=100.0)
    s.add_activation("a", dataflow="d", tenant="t", latency_target_ms=5.0)
    for i in range(5):
        s.enqueue(job("a", 0.0, i, 1.0), 0.0)

    def execute(aid: str, msg: Message) -> None:
        clock.advance(1.0)
        if msg.payload[0]["uid"] == 1:
            assert len(s.remove_activation(aid)) == 3

    r = s.run_once(execute, clock)
    assert r is not None and (r.messages, r.reason) == (2, REMOVED)
    assert s.run_once(execute, clock) is None and s.backlog == 0


def test_execute_raising_leaves_the_scheduler_consistent() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("cameo")
    s.add_activation("a", dataflow="d", tenant="t", latency_target_ms=5.0)
    for i in range(3):
        s.enqueue(job("a", 0.0, i, 1.0), 0.0)

    def boom(aid: str, msg: Message) -> None:
        raise RuntimeError("operator bug")

    with pytest.raises(RuntimeError, match="operator bug"):
        s.run_once(boom, clock)
    assert s.backlog == 2 and s.peek() is not None  # consumed one, re-queued the rest
    assert s.run_until_idle(lambda a, m: None, clock) == 1 and s.backlog == 0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        Scheduler("cameo", quantum_ms=-1.0)
    with pytest.raises(TypeError):
        Scheduler("cameo", quantum_ms="5")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Scheduler(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Scheduler(sched_pkg.get_policy("edf"), policy_params={"x": 1})
    s = Scheduler()
    with pytest.raises(ValueError):
        s.add_activation("a", dataflow="d", tenant="t", latency_target_ms=0.0)
    with pytest.raises(ValueError):
        s.add_activation("a", dataflow="d", tenant="t", latency_target_ms=10.0, weight=0.0)
    with pytest.raises(TypeError):
        s.add_activation("", dataflow="d", tenant="t", latency_target_ms=10.0)
    s.add_activation("a", dataflow="d", tenant="t", latency_target_ms=math.inf)  # best effort
    with pytest.raises(DuplicateActivationError):
        s.add_activation("a", dataflow="d", tenant="t", latency_target_ms=10.0)
    with pytest.raises(TypeError):
        s.enqueue("not a message", 0.0)  # type: ignore[arg-type]
    with pytest.raises(UnknownActivationError):
        s.profile("zzz")
    with pytest.raises(TypeError):
        s.on_feedback("a", 3.0, 0.0)  # type: ignore[arg-type]


def test_ten_thousand_activations() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("cameo", quantum_ms=0.0)
    n = 10_000
    for i in range(n):
        s.add_activation(
            f"a{i}",
            dataflow=f"d{i % 10}",
            tenant="t",
            latency_target_ms=float(1 + (i * 7919) % 1000),
        )
    for i in range(n):
        s.enqueue(job(f"a{i}", 0.0, i, 0.0, dataflow=f"d{i % 10}"), 0.0)
    keys = []
    s.run_until_idle(lambda a, m: keys.append(m.key), clock)
    assert len(keys) == n and keys == sorted(keys)


# -- purity --------------------------------------------------------------------------------------

PKG_DIR = pathlib.Path(sched_pkg.__file__).parent
ALLOWED = {
    "__future__",
    "math",
    "heapq",
    "dataclasses",
    "enum",
    "typing",
    "collections.abc",
    "inspect",
    "cameo_actors.clock",
    "cameo_actors.errors",
}


def test_layer_imports_only_the_standard_library_and_reads_no_clock() -> None:
    for path in PKG_DIR.glob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name in ALLOWED, f"{path.name} imports {name}"


def test_layer_imports_with_ray_and_spark_blocked() -> None:
    code = (
        "import sys; sys.modules['ray'] = None; sys.modules['pyspark'] = None; "
        "import cameo_actors.scheduling"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("module", ["context", "profile", "queues", "policies", "scheduler"])
def test_docstring_examples_run(module: str) -> None:
    mod = importlib.import_module(f"cameo_actors.scheduling.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_hold_keeps_an_activation_out_until_released() -> None:
    from cameo_actors.scheduling import Message, Scheduler

    clock = FakeClock(0.0)
    s = Scheduler("fifo")
    for aid in ("a", "b"):
        s.add_activation(aid, dataflow="d", tenant="t", latency_target_ms=10)
    ran: list[str] = []

    def execute(aid: str, msg: Message) -> None:
        ran.append(aid)
        if aid == "a":
            s.hold("a")  # e.g. its output channel ran out of credits

    for aid in ("a", "a", "b"):
        s.enqueue(Message.ingress(aid, [{}], dataflow="d", tenant="t", ingest_ms=0.0), clock.now_ms())
    s.run_until_idle(execute, clock)
    assert ran == ["a", "b"]  # the slice of "a" ended after one message; "a" stayed out
    assert s.is_held("a") and s.pending("a") == 1
    s.enqueue(Message.ingress("a", [{}], dataflow="d", tenant="t", ingest_ms=0.0), clock.now_ms())
    assert s.run_once(execute, clock) is None  # still held, though it has mail
    s.release("a")
    s.run_once(lambda aid, m: ran.append(aid), clock)
    assert ran == ["a", "b", "a", "a"] and s.pending("a") == 0


# -- activation states ----------------------------------------------------------------------------


def _state(s: Scheduler, aid: str) -> ActivationState:
    return s._acts[aid].state


def test_activation_states_follow_their_transitions() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("fifo", quantum_ms=100.0)
    s.add_activation("a", dataflow="d", tenant="t", latency_target_ms=10)
    s.add_activation("b", dataflow="d", tenant="t", latency_target_ms=10)

    def send(aid: str) -> None:
        s.enqueue(Message.ingress(aid, [{}], dataflow="d", tenant="t", ingest_ms=0.0), 0.0)

    assert _state(s, "a") is ActivationState.IDLE
    s.release("a")  # not held: nothing happens
    assert _state(s, "a") is ActivationState.IDLE
    s.hold("a")
    assert _state(s, "a") is ActivationState.HELD and s.is_held("a")
    s.release("a")  # nothing to run: idle again, not queued
    assert _state(s, "a") is ActivationState.IDLE and not s.has_work()
    send("a")
    assert _state(s, "a") is ActivationState.QUEUED and s.has_work()
    s.hold("a")  # leaves the run queue
    assert _state(s, "a") is ActivationState.HELD and not s.has_work()
    s.hold("a")  # idempotent
    send("a")  # a held activation takes mail but stays out
    assert _state(s, "a") is ActivationState.HELD and not s.has_work()
    s.release("a")
    assert _state(s, "a") is ActivationState.QUEUED and s.pending("a") == 2
    seen: list[tuple[str, str, str]] = []

    def execute(aid: str, msg: Message) -> None:
        before = _state(s, aid)
        s.hold(aid)
        held = _state(s, aid)
        if len(seen) == 0:
            s.release(aid)  # released before the boundary: the slice goes on
        seen.append((before.name, held.name, _state(s, aid).name))

    r = s.run_once(execute, clock)
    assert r is not None and (r.messages, r.reason) == (2, DRAINED)
    assert seen == [
        ("RUNNING", "RUNNING_HELD", "RUNNING"),
        ("RUNNING", "RUNNING_HELD", "RUNNING_HELD"),
    ]
    assert _state(s, "a") is ActivationState.HELD  # the hold outlives the slice
    s.release("a")
    assert _state(s, "a") is ActivationState.IDLE  # its mailbox is empty
    send("b")
    act = s._acts["b"]
    s.remove_activation("b")
    assert act.state is ActivationState.REMOVED and not s.has_work()


def _in_run_queue(s: Scheduler, aid: str) -> bool:
    return aid in s._rq


@given(st.data())
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_states_match_the_run_queue_and_mailboxes_whatever_happens(data: st.DataObject) -> None:
    policy = data.draw(st.sampled_from(POLICIES), label="policy")
    clock = FakeClock(0.0)
    s = Scheduler(policy, quantum_ms=data.draw(st.sampled_from([0.0, 2.0, 50.0])))
    acts = ["a", "b", "c"]
    for i, aid in enumerate(acts):
        s.add_activation(aid, dataflow="d", tenant=f"t{i}", latency_target_ms=5.0 + 10 * i)
    enqueued: list[int] = []
    done: list[int] = []
    uid = [0]

    def send(aid: str) -> None:
        if aid in s:
            uid[0] += 1
            s.enqueue(job(aid, clock.now_ms(), uid[0], 1.0, dataflow="d"), clock.now_ms())
            enqueued.append(uid[0])

    def act_on(aid: str, op: str) -> None:
        if op == "send":
            send(aid)
        elif op == "hold":
            s.hold(aid)
        elif op == "release":
            s.release(aid)
        elif op == "remove" and aid in s:
            done.extend(m.payload[0]["uid"] for m in s.remove_activation(aid))
            s.add_activation(aid, dataflow="d", tenant="t", latency_target_ms=7.0)

    ops = st.tuples(st.sampled_from(acts), st.sampled_from(["send", "hold", "release", "remove"]))

    def check(running: str | None = None) -> None:
        for aid in acts:
            state = _state(s, aid)
            assert (state is ActivationState.QUEUED) == _in_run_queue(s, aid), (aid, state)
            assert s.is_held(aid) == (
                state in (ActivationState.HELD, ActivationState.RUNNING_HELD)
            )
            if aid == running:
                assert state in (ActivationState.RUNNING, ActivationState.RUNNING_HELD)
                continue
            assert state in (ActivationState.IDLE, ActivationState.QUEUED, ActivationState.HELD)
            if state is ActivationState.IDLE:
                assert s.pending(aid) == 0
            if state is ActivationState.QUEUED:
                assert s._acts[aid].qkey == s.urgent_key(aid)

    def execute(aid: str, msg: Message) -> None:
        done.append(msg.payload[0]["uid"])
        clock.advance(1.0)
        for target, op in data.draw(st.lists(ops, max_size=2), label="inside"):
            if not (op == "remove" and target == aid):  # removing itself: checked below
                act_on(target, op)
        if aid in s and s._acts[aid].state is not ActivationState.REMOVED:
            check(running=aid)
        if data.draw(st.integers(0, 9), label="remove itself") == 0:
            act_on(aid, "remove")

    for _ in range(data.draw(st.integers(1, 30), label="steps")):
        for target, op in data.draw(st.lists(ops, max_size=3), label="outside"):
            act_on(target, op)
        check()
        s.run_once(execute, clock)
        check()
    for aid in acts:
        s.release(aid)
    s.run_until_idle(lambda aid, msg: done.append(msg.payload[0]["uid"]), clock)
    check()
    assert sorted(done) == enqueued and s.backlog == 0  # nothing lost, nothing run twice
