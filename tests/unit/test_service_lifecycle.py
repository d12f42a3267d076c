"""Lifecycle states, backpressure answers and per-tenant limits of the RPC API, over the
in-memory runtime (tests/shared/service_fakes.py)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors.clock import FakeClock
from cameo_actors.service import metrics as prom
from cameo_actors.service.app import create_app
from cameo_actors.service.client import ServiceError
from cameo_actors.service.limits import TenantLimits
from cameo_actors.service.tenancy import PRESSURE_TTL_S
from tests.shared.service_fakes import ADMIN, Service, TestClient, auth, flow

EVENT = {"ts": 1, "level": "ERROR", "key": "k"}


def test_list_filters_by_state_and_refuses_unknown_states(svc: Service) -> None:
    c = svc.client(ADMIN)
    for name in ("a", "b", "c"):
        c.submit(flow(name))
    svc.rt.end("b", "failed", "over its state budget")
    c.close("c")
    states = {d["name"]: d["state"] for d in c.list()}
    assert states == {"a": "running", "b": "failed", "c": "finishing"}
    r = svc.http.get("/v1/dataflows?state=failed&state=finishing", headers=auth())
    assert sorted(d["name"] for d in r.json()["dataflows"]) == ["b", "c"]
    r = svc.http.get("/v1/dataflows?state=crashed", headers=auth())
    assert r.status_code == 422 and "crashed" in r.json()["error"]["got"]


def test_a_failed_dataflow_keeps_its_cause_and_last_statistics(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("f"))
    c.push("f", "s", [EVENT] * 4)
    svc.rt.end("f", "failed", "over its state budget: about 9 bytes")
    s = c.status("f")
    assert s["state"] == "failed" and s["cause"].startswith("over its state budget")
    assert s["results"] == 4 and s["ended_at"] == 200.0  # the last statistics, kept
    r = svc.http.get("/v1/dataflows/f/exceptions", headers=auth())
    assert r.status_code == 200 and r.json()["cause"] == s["cause"]
    for call in (lambda: c.push("f", "s", [EVENT]), lambda: c.update("f", weight=2.0),
                 lambda: c.close("f")):
        with pytest.raises(ServiceError) as e:
            call()
        assert e.value.status == 409 and e.value.code == "dataflow_ended", e.value
    c.submit(flow("f"))  # an ended name can run again
    assert c.status("f")["state"] == "running"


def test_a_dataflow_lost_with_its_executor_answers_503_with_the_cause(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("v"))
    c.submit(flow("w"))
    svc.rt.end("v", "failed", "executor 1 died: ActorDiedError: killed", lost=True)
    r = svc.http.post("/v1/dataflows/v/sources/s/events", json=[EVENT], headers=auth())
    assert r.status_code == 503 and r.headers["Retry-After"] == "5"
    assert "executor 1 died" in r.json()["error"]["message"]
    assert c.status("v")["state"] == "failed"
    assert c.push("w", "s", [EVENT])["accepted"] == 1  # the other dataflow goes on


def test_a_full_result_log_answers_429_at_once_and_sends_nothing(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("full"))
    svc.rt.flows["full"]["full_sinks"] = ["full/o/0"]
    r = svc.http.post("/v1/dataflows/full/sources/s/events", json=[EVENT] * 3, headers=auth())
    err = r.json()["error"]
    assert r.status_code == 429 and r.headers["Retry-After"] == "1"
    assert err["code"] == "results_full" and "full/o/0" in err["got"] and "results" in err["fix"]
    assert svc.rt.flows["full"]["events"] == 0
    svc.rt.flows["full"]["full_sinks"] = []  # a reader committed
    svc.clock.advance(1000.0 * PRESSURE_TTL_S + 1.0)  # the service asks the runtime again
    assert c.push("full", "s", [EVENT] * 3)["accepted"] == 3


def test_tenant_limits_answer_429_and_leave_the_admin_alone() -> None:
    svc = Service()
    clock = FakeClock(0.0)
    app = create_app(svc.core, svc.tokens, snapshot=svc.rt.snapshot,
                     limits=TenantLimits(max_concurrent=4, rate_per_s=1.0, burst=2.0, clock=clock))
    http = TestClient(app)
    ops = auth(svc.tenant_token("ops"))
    assert [http.get("/v1/dataflows", headers=ops).status_code for _ in range(3)] == [200, 200, 429]
    r = http.get("/v1/dataflows", headers=ops)
    assert r.json()["error"]["code"] == "rate_limited" and r.headers["Retry-After"] == "1"
    assert http.get("/v1/dataflows", headers=auth(svc.tenant_token("analytics"))).status_code == 200
    assert all(http.get("/v1/dataflows", headers=auth()).status_code == 200 for _ in range(10))
    assert http.get("/healthz").status_code == 200
    clock.advance(1000.0)
    assert http.get("/v1/dataflows", headers=ops).status_code == 200


def test_tenant_limits_bound_requests_in_flight() -> None:
    limits = TenantLimits(max_concurrent=2, max_concurrent_total=3, clock=FakeClock(0.0))
    assert limits.enter("a") is None and limits.enter("a") is None
    refusal = limits.enter("a")
    assert refusal is not None and refusal.code == "too_many_requests"
    assert limits.enter("b") is None
    refusal = limits.enter("c")
    assert refusal is not None and refusal.code == "server_busy"
    limits.leave("a")
    assert limits.enter("c") is None
    assert limits.refused() == {"a": 1, "c": 1}


def test_metrics_count_lifecycle_transitions_per_tenant() -> None:
    snapshot = {"dataflows": [], "executors": [], "states": {"running": 2, "failed": 1},
                "transitions": [("ops", "running", 3), ("ops", "failed", 1),
                                ("analytics", "running", 1)]}
    text = prom.render(lambda: snapshot, tenant="ops").decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.labels["tenant"], s.labels["state"]): s.value
               for s in families["cameo_dataflow_transitions"].samples}
    assert samples == {("ops", "running"): 3, ("ops", "failed"): 1}
    assert "cameo_dataflows_by_state" not in families  # the pool's totals are the admin's
    admin = {f.name for f in text_string_to_metric_families(prom.render(lambda: snapshot).decode())}
    assert "cameo_dataflows_by_state" in admin
