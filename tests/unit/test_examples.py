"""The example dataflows and events that the demos and benchmarks share."""

from __future__ import annotations

from cameo_actors.examples import SCHEMA, alerts_dataflow, bulk_dataflow, generate
from cameo_actors.testing import run_local


def test_events_are_reproducible_and_fit_the_schema() -> None:
    events = generate(1000, start_ms=100, rate_per_ms=2.0, seed=3)
    assert events == generate(1000, start_ms=100, rate_per_ms=2.0, seed=3)
    assert events != generate(1000, start_ms=100, rate_per_ms=2.0, seed=4)
    assert all(set(e) == set(SCHEMA) for e in events)
    assert [events[0]["ts"], events[-1]["ts"]] == [100, 100 + 999 // 2]
    assert 0 < sum(e["level"] == "ERROR" for e in events) < 100


def test_the_two_tenants_run_in_process() -> None:
    events = generate(2000)
    alerts = run_local(alerts_dataflow(), {"logs": events}).sinks["alerts"]
    assert alerts and all(set(r) == {"ts", "key", "value"} and r["value"] > 90 for r in alerts)
    totals = run_local(bulk_dataflow(), {"metrics": events}).sinks["totals"]
    assert sum(r["n"] for r in totals) == 2000


def test_connectors_and_carried_fields_change_only_what_they_name() -> None:
    plain = alerts_dataflow().spec.to_dict()
    fed = alerts_dataflow(source={"format": "json", "path": "in"},
                          sink={"format": "parquet", "path": "out"},
                          carry={"landed_ms": "int"}).spec.to_dict()
    source, _, project, sink = fed["steps"]
    assert source["schema"] == {**SCHEMA, "landed_ms": "int"}
    assert project["fields"]["landed_ms"] == "landed_ms"
    assert source["connector"]["format"] == "json" and sink["connector"]["format"] == "parquet"
    assert fed["steps"][1] == plain["steps"][1]
    late = bulk_dataflow(allowed_lateness_ms=1000).spec
    assert late.sources[0].allowed_lateness_ms == 1000
    assert late.steps[1:] == bulk_dataflow().spec.steps[1:]
