"""Admission control's model: weighted max-min fairness against a reference, and the
verdicts, causes and largest admissible rate `predict` gives, on pools small enough to
work out by hand."""

from __future__ import annotations

import ast
import doctest
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from re import escape as _literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors.scheduling import admission
from cameo_actors.scheduling.admission import Demand, Prediction, fair_allocation, predict

TOL = 1e-6


def flow(name: str, tenant: str, demand_ms: float | None, *, weight: float = 1.0,
         target_ms: float = 1_000.0, cost: float | None = 1.0, within: float | None = None,
         p99_ms: float | None = None) -> Demand:
    """A dataflow demanding `demand_ms` ms/s: that many events/s at `cost` ms each."""
    rate = None if demand_ms is None else demand_ms / (cost or 1.0)
    return Demand(name, tenant, weight, target_ms, rate, cost, within, p99_ms)


def by_name(p: Prediction) -> dict[str, admission.Outcome]:
    return {o.name: o for o in p.outcomes}


# -- fair_allocation ---------------------------------------------------------------------------
def reference_allocation(capacity: float, demands: dict[str, float],
                         weights: dict[str, float]) -> dict[str, float]:
    """Max-min by its definition: the water level L at which sum(min(d, L * w)) is all there
    is to give, found by bisection (independent of the rounds `fair_allocation` takes)."""
    total = sum(demands.values())
    if total <= capacity:
        return dict(demands)
    lo, hi = 0.0, max(d / weights[t] for t, d in demands.items())
    for _ in range(200):
        mid = (lo + hi) / 2
        if sum(min(d, mid * weights[t]) for t, d in demands.items()) < capacity:
            lo = mid
        else:
            hi = mid
    return {t: min(d, hi * weights[t]) for t, d in demands.items()}


tenant_loads = st.dictionaries(
    st.sampled_from("abcdef"),
    st.tuples(st.floats(0.0, 5_000.0), st.floats(0.1, 10.0)),  # (demand, weight)
    min_size=1, max_size=6)


@settings(max_examples=400, deadline=None)
@given(tenant_loads, st.floats(1.0, 20_000.0))
def test_fair_allocation_is_weighted_max_min(loads: dict[str, tuple[float, float]],
                                             capacity: float) -> None:
    demands = {t: d for t, (d, _) in loads.items()}
    weights = {t: w for t, (_, w) in loads.items()}
    alloc = fair_allocation(capacity, demands, weights)
    assert alloc.keys() == demands.keys()
    scale = TOL * max(capacity, sum(demands.values()), 1.0)
    # All of it is given, or all that is asked.
    assert sum(alloc.values()) == pytest.approx(min(capacity, sum(demands.values())), abs=scale)
    ref = reference_allocation(capacity, demands, weights)
    busy_weight = sum(w for t, w in weights.items() if demands[t] > 0)
    for t in demands:
        assert alloc[t] == pytest.approx(ref[t], abs=scale)
        assert 0 <= alloc[t] <= demands[t] + scale
        # The floor: at least the weighted share of the whole, or the demand if smaller.
        floor = capacity * weights[t] / busy_weight if demands[t] > 0 else 0.0
        assert alloc[t] >= min(demands[t], floor) - scale
    # Max-min: a tenant given less than it asks could only get more from a tenant whose
    # allocation per unit of weight is no larger than its own.
    for t in demands:
        if alloc[t] < demands[t] - scale:
            for u in demands:
                assert alloc[u] / weights[u] <= alloc[t] / weights[t] + scale


def test_fair_allocation_gives_what_light_tenants_leave_to_the_others_by_weight() -> None:
    alloc = fair_allocation(100.0, {"a": 10.0, "b": 80.0, "c": 80.0}, {"a": 1, "b": 1, "c": 2})
    assert alloc == {"a": 10.0, "b": 30.0, "c": 60.0}
    # Several rounds: c fits once a has left its part, b does not.
    alloc = fair_allocation(90.0, {"a": 5.0, "b": 100.0, "c": 35.0, "z": 0.0},
                            {"a": 1, "b": 1, "c": 1, "z": 5})
    assert alloc == {"a": 5.0, "b": 50.0, "c": 35.0, "z": 0.0}
    assert fair_allocation(0.0, {"a": 5.0}, {"a": 1.0}) == {"a": 0.0}
    assert fair_allocation(10.0, {}, {}) == {}


