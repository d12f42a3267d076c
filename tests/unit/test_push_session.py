"""The reliable push (`client/push.py`) without Ray: a `PushSession` over in-process
fakes of its two collaborators that behave like executors and the controller's records.

The fakes (`Pool`, and its two faces `FakeCalls` and `FakePlacements`):

- a source applies a client's calls in sequence order, once, as `Ingress._in_order`
  does: a call applied already is dropped, one that comes early is parked until the
  ones before it came, and a call is answered once taken in (parked or applied, as the
  executor answers once the call is in the source's ingress log) with the events
  waiting at its source;
- a call is taken in only when time passes for it: when the session waits for it
  (`answered` with a timeout, `finish`) or a test delivers it; several waited for are
  taken in in order, or in a random order (Ray may reorder calls);
- an executor can die (`kill`): its calls not answered fail with RuntimeUnavailable,
  some of them after they were taken in (the answer was lost), and its dataflows are
  restored in place (`RECOVERING` until the session waits for the change); the
  sources keep what they took in, as a restore replays the ingress log;
- an executor can be slow (never answers), or retired: its sources move to another
  executor, its calls never answer and no call can be made to it any more;
- the records: "deployment", "hosts" (activation -> executor), "state", cached for a
  second of (fake) time as the handle's `Dataflows` caches them; `await_change` takes a
  moment and raises DataflowEnded for an ended dataflow.

Time is a fake clock put in the place of the module's `time`: it moves when the session
waits (a wait that returns fewer calls than asked lasted its whole timeout).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors.clock import FakeClock
from cameo_actors.runtime._private.client import push
from cameo_actors.runtime._private.client.push import (
    MAX_IN_FLIGHT,
    MOVED_CHECK_S,
    PRESSED_SHARE,
    PushSession,
)
from cameo_actors.runtime.boundary import (
    CALL_TIMEOUT_S,
    CANCELLED,
    RECOVERING,
    RUNNING,
    DataflowInfo,
)
from cameo_actors.runtime.exceptions import (
    DataflowEnded,
    DataflowNotFound,
    NotHosted,
    RuntimeUnavailable,
)

INGRESS_EVENTS = 1_000
RECOVERY_S = 5.0
CLIENT = "writer"
#: What the handle's `Dataflows` waits in `await_change`, and how long it trusts a record.
CHANGE_WAIT_S = 0.1
DESCRIBE_TTL_S = 1.0
PRESSING = int(PRESSED_SHARE * INGRESS_EVENTS)  # events waiting that press an executor


class Monotonic:
    """Stands in for the `time` module of `push.py`: a fake clock, in seconds."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def monotonic(self) -> float:
        return self.clock.now_ms() / 1000.0

    def advance(self, s: float) -> None:
        self.clock.advance(s * 1000.0)


@dataclass(eq=False)
class Call:
    """An ingest call: `outcome` is None until it is answered (the events waiting at its
    source) or failed (the error its answer raises)."""

    host: int
    client: str
    seq: int
    target: str
    blob: bytes
    outcome: int | RuntimeUnavailable | None = None


@dataclass
class Source:
    """A source activation of one deployment, taking in calls as `Ingress._in_order`."""

    positions: dict[str, int] = field(default_factory=dict)  # client -> the next seq
    parked: dict[str, dict[int, bytes]] = field(default_factory=dict)
    applied: list[bytes] = field(default_factory=list)
    waiting: int = 0  # the events waiting here, which an answer reports

    def take(self, client: str, seq: int, blob: bytes) -> None:
        nxt = self.positions.get(client, 0)
        if seq != nxt:
            if seq > nxt:  # early: parked until the ones before it came
                self.parked.setdefault(client, {})[seq] = blob
            return  # applied already: dropped
        self.applied.append(blob)
        seq += 1
        parked = self.parked.get(client, {})
        while seq in parked:
            self.applied.append(parked.pop(seq))
            seq += 1
        self.positions[client] = seq


@dataclass
class Deployed:
    """A dataflow's record, and its sources (those of this deployment)."""

    deployment: str
    hosts: dict[str, int]
    sources: dict[str, Source]
    state: str = RUNNING


