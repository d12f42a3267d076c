"""bench.cameo's scenarios, a few seconds each (a random mix among them), bench.migration --smoke, bench.recovery
--smoke (small state), bench.scaling --smoke, bench.critical_path (one short round, one
run), bench.nexmark --quick (two queries, checked against DuckDB) and bench.soak (half a
minute, a migration and a kill), in-process on the session's Ray: the shape and sanity of
the results, not their speed."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from bench import critical_path, migration, mixes, nexmark, recovery, scaling, scenarios, soak
from bench.harness.cluster import ensure_ray
from bench.harness.tenants import PROBE_EPS, measure_capacity

pytestmark = pytest.mark.integration

# A fixed offered scale, no calibration (the figures are not checked), and small: at 20,000
# events/s the runs offered more than this machine takes, and each mode's backlog drained
# for seconds after its measured ones.
CAPACITY = 5_000.0
FIELDS = ("p50_ms", "p95_ms", "p99_ms", "max_ms", "within_target", "throughput_eps", "target_ms",
          "latency_sensitive")


def check_modes(res: dict[str, Any], modes: tuple[str, ...], policies: dict[str, str]) -> None:
    for mode in modes:
        m = res[mode]
        assert m["policy"] == policies[mode]
        assert 0.0 <= m["utilization"] <= 1.0
        assert m["dataflows"]
        for name, d in m["dataflows"].items():
            for f in FIELDS:
                assert f in d, (mode, name, f)
            assert 0 <= d["p50_ms"] <= d["p95_ms"] <= d["p99_ms"] <= d["max_ms"], (mode, name, d)
            assert d["p99_ms"] > 0
            assert 0.0 <= d["within_target"] <= 1.0
            assert d["throughput_eps"] > 0
            assert d["target_ms"] > 0
            assert isinstance(d["latency_sensitive"], bool)
            assert d["p99_from_event_ms"] >= d["p50_from_event_ms"] > 0
            assert 0.0 <= d["within_target_from_event"] <= 1.0
    assert set(res["ratios"]) == {"fifo_over_cameo_p99", "floor_over_cameo_p99",
                                  "isolated_over_cameo_p99"}


def check_ratios(res: dict[str, Any]) -> None:
    for v in res["ratios"].values():
        assert v is not None and v > 0 and math.isfinite(v)


def check_load(res: dict[str, Any], load: float) -> None:
    """A ratio is reported only at the stated load (a fixed capacity here: either way)."""
    refused = scenarios.off_load({m: res[m]["utilization"] for m in POLICIES if m in res}, load)
    assert res["stated_load"] == pytest.approx(load) and res.get("load_refused") == refused
    if refused:
        assert all(v is None for v in res["ratios"].values())
    else:
        check_ratios(res)


POLICIES = {"fifo": "fifo", "cameo": "cameo", "floor": "cameo", "isolated": "fifo"}


def test_latency_scenarios(ray_session: None) -> None:
    ensure_ray()  # Ray is up already: must not start another
    for fn, tune in ((scenarios.single, True), (scenarios.multi, False)):
        said: list[str] = []
        probe = {"probe_s": 1.0} if tune else {}
        res = fn(CAPACITY, 0.5, 1.5, log=said.append, tune=tune, **probe)
        check_modes(res, tuple(POLICIES), POLICIES)
        check_load(res, 0.85)
        assert [res[m]["tenant_floor"] for m in POLICIES] == [False, False, True, False]
        # single: the load offered was tuned by a probe of its mix, and says so
        assert any(line.lstrip().startswith("probe:") for line in said) == tune


def test_capacity_is_measured_flat_out(ray_session: None) -> None:
    capacity = measure_capacity(1.0)
    # An executor's busy time counts a message when it ends: one that ran across the start of
    # the 1 s measured counts in it whole, so a pool busy all the time reads a little over 1.
    assert capacity.eps > PROBE_EPS and 0.0 < capacity.busy <= 1.05


def test_spike(ray_session: None) -> None:
    res = scenarios.spike(CAPACITY, 0.5, 2.0, every_s=1.5, spike_s=0.5, log=lambda _: None)
    check_modes(res, tuple(POLICIES), POLICIES)
    check_load(res, min(1.0, 0.6 * (1.0 + 4 * 0.5) / 1.5))  # the mean offered, at most capacity
    for mode in POLICIES:
        series = res[mode]["dataflows"]["alerts"]["p99_series_ms"]
        assert len(series) == 2 and any(v is not None and v > 0 for v in series)
        assert res[mode]["dataflows"]["bulk"]["spikes_s"]


def test_fair(ray_session: None) -> None:
    res = scenarios.fair(CAPACITY, 1.5, stagger_s=0.5, log=lambda _: None)
    check_modes(res, ("fifo", "cameo"), {"fifo": "fifo", "cameo": "fair_share"})
    assert res["ratios"] == {"fifo_over_cameo_p99": None, "floor_over_cameo_p99": None,
                             "isolated_over_cameo_p99": None}
    for mode in ("fifo", "cameo"):
        shares = res[mode]["final_shares"]
        assert set(shares) == {"bulk-a", "bulk-b", "bulk-c"}
        assert all(0.0 <= s <= 1.0 for s in shares.values())
        assert sum(shares.values()) == pytest.approx(1.0, abs=0.01)
        for d in res[mode]["dataflows"].values():
            assert d["throughput_series_eps"] and all(x >= 0 for x in d["throughput_series_eps"])
            assert d["busy_series_ms"] and all(x >= 0 for x in d["busy_series_ms"])


def test_overload(ray_session: None) -> None:
    # 120% of half the scale: the shape of an overload run with little backlog to drain
    # after each mode's (at 150% of the full scale, a third of the test was draining).
    res = scenarios.overload(CAPACITY / 2, 0.5, 2.0, levels=(1.2,), log=lambda _: None)
    level = res["levels"]["1.20"]
    assert level["stated_load"] == 1.2 and level.get("load_refused") == scenarios.off_load(
        {m: level[m]["utilization"] for m in ("fifo", "cameo", "floor")}, 1.2)
    # (No check_modes: under cameo a starved tenant may have no results at all.)
    assert [level[m]["policy"] for m in ("fifo", "cameo", "floor")] == ["fifo", "cameo", "cameo"]
    names = {n for n, _ in scenarios.OVERLOAD_SENSITIVE} | {n for n, _, _ in scenarios.OVERLOAD_BULK}
    for mode in ("fifo", "cameo", "floor"):
        dfs = level[mode]["dataflows"]
        assert set(dfs) == names
        assert sum(d["share"] for d in dfs.values()) == pytest.approx(1.0, abs=0.01)
        for d in dfs.values():
            assert 0.0 <= d["fair_share"] <= 1.0
            assert d["share_of_fair"] is None or 0.0 <= d["share_of_fair"] <= 1.0


def test_a_random_mix_near_its_capacity(ray_session: None) -> None:
    # The hold-out in its short form: a mix drawn from a seed, its capacity searched for
    # with 1 s probes, then run under the default beside fifo; printed, with the worst
    # tenant's share within target and of its weighted fair share.
    tenants, load = mixes.random_mix(11)
    said: list[str] = []
    res = scenarios.mix(CAPACITY, 0.5, 3.0, tenants, load, log=said.append, probe_s=1.0,
                        modes=("fifo", "floor"))
    print("\n".join(said))
    low, high = scenarios.MIX_RANGE
    assert low * CAPACITY <= res["mix"]["capacity"]["eps"] <= high * CAPACITY
    assert len(res["mix"]["capacity"]["probes"]) == scenarios.MIX_PROBES
    assert [res[m]["policy"] for m in ("fifo", "floor")] == ["fifo", "cameo"]
    for mode in ("fifo", "floor"):
        dfs = res[mode]["dataflows"]
        assert set(dfs) == {t.name for t in tenants}
        assert all(d["results"] > 0 and d["throughput_eps"] > 0 for d in dfs.values())
        assert 0.0 <= res[mode]["worst_within_target"] <= 1.0
        assert res[mode]["worst_within_target"] == min(d["within_target"] for d in dfs.values())
        assert 0.0 < res[mode]["min_share_of_fair"] <= 1.0
        assert sum(d["share"] for d in dfs.values()) == pytest.approx(1.0, abs=0.01)
        assert res[mode]["cpu"]["cpu_s_by_role"]["executors"] > 0


MIGRATION_FIELDS = ("steady_p99_ms", "migration_p99_ms", "migration_max_ms", "alerts_p99_ms",
                    "duration_s", "bytes_moved", "peak_rss_mb", "migration_over_steady_p99")


def test_migration(ray_session: None, tmp_path: Path) -> None:
    """bench.migration --smoke, two strategies (the bench's own branch for stop_the_world, and
    batched; test_reconfig.py moves bins by every strategy) on both state backends at a
    given capacity (no saturation run): each moved its bins and kept its results."""
    out = tmp_path / "migration.json"
    strategies = ("batched", "stop_the_world")
    migration.main(["--smoke", "--strategies", ",".join(strategies), "--capacity", "20000",
                    "--backends", "memory,rocksdb", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert set(figures["strategies"]) == {*strategies, *(f"{x}@rocksdb" for x in strategies)}
    for name, r in figures["strategies"].items():
        assert r["completed"] is True, (name, r["note"])
        assert r["results_match"] is True, (name, r["result_rows"], r["expected_rows"],
                                            r["windows_differing"])
        for f in MIGRATION_FIELDS:
            assert isinstance(r[f], (int, float)) and math.isfinite(r[f]) and r[f] >= 0, (name, f, r[f])
        assert isinstance(r["alerts_within_target"], bool)
        assert r["bins_moved"] == r["bins_total"] > 0
        assert set(r["hosts_after"].values()) == {0, 1}
    assert set(figures["goals"]) >= {"batched_p99_within_2x_steady", "batched_alerts_within_target",
                                     "batched_p99_within_2x_steady_rocksdb"}


CHECKPOINT_FIELDS = ("throughput_off_eps", "throughput_on_eps", "checkpoint_overhead",
                     "alerts_p99_off_ms", "alerts_p99_on_ms", "alerts_p99_ratio", "busy_off",
                     "busy_on", "steady_checkpoint_mb", "steady_checkpoint_s")
RECOVERY_FIELDS = (*CHECKPOINT_FIELDS, "recovery_s", "restore_s", "detect_s", "checkpoint_mb",
                   "checkpoint_s", "replayed_events")


def test_recovery(ray_session: None, tmp_path: Path) -> None:
    """bench.recovery --smoke, small state only, on each state backend (about a minute
    each): every figure measured, the dataflow whose executor was killed restored, its
    results equal to run_local's."""
    out = tmp_path / "recovery.json"
    recovery.main(["--smoke", "--sizes", "small", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert [(r["backend"], r["size"], r["interval_s"], r["parts"]) for r in figures["table"]] == \
        [(b, "small", 1.0, parts) for b in ("memory", "rocksdb") for parts in ("incremental", "full")]
    for r in figures["table"]:
        assert r["error"] is None, r["error"]
        measured = RECOVERY_FIELDS if r["parts"] == "incremental" else CHECKPOINT_FIELDS
        assert r["results_match"] is (True if r["parts"] == "incremental" else None), r
        for f in measured:
            assert isinstance(r[f], (int, float)) and math.isfinite(r[f]) and r[f] >= 0, (f, r[f])
    for backend in ("memory", "rocksdb"):
        rec = figures["backends"][backend]["sizes"]["small"]["recovery"]["1.0"]
        assert rec["recoveries"] == 1 and rec["final_state"] == "finished"
        assert rec["result_rows"] == rec["expected_rows"]
        assert rec["alerts_kept_running"] is True
        assert 0 < rec["detect_s"] <= rec["recovery_s"]
        assert rec["rss_mb_before"] > 0
    assert set(figures["goals"]) == {"recovery_under_5s_large_state",
                                     "checkpoint_overhead_under_10pct", "alerts_p99_within_1_2x"}


SCALING_FIELDS = ("decisions", "actions", "deadline_actions", "seconds_to_converge", "overshoot",
                  "oscillations", "backlog_max_events", "within_target", "timeline", "optimum",
                  "results_equal", "p99_ms_per_s")
SAMPLE_FIELDS = ("t_s", "offered_eps", "parallelism", "executors", "lag_events", "pool_backlog")


def test_scaling(ray_session: None, tmp_path: Path) -> None:
    """bench.scaling --smoke (under a minute; its own pools on the session's Ray): both
    policies and both hot-key runs measured, every figure there, results equal to
    run_local's. The plumbing only: 1.5 s phases are too short to judge the policies."""
    out = tmp_path / "scaling.json"
    res = scaling.main(["--smoke", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["summary"] == res["summary"]
    assert set(figures["policies"]) == set(scaling.POLICIES)
    for policy, r in figures["policies"].items():
        for f in SCALING_FIELDS:
            assert f in r, (policy, f)
        assert r["results_equal"] is True, (policy, r["result_rows"], r["expected_rows"])
        assert r["optimum"] == [1, 2, 4, 2, 1]
        phases = len(r["optimum"])
        for f in ("decisions", "actions", "deadline_actions", "seconds_to_converge", "overshoot"):
            assert len(r[f]) == phases, (policy, f)
        assert all(x >= 0 for x in r["seconds_to_converge"] + r["overshoot"])
        assert r["oscillations"] >= 0 and r["backlog_max_events"] >= 0
        assert r["within_target"] is not None and 0.0 <= r["within_target"] <= 1.0
        assert r["timeline"] and all(f in x for x in r["timeline"] for f in SAMPLE_FIELDS)
        assert all(x["parallelism"] >= 1 for x in r["timeline"])
    assert set(figures["summary"]) == set(scaling.POLICIES)
    assert set(figures["goals"]) == {"ds2_at_most_2_actions_per_step", "ds2_no_oscillation",
                                     "ds2_ahead_of_threshold", "lessee_speedup_at_least_1_5",
                                     "capped_rate_taken_within_60_s", "capped_at_most_3_actions",
                                     "capped_no_oscillation", "capped_results_match"}
    capped = figures["capped"]  # 3 s: too short for the loop to act, the plumbing only
    assert capped["results_match"] is True and capped["optimum"] == 4
    assert capped["offered_eps"] == 3 * capped["capacity_eps"] and capped["timeline"]
    assert capped["actions"] == len(capped["decisions"]) >= 0
    hot = figures["hot_key"]
    assert hot["without"]["results_equal"] is True
    assert hot["without"]["throughput_eps"] > 0
    if hot.get("lessees") == scaling.NOT_AVAILABLE:
        assert hot["lessee_speedup"] is None
    else:
        assert hot["with"]["results_equal"] is True
        assert hot["lessee_speedup"] > 0 and math.isfinite(hot["lessee_speedup"])
    assert not scaling.mismatches(figures)


def test_critical_path(ray_session: None, tmp_path: Path) -> None:
    out = tmp_path / "critical_path.json"
    res = critical_path.main(["--rounds", "1", "--seconds", "1", "--runs", "1", "--json",
                              str(out)])
    assert json.loads(out.read_text())["precision_at_1"] == res["precision_at_1"]
    for mode in ("traced", "read"):
        o = res["tracing_overhead"][mode]
        assert o["throughput_over_untraced"] > 0 and math.isfinite(o["throughput_over_untraced"])
    row = res["rounds"][0]
    assert all(row[m]["bulk_eps"] > 0 for m in ("untraced", "traced", "read"))
    assert res["analysis_activities_per_s"] > 0 and res["traced_activities_per_s"] > 0
    (run,) = res["straggler_runs"]
    assert run["straggler"] == "parse" and run["results"] > 0
    assert isinstance(run["hit"], bool)  # whether it ranks first: test_critical_path asserts it
    assert res["precision_at_1"] == float(run["hit"])


def test_nexmark(ray_session: None, tmp_path: Path) -> None:
    """bench.nexmark --quick on two queries, small: every mode (rows and Arrow pushes on
    Ray) measured and checked against the DuckDB reference (a mismatch would exit)."""
    out = tmp_path / "nexmark.json"
    res = nexmark.main(["--quick", "--events", "5000", "--query", "q1", "q7", "--executors", "1,2",
                        "--scale-queries", "q7", "--json", str(out)])
    assert json.loads(out.read_text())["queries"].keys() == {"q1", "q7"}
    # Every process's CPU per Ray arm; q7 on two executors (parallelism 2) too, checked.
    assert set(res["queries"]["q1"]["cpu"]) == {"ray_x1", "ray_x1_arrow"}
    assert set(res["queries"]["q7"]["cpu"]) == {"ray_x1", "ray_x1_arrow", "ray_x2", "ray_x2_arrow"}
    for c in res["queries"]["q7"]["cpu"].values():
        assert c["events"] == 5000 and c["cpu_s_all"] > 0 and c["wall_s"] > 0
    for q in res["queries"].values():
        assert q["checked"] is True and q["results"] > 0
        for mode in ("in_process", "ray", "ray_busy", "ray_cpu", "ray_arrow", "ray_arrow_busy",
                     "ray_arrow_cpu"):
            assert q[mode]["per_core"] > 0 and math.isfinite(q[mode]["per_core"]), mode
    # The peers' figures are published ones: each names its set-up and source, and the
    # table puts ours beside Flink's.
    assert all(p["setup"] and p["source"].startswith("https://") for p in res["peers"].values())
    q1 = next(line for line in nexmark.table(res).splitlines() if line.startswith("| q1 |"))
    assert f"{res['queries']['q1']['ray']['per_core'] / 1e3:,.1f} K" in q1
    assert q1.endswith(f"| {nexmark.PEERS['flink-1.13']['per_core_eps']['q1'] / 1e3:,.0f} K |")


def test_soak(ray_session: None, tmp_path: Path) -> None:
    """bench.soak for half a minute: 4 dataflows of the 4 kinds, a migration and a kill;
    every dataflow finished, the checked ones exactly run_local's, every figure sampled."""
    out = tmp_path / "soak.json"
    soak.main(["--minutes", "0.5", "--dataflows", "4", "--chaos-every", "9", "--run-dir",
               str(tmp_path / "run"), "--json", str(out)])
    res = json.loads(out.read_text())
    assert res["states"] == {"finished": 4}
    assert res["chaos"][0][1].startswith("scale") and res["chaos"][1][1].startswith("killed")
    assert res["results_exact"] == {"soak-00": True}
    assert len(res["samples"]) >= 3
    for key in ("checkpoints_bytes", "ingress_bytes", "state_bytes", "rss_mb:controller",
                "open_files:executor-0"):
        assert res["growth"][key]["max"] > 0, key
    assert set(res["within_target"]) == {f"soak-0{i}" for i in range(4)}
