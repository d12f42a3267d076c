"""Mailbox, RunQueue and DeadlineRunQueue: order, conservation and watermark barriers, property-based."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors.scheduling import Mailbox, Message, PriorityContext, RunQueue
from cameo_actors.scheduling.queues import LATE_SLACK_FLOOR, DeadlineRunQueue


def _msg(uid: int, key: float, lp: float = 0.0, watermark: bool = False) -> Message:
    m = Message(
        "act",
        0,
        float(uid) if watermark else [{"uid": uid}],
        watermark,
        PriorityContext("df", "t", 0.0, local_priority=lp),
    )
    m.key = key
    m.seq = uid
    return m


def _uid(m: Message) -> int:
    return int(m.payload) if m.is_watermark else m.payload[0]["uid"]


# -- RunQueue ------------------------------------------------------------------------

rq_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 9), st.integers(0, 15)),
        st.tuples(st.just("pop"), st.just(0), st.just(0)),
        st.tuples(st.just("remove"), st.integers(0, 9), st.just(0)),
    ),
    max_size=200,
)


@given(rq_ops)
@settings(max_examples=300)
def test_run_queue_pops_in_key_order_and_loses_nothing(ops: list[tuple[str, int, int]]) -> None:
    rq = RunQueue()
    model: dict[str, tuple[int, int]] = {}  # id -> (key, push order)
    order = 0
    for op, i, key in ops:
        aid = f"a{i}"
        if op == "push":
            if aid not in model or model[aid][0] != key:  # same key keeps its place
                order += 1
                model[aid] = (key, order)
            rq.push(aid, key)
        elif op == "remove":
            assert rq.remove(aid) == (aid in model)
            model.pop(aid, None)
        elif model:
            expect = min(model, key=lambda a: model[a])
            assert rq.peek() == (expect, model[expect][0])
            assert rq.pop() == (expect, model[expect][0])
            del model[expect]
        else:
            assert rq.peek() is None and rq.peek_key() is None
            with pytest.raises(IndexError):
                rq.pop()
        assert len(rq) == len(model)
        for a, (k, _) in model.items():
            assert a in rq and rq.key_of(a) == k
    drained = []
    while rq:
        drained.append(rq.pop())
    assert drained == sorted(((a, k) for a, (k, _) in model.items()), key=lambda x: model[x[0]])


# -- DeadlineRunQueue -------------------------------------------------------------------

GRACE = {f"a{i}": float(g) for i, g in enumerate((50, 1000, 50, 1000, 200))}
deadline_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 4), st.integers(0, 3000)),
        st.tuples(st.just("advance"), st.just(0), st.integers(0, 300)),
        st.tuples(st.just("pop"), st.just(0), st.just(0)),
        st.tuples(st.just("remove"), st.integers(0, 4), st.just(0)),
    ),
    max_size=150,
)


@given(deadline_ops)
@settings(max_examples=300)
def test_deadline_run_queue_runs_what_is_due_first(ops: list[tuple[str, int, int]]) -> None:
    """Due = the deadline, or once it has passed the deadline + target, but never before
    now + the floor's share of the target; pops in due order."""
    rq = DeadlineRunQueue(GRACE.__getitem__)
    model: dict[str, float] = {}
    now = 0.0
    rq.advance(now)

    def due(aid: str) -> float:
        if model[aid] >= now:
            return model[aid]
        return max(model[aid] + GRACE[aid], now + LATE_SLACK_FLOOR * GRACE[aid])

    for op, i, n in ops:
        aid = f"a{i}"
        if op == "push":
            model[aid] = float(n)
            rq.push(aid, float(n))
        elif op == "advance":
            now += n
            rq.advance(now)
        elif op == "remove":
            assert rq.remove(aid) == (aid in model)
            model.pop(aid, None)
        elif model:
            best = min(due(a) for a in model)
            assert due(rq.peek()[0]) == best  # type: ignore[index]
            got, key = rq.pop()
            assert due(got) == best and key == model.pop(got)
        else:
            assert rq.peek() is None
        assert len(rq) == len(model)
        for a in GRACE:  # outranks agrees with the model for every activation
            if a not in model:
                others = [due(b) for b in model]
                if others:
                    model[a] = 1500.0
                    assert rq.outranks(a, 1500.0) == (min(others) < due(a))
                    del model[a]