def dataflow_of(target: str) -> str:
    return target.split("/", 1)[0]


class Pool:
    """Executors hosting the sources of dataflows, and the controller's records.

    Args:
        clock: the session's time.
        rng: the order calls waited for are taken in (None: the order they were sent).
    """

    def __init__(self, clock: Monotonic, rng: random.Random | None = None) -> None:
        self.clock, self.rng = clock, rng
        self.dataflows: dict[str, Deployed] = {}
        self.calls: list[Call] = []
        #: what the session did, in order: ("send", host, target, seq),
        #: ("await_change", name), ("describe", name, refresh)
        self.log: list[tuple[Any, ...]] = []
        #: after each call made, the calls not answered at its executor
        self.in_flight_at_send: list[int] = []
        self.slow: set[int] = set()
        self.retired: set[int] = set()
        self.broken_until: dict[int, float] = {}  # executor -> until when its calls fail
        self._deployed = 0
        self.placements = FakePlacements(self)
        self.ingest = FakeCalls(self)

    # -- what happens to the pool ---------------------------------------------------------
    def deploy(self, name: str, hosts: dict[str, int]) -> str:
        """Deploy `name` (again: a new deployment, its sources from scratch); the handle
        that deploys forgets its record of it."""
        self._deployed += 1
        deployment = f"{name}-{self._deployed}"
        self.dataflows[name] = Deployed(deployment, dict(hosts), {t: Source() for t in hosts})
        self.placements.cached.pop(name, None)
        return deployment

    def end(self, name: str, *, record: bool = True) -> None:
        """Cancel `name`: its calls not answered fail (the activations are gone); its
        record stays (DataflowEnded) or goes too (DataflowNotFound)."""
        self.dataflows[name].state = CANCELLED
        for call in self.unanswered():
            if dataflow_of(call.target) == name:
                call.outcome = NotHosted(f"{call.target} ended")
        if not record:
            del self.dataflows[name]

    def kill(self, host: int, taken: Callable[[Call], bool] = lambda call: False) -> None:
        """Executor `host` dies: its calls not answered fail (those `taken` after they
        were taken in), and its dataflows are restored in place."""
        for call in self.unanswered(host):
            if taken(call):
                self._take(call)
            call.outcome = RuntimeUnavailable(f"executor {host} died")
        for df in self.dataflows.values():
            if df.state == RUNNING and host in df.hosts.values():
                df.state = RECOVERING

    def fail_one(self, call: Call, taken: bool) -> None:
        """One call fails (a restart between two calls), perhaps after it was taken in."""
        if taken:
            self._take(call)
        call.outcome = RuntimeUnavailable(f"executor {call.host} restarted")

    def retire(self, host: int, to: int) -> None:
        """Executor `host` is retired: its sources move to `to` with what they took in;
        its calls never answer."""
        self.retired.add(host)
        for df in self.dataflows.values():
            for target, at in df.hosts.items():
                if at == host:
                    df.hosts[target] = to

    def source(self, target: str) -> Source:
        return self.dataflows[dataflow_of(target)].sources[target]

    def unanswered(self, host: int | None = None) -> list[Call]:
        return [c for c in self.calls if c.outcome is None and host in (None, c.host)]

    def deliver(self, call: Call) -> None:
        """Time passes for `call`: it is taken in and answered, or fails, or hangs."""
        if call.outcome is not None or call.host in self.slow or call.host in self.retired:
            return
        if self.clock.monotonic() < self.broken_until.get(call.host, float("-inf")):
            call.outcome = RuntimeUnavailable(f"executor {call.host} died")
            return
        df = self.dataflows.get(dataflow_of(call.target))
        if df is None or df.state != RUNNING or df.hosts.get(call.target) != call.host:
            call.outcome = NotHosted(f"executor {call.host} does not host {call.target} now")
            return
        self._take(call)
        call.outcome = df.sources[call.target].waiting

    def _take(self, call: Call) -> None:
        df = self.dataflows.get(dataflow_of(call.target))
        if df is not None and df.state != CANCELLED and df.hosts.get(call.target) == call.host:
            df.sources[call.target].take(call.client, call.seq, call.blob)

    def resends(self, since: int) -> list[tuple[Any, ...]]:
        return [e for e in self.log[since:] if e[0] == "send"]


