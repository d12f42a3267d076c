"""Why a dataflow missed its target, through the service: the explain endpoints (admin,
tenant redaction, 404, a bad window), the client, `cameo explain`, the critical-path
gauges of /metrics.

Over the in-memory runtime of tests/shared/service_fakes.py (no Ray, no sleep).
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors.service.client import ServiceError
from cameo_actors.service.metrics import render
from tests.shared.service_fakes import ADMIN, Service, auth, flow

KEYS = {"dataflow", "last_s", "from_ms", "to_ms", "snapshots", "activities",
        "latency_target_ms", "results", "within_target", "latency", "operators",
        "critical_path", "late_paths", "late_path", "summary", "words", "late_words", "tracing"}


@pytest.fixture()
def two(svc: Service) -> dict[str, str]:
    """Dataflows of two tenants (ops: alerts-ops; analytics: bulk-analytics) and a token each."""
    c = svc.client(ADMIN)
    c.submit(flow("alerts-ops", tenant="ops"))
    c.submit(flow("bulk-analytics", tenant="analytics", target=1000))
    c.push("alerts-ops", "s", [{"ts": 1, "level": "ERROR", "key": "k"}] * 4)
    return {"ops": svc.tenant_token("ops"), "analytics": svc.tenant_token("analytics")}


def text_of(explanation: dict[str, Any]) -> str:
    return repr(explanation)


def test_admin_explains_a_dataflow_in_the_runtimes_shape(svc: Service, two: dict[str, str]
                                                         ) -> None:
    r = svc.http.get("/v1/dataflows/alerts-ops/explain?last=30s", headers=auth())
    assert r.status_code == 200, r.text
    e = r.json()
    assert set(e) == KEYS and e["dataflow"] == "alerts-ops" and e["last_s"] == 30.0
    assert svc.rt.explained == ("alerts-ops", 30.0)
    assert e["operators"] == {"filter_1": 0.7, "o": 0.2}
    assert [c["share"] for c in e["critical_path"]] == sorted(
        (c["share"] for c in e["critical_path"]), reverse=True)
    assert e["critical_path"][1]["behind"] == "bulk-analytics"  # the admin sees every name
    assert e["words"][1].startswith("40% processing in alerts-ops/filter_1")
    assert set(e["latency"][0]) == {"t_ms", "results", "within", "p50_ms", "p99_ms", "max_ms"}


@pytest.mark.parametrize("last,seconds", [("60", 60.0), ("60s", 60.0), ("2m", 120.0),
                                          ("500ms", 0.5), (None, 60.0)])
def test_last_takes_seconds_or_a_unit(svc: Service, two: dict[str, str], last: str | None,
                                      seconds: float) -> None:
    params = {"last": last} if last is not None else {}
    r = svc.http.get("/v1/explain", params=params, headers=auth())
    assert r.status_code == 200 and r.json()["last_s"] == seconds
    assert svc.rt.explained == (None, seconds)


@pytest.mark.parametrize("last", ["abc", "0", "-5", "nan", "inf", "1e9", "", "5 parsecs",
                                  "x" * 5000, "60ss"])
def test_a_bad_window_is_a_4xx_naming_the_parameter(svc: Service, two: dict[str, str],
                                                    last: str) -> None:
    svc.rt.explained = None
    for path in ("/v1/explain", "/v1/dataflows/alerts-ops/explain"):
        r = svc.http.get(path, params={"last": last}, headers=auth())
        assert r.status_code == 422, (last, r.text)
        err = r.json()["error"]
        assert err["code"] == "invalid_request" and err["message"].startswith("last:")
        assert err["expected"] and err["fix"] and "got" in err
    assert svc.rt.explained is None  # refused before the runtime was asked


def test_unknown_or_another_tenants_dataflow_is_404(svc: Service, two: dict[str, str]) -> None:
    r = svc.http.get("/v1/dataflows/nope/explain", headers=auth())
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    mine = svc.http.get("/v1/dataflows/bulk-analytics/explain", headers=auth(two["ops"]))
    theirs = svc.http.get("/v1/dataflows/bulk-analytics", headers=auth(two["ops"]))
    assert mine.status_code == theirs.status_code == 404  # what describe gives
    assert mine.json()["error"]["code"] == theirs.json()["error"]["code"]
    assert svc.http.get("/v1/explain", headers=auth("wrong")).status_code == 401


def test_a_tenant_sees_other_tenants_dataflows_unnamed(svc: Service, two: dict[str, str]
                                                       ) -> None:
    own = svc.http.get("/v1/dataflows/alerts-ops/explain", headers=auth(two["ops"])).json()
    assert own["dataflow"] == "alerts-ops"
    assert "bulk-analytics" not in text_of(own) and "another tenant" in text_of(own)
    assert own["critical_path"][1]["behind"] == "another tenant"
    assert own["late_path"][0]["behind"] == "another tenant"
    assert own["late_words"][1] == own["late_path"][0]["text"]
    pool = svc.http.get("/v1/explain", headers=auth(two["ops"])).json()
    assert set(pool) == KEYS and pool["dataflow"] is None
    assert "bulk-analytics" not in text_of(pool) and "alerts-ops" in text_of(pool)
    assert "another tenant" in pool["summary"]["by_dataflow"]
    theirs = svc.http.get("/v1/explain", headers=auth(two["analytics"])).json()
    assert "alerts-ops" not in text_of(theirs) and "bulk-analytics" in text_of(theirs)
    admin = svc.http.get("/v1/explain", headers=auth()).json()
    assert "alerts-ops" in text_of(admin) and "bulk-analytics" in text_of(admin)


def test_the_client_explains(svc: Service, two: dict[str, str]) -> None:
    c = svc.client(two["ops"])
    e = c.explain("alerts-ops", last_s=15)
    assert e["last_s"] == 15.0 and e["words"]
    assert c.explain()["dataflow"] is None
    with pytest.raises(ServiceError) as err:
        c.explain("bulk-analytics")
    assert err.value.status == 404
    with pytest.raises(ServiceError) as err:
        c.explain("alerts-ops", last_s=float("nan"))
    assert err.value.status == 422 and "last" in err.value.message


def test_cameo_explain_prints_the_words_and_the_share_within_target(
        svc: Service, two: dict[str, str], run_cli: Any) -> None:
    code, out, _ = run_cli("explain", "alerts-ops", "--last", "45s")
    assert code == 0 and svc.rt.explained == ("alerts-ops", 45.0)
    lines = out.splitlines()
    assert lines[0].startswith("alerts-ops: 90% of 4 traced results")
    assert lines[1] == "  40% processing in alerts-ops/filter_1 on executor 0"
    late = lines.index("alerts-ops: 1 result message over its target; their critical path:")
    assert lines[late + 1] == "  100% waiting in alerts-ops/filter_1 behind bulk-analytics"
    assert lines[-1] == ("within target  90.0 %  of 4 traced results (target 50 ms, the last "
                         "45 s)")
    code, out, _ = run_cli("explain")  # the pool
    assert code == 0 and out.startswith("the pool:") and svc.rt.explained == (None, 60.0)
    code, out, _ = run_cli("explain", "alerts-ops", "--json")
    assert code == 0 and '"critical_path"' in out
    code, out, err = run_cli("explain", "alerts-ops", "--last", "soon")
    assert code == 1 and "--last" in err and "60s" in err
    code, _, err = run_cli("explain", "nope")
    assert code == 1 and "HTTP 404" in err


def scrape(svc: Service, token: str) -> dict[str, Any]:
    text = svc.http.get("/metrics", headers=auth(token)).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_critical_participation_gauges_per_operator_and_executor(
        svc: Service, two: dict[str, str]) -> None:
    fams = scrape(svc, ADMIN)
    ops = {(s.labels["dataflow"], s.labels["step"]): s.value
           for s in fams["cameo_critical_participation"].samples}
    assert ops == {("alerts-ops", "o"): 0.25, ("bulk-analytics", "o"): 0.25}
    ex = {s.labels["executor"]: s.value
          for s in fams["cameo_executor_critical_participation"].samples}
    assert ex == {"0": 0.6, "1": 0.4}
    tenant = scrape(svc, two["ops"])  # its own operators, no executors
    assert {s.labels["dataflow"] for s in tenant["cameo_critical_participation"].samples} == \
        {"alerts-ops"}
    assert "cameo_executor_critical_participation" not in tenant


@pytest.mark.parametrize("critical", [None, {}, {"by_operator": {}}, {"by_executor": {}}])
def test_a_snapshot_without_a_critical_path_still_renders(svc: Service, two: dict[str, str],
                                                         critical: Any) -> None:
    snapshot = svc.rt.snapshot()
    if critical is None:
        del snapshot["critical_path"]
    else:
        snapshot["critical_path"] = critical
    fams = {f.name: f for f in text_string_to_metric_families(
        render(lambda: snapshot).decode())}
    assert fams["cameo_critical_participation"].samples == []
    assert "cameo_results_within_target" in fams