@pytest.mark.parametrize(("capacity", "demands", "weights", "words"), [
    (-1.0, {"a": 1.0}, {"a": 1.0}, "fair_allocation: capacity: expected a finite number >= 0"),
    (math.inf, {"a": 1.0}, {"a": 1.0}, "capacity"),
    (10.0, {"a": -1.0}, {"a": 1.0}, "demands['a']: expected a finite number >= 0, got -1.0"),
    (10.0, {"a": math.nan}, {"a": 1.0}, "demands['a']"),
    (10.0, {"a": 1.0}, {}, "weights['a']: expected a finite number > 0 for every tenant in "
                           "demands, got None"),
    (10.0, {"a": 1.0}, {"a": 0.0}, "weights['a']"),
])
def test_fair_allocation_refuses_bad_arguments(capacity: float, demands: dict[str, float],
                                               weights: dict[str, float], words: str) -> None:
    with pytest.raises(ValueError, match=_literal(words)):
        fair_allocation(capacity, demands, weights)


# -- predict: verdicts -------------------------------------------------------------------------
def test_a_pool_with_room_meets_every_target() -> None:
    p = predict(4_000.0, [flow("clicks", "web", 1_200.0), flow("alerts", "ops", 300.0)])
    assert [o.verdict for o in p.outcomes] == ["meets", "meets"]
    assert p.feasible and p.misses() == [] and p.causes == ()
    assert p.utilization == pytest.approx(1_500 / 4_000)
    assert p.executors_needed == 2  # 1,500 ms/s under 90% of 1,000 per executor
    assert p.max_rate_eps is None  # nothing new asked for
    clicks = p.outcomes[0]
    assert clicks.allocation_ms_per_s == pytest.approx(1_200.0)
    assert clicks.sustainable_eps == pytest.approx(1_200.0)
    assert clicks.behind_s_per_s == 0.0
    assert clicks.reason == "gets the 1,200 ms/s of executor time it needs"


def test_a_pool_near_full_puts_everyone_at_risk_but_misses_nothing() -> None:
    p = predict(2_000.0, [flow("clicks", "web", 1_500.0), flow("alerts", "ops", 400.0)])
    assert [o.verdict for o in p.outcomes] == ["at_risk", "at_risk"]
    assert p.feasible and p.causes == ()
    assert p.utilization == pytest.approx(0.95)
    assert p.executors_needed == 3
    assert "95% of the pool's capacity (above the 90% headroom)" in p.outcomes[0].reason
    # The same load with a headroom of 1 meets.
    assert predict(2_000.0, [flow("clicks", "web", 1_500.0)], headroom=1.0).feasible


def test_an_overloaded_pool_starves_only_the_tenant_over_its_share() -> None:
    running = [flow("etl", "bulk", 2_400.0, target_ms=60_000.0, cost=0.5),
               flow("backfill", "bulk", 600.0, target_ms=60_000.0, cost=2.0),
               flow("clicks", "web", 200.0, target_ms=200.0),
               flow("alerts", "ops", 100.0, target_ms=100.0)]
    p = predict(2_000.0, running)
    out = by_name(p)
    # bulk gets what web and ops leave: 2,000 - 300 = 1,700 of its 3,000 ms/s, split 4:1.
    behind = 1 - 1_700 / 3_000
    assert out["etl"].verdict == out["backfill"].verdict == "misses"
    assert out["etl"].allocation_ms_per_s == pytest.approx(1_700 * 0.8)
    assert out["backfill"].allocation_ms_per_s == pytest.approx(1_700 * 0.2)
    assert out["etl"].behind_s_per_s == pytest.approx(behind)
    assert out["backfill"].behind_s_per_s == pytest.approx(behind)
    assert out["etl"].sustainable_eps == pytest.approx(1_700 * 0.8 / 0.5)
    assert out["etl"].reason == (
        "needs 2,400 ms/s of executor time, its floor gives 1,360 ms/s: it keeps up with 2,720 "
        "of 4,800 events/s and its results fall 0.43 s further behind every second (its "
        "tenant 'bulk' asks 2,333 ms/s above its weighted share of 667 ms/s)")
    # The light, latency-sensitive tenants keep their whole demand: their floor protects
    # them. The pool runs above its headroom, so the model calls them at risk, not missing.
    for name, demand in (("clicks", 200.0), ("alerts", 100.0)):
        assert out[name].verdict == "at_risk"
        assert out[name].allocation_ms_per_s == pytest.approx(demand)
        assert out[name].behind_s_per_s == 0.0
        assert "bulk" not in out[name].reason  # a tenant reads only its own reasons
    assert [o.name for o in p.misses()] == ["etl", "backfill"] and not p.feasible
    assert len(p.causes) == 1
    assert p.causes[0][0] == "bulk"
    assert p.causes[0][1] == pytest.approx(3_000 - 2_000 / 3)
    assert p.executors_needed == 4  # 3,300 ms/s at 900 per executor