class FakeCalls:
    """`push.IngestCalls` over the pool."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    def send(self, host: int, client: str, seq: int, target: str, blob: bytes) -> Call:
        self.pool.log.append(("send", host, target, seq))
        if host in self.pool.retired:  # as the handle's `Dataflows.executor`
            raise RuntimeUnavailable(f"executor {host} was retired")
        call = Call(host, client, seq, target, blob)
        self.pool.calls.append(call)
        self.pool.in_flight_at_send.append(len(self.pool.unanswered(host)))
        return call

    def answered(self, calls: Sequence[Any], at_least: int, timeout_s: float) -> list[Any]:
        """As `ray.wait`: at most `at_least` answered calls, in the order given; fewer
        once `timeout_s` passed."""
        mine = cast(list[Call], list(calls))
        at_least = min(at_least, len(mine))
        if timeout_s > 0:
            order = list(mine)
            if self.pool.rng is not None:
                self.pool.rng.shuffle(order)
            for call in order:
                if sum(c.outcome is not None for c in mine) >= at_least:
                    break
                self.pool.deliver(call)
        done = [c for c in mine if c.outcome is not None]
        if len(done) < at_least:
            self.pool.clock.advance(timeout_s)
        return list(done[:at_least])

    def answer(self, call: Any) -> int:
        outcome = cast(Call, call).outcome
        if outcome is None:
            raise AssertionError(f"the answer of a call not answered: {call}")
        if isinstance(outcome, RuntimeUnavailable):
            raise outcome
        return outcome

    def finish(self, calls: Sequence[Any]) -> None:
        for call in calls:
            self.pool.deliver(call)
        if any(c.outcome is None for c in calls):  # waited for them up to the timeout
            self.pool.clock.advance(CALL_TIMEOUT_S)


class FakePlacements:
    """`push.Placements` over the pool: the records, cached as the handle caches them."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.cached: dict[str, tuple[float, DataflowInfo]] = {}

    def describe(self, name: str, *, refresh: bool = False) -> DataflowInfo:
        self.pool.log.append(("describe", name, refresh))
        now = self.pool.clock.monotonic()
        cached = self.cached.get(name)
        if refresh or cached is None or now - cached[0] > DESCRIBE_TTL_S:
            df = self.pool.dataflows.get(name)
            if df is None:
                raise DataflowNotFound(name, list(self.pool.dataflows))
            info = {"name": name, "deployment": df.deployment, "hosts": dict(df.hosts),
                    "state": df.state, "released": df.state == CANCELLED}
            cached = self.cached[name] = (now, cast(DataflowInfo, info))
        return cached[1]

    def await_recovered(self, name: str) -> DataflowInfo:
        df = self.pool.dataflows.get(name)
        if df is not None and df.state == RECOVERING:
            df.state = RUNNING
        return self.describe(name, refresh=True)

    def await_change(self, name: str) -> None:
        self.pool.log.append(("await_change", name))
        self.pool.clock.advance(CHANGE_WAIT_S)
        info = self.describe(name, refresh=True)
        if info["state"] == CANCELLED:
            raise DataflowEnded(name, info["state"])
        df = self.pool.dataflows[name]
        if df.state == RECOVERING:  # restored meanwhile
            df.state = RUNNING

    def retired(self, index: int) -> bool:
        return index in self.pool.retired


@contextmanager
def fake_time() -> Any:
    """The session's time: a fake clock in the place of `push.time`."""
    clock = Monotonic(FakeClock())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(push, "time", clock)
        yield clock


@pytest.fixture()
def clock() -> Any:
    with fake_time() as c:
        yield c


def session_on(pool: Pool) -> PushSession:
    return PushSession(CLIENT, pool.ingest, pool.placements, ingress_events=INGRESS_EVENTS,
                       recovery_timeout_s=RECOVERY_S)


