"""What the console reads, through the service's API over the in-memory runtime of
tests/shared/service_fakes.py (no Ray, no sleep): the list's figures, a dataflow's spec,
graph, checkpoints and time line, and the pool's hotspots, each kept to the caller's
tenant."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from cameo_actors import Dataflow, count
from cameo_actors.service.history import PARTS, History
from tests.shared.service_fakes import ADMIN, SCHEMA, Service, auth, flow


def keyed(name: str, tenant: str) -> Dataflow:
    return (Dataflow(name, latency_target_ms=200, tenant=tenant)
            .source("s", schema=SCHEMA, event_time="ts").key_by("key", id="kb")
            .window(tumbling_ms=1000, id="win", parallelism=2).aggregate(n=count()).sink("o"))


@pytest.fixture()
def two(svc: Service) -> dict[str, str]:
    """ops runs alerts (events pushed) and a keyed window; analytics runs bulk; one of ops'
    dataflows ended."""
    c = svc.client(ADMIN)
    c.submit(flow("alerts", tenant="ops"))
    c.submit(keyed("windows", "ops"))
    c.submit(flow("bulk", tenant="analytics", target=1000))
    c.submit(flow("gone", tenant="ops"))
    c.cancel("gone")
    c.push("alerts", "s", [{"ts": 1, "level": "ERROR", "key": "k"}] * 4)
    return {"ops": svc.tenant_token("ops"), "analytics": svc.tenant_token("analytics")}


def get(svc: Service, path: str, token: str) -> Any:
    r = svc.http.get(path, headers=auth(token))
    assert r.status_code == 200, r.text
    return r.json()


def test_the_list_with_detail_gives_each_live_dataflows_figures(
        svc: Service, two: dict[str, str]) -> None:
    listed = {d["name"]: d for d in get(svc, "/v1/dataflows?detail=true", ADMIN)["dataflows"]}
    assert listed["alerts"]["figures"]["within_target"] == 1.0
    assert listed["alerts"]["figures"]["results"] == 4
    assert listed["alerts"]["figures"]["events_in_per_s"] > 0
    assert listed["bulk"]["figures"]["within_target"] is None  # no result yet
    assert listed["gone"]["state"] == "cancelled" and listed["gone"]["figures"] is None
    plain = get(svc, "/v1/dataflows", ADMIN)["dataflows"]
    assert all(d.get("figures") is None for d in plain)
    mine = get(svc, "/v1/dataflows?detail=true", two["analytics"])["dataflows"]
    assert [d["name"] for d in mine] == ["bulk"]


def test_a_graph_shows_every_steps_instances_executors_and_critical_share(
        svc: Service, two: dict[str, str]) -> None:
    g = get(svc, "/v1/dataflows/windows/graph?last=30s", two["ops"])
    assert g["window_s"] == 30.0 and g["state"] == "running"
    steps = {s["id"]: s for s in g["steps"]}
    spec = get(svc, "/v1/dataflows/windows/spec", two["ops"])
    assert list(steps) == [s["id"] for s in spec["steps"]]
    window = next(s for s in g["steps"] if s["op"] == "window")
    assert window["parallelism"] == 2
    assert [(i["id"], i["executor"]) for i in window["instances"]] == [
        (f"windows/{window['id']}/0", 0), (f"windows/{window['id']}/1", 1)]
    # the fake's explanation: 0.7 of the path in the second step, 0.2 in the last
    assert steps[spec["steps"][1]["id"]]["critical_share"] == 0.7
    assert steps["o"]["critical_share"] == 0.2
    assert steps["s"]["critical_share"] == 0.0 and steps["s"]["held"] == 0
    assert all(s["critical_share"] is None for s in get(
        svc, "/v1/dataflows/gone/graph", two["ops"])["steps"])  # ended: nothing traced


def test_checkpoints_come_newest_first_with_their_parts(svc: Service, two: dict[str, str]
                                                        ) -> None:
    svc.rt.flows["alerts"]["checkpoints"] = [
        {"id": n, "at": 100.0 + n, "ok": n != 2, "duration_s": 0.1 * n,
         "bytes": 0 if n == 2 else 1000 * n, "parts": 0 if n == 2 else 3,
         "incremental_parts": 0 if n == 2 else 1, "executors": {} if n == 2 else {"0": 1000 * n},
         "reason": "1 of 3 parts not written in time (executors [1])" if n == 2 else None}
        for n in (1, 2, 3)]
    c = get(svc, "/v1/dataflows/alerts/checkpoints", two["ops"])
    assert [r["id"] for r in c["history"]] == [3, 2, 1]
    assert c["history"][1]["ok"] is False and "not written" in c["history"][1]["reason"]
    assert c["interval_s"] == 1.0 and c["last_restore"] is None


def test_the_timeline_puts_states_changes_migrations_and_failed_checkpoints_in_order(
        svc: Service, two: dict[str, str]) -> None:
    f = svc.rt.flows["windows"]
    f["changes"] = [{"at": 150.0, "what": "latency target 200 ms -> 100 ms"}]
    f["checkpoints"] = [{"id": 7, "at": 160.0, "ok": False, "duration_s": 1.0, "bytes": 0,
                         "parts": 0, "incremental_parts": 0, "executors": {},
                         "reason": "the dataflow became cancelled meanwhile"},
                        {"id": 8, "at": 170.0, "ok": True, "duration_s": 0.1, "bytes": 10,
                         "parts": 3, "incremental_parts": 0, "executors": {"0": 10},
                         "reason": None}]
    step = next(s["id"] for s in get(svc, "/v1/dataflows/windows/spec", ADMIN)["steps"]
                if s["op"] == "window")
    r = svc.http.post("/v1/dataflows/windows/scale", headers=auth(two["ops"]),
                      json={"step": step, "parallelism": 3})
    assert r.status_code == 202, r.text
    events = get(svc, "/v1/dataflows/windows/timeline", two["ops"])["events"]
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    kinds = [e["kind"] for e in events]
    assert kinds[:3] == ["state", "change", "checkpoint"]
    assert "migration" in kinds
    assert events[2]["what"] == "checkpoint 7 failed: the dataflow became cancelled meanwhile"
    assert not any("checkpoint 8" in e["what"] for e in events)  # completed ones are not events
    assert any(e["what"].startswith(f"scale of {step} from 2 to 3 instances") for e in events)


def test_hotspots_keep_a_tenant_to_its_own_dataflows(svc: Service, two: dict[str, str]
                                                     ) -> None:
    admin = get(svc, "/v1/hotspots", ADMIN)
    assert {r["dataflow"] for r in admin["misses"]} == {"alerts", "windows", "bulk"}
    assert admin["misses"][0]["within_target"] == 1.0  # the one with results; None last
    assert [r["executor"] for r in admin["executors"]] == [0]
    assert admin["window_s"] == 60.0 and any("bulk" in w for w in admin["words"])
    assert get(svc, "/v1/hotspots?last=5m", ADMIN)["window_s"] == 300.0
    ops = get(svc, "/v1/hotspots", two["ops"])
    for rows in (ops["steps"], ops["misses"], ops["backlogs"]):
        assert rows and {r["tenant"] for r in rows} == {"ops"}
    assert ops["executors"] == [] and ops["words"]
    assert "bulk" not in repr(ops)  # in the words too: "another tenant"


@pytest.mark.parametrize("path", ["graph", "spec", "checkpoints", "timeline"])
def test_another_tenants_dataflow_is_not_found(svc: Service, two: dict[str, str],
                                               path: str) -> None:
    r = svc.http.get(f"/v1/dataflows/bulk/{path}", headers=auth(two["ops"]))
    assert r.status_code == 404 and "bulk" in r.json()["error"]["message"]


# -- the history: ended dataflows outlive the pool ----------------------------------------------
def test_ended_dataflows_are_kept_and_answered_after_the_pool_forgot_them(
        tmp_path: Path) -> None:
    def history() -> History:  # (the fake pool's times are from 1970: none expires here)
        return History(str(tmp_path / "history"), retention_s=math.inf)

    first = Service(history())
    c = first.client(ADMIN)
    c.submit(flow("alerts", tenant="ops"))
    c.submit(flow("bulk", tenant="analytics"))
    c.push("alerts", "s", [{"ts": 1, "level": "ERROR", "key": "k"}] * 2)
    first.rt.end("alerts", "failed", "an operator failed")
    assert first.core.keep_ended() == 1 and first.core.keep_ended() == 0  # once per end
    answered = {p: get(first, f"/v1/dataflows/alerts/{p}", ADMIN)
                for p in ("spec", "graph", "checkpoints", "timeline", "exceptions")}
    answered["status"] = get(first, "/v1/dataflows/alerts", ADMIN)
    # A new service and a new pool (which knows nothing of it) over the same folder:
    again = Service(history())
    ops = again.tenant_token("ops")
    listed = get(again, "/v1/dataflows", ops)["dataflows"]
    assert [(d["name"], d["state"]) for d in listed] == [("alerts", "failed")]
    assert get(again, "/v1/dataflows?state=failed", ADMIN)["dataflows"][0]["name"] == "alerts"
    assert get(again, "/v1/dataflows?state=running", ADMIN)["dataflows"] == []
    for part, answer in answered.items():
        path = "/v1/dataflows/alerts" + ("" if part == "status" else f"/{part}")
        assert get(again, path, ops) == answer, part
    assert answered["status"]["results"] == 2 and answered["status"]["cause"] == \
        "an operator failed"
    r = again.http.get("/v1/dataflows/alerts", headers=auth(again.tenant_token("analytics")))
    assert r.status_code == 404  # another tenant's, kept or not


def test_the_history_is_bounded_by_count_and_age_and_skips_a_damaged_file(
        tmp_path: Path) -> None:
    folder, now = str(tmp_path / "history"), [1050.0]
    history = History(folder, kept=2, retention_s=100.0, now=lambda: now[0])
    for i, ended_at in enumerate((1000.0, 1010.0, 1020.0)):
        history.keep({"summary": {"name": f"d{i}", "tenant": "t", "state": "cancelled",
                                  "ended_at": ended_at},
                      **{p: {} for p in PARTS if p != "summary"}})
    assert sorted(s["name"] for s in history.summaries()) == ["d1", "d2"]  # two kept
    now[0] = 1115.0
    history.expire()
    assert [s["name"] for s in history.summaries()] == ["d2"]  # d1 over 100 s old
    (tmp_path / "history" / "broken.json").write_text("{not json")
    again = History(folder, kept=2, retention_s=math.inf)
    assert [s["name"] for s in again.summaries()] == ["d2"]
    with pytest.raises(ValueError, match="without"):
        again.keep({"summary": {"name": "x"}})


def test_the_consoles_files_are_served_without_a_token_and_hold_no_data(svc: Service) -> None:
    page = svc.http.get("/console", follow_redirects=True)
    assert page.status_code == 200 and page.url.path == "/console/"
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert page.headers["cache-control"] == "no-store"
    assert '<script src="console.js"' in page.text or "console.js" in page.text
    for asset, kind in (("console.js", "text/javascript"), ("console.css", "text/css")):
        r = svc.http.get(f"/console/{asset}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
    assert svc.http.get("/console/secrets.json").status_code == 401  # not a file of it
    r = svc.http.get("/console/secrets.json", headers=auth(ADMIN))
    assert r.status_code == 404 and "index.html" in r.json()["error"]["expected"]
    # the page before the console: its addresses open the console's page for them
    for old, new in (("/ui", "/console/"), ("/ui?token=x", "/console/"),
                     ("/ui/dataflows/a%20b", "/console/#/dataflow/a%20b")):
        r = svc.http.get(old, follow_redirects=False)
        assert r.status_code == 308 and r.headers["location"] == new, old