def test_causes_use_the_weighted_share_and_come_largest_first() -> None:
    # Shares of 3,000 ms/s by weight 1:2:3 among the tenants that ask: 500, 1,000, 1,500.
    running = [flow("a", "small", 900.0, weight=1.0), flow("b", "mid", 1_600.0, weight=2.0),
               flow("c", "big", 1_000.0, weight=3.0), flow("idle", "quiet", 0.0, weight=9.0)]
    p = predict(3_000.0, running)
    assert [t for t, _ in p.causes] == ["mid", "small"]
    assert [ms for _, ms in p.causes] == pytest.approx([600.0, 400.0])
    # big fits; small and mid share the other 2,000 ms/s by weight: 666.7 and 1,333.3.
    out = by_name(p)
    assert out["c"].allocation_ms_per_s == pytest.approx(1_000.0)
    assert out["a"].allocation_ms_per_s == pytest.approx(2_000 / 3)
    assert out["b"].allocation_ms_per_s == pytest.approx(4_000 / 3)
    assert out["idle"].verdict == "at_risk" and out["idle"].allocation_ms_per_s == 0.0


def test_a_tenant_weighs_as_its_heaviest_dataflow_and_sums_its_demands() -> None:
    # heavy's weight is 3 (its heaviest dataflow), so it gets 3/4 of a saturated pool.
    running = [flow("h1", "heavy", 1_000.0, weight=1.0), flow("h2", "heavy", 1_000.0, weight=3.0),
               flow("l1", "light", 2_000.0, weight=1.0)]
    out = by_name(predict(2_000.0, running))
    assert out["h1"].allocation_ms_per_s == pytest.approx(750.0)
    assert out["h2"].allocation_ms_per_s == pytest.approx(750.0)
    assert out["l1"].allocation_ms_per_s == pytest.approx(500.0)


def test_a_shortfall_of_at_most_one_percent_is_rounding_not_a_miss() -> None:
    out = by_name(predict(1_000.0, [flow("a", "t", 1_010.0)]))
    assert out["a"].verdict == "at_risk" and out["a"].behind_s_per_s == 0.0
    out = by_name(predict(1_000.0, [flow("a", "t", 1_011.0)]))
    assert out["a"].verdict == "misses"
    assert out["a"].behind_s_per_s == pytest.approx(1 - 1_000 / 1_011)


def test_an_unknown_demand_counts_as_no_load_and_says_so() -> None:
    running = [flow("new-ish", "t1", None, cost=None),
               Demand("no-cost", "t2", 1.0, 500.0, rate_eps=100.0, cost_ms_per_event=None),
               flow("known", "t3", 1_000.0)]
    p = predict(1_000.0, running)
    out = by_name(p)
    assert out["new-ish"].verdict == out["no-cost"].verdict == "unknown"
    assert out["new-ish"].reason == "its rate and cost per event are not known yet, so it " \
                                    "counts as no load"
    assert out["no-cost"].reason == "its cost per event is not known yet, so it counts as no load"
    for name in ("new-ish", "no-cost"):
        o = out[name]
        assert (o.demand_ms_per_s, o.allocation_ms_per_s, o.sustainable_eps) == (None,) * 3
        assert o.behind_s_per_s == 0.0
    # The known one gets the whole pool: the unknown ones took nothing.
    assert out["known"].allocation_ms_per_s == pytest.approx(1_000.0)
    assert p.utilization == pytest.approx(1.0)
    only_unknown = predict(1_000.0, [flow("x", "t", None)])
    assert only_unknown.utilization is None and only_unknown.executors_needed is None
    assert only_unknown.feasible  # unknown is not a miss