def pool_of(clock: Monotonic, placed: dict[str, dict[str, int]],
            rng: random.Random | None = None) -> tuple[Pool, PushSession]:
    pool = Pool(clock, rng)
    for name, hosts in placed.items():
        pool.deploy(name, hosts)
    return pool, session_on(pool)


class Writer:
    """Pushes numbered events and remembers them, per source activation."""

    def __init__(self, session: PushSession) -> None:
        self.session = session
        self.pushed: dict[str, list[bytes]] = {}

    def push(self, target: str, n: int = 1) -> None:
        for _ in range(n):
            sent = self.pushed.setdefault(target, [])
            blob = f"{target}#{len(sent)}".encode()
            sent.append(blob)
            self.session.send(dataflow_of(target), target, blob)


def all_settled(pool: Pool, session: PushSession) -> bool:
    return not any(session.in_flight.values()) and not any(
        c.outcome is None for c in pool.calls if c.host not in pool.retired)


# -- (1) order and exactly-once ------------------------------------------------------------
TARGETS = ["A/s/0", "A/s/1", "B/s/0", "B/s/1"]
_ops = st.lists(st.one_of(
    st.tuples(st.just("push"), st.integers(0, 3), st.integers(1, 10)),
    st.tuples(st.just("deliver"), st.integers(0, 1), st.integers(1, 6)),
    st.tuples(st.just("kill"), st.integers(0, 1)),
    st.tuples(st.just("fail_one"), st.integers(0, 1), st.booleans()),
    st.tuples(st.just("press"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("flush")),
), max_size=50)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops, placement=st.lists(st.integers(0, 1), min_size=4, max_size=4),
       seed=st.integers(0, 2**32 - 1))
def test_every_event_is_applied_once_and_in_push_order_through_failures(
        ops: list[tuple[Any, ...]], placement: list[int], seed: int) -> None:
    """Pushes, calls taken in in any order, executors dying (restored in place) and
    single calls failing, sources pressed: each source applies exactly what was pushed
    to it, in order (a prefix of it all along), and no executor has more than
    MAX_IN_FLIGHT calls in flight. (Sources that move are the tests of (5).)"""
    rng = random.Random(seed)
    hosts = dict(zip(TARGETS, placement, strict=True))
    with fake_time() as clock:
        pool, session = pool_of(clock, {
            name: {t: h for t, h in hosts.items() if dataflow_of(t) == name}
            for name in ("A", "B")}, rng)
        writer = Writer(session)
        for op in ops:
            if op[0] == "push":
                writer.push(TARGETS[op[1]], op[2])
            elif op[0] == "deliver":  # the executor takes in some calls, in any order
                calls = pool.unanswered(op[1])
                for call in rng.sample(calls, min(op[2], len(calls))):
                    pool.deliver(call)
            elif op[0] == "kill":
                pool.kill(op[1], taken=lambda call: rng.random() < 0.5)
            elif op[0] == "fail_one":
                calls = pool.unanswered(op[1])
                if calls:
                    pool.fail_one(rng.choice(calls), taken=op[2])
            elif op[0] == "press":
                pool.source(TARGETS[op[1]]).waiting = PRESSING if op[2] else 0
            else:
                session.flush()
            for target in TARGETS:  # never out of order, never twice
                applied = pool.source(target).applied
                assert applied == writer.pushed.get(target, [])[:len(applied)], target
            assert max(pool.in_flight_at_send, default=0) <= MAX_IN_FLIGHT
        session.flush()
        for target in TARGETS:
            assert pool.source(target).applied == writer.pushed.get(target, []), target
        assert all_settled(pool, session)