def test_an_overdue_backlog_does_not_delay_fresh_work_of_another_tenant() -> None:
    from cameo_actors.clock import FakeClock
    from cameo_actors.scheduling import Scheduler

    clock = FakeClock(0.0)
    s = Scheduler("cameo", quantum_ms=0.0)
    s.add_activation("bulk", dataflow="bulk", tenant="b", latency_target_ms=1000.0)
    s.add_activation("alerts", dataflow="alerts", tenant="a", latency_target_ms=50.0)
    for i in range(100):  # 100 ms of bulk work, ingested long ago: late by 4 s by now
        s.enqueue(Message.ingress("bulk", [i], dataflow="bulk", tenant="b", ingest_ms=0.0), 0.0)
    clock.set(5_000.0)
    s.enqueue(Message.ingress("alerts", ["x"], dataflow="alerts", tenant="a", ingest_ms=5_000.0), 5_000.0)
    order: list[str] = []
    s.run_until_idle(lambda aid, m: (order.append(aid), clock.advance(1.0)), clock)
    # However late the backlog, it is due no sooner than 100 ms from now: the alert first.
    assert order[0] == "alerts" and order.count("bulk") == 100  # and bulk is not dropped
    assert s.stats.overdue >= 1


def test_a_late_backlog_of_a_loose_target_is_not_starved_by_fresh_work_of_a_tight_one() -> None:
    # Two bulk tenants, 1 s and 4 s: the 4 s one's backlog is late by 5 s; the 1 s one has
    # fresh work due in 900 ms. A slack of one target from now kept the late one behind all
    # such work for good; its slack shrinking as it ages lets it run first.
    rq = DeadlineRunQueue({"fresh": 1000.0, "late": 4000.0}.__getitem__)
    rq.advance(0.0)
    rq.push("late", 0.0)
    rq.advance(5_000.0)
    rq.push("fresh", 5_000.0 + 900.0)
    assert rq.peek() == ("late", 0.0) and rq.outranks("fresh", 5_900.0)
    assert not rq.outranks("late", 0.0)
    assert [rq.pop()[0] for _ in range(2)] == ["late", "fresh"] and not rq


def test_a_slack_floor_of_one_target_keeps_late_work_behind_everything_due_within_it() -> None:
    # late_slack_floor=1.0: late work is due one target from now, however late (the rule
    # before): the 4 s backlog waits behind fresh work due in 900 ms.
    from cameo_actors.clock import FakeClock
    from cameo_actors.scheduling import Scheduler

    s = Scheduler("cameo", quantum_ms=0.0, policy_params={"late_slack_floor": 1.0})
    s.add_activation("late", dataflow="late", tenant="a", latency_target_ms=4000.0)
    s.add_activation("fresh", dataflow="fresh", tenant="b", latency_target_ms=1000.0)
    s.enqueue(Message.ingress("late", [1], dataflow="late", tenant="a", ingest_ms=0.0), 0.0)
    s.enqueue(Message.ingress("fresh", [1], dataflow="fresh", tenant="b", ingest_ms=9_000.0), 9_000.0)
    order: list[str] = []
    s.run_until_idle(lambda aid, m: order.append(aid), FakeClock(9_000.0))
    assert order == ["fresh", "late"]
    with pytest.raises(ValueError, match="late_slack_floor must be in"):
        Scheduler("cameo", policy_params={"late_slack_floor": 0.0})


def test_run_queue_stays_compact_under_many_updates() -> None:
    rq = RunQueue()
    n = 10_000
    for round_ in range(5):
        for i in range(n):
            rq.push(f"a{i}", (i * 7919 + round_) % n)
    assert len(rq) == n
    assert len(rq._heap) <= 2 * n + 65  # dead entries are compacted away
    keys = [rq.pop()[1] for _ in range(n)]
    assert keys == sorted(keys)


