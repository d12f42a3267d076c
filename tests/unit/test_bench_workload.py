"""bench/harness/workload.py (seeded event streams) and bench.scenarios.combine (medians over runs)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench.harness.workload import Workload
from bench.scenarios import combine


def test_same_seed_same_events_other_seed_other_events() -> None:
    w = Workload(2_000, 3, seed=5, zipf_s=1.0, disorder_ms=20)
    assert list(w.batches()) == list(Workload(2_000, 3, seed=5, zipf_s=1.0, disorder_ms=20).batches())
    assert list(w.batches()) != list(Workload(2_000, 3, seed=6, zipf_s=1.0, disorder_ms=20).batches())


def test_rates_of_each_profile() -> None:
    steady = Workload(1_000, 10, period_s=0.1)
    assert steady.total_events() == 10_000
    assert {len(b) for _, b in steady.batches()} == {100}
    bursty = Workload(1_000, 10, profile="bursty", burst_factor=5, burst_every_s=5, burst_s=1)
    assert bursty.bursts() == [(4.0, 5.0), (9.0, 10.0)]
    sizes = {round(t, 1): len(b) for t, b in bursty.batches()}
    assert sizes[3.9] == 100 and sizes[4.0] == 500 and sizes[4.9] == 500 and sizes[5.0] == 100
    assert bursty.total_events() == 8 * 1_000 + 2 * 5_000
    diurnal = Workload(1_000, 60, profile="diurnal", diurnal_s=60, amplitude=0.5)
    assert diurnal.rate_at(15) == pytest.approx(1_500) and diurnal.rate_at(45) == pytest.approx(500)
    assert diurnal.total_events() == pytest.approx(60_000, abs=2)


def test_zipf_skews_keys_and_uniform_does_not() -> None:
    def counts(zipf: float) -> Counter[str]:
        w = Workload(10_000, 5, keys=50, zipf_s=zipf, seed=1)
        return Counter(e["key"] for _, b in w.batches() for e in b)

    skewed, flat = counts(1.2), counts(0.0)
    assert skewed.most_common(1)[0][0] == "k0"
    assert skewed["k0"] > 5 * skewed["k10"]
    assert max(flat.values()) < 2 * min(flat.values())


def test_disorder_is_bounded_and_present() -> None:
    w = Workload(5_000, 2, disorder_ms=30, period_s=0.05, seed=3)
    lags = [int(t * 1000) - e["ts"] for t, b in w.batches(start_ms=0) for e in b]
    assert min(lags) == 0 and max(lags) <= 30
    assert len(set(lags)) > 10


def test_files_hold_every_event_in_order(tmp_path: Path) -> None:
    w = Workload(1_000, 2, seed=9)
    paths = w.write_files(str(tmp_path), start_ms=1_000, batches_per_file=5)
    assert [Path(p).name for p in paths] == [f"events-{i:06d}.json" for i in range(4)]
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines()]
    assert rows == [e for _, b in w.batches(start_ms=1_000) for e in b]
    assert not list(tmp_path.glob(".*"))  # no half-written file left behind


def test_bad_workloads_are_refused() -> None:
    with pytest.raises(ValueError, match="profile"):
        Workload(1, 1, profile="spiky")
    with pytest.raises(ValueError, match="period_s"):
        Workload(1, 1, period_s=0)


def _run(p99: float, fifo_ratio: float) -> dict:
    df = {"p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": p99, "max_ms": 2 * p99, "within_target": 1.0,
          "throughput_eps": 10.0, "latency_sensitive": True}
    return {"cameo": {"utilization": 0.5, "dataflows": {"a": dict(df)}},
            "ratios": {"fifo_over_cameo_p99": fifo_ratio, "isolated_over_cameo_p99": None}}


def test_combine_takes_medians_and_the_spread() -> None:
    out = combine([_run(3.0, 10.0), _run(1.0, 30.0), _run(2.0, 20.0)])
    d = out["cameo"]["dataflows"]["a"]
    assert d["p99_ms"] == 2.0 and d["p99_ms_runs"] == [3.0, 1.0, 2.0] and d["max_ms"] == 4.0
    assert out["ratios"] == {"fifo_over_cameo_p99": 20.0, "isolated_over_cameo_p99": None}
    assert out["ratios_spread"]["fifo_over_cameo_p99"] == [10.0, 30.0]
    assert out["runs"] == 3
    one = _run(5.0, 2.0)
    assert combine([one]) is one


def test_combine_keeps_each_level_and_shape_of_the_skew_scenario_apart() -> None:
    def skew_run(p99: float, ratio: float) -> dict:
        levels = {lvl: {"shapes": {s: _run(p99 * k, ratio * k) for s in ("in_order", "skewed")},
                        "ratios": _run(p99 * k, ratio * k)["ratios"]}
                  for lvl, k in (("0.30", 1.0), ("0.55", 2.0))}
        return {"levels": levels, "ratios": levels["0.55"]["ratios"], "skew": {"sources": 4}}
    out = combine([skew_run(1.0, 1.0), skew_run(3.0, 3.0)])
    skewed = out["levels"]["0.30"]["shapes"]["skewed"]
    assert skewed["cameo"]["dataflows"]["a"]["p99_ms"] == 2.0 and skewed["ratios_spread"][
        "fifo_over_cameo_p99"] == [1.0, 3.0]
    assert out["ratios"]["fifo_over_cameo_p99"] == 4.0  # the highest level's, median
    assert out["ratios_spread"]["fifo_over_cameo_p99"] == [2.0, 6.0] and out["runs"] == 2


def test_the_in_process_core_benchmark_runs_the_query_to_run_locals_results() -> None:
    from bench.throughput import dataflow, make_events, run_core
    from cameo_actors import run_local

    events = make_events(5_000)
    core = run_core(events, batch=700)
    got = [row[0] for log in core.egress.dataflows["core"].results.values()
           for row in log.read(0)]
    expected = run_local(dataflow("core"), {"s": events}).sinks
    assert sorted(map(repr, got)) == sorted(map(repr, next(iter(expected.values()))))
    assert core.stats.dataflows["core"].events_in == len(events) and got


def test_a_ratio_is_refused_for_runs_far_from_the_stated_load() -> None:
    import doctest

    from bench import scenarios

    assert scenarios.off_load({"fifo": 0.80, "cameo": 0.95, "floor": 0.71}, 0.85) is None
    why = scenarios.off_load({"fifo": 0.42, "cameo": 0.39, "isolated": 0.1}, 0.85)
    assert why == ("the executors were fifo 42% busy (load 42%), cameo 39% busy (load 39%), "
                   "not 85% (within 15%): no ratio")
    assert scenarios.off_load({"fifo": 0.72, "cameo": 0.75}, 0.85, flat_out=0.85) is None
    assert doctest.testmod(scenarios).failed == 0


@pytest.mark.parametrize("state", ["window", "process", "join", "session"])
def test_the_recovery_benchmarks_state_steps_keep_what_they_say(state: str) -> None:
    """bench.recovery's bulk: each key's events come `keys` apart; the day window and the
    day-gap session fire one row per key at the end, the process at each key's 2nd event
    (of 3 here), the interval join one pair per event with its key's next one."""
    from bench.recovery import STATE_SINK, bulk_dataflow, make_events
    from cameo_actors.testing import run_local

    keys = 400
    rows = run_local(bulk_dataflow("b", 0, state=state, keys=keys),
                     {"events": make_events(0, 3 * keys, keys)}).sinks[STATE_SINK]
    assert len(rows) == {"join": 2 * keys}.get(state, keys)
    assert len({r["key"] for r in rows}) == keys
    if state == "join":  # each of a key's 3 events with its next one
        assert set(Counter(r["key"] for r in rows).values()) == {2}
    else:
        assert {r["n"] for r in rows} == {2 if state == "process" else 3}