# -- (2) backpressure ----------------------------------------------------------------------
def test_at_most_max_in_flight_per_executor_and_one_while_it_is_pressed(clock: Monotonic) -> None:
    pool, session = pool_of(clock, {"A": {"A/s/0": 0}, "B": {"B/s/0": 1}})
    writer = Writer(session)
    writer.push("A/s/0", 20)
    assert pool.in_flight_at_send == [*range(1, MAX_IN_FLIGHT + 1),
                                      *[MAX_IN_FLIGHT] * (20 - MAX_IN_FLIGHT)]

    # Events waiting at the source (exactly the share) press its executor: the push that
    # learns it (from the oldest call's answer) still sends with the others in flight;
    # each one after it waits for every call before its own.
    pool.source("A/s/0").waiting = PRESSING
    pool.in_flight_at_send = []
    writer.push("A/s/0", 10)
    writer.push("B/s/0", 3)  # another executor is not pressed
    assert pool.in_flight_at_send == [MAX_IN_FLIGHT, *[1] * 9, 1, 2, 3]

    # Answers below the share: the executor takes MAX_IN_FLIGHT again.
    pool.source("A/s/0").waiting = PRESSING - 1
    pool.in_flight_at_send = []
    writer.push("A/s/0", 12)
    assert pool.in_flight_at_send == [*range(1, MAX_IN_FLIGHT + 1), *[MAX_IN_FLIGHT] * 4]
    session.flush()
    assert all(pool.source(t).applied == writer.pushed[t] for t in writer.pushed)


def test_a_push_takes_the_answered_calls_first_so_a_failure_shows_at_once(
        clock: Monotonic) -> None:
    pool, session = pool_of(clock, {"A": {"A/s/0": 0}})
    writer = Writer(session)
    writer.push("A/s/0", 3)
    pool.fail_one(pool.unanswered(0)[0], taken=False)  # the first call failed
    mark = len(pool.log)
    writer.push("A/s/0")  # far from full, yet the failure is dealt with now: no gap left
    assert [e[3] for e in pool.resends(mark)] == [0, 1, 2, 3]
    assert pool.source("A/s/0").applied == writer.pushed["A/s/0"][:3]


# -- (3) a failure: every call not answered, again, in order, after the change -------------------
def test_a_failure_sends_every_unanswered_call_again_in_order_after_the_change(
        clock: Monotonic) -> None:
    pool, session = pool_of(clock, {"A": {"A/s/0": 0, "A/s/1": 1}, "B": {"B/s/0": 0}})
    writer = Writer(session)
    for target in ["A/s/0", "B/s/0", "A/s/0", "A/s/0", "B/s/0", "A/s/0"]:
        writer.push(target)
    at_0 = pool.unanswered(0)
    pool.deliver(at_0[2])  # A/s/0 seq 1 came early: parked, answered
    pool.kill(0, taken=lambda call: call is at_0[3])  # seq 2 taken in, its answer lost
    assert pool.dataflows["A"].state == RECOVERING
    mark = len(pool.log)
    session.flush()

    after = pool.log[mark:]
    first_send = next(i for i, e in enumerate(after) if e[0] == "send")
    assert {("await_change", "A"), ("await_change", "B")} <= set(after[:first_send])
    assert pool.resends(mark) == [("send", 0, "A/s/0", 0), ("send", 0, "A/s/0", 1),
                                  ("send", 0, "A/s/0", 2), ("send", 0, "A/s/0", 3),
                                  ("send", 0, "B/s/0", 0), ("send", 0, "B/s/0", 1)]
    for target in ("A/s/0", "B/s/0"):
        assert pool.source(target).applied == writer.pushed[target]
    assert all_settled(pool, session)


def test_a_call_failed_on_a_recovering_dataflow_goes_again_once_it_runs(clock: Monotonic) -> None:
    # Executor 0 died: A, which has a source on executor 1 too, is restored as a whole, so
    # its call to executor 1 fails as well.
    pool, session = pool_of(clock, {"A": {"A/s/0": 0, "A/s/1": 1}})
    writer = Writer(session)
    writer.push("A/s/0", 2)
    writer.push("A/s/1", 2)
    pool.kill(0)
    for call in pool.unanswered(1):  # taken while A is being restored: not hosted
        pool.deliver(call)
    assert all(isinstance(c.outcome, RuntimeUnavailable) for c in pool.calls)
    session.flush()
    assert pool.dataflows["A"].state == RUNNING
    for target in ("A/s/0", "A/s/1"):
        assert pool.source(target).applied == writer.pushed[target]