def test_a_dataflow_measured_missing_misses_whatever_the_model_says() -> None:
    running = [flow("slow", "t", 10.0, target_ms=1_000.0, within=0.61, p99_ms=4_200.0),
               flow("ok", "t", 10.0, within=0.9, p99_ms=800.0),
               flow("blind", "u", None, cost=None, target_ms=250.0, within=0.5)]
    p = predict(4_000.0, running)
    out = by_name(p)
    assert out["slow"].verdict == "misses"
    assert out["slow"].behind_s_per_s == 0.0
    assert out["slow"].allocation_ms_per_s == pytest.approx(10.0)
    assert out["slow"].reason == ("measured: p99 4.2 s against a 1 s target; 61% of recent "
                                  "results within target, although it gets the 10 ms/s of "
                                  "executor time it needs")
    assert out["ok"].verdict == "meets"  # 90% within target is not a miss
    assert out["blind"].verdict == "misses"  # measured, though its demand is unknown
    assert out["blind"].reason == ("measured: 50% of recent results within the 250 ms target "
                                   "(its rate and cost per event are not known yet, so it "
                                   "counts as no load)")
    assert [o.name for o in p.misses()] == ["slow", "blind"]
    assert p.causes == ()  # measured misses name no tenant over its share


def test_a_starved_dataflow_measured_missing_gives_both_reasons() -> None:
    out = by_name(predict(1_000.0, [flow("a", "t", 2_000.0, within=0.3, p99_ms=9_000.0)]))
    assert out["a"].verdict == "misses" and out["a"].behind_s_per_s == pytest.approx(0.5)
    assert out["a"].reason.endswith("; measured: p99 9 s against a 1 s target; 30% of recent "
                                    "results within target")


def test_a_share_just_below_the_threshold_does_not_read_as_the_threshold() -> None:
    out = by_name(predict(4_000.0, [flow("a", "t", 1.0, within=0.899)]))
    assert "89% of recent results" in out["a"].reason


# -- predict: a new dataflow and the largest rate that fits ------------------------------------
def test_the_new_dataflow_comes_last_and_its_rate_limit_is_the_exact_boundary() -> None:
    running = [flow("a", "A", 400.0), flow("b", "B", 300.0)]
    new = flow("n", "C", 500.0)
    p = predict(1_000.0, running, new)
    assert [o.name for o in p.outcomes] == ["a", "b", "n"]
    out = by_name(p)
    # At 500 ms/s n pushes a over, and takes only 350 itself; b stays within its share.
    assert out["a"].verdict == out["n"].verdict == "misses"
    assert out["b"].verdict == "at_risk"
    # Above n = 300 ms/s: b keeps 300, a and n share 700, and a misses once it gets less
    # than 99% of 400 = 396, i.e. once n takes more than 304.
    limit = p.max_rate_eps
    assert limit is not None and limit == pytest.approx(304.0, rel=1e-9)
    assert predict(1_000.0, running).feasible
    below = predict(1_000.0, running, replace(new, rate_eps=limit * 0.99))
    above = predict(1_000.0, running, replace(new, rate_eps=limit * 1.05))
    assert below.feasible
    assert [o.name for o in above.misses()] == ["a"]


