"""bench.placement's table: per placement, each tight tenant's executors and share within
target over the rounds."""

from __future__ import annotations

from typing import Any

from bench.tables import placement as placement_table


def arm(filter_on: list[int], within: float, busy: float) -> dict[str, Any]:
    def df(executors: list[int], share: float, bulk: bool = False) -> dict[str, Any]:
        return {"executors": executors, "within_target": share, "latency_sensitive": not bulk}
    return {"utilization": busy, "cpu": {"cores_busy": 1.8},
            "dataflows": {"filter-50": df(filter_on, within), "window-300": df([1], 1.0),
                          "bulk-1s": df([0, 1], 1.0, bulk=True)}}


def test_the_table_has_a_row_per_placement_with_the_tight_tenants_rounds_at_99() -> None:
    figures = {"arms": ["targets_apart", "even"], "bulk_eps": 8_500.0, "share": 0.25,
               "bulk_alone_eps": 34_000.0,
               "tenants": [{"name": "filter-50", "kind": "filter", "target_ms": 50.0},
                           {"name": "window-300", "kind": "window", "target_ms": 300.0},
                           {"name": "bulk-1s", "kind": "bulk", "target_ms": 1000.0}],
               "rounds": [{"targets_apart": arm([0], 0.995, 0.5), "even": arm([1], 0.97, 0.6)},
                          {"targets_apart": arm([0], 0.989, 0.5), "even": arm([1], 0.992, 0.6)}]}
    lines = placement_table.table(figures)
    assert lines[0].startswith("| placement | filter-50: executor, within target (lowest) | "
                               "window-300: executor, within target (lowest) | rounds with "
                               "filter-50 at 99% or more |")
    assert lines[2] == ("| tight targets apart (the default) | 0, 99.2% (98.9%) | 1, 100.0% "
                        "(100.0%) | 1 of 2 | 50% | 1.80 |")
    assert lines[3].startswith("| the least loaded executor (before) | 1, 98.1% (97.0%) |")
    assert "8,500 events/s, 25% of what bulk alone took in flat out (34,000)" in lines[-1]