# -- (4) a dataflow that ended meanwhile ----------------------------------------------------
@pytest.mark.parametrize("record", [True, False], ids=["ended", "gone"])
def test_calls_of_a_dataflow_that_ended_are_dropped_and_fail_no_other(clock: Monotonic,
                                                                      record: bool) -> None:
    pool, session = pool_of(clock, {"A": {"A/s/0": 0}, "B": {"B/s/0": 0}})
    writer = Writer(session)
    for target in ["A/s/0", "B/s/0", "A/s/0", "B/s/0", "B/s/0"]:
        writer.push(target)
    pool.deliver(pool.unanswered(0)[0])  # A's first call is in
    pool.end("A", record=record)
    mark = len(pool.log)
    session.flush()  # no error: A takes no more input, B's batches are in
    assert not [e for e in pool.resends(mark) if e[2].startswith("A/")]
    assert pool.source("B/s/0").applied == writer.pushed["B/s/0"]
    assert all_settled(pool, session)


# -- (5) a source moved off a retired executor -----------------------------------------------
def test_calls_to_a_retired_executor_go_where_their_source_moved(clock: Monotonic) -> None:
    pool, session = pool_of(clock, {"A": {"A/s/0": 0}, "B": {"B/s/0": 1}})
    writer = Writer(session)
    writer.push("A/s/0", 3)
    pool.retire(0, to=1)  # its calls hang; the record the handle has still says 0
    mark = len(pool.log)
    writer.push("A/s/0")  # to where the source is now
    assert pool.resends(mark) == [("send", 1, "A/s/0", 3)]
    session.flush()
    assert pool.resends(mark)[1:] == [("send", 1, "A/s/0", 0), ("send", 1, "A/s/0", 1),
                                      ("send", 1, "A/s/0", 2)]
    assert pool.source("A/s/0").applied == writer.pushed["A/s/0"]
    assert clock.monotonic() < 5 * MOVED_CHECK_S  # found moved, not waited out
    assert all_settled(pool, session)


def test_flush_settles_the_calls_moved_to_an_executor_it_settled_already(
        clock: Monotonic) -> None:
    """`flush` waits until every call was accepted: also those it sent again, while
    settling one executor, to another it had settled already."""
    pool, session = pool_of(clock, {"A": {"A/s/0": 0, "A/s/1": 1}})
    writer = Writer(session)
    writer.push("A/s/0")  # executor 0 first in the session's order
    writer.push("A/s/1")
    pool.retire(1, to=0)
    session.flush()  # settles 0, then finds A/s/1 moved from 1 to 0 and sends it there
    assert pool.source("A/s/1").applied == writer.pushed["A/s/1"]
    assert all_settled(pool, session)


# -- (6) deployed again ------------------------------------------------------------------------
def test_a_new_deployment_numbers_its_sources_from_zero_and_no_other(clock: Monotonic) -> None:
    pool, session = pool_of(clock, {"A": {"A/s/0": 0}, "B": {"B/s/0": 0}})
    writer = Writer(session)
    writer.push("A/s/0", 3)
    writer.push("B/s/0", 3)
    session.flush()
    pool.deploy("A", {"A/s/0": 1})  # a new deployment, elsewhere
    mark = len(pool.log)
    session.send("A", "A/s/0", b"again-0")
    session.send("A", "A/s/0", b"again-1")
    writer.push("B/s/0", 2)
    assert pool.resends(mark) == [("send", 1, "A/s/0", 0), ("send", 1, "A/s/0", 1),
                                  ("send", 0, "B/s/0", 3), ("send", 0, "B/s/0", 4)]
    session.flush()
    assert pool.source("A/s/0").applied == [b"again-0", b"again-1"]
    assert pool.source("B/s/0").applied == writer.pushed["B/s/0"]


def test_forget_numbers_a_dataflows_sources_from_zero(clock: Monotonic) -> None:
    pool, session = pool_of(clock, {"A": {"A/s/0": 0}, "AB": {"AB/s/0": 0}})
    Writer(session).push("A/s/0", 2)
    Writer(session).push("AB/s/0", 2)
    session.forget("A")
    mark = len(pool.log)
    session.send("A", "A/s/0", b"x")
    session.send("AB", "AB/s/0", b"y")
    assert [e[3] for e in pool.resends(mark)] == [0, 2]