def test_the_rate_limit_keeps_the_new_dataflow_itself_whole() -> None:
    # bulk misses already and does not count; n misses above 500 / 0.99 ms/s (its share).
    running = [flow("etl", "bulk", 2_000.0)]
    new = flow("n", "C", 100.0, cost=0.5)
    p = predict(1_000.0, running, new)
    limit = p.max_rate_eps
    assert limit is not None and limit == pytest.approx(500 / 0.99 / 0.5, rel=1e-9)
    below = by_name(predict(1_000.0, running, replace(new, rate_eps=limit * 0.99)))
    above = by_name(predict(1_000.0, running, replace(new, rate_eps=limit * 1.05)))
    assert below["n"].verdict != "misses" and above["n"].verdict == "misses"


def test_the_rate_limit_is_what_the_whole_pool_serves_at_most() -> None:
    p = predict(2_000.0, [], flow("n", "C", 10.0, cost=0.25))
    assert p.max_rate_eps == pytest.approx(8_000.0)
    assert p.outcomes[0].verdict == "meets"


def test_no_rate_fits_when_the_new_weight_alone_takes_another_floor() -> None:
    # a is within 1% of its demand; n at any rate lifts B's weight to 4, and B's larger
    # share leaves a 400 of its 505 ms/s.
    running = [flow("a", "A", 505.0), flow("b", "B", 600.0)]
    assert by_name(predict(1_000.0, running))["a"].verdict == "at_risk"
    p = predict(1_000.0, running, flow("n", "B", 0.0, weight=4.0))
    assert p.max_rate_eps == 0.0
    assert by_name(p)["a"].verdict == "misses"


def test_no_rate_limit_without_a_known_cost() -> None:
    running = [flow("a", "A", 400.0)]
    assert predict(1_000.0, running, flow("n", "C", None, cost=None)).max_rate_eps is None
    # A known cost is enough: the rate is what is asked for.
    unknown_rate = predict(1_000.0, running, flow("n", "C", None))
    assert unknown_rate.outcomes[-1].verdict == "unknown"
    assert unknown_rate.max_rate_eps == pytest.approx(600 / 0.99)
    free = Demand("n", "C", 1.0, 100.0, rate_eps=1e6, cost_ms_per_event=0.0)
    p = predict(1_000.0, running, free)
    assert p.max_rate_eps is None and p.outcomes[-1].sustainable_eps is None
    assert p.outcomes[-1].verdict == "meets"


def test_a_new_dataflow_measured_missing_fits_at_no_rate() -> None:
    p = predict(1_000.0, [], flow("n", "C", 10.0, within=0.5))
    assert p.max_rate_eps == 0.0


pools = st.lists(
    st.tuples(st.sampled_from("ABCD"), st.floats(0.0, 1_500.0), st.floats(0.1, 10.0)),
    min_size=0, max_size=6)


@settings(max_examples=150, deadline=None)
@given(pools, st.sampled_from("ABCDE"), st.floats(0.1, 10.0), st.floats(0.01, 5.0),
       st.integers(1, 4))
def test_the_rate_limit_is_a_boundary_on_any_pool(
        pool: list[tuple[str, float, float]], tenant: str, weight: float, cost: float,
        executors: int) -> None:
    capacity = 1_000.0 * executors
    running = [flow(f"d{i}", t, ms, weight=w) for i, (t, ms, w) in enumerate(pool)]
    new = Demand("new", tenant, weight, 500.0, rate_eps=1.0, cost_ms_per_event=cost)
    limit = predict(capacity, running, new).max_rate_eps
    assert limit is not None and 0.0 <= limit <= capacity / cost
    missing = {o.name for o in predict(capacity, running).misses()}

    def breaks(rate: float) -> bool:
        p = predict(capacity, running, replace(new, rate_eps=rate))
        return any(o.name not in missing for o in p.misses())

    if limit > 0:
        assert not breaks(limit * (1 - 1e-9))
    if limit < capacity / cost:
        assert breaks(min(limit * 1.001 + 1e-6, capacity / cost))
    # The prediction is coherent whatever the rate: what is given fits the pool.
    p = predict(capacity, running, replace(new, rate_eps=limit))
    given_ = sum(o.allocation_ms_per_s or 0.0 for o in p.outcomes)
    assert given_ <= capacity * (1 + 1e-9)
    for o in p.outcomes:
        assert (o.verdict == "misses") == (o.behind_s_per_s > 0)


