"""Prometheus families from a runtime snapshot: cumulative buckets in seconds, tenant filter."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors.runtime.boundary import LATENCY_BUCKETS_MS
from cameo_actors.service.metrics import histogram_buckets, render


def snapshot() -> dict[str, Any]:
    counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
    counts[0], counts[4], counts[-1] = 2, 5, 1  # <=1 ms, <=20 ms, > 10 s
    return {
        "dataflows": [
            {"name": "alerts", "tenant": "ops", "target_ms": 50, "weight": 2.0, "results": 8,
             "within_target_count": 7, "sum_ms": 12_080.0, "buckets": counts, "p50_ms": 15.0,
             "p95_ms": 40.0, "p99_ms": None, "events_in": 100, "events_out": 8, "backlog": 3,
             "errors": {"logs:malformed": 4, "f.x:operator_failure": 1}},
            {"name": "bulk", "tenant": "analytics", "target_ms": 1000, "weight": 1.0, "results": 0,
             "within_target_count": 0, "sum_ms": 0.0, "buckets": [0] * len(counts),
             "p50_ms": None, "p95_ms": None, "p99_ms": None, "events_in": 0, "events_out": 0,
             "backlog": 0, "errors": {}},
        ],
        "executors": [
            {"executor": 0, "node": "a" * 56, "activations": 3, "backlog": 4, "executed": 10,
             "slices": 5, "preempted": 2, "overdue": 6, "busy_ms": 2500.0, "overhead_ms": 5.0,
             "overhead_us_per_message": 12.5, "held": 1, "faults": ["boom"]},
            {"executor": 1, "node": "b" * 56, "activations": 1, "backlog": 0, "executed": 0,
             "slices": 0, "preempted": 0, "overdue": 0, "busy_ms": 0.0, "overhead_ms": 0.0,
             "overhead_us_per_message": None, "held": 0, "faults": []},
        ],
    }


def parse(text: bytes) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


def test_buckets_become_cumulative_seconds_ending_in_inf() -> None:
    counts = [1] * (len(LATENCY_BUCKETS_MS) + 1)
    got = histogram_buckets(counts)
    assert got[0] == ("0.001", 1) and got[9] == ("1", 10) and got[-2] == ("10", 13)
    assert got[-1] == ("+Inf", 14)
    with pytest.raises(ValueError, match="expected 14 counts"):
        histogram_buckets([1, 2])


def test_admin_scrape_has_dataflow_and_executor_families() -> None:
    fams = parse(render(snapshot, timer=iter([1.0, 1.008]).__next__))
    lat = {(s.labels["dataflow"], s.labels.get("le")): s.value
           for s in fams["cameo_result_latency_seconds"].samples}
    assert lat[("alerts", "0.001")] == 2 and lat[("alerts", "0.02")] == 7
    assert lat[("alerts", "10")] == 7 and lat[("alerts", "+Inf")] == 8
    sums = [s.value for s in fams["cameo_result_latency_seconds"].samples if s.name.endswith("_sum")]
    assert sums[0] == pytest.approx(12.08)
    within = {s.labels["dataflow"]: s.value for s in fams["cameo_results_within_target"].samples}
    assert within == {"alerts": 7, "bulk": 0}
    target = {s.labels["dataflow"]: s.value for s in fams["cameo_latency_target_seconds"].samples}
    assert target == {"alerts": 0.05, "bulk": 1.0}
    errors = {(s.labels["step"], s.labels["kind"]): s.value for s in fams["cameo_errors"].samples}
    assert errors == {("logs", "malformed"): 4, ("f.x", "operator_failure"): 1}
    quantiles = {s.labels["quantile"] for s in fams["cameo_result_latency_recent_seconds"].samples}
    assert quantiles == {"0.5", "0.95"}  # p99 unknown: left out, not zero
    busy = {s.labels["executor"]: (s.labels["node"], s.value)
            for s in fams["cameo_executor_busy_seconds"].samples}
    assert busy == {"0": ("a" * 12, 2.5), "1": ("b" * 12, 0.0)}
    faults = {s.labels["executor"]: s.value for s in fams["cameo_executor_faults"].samples}
    assert faults == {"0": 1, "1": 0}
    overdue = {s.labels["executor"]: s.value for s in fams["cameo_executor_overdue"].samples}
    assert overdue == {"0": 6, "1": 0}
    assert fams["cameo_scrape_duration_seconds"].samples[0].value == pytest.approx(0.008)


def test_tenant_scrape_sees_only_its_dataflows_and_no_executors() -> None:
    fams = parse(render(snapshot, tenant="analytics", include_executors=False))
    names = {s.labels.get("dataflow") for f in fams.values() for s in f.samples} - {None}
    assert names == {"bulk"}
    assert not any(n.startswith("cameo_executor") for n in fams)


def test_labels_stay_low_cardinality() -> None:
    fams = parse(render(snapshot))
    allowed = {"dataflow", "tenant", "le", "quantile", "step", "kind", "executor", "node"}
    for f in fams.values():
        for s in f.samples:
            assert set(s.labels) <= allowed, (f.name, s.labels)