def test_calls_of_an_earlier_deployment_are_not_applied_to_the_new_one(clock: Monotonic) -> None:
    """A call to a deployment that ended is dropped, also when the dataflow was deployed
    again under its name meanwhile: its number counts in the old numbering."""
    pool, session = pool_of(clock, {"A": {"A/s/0": 0}})
    session.send("A", "A/s/0", b"old")  # not answered yet when A is cancelled
    pool.end("A")  # the call fails: the activation is gone
    pool.deploy("A", {"A/s/0": 0})
    session.send("A", "A/s/0", b"new")
    session.flush()
    assert pool.source("A/s/0").applied == [b"new"]


# -- (7) flush ---------------------------------------------------------------------------------
def test_flush_settles_every_call(clock: Monotonic) -> None:
    pool, session = pool_of(clock, {"A": {"A/s/0": 0, "A/s/1": 1}, "B": {"B/s/0": 1}},
                            random.Random(7))
    writer = Writer(session)
    for i in range(30):
        writer.push(["A/s/0", "A/s/1", "B/s/0"][i % 3])
    assert pool.unanswered()
    pool.fail_one(pool.unanswered(1)[-1], taken=False)
    session.flush()
    assert all_settled(pool, session)
    assert all(pool.source(t).applied == writer.pushed[t] for t in writer.pushed)
    mark = len(pool.log)
    session.flush()  # nothing left: nothing sent
    assert not pool.resends(mark)


# -- (8) giving up ----------------------------------------------------------------------------
def test_a_failure_is_waited_out_up_to_the_recovery_timeout(clock: Monotonic) -> None:
    pool, session = pool_of(clock, {"A": {"A/s/0": 0}})
    writer = Writer(session)
    writer.push("A/s/0", 2)
    pool.broken_until[0] = RECOVERY_S - 1.0  # back within the timeout
    session.flush()
    assert pool.source("A/s/0").applied == writer.pushed["A/s/0"]

    pool.broken_until[0] = float("inf")  # never back
    writer.push("A/s/0")
    began = clock.monotonic()
    with pytest.raises(RuntimeUnavailable, match="within 5 s of a failure"):
        session.flush()
    assert RECOVERY_S < clock.monotonic() - began <= RECOVERY_S + 2 * CHANGE_WAIT_S


def test_an_executor_that_answers_nothing_in_the_call_timeout_fails_the_push(
        clock: Monotonic) -> None:
    pool, session = pool_of(clock, {"A": {"A/s/0": 0}})
    writer = Writer(session)
    pool.slow.add(0)
    writer.push("A/s/0", MAX_IN_FLIGHT)  # room for these
    assert clock.monotonic() == 0.0
    with pytest.raises(RuntimeUnavailable, match="accepted no batch in 120 s"):
        writer.push("A/s/0")  # waits for the oldest: never answered, its source stayed
    assert CALL_TIMEOUT_S < clock.monotonic() <= CALL_TIMEOUT_S + MOVED_CHECK_S
    checks = [e for e in pool.log if e == ("describe", "A", True)]
    assert len(checks) >= CALL_TIMEOUT_S / MOVED_CHECK_S - 1  # it kept asking if A moved
    with pytest.raises(RuntimeUnavailable, match="accepted no batch"):
        session.flush()


def test_a_push_that_gave_up_leaves_no_gap_before_the_next_ones(clock: Monotonic) -> None:
    """A push that raised sent nothing: the calls after it must not wait on its number."""
    pool, session = pool_of(clock, {"A": {"A/s/0": 0}})
    pool.slow.add(0)
    session.send("A", "A/s/0", b"0")
    with pytest.raises(RuntimeUnavailable):
        for i in range(1, MAX_IN_FLIGHT + 1):
            session.send("A", "A/s/0", str(i).encode())  # the last waits in vain: gives up
    pool.slow.discard(0)  # the executor answers again
    session.send("A", "A/s/0", b"after")
    session.flush()
    applied = pool.source("A/s/0").applied
    assert applied[-1:] == [b"after"], applied