def test_run_queue_breaks_ties_by_queueing_order() -> None:
    rq = RunQueue()
    for a in "abc":
        rq.push(a, 1.0)
    aid, key = rq.pop()
    rq.push(aid, key)  # re-queued after its slice: goes behind equals
    assert [rq.pop()[0] for _ in range(3)] == ["b", "c", "a"]


# -- Mailbox -------------------------------------------------------------------------

mb_ops = st.lists(
    st.one_of(
        st.tuples(st.just("data"), st.integers(0, 3), st.integers(0, 50)),
        st.tuples(st.just("wm"), st.just(0), st.integers(0, 50)),
        st.tuples(st.just("pop"), st.just(0), st.just(0)),
    ),
    max_size=200,
)


@given(mb_ops)
@settings(max_examples=300)
def test_mailbox_order_urgency_barriers_and_conservation(ops: list[tuple[str, int, int]]) -> None:
    mb = Mailbox()
    model: list[tuple[int, float, int, Message]] = []  # (epoch, lp, uid, msg)
    epoch = 0
    uid = 0
    put_uids: list[int] = []
    kinds: dict[int, bool] = {}  # uid -> is watermark
    popped: list[int] = []
    for op, lp, key in ops:
        if op in ("data", "wm"):
            uid += 1
            wm = op == "wm"
            m = _msg(uid, float(key), float(lp), wm)
            mb.put(m)
            model.append((epoch, math.inf if wm else float(lp), uid, m))
            epoch += wm
            put_uids.append(uid)
            kinds[uid] = wm
        elif model:
            expect = min(model, key=lambda e: e[:3])
            assert mb.peek() is expect[3]
            got = mb.pop()
            assert got is expect[3]
            model.remove(expect)
            popped.append(_uid(got))
        else:
            with pytest.raises(IndexError):
                mb.pop()
        assert len(mb) == len(model)
        assert mb.urgent_key() == (min(e[3].key for e in model) if model else None)
    rest = mb.clear()
    assert [_uid(m) for m in rest] == [e[2] for e in sorted(model, key=lambda e: e[:3])]
    popped += [_uid(m) for m in rest]
    # nothing lost or duplicated
    assert sorted(popped) == put_uids
    # barriers: data never passes an earlier watermark, a watermark never passes earlier data
    position = {u: i for i, u in enumerate(popped)}
    for u in put_uids:
        for v in put_uids:
            if v < u and (kinds[u] or kinds[v]):
                assert position[v] < position[u], (v, u)


def test_mailbox_orders_by_window_between_watermarks() -> None:
    mb = Mailbox()
    for uid, lp in ((1, 5), (2, 3), (3, 4)):
        mb.put(_msg(uid, 0.0, lp))
    mb.put(_msg(4, 0.0, watermark=True))
    mb.put(_msg(5, 0.0, lp=0))  # an earlier window after the watermark still waits
    assert [_uid(mb.pop()) for _ in range(5)] == [2, 3, 1, 4, 5]


def test_mailbox_rejects_nan_local_priority() -> None:
    with pytest.raises(ValueError, match="local_priority"):
        Mailbox().put(_msg(1, 0.0, lp=math.nan))


def test_mailbox_lazy_deletion_stays_bounded() -> None:
    mb = Mailbox()
    for i in range(1000):
        mb.put(_msg(i, float(1000 - i)))  # most urgent last: urgent heap keeps stale tops
        if i % 2:
            mb.pop()
    assert len(mb._urgent) <= 2 * len(mb) + 33
    assert mb.urgent_key() == min(e[3].key for e in mb._order)


def test_a_message_put_first_comes_before_every_pending_one() -> None:
    mb = Mailbox()
    for m in (_msg(1, 5.0, lp=2.0), _msg(2, 4.0, watermark=True), _msg(3, 3.0, lp=1.0)):
        mb.put(m)
    mb.put(_msg(4, 9.0, watermark=True), first=True)
    mb.put(_msg(5, 9.0, watermark=True), first=True)  # put first later: first again
    mb.put(_msg(6, 1.0, lp=0.0))
    assert [_uid(mb.pop()) for _ in range(len(mb))] == [5, 4, 1, 2, 6, 3]  # 6, 3: by window
