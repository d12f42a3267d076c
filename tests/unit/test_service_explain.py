"""Why a dataflow missed its target, through the service: the explain endpoints (admin,
tenant redaction, 404, a bad window), the client, `cameo explain`, the critical-path
gauges of /metrics, and the /ui page (login, cookie, the dataflows, no 5xx for junk).

Over the in-memory runtime of tests/shared/service_fakes.py (no Ray, no sleep).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors.service.client import ServiceError
from cameo_actors.service.metrics import render
from cameo_actors.service.ui import COOKIE, graph, latency_chart, words
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


# -- /ui -----------------------------------------------------------------------------------------
def test_ui_without_a_token_shows_the_login_form(svc: Service, two: dict[str, str]) -> None:
    r = svc.http.get("/ui")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert '<form method="post" action="/ui/login">' in r.text and 'name="token"' in r.text
    assert "alerts-ops" not in r.text
    r = svc.http.get("/ui?token=wrong")
    assert r.status_code == 401 and "not valid" in r.text and COOKIE not in r.headers.get(
        "set-cookie", "")


def test_ui_token_in_the_url_becomes_a_strict_httponly_cookie(svc: Service,
                                                              two: dict[str, str]) -> None:
    r = svc.http.get(f"/ui?token={ADMIN}&last=30s", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui?last=30s"  # token stripped
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={ADMIN};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    page = svc.http.get("/ui?last=30s")  # the TestClient keeps the cookie
    assert page.status_code == 200 and 'http-equiv="refresh"' in page.text
    assert "alerts-ops" in page.text and "bulk-analytics" in page.text
    assert "the last 30 s" in page.text and svc.rt.explained[1] == 30.0
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    # The cookie is the page's only: the API still wants the header.
    assert svc.http.get("/v1/dataflows").status_code == 401


def test_ui_page_draws_latency_graph_and_words(svc: Service, two: dict[str, str]) -> None:
    svc.http.cookies.set(COOKIE, ADMIN)
    page = svc.http.get("/ui").text
    assert page.count("<section>") == 3  # the pool, and each running dataflow
    assert 'aria-label="latency against target"' in page and "target 50 ms" in page
    assert 'aria-label="dataflow graph"' in page and "<polyline" in page
    assert "90.0 %</span> of 4 traced results within the 50 ms target" in page
    assert "40% processing in alerts-ops/filter_1 on executor 0" in page
    assert "1 result message over its target; their critical path:" in page
    one = svc.http.get("/ui/dataflows/alerts-ops")
    assert one.status_code == 200 and "bulk-analytics</a></h2>" not in one.text
    svc.client(ADMIN).cancel("bulk-analytics")  # ended: no longer listed as running
    listed = re.findall(r'<h2><a href="/ui/dataflows/([^"?]+)', svc.http.get("/ui").text)
    assert listed == ["alerts-ops"]


def test_ui_for_a_tenant_shows_its_own_dataflows_and_hides_other_names(
        svc: Service, two: dict[str, str]) -> None:
    r = svc.http.get(f"/ui?token={two['ops']}")  # follows the redirect with the cookie
    assert r.status_code == 200 and "tenant ops" in r.text
    assert "alerts-ops" in r.text and "bulk-analytics" not in r.text
    assert "another tenant" in r.text
    r = svc.http.get("/ui/dataflows/bulk-analytics")
    assert r.status_code == 404 and "bulk-analytics" in r.text  # the name asked, escaped


def test_ui_login_form_and_logout(svc: Service, two: dict[str, str]) -> None:
    r = svc.http.post("/ui/login", data={"token": ADMIN}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui"
    assert "HttpOnly" in r.headers["set-cookie"]
    assert "alerts-ops" in svc.http.get("/ui").text
    r = svc.http.post("/ui/logout", follow_redirects=False)
    assert r.status_code == 303
    svc.http.cookies.clear()
    assert 'name="token"' in svc.http.get("/ui").text
    assert svc.http.post("/ui/login", data={"token": "nope"}).status_code == 401
    assert svc.http.post("/ui/login", content=b"x" * 10_000).status_code == 413


@pytest.mark.parametrize("path", [
    "/ui?last=junk", "/ui?last=-1", "/ui?token=", "/ui?token=%00%ff", "/ui/dataflows/nope",
    "/ui/dataflows/%3Cscript%3E", "/ui/dataflows/a%2Fb", "/ui/nothing", "/ui?last=1e999",
    "/ui/dataflows/alerts-ops?last=%3Cb%3E"])
def test_ui_junk_is_never_a_5xx_and_is_escaped(svc: Service, two: dict[str, str],
                                               path: str) -> None:
    svc.http.cookies.set(COOKIE, ADMIN)
    r = svc.http.get(path)
    assert r.status_code < 500, (path, r.text)
    assert "<script>" not in r.text and "<b>" not in r.text
    svc.http.cookies.set(COOKIE, "garbage \"; junk")
    assert svc.http.get(path).status_code < 500


def test_ui_escapes_names_and_words(svc: Service, two: dict[str, str]) -> None:
    explanation = svc.rt.explain("alerts-ops")
    said = words({**explanation, "words": ["<script>alert(1)</script>", "<img src=x>"]})
    assert "<script>" not in said and "&lt;img src=x&gt;" in said
    svg = latency_chart(explanation)
    assert svg.startswith("<svg") and "target 50 ms" in svg
    drawn = graph({"steps": [{"id": "<s>", "op": "source", "inputs": []},
                             {"id": "m", "op": "map", "inputs": ["<s>"]},
                             {"id": "k", "op": "sink", "inputs": ["m", "missing"]}]},
                  {"m": 0.9, "k": float("nan")})
    assert "<s>" not in drawn and "&lt;s&gt;" in drawn and drawn.count("<line") == 2
    assert "rgb(" in drawn
    empty = latency_chart({"latency": []})
    assert "no latency snapshots" in empty
