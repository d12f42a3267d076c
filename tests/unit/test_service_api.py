"""The RPC API over an in-memory runtime: auth, tenancy, idempotent submit, bad input.

FastAPI's TestClient calls the app in-process (no server, no Ray, no sleep);
the Python client is driven through it too.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import msgpack
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors import Dataflow, SpecError
from cameo_actors.service.client import ServiceError
from cameo_actors.service.protocol import UpdateRequest
from tests.shared.service_fakes import ADMIN, SCHEMA, Service, auth, flow


def test_missing_or_wrong_token_gets_401_and_changes_nothing(svc: Service) -> None:
    body = flow("a").spec.to_json()
    for headers in ({}, auth("wrong"), {"Authorization": "Basic abc"}):
        for method, path in (("POST", "/v1/dataflows"), ("GET", "/v1/dataflows"),
                             ("DELETE", "/v1/dataflows/a"), ("GET", "/metrics"),
                             ("GET", "/openapi.json"), ("GET", "/no/such/path")):
            r = svc.http.request(method, path, content=body, headers=headers)
            assert r.status_code == 401, (method, path, headers)
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["error"]["code"] == "unauthorized"
    assert svc.rt.deploys == 0
    assert svc.http.get("/healthz").json() == {"status": "ok"}  # liveness needs no token


def test_submit_is_idempotent_by_name(svc: Service) -> None:
    c = svc.client(ADMIN)
    first = c.submit(flow("a"))
    assert (first["id"], first["created"], first["tenant"]) == ("a", True, "ops")
    again = c.submit(flow("a"))
    assert again["created"] is False and svc.rt.deploys == 1
    with pytest.raises(ServiceError) as e:
        c.submit(flow("a", target=40))
    assert e.value.status == 409 and e.value.code == "spec_changed"
    assert "latency_target_ms: running 50" in str(e.value.got) and "cameo update" in (e.value.fix or "")
    assert svc.rt.flows["a"]["spec"]["latency_target_ms"] == 50  # unchanged
    replaced = c.submit(flow("a", target=40), replace=True)
    assert replaced["created"] and replaced["replaced"]
    assert svc.rt.flows["a"]["spec"]["latency_target_ms"] == 40


def test_msgpack_and_json_bodies_are_both_accepted(svc: Service) -> None:
    r = svc.http.post("/v1/dataflows", content=msgpack.packb(flow("m").spec.to_dict()),
                      headers={**auth(), "Content-Type": "application/msgpack"})
    assert r.status_code == 201, r.text
    r = svc.http.post("/v1/dataflows/m/sources/s/events",
                      content=msgpack.packb([{"ts": 1, "level": "ERROR", "key": "k"}] * 3),
                      headers={**auth(), "Content-Type": "application/msgpack"})
    assert r.status_code == 202 and r.json() == {"accepted": 3, "rejected": 0, "rejections": []}
    r = svc.http.post("/v1/dataflows/m/sources/s/events", headers=auth(),
                      json={"events": [{"ts": 2, "level": "INFO", "key": "k"}]})
    assert r.status_code == 202 and svc.rt.flows["m"]["events"] == 4


@pytest.mark.parametrize("body,ctype,status,code,needle", [
    (b'{"name": ', "application/json", 400, "malformed_body", "not valid JSON"),
    (b"", "application/json", 400, "malformed_body", "no spec"),
    (b"\xc1\xc1", "application/msgpack", 400, "malformed_body", "not valid msgpack"),
    (b"name=a", "application/x-www-form-urlencoded", 415, "unsupported_media_type", "JSON or msgpack"),
    (b"[1, 2]", "application/json", 422, "invalid_spec", "not an object"),
    (json.dumps({**flow("u").spec.to_dict(), "colour": "red"}).encode(), "application/json", 422,
     "invalid_spec", "colour"),
    (json.dumps({**flow("v").spec.to_dict(), "latency_target_ms": -1}).encode(), "application/json",
     422, "invalid_spec", "latency_target_ms"),
    (b"{" + b" " * 5000 + b"}", "application/json", 413, "too_large", "at most 4096 bytes"),
])
def test_bad_submissions_get_a_clear_4xx_and_change_nothing(svc: Service, body: bytes, ctype: str,
                                                            status: int, code: str, needle: str) -> None:
    r = svc.http.post("/v1/dataflows", content=body, headers={**auth(), "Content-Type": ctype})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code
    assert needle in json.dumps(err)
    assert err["expected"] and err["fix"], err  # says what was expected and how to fix it
    assert svc.rt.deploys == 0 and svc.rt.flows == {}


def test_a_spec_error_names_the_step_and_reaches_the_client_as_spec_error(svc: Service) -> None:
    bad = flow("b").spec.to_dict()
    bad["steps"][1]["predicate"] = "level = 'ERROR'"
    with pytest.raises(SpecError) as e:
        svc.client(ADMIN).submit(bad)
    assert e.value.step == bad["steps"][1]["id"] and e.value.fix
    with pytest.raises(SpecError, match="allowed module"):
        svc.client(ADMIN).submit(Dataflow("f", latency_target_ms=5).source("s", schema=SCHEMA)
                                 .map(function="os:system").sink("o"))
    assert svc.rt.deploys == 0


def test_unknown_dataflow_is_404_and_an_ended_one_says_how_it_ended(svc: Service) -> None:
    c = svc.client(ADMIN)
    for call in (lambda: c.status("nope"), lambda: c.cancel("nope"),
                 lambda: c.update("nope", weight=2), lambda: c.push("nope", "s", [{"ts": 1}])):
        with pytest.raises(ServiceError) as e:
            call()
        assert e.value.status == 404
    c.submit(flow("x"))
    assert c.cancel("x")["state"] == "cancelled"
    assert c.cancel("x")["state"] == "cancelled"  # cancelling twice is no error
    assert c.status("x")["state"] == "cancelled"  # the record stays, with how it ended
    with pytest.raises(ServiceError) as e:
        c.push("x", "s", [{"ts": 1}])
    assert e.value.status == 409 and e.value.code == "dataflow_ended"
    with pytest.raises(ServiceError) as e:
        c.submit(flow("y")) and c.push("y", "nosuch", [{"ts": 1}])
    assert e.value.status == 404 and e.value.code == "unknown_source" and "['s']" in str(e.value.expected)


def test_tenants_see_and_change_only_their_own(svc: Service) -> None:
    ops, ana = svc.client(svc.tenant_token("ops")), svc.client(svc.tenant_token("analytics"))
    assert ops.submit(flow("o1", tenant="ops"))["tenant"] == "ops"
    # No tenant field (or the "default" placeholder): the token's tenant is filled in.
    assert ana.submit(flow("a1", tenant="default"))["tenant"] == "analytics"
    with pytest.raises(ServiceError) as e:
        ana.submit(flow("a2", tenant="ops"))
    assert e.value.status == 403
    assert [d["name"] for d in ops.list()] == ["o1"]
    assert [d["name"] for d in ana.list()] == ["a1"]
    assert {d["name"] for d in svc.client(ADMIN).list()} == {"o1", "a1"}
    for call in (lambda: ana.status("o1"), lambda: ana.cancel("o1"),
                 lambda: ana.update("o1", latency_target_ms=1), lambda: ana.push("o1", "s", [{}]),
                 lambda: ana.close("o1")):
        with pytest.raises(ServiceError) as e:
            call()
        assert e.value.status == 404  # the same answer as for a name that does not exist
    with pytest.raises(ServiceError) as e:
        ana.submit(flow("o1", tenant="analytics"))
    assert e.value.status == 409 and e.value.code == "name_taken"
    assert "o1" in svc.rt.flows and svc.rt.flows["o1"]["spec"]["latency_target_ms"] == 50
    for call in (ana.executors, ana.tokens, lambda: ana.create_token("x")):
        with pytest.raises(ServiceError) as e:
            call()
        assert e.value.status == 403


def test_status_update_and_throughput(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("s1"))
    c.push("s1", "s", [{"ts": i, "level": "ERROR", "key": "k"} for i in range(100)])
    s = c.status("s1")
    assert (s["state"], s["latency_target_ms"], s["results"], s["backlog"]) == ("running", 50, 100, 0)
    assert s["latency"]["p99_ms"] == 5.0 and s["within_target"] == 1.0
    assert s["errors"] == {"s:malformed": 1}
    # Since submission (t=100 s) until now (t=200 s): 100 events in 100 s.
    assert s["throughput"]["events_in_per_s"] == pytest.approx(1.0)
    svc.clock.advance(2_000)
    c.push("s1", "s", [{"ts": 1, "level": "ERROR", "key": "k"}] * 50)
    assert c.status("s1")["throughput"]["events_in_per_s"] == pytest.approx(25.0)
    assert c.update("s1", latency_target_ms=20, weight=3) == {
        "name": "s1", "latency_target_ms": 20, "weight": 3}
    assert c.status("s1")["latency_target_ms"] == 20


@pytest.mark.parametrize("body,needle", [
    ({}, "give latency_target_ms"), ({"latency_target_ms": 0}, "greater than 0"),
    ({"weight": -1}, "greater than 0"), ({"target": 5}, "Extra inputs"),
    ({"latency_target_ms": "fast"}, "valid number"),
])
def test_bad_updates_are_422_and_change_nothing(svc: Service, body: dict[str, Any], needle: str) -> None:
    svc.client(ADMIN).submit(flow("u1"))
    r = svc.http.patch("/v1/dataflows/u1", json=body, headers=auth())
    assert r.status_code == 422 and needle in r.json()["error"]["message"], r.text
    assert svc.rt.flows["u1"]["spec"]["latency_target_ms"] == 50


def test_events_must_be_a_list_of_objects_within_the_limit(svc: Service) -> None:
    svc.client(ADMIN).submit(flow("e1"))
    for body, status in (({"x": 1}, 422), ([1, 2], 422), ([{"k": "v" * 9000}], 413)):
        r = svc.http.post("/v1/dataflows/e1/sources/s/events", json=body, headers=auth())
        assert r.status_code == status, r.text
    assert svc.rt.flows["e1"]["events"] == 0


def test_metrics_admin_sees_all_tenant_sees_own(svc: Service) -> None:
    admin = svc.client(ADMIN)
    admin.submit(flow("m1", tenant="ops"))
    admin.submit(flow("m2", tenant="analytics"))
    admin.push("m1", "s", [{"ts": 1, "level": "ERROR", "key": "k"}] * 7)
    fams = {f.name: f for f in text_string_to_metric_families(admin.metrics())}
    buckets = {(s.labels["dataflow"], s.labels["le"]): s.value
               for s in fams["cameo_result_latency_seconds"].samples if s.name.endswith("_bucket")}
    assert buckets[("m1", "0.002")] == 0 and buckets[("m1", "0.005")] == 7 and buckets[("m1", "+Inf")] == 7
    assert {s.labels["dataflow"] for s in fams["cameo_results_within_target"].samples} == {"m1", "m2"}
    assert "cameo_executor_busy_seconds" in fams
    ops_token = svc.tenant_token("ops")
    text = svc.client(ops_token).metrics()
    assert 'dataflow="m1"' in text and 'dataflow="m2"' not in text
    assert "cameo_executor_busy_seconds" not in text


def test_openapi_document_describes_the_operations(svc: Service) -> None:
    doc = svc.http.get("/openapi.json", headers=auth()).json()
    paths = doc["paths"]
    assert {"post", "get"} <= set(paths["/v1/dataflows"])
    assert {"get", "patch", "delete"} <= set(paths["/v1/dataflows/{name}"])
    body = paths["/v1/dataflows"]["post"]["requestBody"]["content"]
    assert {"application/json", "application/msgpack"} <= set(body)
    assert "steps" in body["application/json"]["schema"]["properties"]
    assert "HTTPBearer" in doc["components"]["securitySchemes"]


def test_tokens_created_over_the_api_work_and_can_be_revoked(svc: Service) -> None:
    admin = svc.client(ADMIN)
    made = admin.create_token("ops")
    assert svc.client(made["token"]).whoami() == {"tenant": "ops", "admin": False,
                                                   "token_id": made["id"]}
    assert [t["id"] for t in admin.tokens()] == [made["id"]]
    admin.revoke_token(made["id"])
    with pytest.raises(ServiceError) as e:
        svc.client(made["token"]).list()
    assert e.value.status == 401


def test_a_tenant_past_its_token_limit_gets_409_saying_how_to_make_room(svc: Service) -> None:
    made = [svc.http.post("/v1/tokens", json={"tenant": "ops"}, headers=auth()).json()
            for _ in range(16)]  # the default max_tokens_per_tenant
    r = svc.http.post("/v1/tokens", json={"tenant": "ops"}, headers=auth())
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["code"] == "token_limit" and "tenant 'ops'" in err["message"]
    assert err["expected"] == "at most 16 tokens per tenant" and err["got"] == "16 tokens already"
    assert "cameo token revoke ID" in err["fix"]
    assert len(svc.tokens.list()) == 16  # nothing was created
    assert svc.http.post("/v1/tokens", json={"tenant": "analytics"}, headers=auth()).status_code == 201
    svc.client(ADMIN).revoke_token(made[0]["id"])
    assert svc.http.post("/v1/tokens", json={"tenant": "ops"}, headers=auth()).status_code == 201


def test_stopping_refuses_changes_and_stop_all_says_how_each_ended(svc: Service) -> None:
    admin = svc.client(ADMIN)
    admin.submit(flow("k1"))
    admin.push("k1", "s", [{"ts": 1, "level": "ERROR", "key": "k"}] * 3)
    said: list[str] = []
    stopped = svc.core.stop_all(5.0, said.append)
    assert stopped == [{"name": "k1", "results": 3, "drained": True, "messages_dropped": 0}]
    assert svc.rt.closed == ["k1"] and svc.rt.flows["k1"]["state"] == "cancelled"
    assert any("'k1'" in line and "stopped cleanly" in line and "3 results" in line for line in said)
    with pytest.raises(ServiceError) as e:
        admin.submit(flow("k2"))
    assert e.value.status == 503


def test_one_dataflows_stuck_push_holds_back_neither_others_nor_its_cancel(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("slow"))
    c.submit(flow("fast"))
    done: list[str] = []

    def other_calls() -> None:
        done.append(str(c.push("fast", "s", [{"ts": 1, "level": "ERROR", "key": "k"}])))
        done.append(c.cancel("slow")["state"])

    with svc.core.flow_lock("slow"):  # as if a push to "slow" waited on its backpressure
        t = threading.Thread(target=other_calls)
        t.start()
        t.join(timeout=30)
        assert not t.is_alive(), "a push to one dataflow waited for another's"
    assert done == ["1", "cancelled"]


def test_update_request_model_validates_alone() -> None:
    assert UpdateRequest(weight=2).weight == 2


def test_admission_control_answers_before_and_on_submit(svc: Service) -> None:
    admin = svc.client(ADMIN)
    busy = Dataflow("busy", latency_target_ms=1000, tenant="analytics", expected_rate_eps=150_000)
    busy = busy.source("s", schema=SCHEMA).sink("o")  # 1,500 of the pool's 2,000 ms/s
    fits = admin.check(busy)
    assert fits["feasible"] and [o["verdict"] for o in fits["outcomes"]] == ["meets"]
    assert svc.rt.deploys == 0  # a check starts nothing
    created = admin.submit(busy)
    assert created["admission"]["feasible"] and created["admission"]["warnings"] == []

    more = Dataflow("more", latency_target_ms=50, tenant="ops", expected_rate_eps=150_000)
    more = more.source("s", schema=SCHEMA).sink("o")
    verdict = admin.check(more)
    assert not verdict["feasible"] and verdict["executors_needed"] == 4
    assert {o["name"]: o["verdict"] for o in verdict["outcomes"]} == {"busy": "misses",
                                                                      "more": "misses"}
    assert 0 < verdict["max_rate_eps"] < 150_000

    svc.rt.admission = "refuse"
    with pytest.raises(ServiceError) as e:
        admin.submit(more)
    assert e.value.status == 409 and e.value.code == "admission_refused"
    assert "busy" in str(e.value.got) and "grow the pool" in (e.value.fix or "")
    assert "more" not in svc.rt.flows

    svc.rt.admission = "warn"  # admitted, with the warning in the answer
    warned = admin.submit(more)
    assert warned["created"] and len(warned["admission"]["warnings"]) == 2


def test_the_overload_report_shows_a_tenant_its_own_dataflows_only(svc: Service) -> None:
    admin = svc.client(ADMIN)
    for name, tenant in (("hog", "analytics"), ("mine", "ops")):
        admin.submit(Dataflow(name, latency_target_ms=100, tenant=tenant,
                              expected_rate_eps=150_000).source("s", schema=SCHEMA).sink("o"))
    report = admin.overload()
    assert not report["feasible"]
    assert {c["tenant"] for c in report["causes"]} == {"analytics", "ops"}
    ops = svc.client(svc.tenant_token("ops")).overload()
    assert [o["name"] for o in ops["outcomes"]] == ["mine"]
    assert {c["tenant"] for c in ops["causes"]} == {"ops", "another tenant"}
    status = admin.status("mine")
    assert status["outlook"]["verdict"] == "misses" and "behind" in status["outlook"]["reason"]
    metrics = svc.http.get("/metrics", headers=auth()).text
    assert 'cameo_dataflow_missing_target{dataflow="mine",tenant="ops"} 1.0' in metrics
    assert 'cameo_tenant_over_share_executor_seconds_per_second{tenant="analytics"}' in metrics


def test_a_tenant_refused_admission_learns_nothing_of_other_tenants_dataflows(svc: Service) -> None:
    svc.client(ADMIN).submit(Dataflow("secret-job", latency_target_ms=100, tenant="analytics",
                                      expected_rate_eps=150_000).source("s", schema=SCHEMA).sink("o"))
    svc.rt.admission = "refuse"
    ops = svc.client(svc.tenant_token("ops"))
    mine = Dataflow("mine", latency_target_ms=100, expected_rate_eps=150_000)
    with pytest.raises(ServiceError) as e:
        ops.submit(mine.source("s", schema=SCHEMA).sink("o"))
    assert e.value.status == 409 and "secret-job" not in str(e.value)
    assert "1 dataflow(s) of other tenants would miss" in str(e.value.got)
    assert "mine: needs 1,500 ms/s" in str(e.value.got)
