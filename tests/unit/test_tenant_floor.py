"""Tenant floors on a fake clock: under overload every tenant gets its weighted share of
executor time whatever its target, tenants within their share keep their deadlines, and
without contention nothing changes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors.clock import FakeClock
from cameo_actors.scheduling import Message, Scheduler
from cameo_actors.scheduling.floor import TenantFloor


@dataclass
class Tenant:
    name: str
    target_ms: float
    load: float  # offered executor time per ms of wall time (1.0: a whole executor)
    cost_ms: float = 2.0
    weight: float = 1.0
    busy_ms: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def period_ms(self) -> float:
        return self.cost_ms / self.load


def simulate(tenants: list[Tenant], floor_slack_ms: float | None, run_ms: float = 10_000.0,
             policy: str = "cameo", measure_from_ms: float = 1_000.0) -> list[str]:
    """Periodic arrivals of `cost_ms` messages per tenant (one activation each) on one
    scheduler for `run_ms` of fake time; returns the order in which tenants ran."""
    clock = FakeClock(0.0)
    s = Scheduler(policy, quantum_ms=5.0, floor_slack_ms=floor_slack_ms)
    for t in tenants:
        s.add_activation(t.name, dataflow=t.name, tenant=t.name, latency_target_ms=t.target_ms,
                         weight=t.weight)
    due = {t.name: 0.0 for t in tenants}
    by_name = {t.name: t for t in tenants}
    order: list[str] = []

    def arrivals() -> None:
        now = clock.now_ms()
        for t in tenants:
            while due[t.name] <= now and due[t.name] < run_ms:
                s.enqueue(Message.ingress(t.name, [{"at": due[t.name]}], dataflow=t.name,
                                          tenant=t.name, ingest_ms=due[t.name]), now)
                due[t.name] += t.period_ms

    def execute(aid: str, msg: Message) -> None:
        t = by_name[aid]
        if clock.now_ms() >= measure_from_ms:
            t.busy_ms += t.cost_ms
        clock.advance(t.cost_ms)
        at = msg.payload[0]["at"]
        if at >= measure_from_ms:
            t.latencies.append(clock.now_ms() - at)
        order.append(aid)

    while clock.now_ms() < run_ms:
        arrivals()
        if s.run_once(execute, clock, poll=arrivals) is None:
            nxt = min(due.values())
            if nxt >= run_ms:
                break
            clock.advance(max(0.0, nxt - clock.now_ms()))
    return order


def within(t: Tenant) -> float:
    return sum(1 for x in t.latencies if x <= t.target_ms) / max(1, len(t.latencies))


def max_min_shares(tenants: list[Tenant], capacity: float = 1.0) -> dict[str, float]:
    """Weighted max-min fair shares of `capacity` for the tenants' offered loads."""
    left, todo, out = capacity, list(tenants), {}
    while todo:
        unit = left / sum(t.weight for t in todo)
        fits = [t for t in todo if t.load <= unit * t.weight]
        if not fits:
            out.update({t.name: unit * t.weight for t in todo})
            break
        for t in fits:
            out[t.name] = t.load
            left -= t.load
            todo.remove(t)
    return out


def test_two_equal_tenants_offered_twice_the_capacity_each_get_half_whatever_their_targets() -> None:
    def run(slack: float | None) -> tuple[Tenant, Tenant]:
        # Offered together twice the executor; the tight tenant alone would fit.
        tight, loose = Tenant("tight", 50.0, 0.95), Tenant("loose", 3000.0, 1.05)
        simulate([tight, loose], slack)
        return tight, loose

    tight, loose = run(None)  # deadline order alone: the loose target starves
    assert loose.busy_ms < 0.1 * (tight.busy_ms + loose.busy_ms)
    tight, loose = run(50.0)
    total = tight.busy_ms + loose.busy_ms
    assert tight.busy_ms / total == pytest.approx(0.5, abs=0.03)
    assert loose.busy_ms / total == pytest.approx(0.5, abs=0.03)


