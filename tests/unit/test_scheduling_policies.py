"""Policies, profiles and frontiers, with a fake clock; the registry and its errors."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from cameo_actors.clock import FakeClock
from cameo_actors.errors import CameoError
from cameo_actors.scheduling import (
    ActivationProfile,
    DuplicatePolicyError,
    EdfPolicy,
    FairSharePolicy,
    Feedback,
    LeastLaxityPolicy,
    Message,
    Policy,
    PolicyKeyError,
    PriorityContext,
    Scheduler,
    TokenBucketPolicy,
    UnknownPolicyError,
    WindowTiming,
    get_policy,
    policy_names,
    register_policy,
    stamp,
    window_frontier_ms,
)

BUILTINS = ["cameo", "edf", "fair_share", "fifo", "llf", "sjf", "token_bucket"]


def ingress(
    target: str,
    t: float,
    *,
    dataflow: str = "df",
    tenant: str = "t",
    tag: Any = None,
    size: int = 1,
    event_ms: float = -math.inf,
) -> Message:
    return Message.ingress(
        target,
        [{"tag": tag}] * size,
        dataflow=dataflow,
        tenant=tenant,
        ingest_ms=t,
        event_ms=event_ms,
    )


def run_order(s: Scheduler, clock: FakeClock, cost: float | dict[str, float] = 1.0) -> list[Any]:
    """Drain the scheduler; return the tags of messages in execution order."""
    order = []

    def execute(aid: str, msg: Message) -> None:
        order.append(msg.payload[0]["tag"] if not msg.is_watermark else ("wm", aid))
        clock.advance(cost if isinstance(cost, float) else cost[aid])

    s.run_until_idle(execute, clock)
    return order


# -- ranking ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy,expect",
    [
        ("cameo", ["tight", "loose"]),
        ("llf", ["tight", "loose"]),
        ("edf", ["tight", "loose"]),
        ("fifo", ["loose", "tight"]),
    ],
)
def test_tight_target_overtakes_earlier_loose_one(policy: str, expect: list[str]) -> None:
    clock = FakeClock(1_000.0)
    s = Scheduler(policy)
    s.add_activation("loose", dataflow="bulk", tenant="a", latency_target_ms=1000.0)
    s.add_activation("tight", dataflow="alert", tenant="b", latency_target_ms=50.0)
    s.enqueue(ingress("loose", 1_000.0, tag="loose", dataflow="bulk"), 1_000.0)
    clock.advance(5)
    s.enqueue(ingress("tight", 1_005.0, tag="tight", dataflow="alert"), 1_005.0)
    assert run_order(s, clock) == expect


def _learn(s: Scheduler, clock: FakeClock, aid: str, cost: float, df: str) -> None:
    """Run one message through `aid` that costs `cost` so its C_OM becomes `cost`."""
    s.enqueue(ingress(aid, clock.now_ms(), tag="warmup", dataflow=df), clock.now_ms())
    s.run_until_idle(lambda a, m: clock.advance(cost), clock)


def test_edf_and_llf_differ_when_costs_differ() -> None:
    # A: L=100 but each message costs 40 ms -> laxity 60. B: L=90, costs ~0 -> laxity 90.
    # EDF looks at deadlines only (B: 90 < A: 100); LLF at start deadlines (A: 60 < B: 90).
    results = {}
    for policy in ("edf", "llf"):
        clock = FakeClock(0.0)
        s = Scheduler(policy)
        s.add_activation("A", dataflow="a", tenant="t", latency_target_ms=100.0)
        s.add_activation("B", dataflow="b", tenant="t", latency_target_ms=90.0)
        _learn(s, clock, "A", 40.0, "a")
        _learn(s, clock, "B", 0.0, "b")
        t = clock.now_ms()
        s.enqueue(ingress("B", t, tag="B", dataflow="b"), t)
        s.enqueue(ingress("A", t, tag="A", dataflow="a"), t)
        results[policy] = run_order(s, clock, {"A": 40.0, "B": 0.0})
    assert results == {"edf": ["B", "A"], "llf": ["A", "B"]}


def test_cameo_start_deadline_subtracts_cost_and_path() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("cameo")
    s.add_activation("op", dataflow="d", tenant="t", latency_target_ms=100.0)
    first = ingress("op", 0.0)
    s.enqueue(first, 0.0)
    assert (first.ctx.frontier_ms, first.ctx.deadline_ms, first.key) == (0.0, 100.0, 100.0)
    s.run_until_idle(lambda a, m: clock.advance(7.0), clock)
    s.on_feedback("op", Feedback("sink", 13.0), clock.now_ms())
    second = ingress("op", 7.0)
    s.enqueue(second, 7.0)
    assert second.ctx.deadline_ms == pytest.approx(7.0 + 100.0 - 7.0 - 13.0)


def test_sjf_runs_cheapest_first() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("sjf")
    costs = {"slow": 9.0, "mid": 3.0, "fast": 1.0}
    for aid, c in costs.items():
        s.add_activation(aid, dataflow=aid, tenant="t", latency_target_ms=100.0)
        _learn(s, clock, aid, c, aid)
    for aid in costs:  # arrival order: slow, mid, fast
        s.enqueue(ingress(aid, clock.now_ms(), tag=aid, dataflow=aid), clock.now_ms())
    assert run_order(s, clock, costs) == ["fast", "mid", "slow"]


def test_fifo_by_ingest_and_by_arrival() -> None:
    for order, expect in (
        ("arrival", ["late-ingest", "early-ingest"]),
        ("ingest", ["early-ingest", "late-ingest"]),
    ):
        clock = FakeClock(100.0)
        s = Scheduler("fifo", policy_params={"order": order})
        s.add_activation("x", dataflow="x", tenant="t", latency_target_ms=10.0)
        s.add_activation("y", dataflow="y", tenant="t", latency_target_ms=10.0)
        s.enqueue(ingress("x", 90.0, tag="late-ingest", dataflow="x"), 100.0)
        s.enqueue(ingress("y", 50.0, tag="early-ingest", dataflow="y"), 100.0)
        assert run_order(s, clock) == expect


# -- cost learning ------------------------------------------------------------------------


def _chain(costs: dict[str, Any], rounds: int, seed: int = 0) -> Scheduler:
    """Run `rounds` messages through A -> B -> C, each stage sending feedback upstream."""
    rng = random.Random(seed)
    clock = FakeClock(0.0)
    s = Scheduler("cameo")
    stages = list(costs)
    for aid in stages:
        s.add_activation(aid, dataflow="d", tenant="t", latency_target_ms=500.0)

    def execute(aid: str, msg: Message) -> None:
        c = costs[aid]
        clock.advance(c() if callable(c) else c)
        now = clock.now_ms()
        if msg.upstream:  # piggy-backed on the credit return in the runtime
            s.on_feedback(msg.upstream, s.feedback_for(aid, msg.upstream), now)
        i = stages.index(aid)
        if i + 1 < len(stages):
            s.enqueue(s.derive(msg, stages[i + 1], msg.payload, now), now)

    for _ in range(rounds):
        s.enqueue(ingress(stages[0], clock.now_ms()), clock.now_ms())
        s.run_until_idle(execute, clock)
        clock.advance(rng.uniform(0, 5))
    return s


def test_costs_and_path_costs_converge_along_a_chain() -> None:
    # Unknown costs start at 0 ...
    s0 = _chain({"A": 1.0, "B": 2.0, "C": 3.0}, rounds=0)
    assert [s0.profile(a).path_cost_ms for a in "ABC"] == [0.0, 0.0, 0.0]
    assert s0.profile("B").cost_ms("A") == 0.0
    # ... and converge: C_path(B) = cost(C) = 3, C_path(A) = cost(B) + C_path(B) = 5.
    s = _chain({"A": 1.0, "B": 2.0, "C": 3.0}, rounds=20)
    assert s.profile("A").cost_ms("") == pytest.approx(1.0)
    assert s.profile("B").cost_ms("A") == pytest.approx(2.0)
    assert s.profile("C").cost_ms("B") == pytest.approx(3.0)
    assert [s.profile(a).path_cost_ms for a in "ABC"] == pytest.approx([5.0, 3.0, 0.0])


def test_costs_converge_to_the_mean_of_noisy_measurements() -> None:
    rng = random.Random(1)
    costs = {
        "A": lambda: rng.uniform(0.5, 1.5),
        "B": lambda: rng.uniform(1, 3),
        "C": lambda: rng.uniform(2, 4),
    }
    s = _chain(costs, rounds=400)
    assert s.profile("B").cost_ms("A") == pytest.approx(2.0, rel=0.25)
    assert s.profile("A").path_cost_ms == pytest.approx(5.0, rel=0.25)


def test_path_cost_is_the_max_over_downstreams_and_forgets_removed_ones() -> None:
    p = ActivationProfile("up", dataflow="d", tenant="t", latency_target_ms=10.0)
    p.apply_feedback(Feedback("fast", 2.0))
    p.apply_feedback(Feedback("slow", 9.0))
    assert p.path_cost_ms == 9.0
    p.apply_feedback(Feedback("slow", 4.0))  # the old maximum shrank
    assert p.path_cost_ms == 4.0
    p.forget_downstream("slow")
    assert p.path_cost_ms == 2.0
    with pytest.raises(ValueError, match="path_cost_ms"):
        p.apply_feedback(Feedback("bad", math.nan))


def test_feedback_includes_transfer_delay_but_not_queueing() -> None:
    clock = FakeClock(0.0)
    s = Scheduler("cameo")
    s.add_activation("up", dataflow="d", tenant="t", latency_target_ms=100.0)
    s.add_activation("down", dataflow="d", tenant="t", latency_target_ms=100.0)
    parent = ingress("up", 0.0)
    s.enqueue(parent, 0.0)
    msg = s.derive(parent, "down", [{}], now_ms=1.0)
    assert (msg.upstream, msg.sent_ms) == ("up", 1.0)
    s.enqueue(msg, now_ms=3.0)  # 2 ms in transit
    clock.set(10.0)  # 7 ms waiting in the mailbox (up never ran in this test)
    s.run_once(lambda a, m: clock.advance(4.0), clock)  # runs "up" (older) ...
    s.run_once(lambda a, m: clock.advance(4.0), clock)  # ... then "down"
    s.on_feedback("down", Feedback("sink", 5.0), clock.now_ms())
    fb = s.feedback_for("down", "up")
    # C_path 5 + cost 4 + transfer 2; the 11 ms "down" waited are left out (see feedback_for)
    assert fb.from_activation == "down" and fb.path_cost_ms == pytest.approx(11.0)
    assert s.profile("down").queue_delay_ms == pytest.approx(11.0)


def test_before_send_carries_ingest_and_event_time_forward() -> None:
    s = Scheduler("cameo")
    s.add_activation("w", dataflow="d", tenant="acme", latency_target_ms=100.0)
    parent = ingress("w", 123.0, dataflow="d", tenant="acme", event_ms=100.0)
    s.enqueue(parent, 124.0)
    child = s.derive(parent, "next", [{}, {}], 130.0)
    assert (child.ctx.dataflow, child.ctx.tenant, child.ctx.ingest_ms, child.ctx.event_ms) == (
        "d",
        "acme",
        123.0,
        100.0,
    )
    assert math.isnan(child.ctx.frontier_ms) and child.ctx.deadline_ms == math.inf
    assert child.size == 2
    fired = s.derive(parent, "next", [{}], 130.0, event_ms=1000.0)
    assert fired.ctx.event_ms == 1000.0
    wm = s.derive(parent, "next", 99.0, 130.0, is_watermark=True)
    assert wm.size == 0 and wm.is_watermark


# -- frontiers of window operators ----------------------------------------------------------


def test_window_frontier_formula() -> None:
    assert window_frontier_ms(10_000.0, 500.0, 20.0) == 10_520.0


def test_window_data_and_closing_watermark_deadlines() -> None:
    s = Scheduler("cameo")
    s.add_activation(
        "win",
        dataflow="d",
        tenant="t",
        latency_target_ms=500.0,
        window=WindowTiming.tumbling(1000.0, allowed_lateness_ms=100.0),
    )
    s.add_activation("map", dataflow="d", tenant="t", latency_target_ms=500.0)
    data = ingress("win", 10_050.0, event_ms=10_020.0)  # lag 30 ms, window [10000, 11000)
    s.enqueue(data, 10_050.0)
    flow = s.dataflow_profile("d")
    assert flow is not None and flow.lag_ms == 30.0
    assert data.ctx.local_priority == 10.0
    assert data.ctx.frontier_ms == 11_000.0 + 100.0 + 30.0
    assert data.ctx.deadline_ms == data.ctx.frontier_ms + 500.0
    # A regular operator's frontier is the ingest time.
    plain = ingress("map", 10_050.0, event_ms=10_020.0)
    s.enqueue(plain, 10_050.0)
    assert plain.ctx.frontier_ms == 10_050.0 and plain.ctx.local_priority == 0.0

    def wm(value: float, t: float) -> Message:
        m = Message.ingress("win", value, dataflow="d", tenant="t", ingest_ms=t, is_watermark=True)
        s.enqueue(m, t)
        return m

    # The watermark closing [10000, 11000) inherits that window's frontier (it trails the
    # events by the lateness, and came 30 ms after them) ...
    assert wm(11_100.0, 11_230.0).ctx.frontier_ms == data.ctx.frontier_ms
    # ... the next one, jumping over two windows, the earliest it closes: [11000, 12000).
    assert wm(13_200.0, 13_330.0).ctx.frontier_ms == 12_000.0 + 100.0 + 30.0
    # The end of the stream fires everything now.
    assert wm(math.inf, 13_300.0).ctx.frontier_ms == 13_300.0


def test_windows_fire_at_the_lag_of_their_slowest_input_channel() -> None:
    """Two inputs 700 ms apart in event time: the data's lag swings between them, the
    windows' deadlines must not (they fire when the slower input's watermark passes)."""
    s = Scheduler("cameo", alpha=0.5)
    s.add_activation("win", dataflow="d", tenant="t", latency_target_ms=500.0,
                     window=WindowTiming.tumbling(250.0))

    def arrive(upstream: str, now: float, lag: float, watermark: bool) -> Message:
        m = Message("win", 0, now - lag if watermark else [{}], watermark,
                    PriorityContext("d", "t", ingest_ms=now, event_ms=now - lag), upstream=upstream)
        s.enqueue(m, now)
        return m

    flow = s.dataflow_profile("d")
    assert flow is not None
    for t in range(10_000, 12_000, 100):
        arrive("map#0", float(t), 20.0, False)
        arrive("map#1", t + 50.0, 720.0, False)
        arrive("map#0", float(t), 20.0, True)
        arrive("map#1", t + 50.0, 720.0, True)
    assert flow.lag_ms == 720.0  # not a blend of 20 and 720
    ahead = arrive("map#0", 12_000.0, 20.0, False)  # window [11_750, 12_000) of the input ahead
    behind = arrive("map#1", 12_050.0, 720.0, False)  # window [11_250, 11_500) of the one behind
    assert behind.ctx.frontier_ms == 11_500.0 + 720.0
    assert ahead.ctx.frontier_ms == 12_000.0 + 720.0
    # The channel behind goes quiet (idle, or gone): the one still heard decides.
    for t in range(12_100, 14_500, 100):
        arrive("map#0", float(t), 20.0, True)
    assert flow.lag_ms == 20.0


def test_window_timing_ids_and_validation() -> None:
    assert WindowTiming.tumbling(1000.0).data_window(999.0) == (0.0, 1000.0)
    assert WindowTiming.sliding(1000.0, 250.0).data_window(1000.0) == (1.0, 1250.0)
    assert WindowTiming.session_gap(300.0).data_window(50.0) == (50.0, 350.0)
    with pytest.raises(ValueError):
        WindowTiming(0.0)
    with pytest.raises(ValueError):
        WindowTiming.tumbling(100.0, allowed_lateness_ms=-1.0)
    with pytest.raises(TypeError):
        WindowTiming("100")  # type: ignore[arg-type]


def test_closing_window_end_for_sliding_and_session_windows() -> None:
    sliding = WindowTiming.sliding(1000.0, 250.0)
    assert sliding.closing_window_end(2000.0, 2600.0) == 2250.0  # earliest newly closed
    assert sliding.closing_window_end(-math.inf, 2600.0) == 2500.0  # latest it closes
    session = WindowTiming.session_gap(300.0, allowed_lateness_ms=50.0)
    assert session.closing_window_end(1000.0, 2000.0) == 950.0
    assert session.closing_window_end(-math.inf, 2000.0) == 1950.0


def test_sender_frontier_is_kept() -> None:
    s = Scheduler("edf")
    s.add_activation("op", dataflow="d", tenant="t", latency_target_ms=10.0)
    m = ingress("op", 100.0)
    m.ctx.frontier_ms = 40.0
    s.enqueue(m, 100.0)
    assert m.key == 50.0


def test_lag_is_an_ewma_starting_from_the_first_sample() -> None:
    s = Scheduler("cameo", alpha=0.5)
    s.add_activation("op", dataflow="d", tenant="t", latency_target_ms=10.0)
    for lag in (10.0, 20.0, 20.0):
        s.enqueue(ingress("op", 1000.0, event_ms=1000.0 - lag), 1000.0)
    flow = s.dataflow_profile("d")
    assert flow is not None and flow.lag_ms == pytest.approx(17.5)


# -- fair share and token bucket -------------------------------------------------------------


@pytest.mark.parametrize(
    "weights,costs",
    [
        ((1.0, 2.0), (1.0, 1.0)),
        ((1.0, 2.0), (2.0, 0.5)),  # shares are of service time, not of messages
        ((1.0, 1.0), (3.0, 1.0)),
        ((3.0, 1.0), (1.0, 1.0)),
    ],
)
def test_fair_share_divides_time_by_weight(
    weights: tuple[float, float], costs: tuple[float, float]
) -> None:
    clock = FakeClock(0.0)
    s = Scheduler("fair_share", quantum_ms=5.0)
    cost = {"a": costs[0], "b": costs[1]}
    s.add_activation("a", dataflow="da", tenant="A", latency_target_ms=100.0, weight=weights[0])
    s.add_activation("b", dataflow="db", tenant="B", latency_target_ms=100.0, weight=weights[1])
    busy = {"a": 0.0, "b": 0.0}

    def execute(aid: str, msg: Message) -> None:
        clock.advance(cost[aid])
        busy[aid] += cost[aid]
        # closed loop: every finished message is replaced, both tenants stay backlogged
        s.enqueue(ingress(aid, clock.now_ms(), tenant=msg.ctx.tenant), clock.now_ms())

    for aid, tenant in (("a", "A"), ("b", "B")):
        for _ in range(20):
            s.enqueue(ingress(aid, 0.0, tenant=tenant), 0.0)
    while clock.now_ms() < 5_000.0:
        s.run_once(execute, clock)
    share_b = busy["b"] / (busy["a"] + busy["b"])
    assert share_b == pytest.approx(weights[1] / sum(weights), abs=0.03)


def test_fair_share_weights_parameter_overrides_profiles() -> None:
    p = get_policy("fair_share", weights={"A": 3})
    prof = ActivationProfile("a", dataflow="d", tenant="A", latency_target_ms=1.0, weight=1.0)
    m1, m2 = ingress("a", 0.0, tenant="A"), ingress("a", 0.0, tenant="A")
    assert p.key(m1, prof, 0.0) == 0.0
    assert p.key(m2, prof, 0.0) == pytest.approx(1.0 / 3.0)  # default cost 1 / weight 3


def test_token_bucket_demotes_over_rate_tenant() -> None:
    clock = FakeClock(0.0)
    policy = get_policy("token_bucket", rates={"bulk": 100.0}, burst=10.0, inner="fifo")
    s = Scheduler(policy)
    s.add_activation("bulk", dataflow="b", tenant="bulk", latency_target_ms=100.0)
    s.add_activation("alert", dataflow="a", tenant="alert", latency_target_ms=100.0)
    for i in range(5):  # 5 x 10 events at once: 5x the burst
        s.enqueue(ingress("bulk", 0.0, tenant="bulk", dataflow="b", tag=f"b{i}", size=10), 0.0)
    for i in range(2):
        s.enqueue(ingress("alert", 0.0, tenant="alert", dataflow="a", tag=f"a{i}"), 0.0)
    assert isinstance(policy, TokenBucketPolicy)
    assert policy.tokens("bulk") == 0.0 and policy.tokens("alert") == math.inf
    # plain fifo would run b0..b4 first; the demoted bulk work waits behind in-rate alerts
    assert run_order(s, clock, 0.0) == ["b0", "a0", "a1", "b1", "b2", "b3", "b4"]
    # after 100 ms the bucket holds 10 events again: the next message is in rate
    clock.advance(100.0)
    m = ingress("bulk", 100.0, tenant="bulk", dataflow="b", size=10)
    s.enqueue(m, clock.now_ms())
    assert m.key[0] == 0


def test_token_bucket_wraps_any_policy_and_delegates_hooks() -> None:
    clock = FakeClock(0.0)
    tb = TokenBucketPolicy(rates={"A": 1e9}, inner="fair_share")
    s = Scheduler(tb)
    s.add_activation("a", dataflow="d", tenant="A", latency_target_ms=100.0)
    for _ in range(3):
        s.enqueue(ingress("a", 0.0, tenant="A"), 0.0)
    s.run_until_idle(lambda a, m: clock.advance(2.0), clock)
    assert s.profile("a").cost_ms("") == 2.0  # cost learning reached the profile
    assert isinstance(tb.inner, FairSharePolicy)
    assert tb.inner.virtual_time > 0  # fair_share's before_execute saw its own key
    default = get_policy("token_bucket")
    assert isinstance(default, TokenBucketPolicy) and isinstance(default.inner, LeastLaxityPolicy)


# -- registry ---------------------------------------------------------------------------------


def test_builtins_registered_and_cameo_is_llf() -> None:
    assert set(BUILTINS) <= set(policy_names())
    assert type(get_policy("cameo")) is type(get_policy("llf")) is LeastLaxityPolicy
    assert get_policy("edf") is not get_policy("edf")  # a new, stateful instance each time


def test_unknown_policy_lists_known_ones() -> None:
    with pytest.raises(UnknownPolicyError) as e:
        get_policy("deadline-ish")
    assert isinstance(e.value, ValueError) and isinstance(e.value, CameoError)
    for name in BUILTINS:
        assert name in str(e.value)
    with pytest.raises(UnknownPolicyError):
        Scheduler("nope")


def test_bad_policy_parameters() -> None:
    with pytest.raises(TypeError, match="order"):
        get_policy("fifo", nonsense=1)
    with pytest.raises(ValueError):
        get_policy("fifo", order="random")
    with pytest.raises(ValueError):
        get_policy("fair_share", weights={"a": 0})
    with pytest.raises(ValueError):
        get_policy("token_bucket", rates={"a": -1})


def test_register_a_custom_policy() -> None:
    class LatestFirst(Policy):
        name = "latest_first_test"

        def key(self, msg: Message, profile: ActivationProfile, now_ms: float) -> float:
            return -msg.ctx.ingest_ms

    register_policy("latest_first_test", LatestFirst)
    with pytest.raises(DuplicatePolicyError):
        register_policy("latest_first_test", lambda: LatestFirst())
    register_policy("latest_first_test", LatestFirst, replace=True)
    clock = FakeClock(0.0)
    s = Scheduler("latest_first_test")
    for aid, t in (("old", 1.0), ("new", 2.0)):
        s.add_activation(aid, dataflow=aid, tenant="t", latency_target_ms=10.0)
        s.enqueue(ingress(aid, t, tag=aid, dataflow=aid), 2.0)
    assert run_order(s, clock) == ["new", "old"]
    # the default hooks still stamped the deadline and learn costs
    assert s.profile("old").messages == 1
    with pytest.raises(TypeError):
        register_policy("x", "not callable")  # type: ignore[arg-type]
    register_policy("not_a_policy_test", lambda: object(), replace=True)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="expected a Policy"):
        get_policy("not_a_policy_test")


def test_policy_keys_must_be_orderable() -> None:
    class Broken(EdfPolicy):
        def key(self, msg: Message, profile: ActivationProfile, now_ms: float) -> float:
            return math.nan

    s = Scheduler(Broken())
    s.add_activation("op", dataflow="d", tenant="t", latency_target_ms=10.0)
    with pytest.raises(PolicyKeyError):
        s.enqueue(ingress("op", 0.0), 0.0)


def test_priority_context_wire_form_round_trips() -> None:
    ctx = PriorityContext("d", "t", 1.0, 2.0, 3.0, 4.0, 5.0)
    assert PriorityContext.from_tuple(list(ctx.to_tuple())) == ctx
    with pytest.raises(ValueError):
        PriorityContext.from_tuple([1, 2])


# -- policies decide, the scheduler applies --------------------------------------------------


def _snapshot(msg: Message, profile: ActivationProfile) -> str:
    """Everything a hook could write to: the message, its context and the profile."""
    state = {slot: getattr(profile, slot) for slot in ActivationProfile.__slots__}
    state["flow"] = (profile.flow.lag_ms, profile.flow.samples)
    return repr((msg, state))


class _KeyOnly(Policy):
    name = "key_only_test"

    def key(self, msg: Message, profile: ActivationProfile, now_ms: float) -> float:
        return -msg.ctx.ingest_ms


@pytest.mark.parametrize("policy", [*BUILTINS, "key_only"])
@pytest.mark.parametrize("windowed", [False, True])
def test_hooks_read_the_message_and_profile_and_write_neither(policy: str, windowed: bool) -> None:
    p = _KeyOnly() if policy == "key_only" else get_policy(policy)
    s = Scheduler(p)
    window = WindowTiming.tumbling(100.0, allowed_lateness_ms=10.0) if windowed else None
    s.add_activation("up", dataflow="d", tenant="A", latency_target_ms=50.0)
    s.add_activation("op", dataflow="d", tenant="A", latency_target_ms=50.0, window=window)
    clock = FakeClock(0.0)
    for t in (0.0, 1.0):  # learn some costs and a lag first, so hooks have state to read
        s.enqueue(ingress("op", t, tenant="A", event_ms=t - 5.0), t)
        s.run_until_idle(lambda a, m: clock.advance(2.0), clock)
    s.on_feedback("op", Feedback("sink", 3.0), clock.now_ms())
    profile = s.profile("op")
    parent = ingress("up", 2.0, tenant="A", event_ms=1.0)
    s.enqueue(parent, 2.0)
    msgs = [s.derive(parent, "op", [{}], 3.0), s.derive(parent, "op", 250.0, 3.0, is_watermark=True)]
    for msg in msgs:
        s.enqueue(msg, 4.0)  # stamped and keyed as the scheduler does
        before = _snapshot(msg, profile)
        assert stamp(msg, profile)[2] == msg.ctx.deadline_ms
        p.on_arrival(msg, profile, 5.0)
        p.before_execute(msg, profile, msg.key, 5.0)
        p.after_execute(msg, profile, msg.key, 1.5, 1.0, 6.5)
        child = p.before_send(msg, profile, 6.5, None)
        p.on_feedback(profile, Feedback("sink", 7.0), 6.5)
        assert _snapshot(msg, profile) == before
        assert child is not msg.ctx and child.ingest_ms == msg.ctx.ingest_ms


def test_stamp_is_a_decision_the_scheduler_writes() -> None:
    s = Scheduler("cameo")
    s.add_activation("op", dataflow="d", tenant="t", latency_target_ms=100.0)
    s.add_activation(
        "win", dataflow="d", tenant="t", latency_target_ms=100.0,
        window=WindowTiming.tumbling(1000.0, allowed_lateness_ms=10.0),
    )
    s.enqueue(ingress("win", 1040.0, event_ms=1000.0), 1040.0)  # learn the lag: 40 ms
    for target, ev in (("op", -math.inf), ("win", 2500.0)):
        msg = ingress(target, 2540.0, event_ms=ev)
        fresh = repr(msg.ctx)
        decided = stamp(msg, s.profile(target))
        assert repr(msg.ctx) == fresh  # stamp only decides ...
        s.enqueue(msg, 2540.0)  # ... the scheduler writes it (lag stays 40 ms)
        assert (msg.ctx.frontier_ms, msg.ctx.local_priority, msg.ctx.deadline_ms) == decided
    assert decided == (3000.0 + 10.0 + 40.0, 2.0, 3050.0 + 100.0)


def test_the_key_on_arrival_returns_is_the_key_the_scheduler_stamps() -> None:
    returned: list[Any] = []

    class Spy(TokenBucketPolicy):
        def on_arrival(self, msg: Message, profile: ActivationProfile, now_ms: float) -> Any:
            returned.append(super().on_arrival(msg, profile, now_ms))
            return returned[-1]

    s = Scheduler(Spy(rates={"t": 1.0}, burst=1.0, inner="fair_share"))
    s.add_activation("op", dataflow="d", tenant="t", latency_target_ms=10.0)
    msgs = [ingress("op", 0.0) for _ in range(3)]
    for m in msgs:
        s.enqueue(m, 0.0)
    assert [m.key for m in msgs] == returned == [(0, 0.0), (1, 1.0), (1, 2.0)]


def test_window_frontier_after_end_of_stream_on_another_channel() -> None:
    from cameo_actors.scheduling import ActivationProfile, Message, WindowTiming

    p = ActivationProfile("d/w/0", dataflow="d", tenant="t", latency_target_ms=10,
                          window=WindowTiming.tumbling(100.0))
    eos = Message.ingress("d/w/0", float("inf"), dataflow="d", tenant="t", ingest_ms=5.0,
                          is_watermark=True)
    late_wm = Message.ingress("d/w/0", 250.0, dataflow="d", tenant="t", ingest_ms=7.0,
                              is_watermark=True)
    assert p.frontier_ms(eos) == 5.0
    assert p.frontier_ms(late_wm) == 7.0  # not an overflow: the stream already ended