# -- executors, validation, the wire -----------------------------------------------------------
def test_executors_needed_fit_the_known_demand_under_the_headroom() -> None:
    assert predict(1_000.0, [flow("a", "t", 1_800.0)]).executors_needed == 2
    assert predict(1_000.0, [flow("a", "t", 1_801.0)]).executors_needed == 3
    assert predict(1_000.0, [flow("a", "t", 1_600.0)], headroom=0.8).executors_needed == 2
    assert predict(1_000.0, [flow("a", "t", 0.0)]).executors_needed == 1
    assert predict(1_000.0, []).executors_needed is None


@pytest.mark.parametrize(("capacity", "words"), [
    (0.0, "predict: capacity_ms_per_s: expected a finite number > 0 (1,000 per executor), "
          "got 0.0"),
    (-1_000.0, "got -1000.0"), (math.inf, "got inf"), (math.nan, "got nan"),
    ("2000", "got '2000'"), (True, "got True"),
])
def test_predict_refuses_a_bad_capacity(capacity: float, words: str) -> None:
    with pytest.raises(ValueError, match=_literal(words)):
        predict(capacity, [flow("a", "t", 1.0)])


@pytest.mark.parametrize("headroom", [0.0, -0.5, 1.01, math.nan])
def test_predict_refuses_a_bad_headroom(headroom: float) -> None:
    with pytest.raises(ValueError, match=_literal(
            f"predict: headroom: expected a share in (0, 1], such as 0.9, got {headroom!r}")):
        predict(1_000.0, [], headroom=headroom)


@pytest.mark.parametrize(("bad", "words"), [
    (flow("x", "t", 1.0, weight=0.0),
     "predict: running[1] ('x').weight: expected a finite number > 0 (the dataflow's "
     "scheduling.weight), got 0.0"),
    (flow("x", "t", 1.0, weight=-2.0), "running[1] ('x').weight"),
    (flow("x", "t", 1.0, weight=math.nan), "running[1] ('x').weight"),
    (Demand("x", "t", 1.0, 100.0, rate_eps=-5.0, cost_ms_per_event=1.0),
     "running[1] ('x').rate_eps: expected None (unknown) or a finite number >= 0, got -5.0"),
    (Demand("x", "t", 1.0, 100.0, rate_eps=5.0, cost_ms_per_event=math.inf),
     "running[1] ('x').cost_ms_per_event"),
    (flow("x", "t", 1.0, within=1.5), "running[1] ('x').within_target: expected None "
                                      "(unknown) or a share in [0, 1], got 1.5"),
    (flow("x", "t", 1.0, target_ms=0.0), "running[1] ('x').target_ms"),
    (flow("a", "t", 1.0), "predict: running[1] ('a').name: expected a name not used by "
                          "another dataflow"),
    ("a", "predict: running[1]: expected a Demand, got 'a'"),
])
def test_predict_refuses_a_bad_dataflow(bad: Demand, words: str) -> None:
    with pytest.raises(ValueError, match=_literal(words)):
        predict(1_000.0, [flow("a", "t", 1.0), bad])


def test_predict_refuses_a_new_dataflow_that_is_running() -> None:
    with pytest.raises(ValueError, match=_literal("predict: new ('a').name: expected a name "
                                                  "not used by another dataflow (to predict "
                                                  "a dataflow as new, leave it out of running)")):
        predict(1_000.0, [flow("a", "t", 1.0)], flow("a", "t", 2.0))