def test_weights_divide_the_executor_under_overload() -> None:
    a, b = Tenant("a", 100.0, 1.0, weight=1.0), Tenant("b", 1000.0, 1.0, weight=3.0)
    simulate([a, b], 50.0)
    total = a.busy_ms + b.busy_ms
    assert b.busy_ms / total == pytest.approx(0.75, abs=0.03)


def test_a_latency_sensitive_tenant_within_its_share_keeps_its_deadlines_under_a_bulk_overload() -> None:
    alerts = Tenant("alerts", 20.0, 0.1, cost_ms=1.0)
    bulk = Tenant("bulk", 1000.0, 2.0, cost_ms=4.0)
    medium = Tenant("medium", 3000.0, 0.3)
    simulate([alerts, bulk, medium], 50.0)
    assert within(alerts) >= 0.99
    assert within(medium) >= 0.99  # 30% fits in its third: not starved by bulk's deadlines
    assert bulk.busy_ms > 0.5 * (alerts.busy_ms + bulk.busy_ms + medium.busy_ms)  # it gets the rest


def test_without_contention_the_floor_changes_nothing() -> None:
    def run(slack: float | None) -> list[str]:
        return simulate([Tenant("a", 50.0, 0.2), Tenant("b", 200.0, 0.3, cost_ms=3.0),
                         Tenant("c", 1000.0, 0.2, cost_ms=5.0)], slack, run_ms=5_000.0)

    assert run(50.0) == run(None)


@given(loads=st.lists(st.tuples(st.sampled_from([1.0, 2.0, 3.0]),         # weight
                                st.sampled_from([20.0, 100.0, 1000.0, 5000.0]),  # target
                                st.floats(0.05, 1.5),                     # offered load
                                st.sampled_from([1.0, 2.0, 5.0])),        # cost per message
                      min_size=2, max_size=4),
       policy=st.sampled_from(["cameo", "edf", "fifo"]))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_no_tenant_starves_under_overload(loads: list[tuple[float, float, float, float]],
                                          policy: str) -> None:
    tenants = [Tenant(f"t{i}", target, load, cost_ms=cost, weight=w)
               for i, (w, target, load, cost) in enumerate(loads)]
    simulate(tenants, 50.0, run_ms=6_000.0, policy=policy)
    measured = 5_000.0
    fair = max_min_shares(tenants)
    for t in tenants:
        # At least 80% of its max-min share of the executor (or of what it asked for).
        assert t.busy_ms / measured >= 0.8 * fair[t.name] - 0.01, (t, fair)


def test_debts_are_capped_and_cleared_when_the_executor_runs_out_of_work() -> None:
    demoted: list[str] = []
    f = TenantFloor(10.0, on_demote=demoted.append, on_promote=demoted.remove)
    f.set_weight("a", 1.0)
    f.set_weight("b", 1.0)
    f.queued("a")
    f.queued("b")
    for _ in range(5):
        f.queued("a")
        f.charge("a", 10.0)
    assert demoted == ["a"] and f.over_share_ms("a") == 20.0  # capped at two slacks
    f.charge("b", 1.0)
    f.charge("a", 1.0)
    f.idle()
    assert demoted == [] and f.over_share_ms("a") <= 0


def test_a_bad_slack_is_refused() -> None:
    with pytest.raises(ValueError, match="slack_ms must be finite and > 0"):
        Scheduler("cameo", floor_slack_ms=0.0)


def test_a_tenant_weighs_as_its_heaviest_dataflow_here() -> None:
    s = Scheduler("cameo", floor_slack_ms=50.0)
    assert s.floor is not None
    for aid, weight in (("a1", 1.0), ("a2", 3.0), ("a3", 2.0)):
        s.add_activation(aid, dataflow=aid, tenant="t", latency_target_ms=100.0, weight=weight)
    assert s.floor.weight("t") == 3.0
    s.remove_activation("a1")
    assert s.floor.weight("t") == 3.0
    s.remove_activation("a2")  # the heaviest goes: the next one counts
    assert s.floor.weight("t") == 2.0
    s.set_weight("a3", 5.0)
    assert s.floor.weight("t") == 5.0
    s.remove_activation("a3")
    assert s.floor.weight("t") == 0.0  # forgotten
