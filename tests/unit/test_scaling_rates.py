"""The scaling loop's measurements, pure: DS2's counters per activation become each
step's observed and true rates, busy shares and backlogs; a source's offered rate
adds the growth of its writers' backlog; a rate still changing holds the decision."""

from __future__ import annotations

import pytest

from cameo_actors import Dataflow, count
from cameo_actors.runtime._private.controller.scaling import RateTracker
from cameo_actors.runtime._private.placement import place
from cameo_actors.runtime.boundary import ActivationId


def flow() -> Dataflow:
    return (Dataflow("df", latency_target_ms=500, tenant="t")
            .source("s", schema={"ts": "int", "k": "int"}, event_time="ts")
            .key_by("k").window(tumbling_ms=100, id="w", parallelism=2)
            .aggregate(n=count()).sink("o"))


def counters(t: float, source_in: float, w_in: float, w_proc_ms: float) -> dict:
    """[events in, out, processing ms, deser ms, ser ms, queue ms, events waiting, events
    arrived, results, within, read at] at time t; the source has 100 events waiting, the
    sink writes 100 results a second, 90 of them within target."""
    return {"df": {
        "df/s/0": [source_in, source_in, 0.1 * source_in, 0.0, 0.0, 0.0, 100, source_in + 100,
                   0, 0, t],
        "df/w/0": [w_in / 2, w_in / 20, w_proc_ms / 2, 10.0 * t, 5.0 * t, 1.0, 30, 0, 0, 0, t],
        "df/w/1": [w_in / 2, w_in / 20, w_proc_ms / 2, 10.0 * t, 5.0 * t, 1.0, 10, 0, 0, 0, t],
        "df/o/0": [100.0 * t, 0, 0.0, 0.0, 0.0, 0.0, 0, 0, 100.0 * t, 90.0 * t, t],
    }}


def test_rates_true_rates_busy_and_backlog_of_a_step_from_counter_differences() -> None:
    spec = flow().spec
    placement = place(spec, [0, 1], {}, bins=64)
    rates = RateTracker(window_s=4.0)
    for t in range(6):  # 1,000 events/s in, each window instance busy 0.4 s/s processing
        rates.observe(float(t), counters(t, 1000.0 * t, 1000.0 * t, 800.0 * t))
    m = rates.measure(5.0, spec, placement, {})
    (src,) = m.sources
    assert src.rate_eps == pytest.approx(1000.0)
    assert src.backlog_events == pytest.approx(100.0)  # accepted, not yet run
    w = next(s for s in m.steps if s.step == "w")
    assert w.scalable and w.parallelism == 2 and w.inputs == ("key_by_1",)
    assert w.events_in_eps == pytest.approx(1000.0)
    assert w.events_out_eps == pytest.approx(100.0)
    # useful = processing 800 + deserialization 20 + serialization 10 ms per second
    assert w.useful_ms_per_s == pytest.approx(830.0)
    assert w.true_processing_eps == pytest.approx(1000.0 / 0.83)
    assert w.instance_busy == pytest.approx((0.415, 0.415))
    assert w.backlog_events == 40
    assert m.within_target == pytest.approx(0.9)


def test_writers_backlog_growth_is_offered_rate_and_a_changing_rate_is_not_steady() -> None:
    spec = flow().spec
    placement = place(spec, [0], {}, bins=64)
    rates = RateTracker(window_s=4.0)
    for t in range(6):  # steady ingest, a writer falling behind by 500 events/s
        rates.observe(float(t), counters(t, 1000.0 * t, 1000.0 * t, 500.0 * t))
        rates.report_backlog(float(t), "df", "s", 500.0 * t)
    m = rates.measure(5.0, spec, placement, {})
    assert m.sources[0].backlog_events == pytest.approx(2500.0 + 100.0)
    assert m.sources[0].backlog_growth_eps == pytest.approx(500.0)
    assert rates.steady(spec, placement)
    stepped = RateTracker(window_s=4.0)
    total = 0.0
    for t in range(6):  # 500 events/s, then 2,000 from t = 3
        total += 500.0 if t < 3 else 2000.0
        stepped.observe(float(t), counters(t, total, total, 0.5 * total))
    assert not stepped.steady(spec, placement)


def test_counters_that_restart_start_the_window_over_and_lessees_count_with_their_step() -> None:
    spec = flow().spec
    placement = place(spec, [0, 1], {}, bins=64)
    rates = RateTracker(window_s=10.0)
    for t in range(3):
        rates.observe(float(t), counters(t, 1000.0 * t, 1000.0 * t, 100.0 * t))
    lessee = str(ActivationId("df", "w", 5))
    after = counters(3, 10.0, 10.0, 1.0)  # restored from a checkpoint: counters from 0
    after["df"][lessee] = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0.0, 0, 0, 3.0]
    rates.observe(3.0, after)
    later = counters(4, 1010.0, 1010.0, 101.0)
    later["df"][lessee] = [300.0, 0.0, 100.0, 0.0, 0.0, 0.0, 0, 0.0, 0, 0, 4.0]
    rates.observe(4.0, later)
    m = rates.measure(4.0, spec, placement, {"w": [lessee]})
    w = next(s for s in m.steps if s.step == "w")
    assert w.lessees == 1
    assert w.events_in_eps == pytest.approx(1300.0)  # since the restart, the lessee's too