def test_to_dict_is_json_ready_and_rounded() -> None:
    running = [flow("etl", "bulk", 3_000.0 + 1 / 3, cost=0.3), flow("web", "w", None),
               flow("m", "w", 1.0, within=0.5, p99_ms=2_000.0)]
    p = predict(2_000.0, running, flow("n", "x", 123.456, cost=0.7))
    d = json.loads(json.dumps(p.to_dict(), allow_nan=False))
    assert set(d) == {"feasible", "capacity_ms_per_s", "capacity_basis", "utilization",
                      "outcomes", "causes", "executors_needed", "max_rate_eps"}
    assert d["feasible"] is False
    assert [o["name"] for o in d["outcomes"]] == ["etl", "web", "m", "n"]
    etl = d["outcomes"][0]
    assert set(etl) == {"name", "tenant", "verdict", "demand_ms_per_s", "calls_ms_per_s",
                        "allocation_ms_per_s", "sustainable_eps", "behind_s_per_s", "reason"}
    assert etl["demand_ms_per_s"] == round(3_000.0 + 1 / 3, 2)
    assert d["outcomes"][1]["demand_ms_per_s"] is None
    assert d["causes"][0]["tenant"] == "bulk"
    assert set(d["causes"][0]) == {"tenant", "over_share_ms_per_s"}
    assert d["max_rate_eps"] <= p.max_rate_eps  # rounded down: still a rate that fits
    assert d["max_rate_eps"] == pytest.approx(p.max_rate_eps, abs=0.1)
    assert json.loads(json.dumps(predict(1_000.0, []).to_dict())) == {
        "feasible": True, "capacity_ms_per_s": 1_000.0, "utilization": None, "outcomes": [],
        "causes": [], "executors_needed": None, "max_rate_eps": None,
        "capacity_basis": "1,000 ms/s per executor"}


# -- the module itself -------------------------------------------------------------------------
def test_docstring_examples_run() -> None:
    result = doctest.testmod(admission, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted >= 3


def test_the_model_imports_the_standard_library_only() -> None:
    tree = ast.parse(Path(admission.__file__).read_text(encoding="utf-8"))
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    names |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom)}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, names



def test_a_dataflow_whose_calls_cost_most_is_told_to_batch() -> None:
    chatty = Demand("chatty", "t", 1.0, 50.0, 500.0, 0.1, calls_ms_per_s=150.0)
    quiet = Demand("quiet", "u", 1.0, 50.0, 500.0, 0.4, calls_ms_per_s=50.0)
    p = predict(2_000.0, [chatty, quiet], capacity_basis="the executors' CPU: measured")
    assert "75% of its cost is receiving the calls" in p.outcomes[0].reason
    assert "fewer, larger batches" in p.outcomes[0].reason
    assert "calls" not in p.outcomes[1].reason
    assert p.to_dict()["capacity_basis"] == "the executors' CPU: measured"
    assert p.to_dict()["outcomes"][0]["calls_ms_per_s"] == 150.0
    with pytest.raises(ValueError, match="calls_ms_per_s: expected None"):
        predict(2_000.0, [Demand("x", "t", 1.0, 50.0, 1.0, 1.0, calls_ms_per_s=-1.0)])


def test_calls_cost_per_second_whatever_the_rate() -> None:
    """A dataflow's calls are priced per second and paid before its events: a higher rate
    of the same dataflow adds only its operators' cost, and a starved one keeps up with
    what is left after its calls."""
    base = Demand("base", "a", 1.0, 1_000.0, 1_000.0, 0.2, calls_ms_per_s=300.0)
    assert base.demand_ms_per_s == pytest.approx(500.0)
    new = Demand("new", "b", 1.0, 1_000.0, None, 0.2, calls_ms_per_s=300.0)
    p = predict(2_000.0, [base], new, headroom=1.0)
    # Its tenant's share is 1,500 ms/s (base takes 500), less 300 for its calls; a tenant
    # given 99% of its demand is not short (rounding).
    assert p.max_rate_eps == pytest.approx((1_500.0 / 0.99 - 300.0) / 0.2, rel=1e-6)
    over = predict(1_000.0, [replace(new, rate_eps=10_000.0)])
    (o,) = over.outcomes
    assert o.verdict == "misses" and o.demand_ms_per_s == pytest.approx(2_300.0)
    assert o.sustainable_eps == pytest.approx((1_000.0 - 300.0) / 0.2)
    assert f"it keeps up with {700 / 0.2:,.0f} of 10,000 events/s" in o.reason
    calls_only = predict(100.0, [Demand("c", "c", 1.0, 50.0, 10.0, 0.0, calls_ms_per_s=300.0)])
    assert "receiving its calls alone needs more" in calls_only.outcomes[0].reason
    assert calls_only.outcomes[0].sustainable_eps is None
