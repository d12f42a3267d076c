"""Live reconfiguration through the service: scale, migrate, migrations, the pool's
executors and rebalance, over the in-memory runtime (tests/shared/service_fakes.py), where
a migration is "running" when first reported and "done" at the next look."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors import Dataflow
from cameo_actors.dataflow.builder import count
from cameo_actors.service import cli
from cameo_actors.service import metrics as prom
from cameo_actors.service.client import ServiceError
from cameo_actors.service.errors import ConfigError
from cameo_actors.service.view import iso_time, migration_row, render_migrations, render_status
from tests.shared.service_fakes import ADMIN, SCHEMA, Service, auth, flow


def keyed(name: str = "k", tenant: str = "ops") -> Dataflow:
    """source -> key_by -> a tumbling window "win" (the keyed step) -> sink."""
    return (Dataflow(name, latency_target_ms=50, tenant=tenant)
            .source("s", schema=SCHEMA, event_time="ts").key_by("key", id="kb")
            .window(tumbling_ms=1000, id="win").aggregate(n=count()).sink("o"))


def error(r: Any) -> dict[str, Any]:
    return r.json()["error"]  # type: ignore[no-any-return]


def finish_all(svc: Service) -> None:
    """The fake's migrations end at the second look."""
    svc.rt.migrations()
    svc.rt.migrations()


# -- the endpoints, happy paths -----------------------------------------------------------------
def test_scale_answers_202_with_the_running_migration_and_migrations_show_its_progress(
        svc: Service) -> None:
    svc.client(ADMIN).submit(keyed())
    r = svc.http.post("/v1/dataflows/k/scale", headers=auth(),
                      json={"step": "win", "parallelism": 4, "strategy": "fluid"})
    assert r.status_code == 202, r.text
    m = r.json()
    assert (m["dataflow"], m["step"], m["kind"], m["strategy"], m["state"]) == (
        "k", "win", "scale", "fluid", "running")
    assert (m["from_parallelism"], m["to_parallelism"]) == (1, 4)
    first = svc.http.get("/v1/dataflows/k/migrations", headers=auth()).json()["migrations"]
    assert [x["state"] for x in first] == ["running"]
    then = svc.http.get("/v1/migrations", headers=auth()).json()["migrations"]
    assert then[0]["id"] == m["id"] and then[0]["state"] == "done"
    assert then[0]["bins_moved"] == then[0]["bins_total"] > 0 and then[0]["bytes_moved"] > 0
    assert then[0]["epochs_done"] == then[0]["epochs_total"] == then[0]["bins_total"]  # fluid
    assert svc.rt.flows["k"]["spec"]["steps"][2]["parallelism"] == 4


def test_migrate_moves_bins_or_an_instance(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(keyed())
    c.wait_migration(c.scale("k", "win", 2)["id"], sleep=lambda _: None)
    r = svc.http.post("/v1/dataflows/k/migrate", headers=auth(),
                      json={"step": "win", "bins": [0, 1, 2], "to_instance": 1,
                            "strategy": "all_at_once"})
    assert r.status_code == 202, r.text
    assert (r.json()["kind"], r.json()["bins_total"], r.json()["epochs_total"]) == (
        "migrate", 3, 1)
    finish_all(svc)
    m = c.migrate("k", "win", instance=0, to_executor=1, batch_bins=256)
    assert m["kind"] == "move_instance" and m["state"] == "running"
    assert m["epochs_total"] == m["bins_total"] // 256


def test_the_client_waits_for_a_migration_and_times_out_naming_it(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(keyed())
    m = c.scale("k", "win", 3, batch_bins=512)
    naps: list[float] = []
    done = c.wait_migration(m["id"], poll_s=0.5, sleep=naps.append)
    assert done["state"] == "done" and naps == [0.5]  # running once, then done
    m = c.scale("k", "win", 1)
    ticks = iter([0.0, 200.0])
    with pytest.raises(TimeoutError, match=f"migration '{m['id']}' of dataflow 'k' step 'win'"):
        c.wait_migration(m["id"], timeout_s=120, sleep=naps.append, clock=lambda: next(ticks))
    with pytest.raises(ServiceError) as e:
        c.wait_migration("m-nowhere", sleep=naps.append)
    assert e.value.status == 404 and "m-nowhere" in str(e.value)


def test_status_lists_the_dataflows_migrations(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(keyed())
    c.submit(keyed("other"))
    assert c.status("k")["migrations"] == []
    m = c.scale("k", "win", 2)
    c.scale("other", "win", 3)
    got = c.status("k")["migrations"]
    assert [x["id"] for x in got] == [m["id"]]
    text = render_status(c.status("k"), now=0)
    assert "migrations" in text and m["id"] in text and "scale 1->2" in text


def test_pool_endpoints_add_rebalance_and_remove(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(keyed())
    c.scale("k", "win", 2)
    finish_all(svc)
    r = svc.http.post("/v1/pool/executors", headers=auth(), json={"count": 2})
    assert r.status_code == 201 and r.json() == {"added": [2, 3]}
    r = svc.http.post("/v1/pool/executors", headers=auth())  # no body: one
    assert r.status_code == 201 and r.json() == {"added": [4]}
    r = svc.http.post("/v1/pool/rebalance", headers=auth())
    assert r.status_code == 202 and [m["kind"] for m in r.json()["migrations"]] == ["migrate"]
    finish_all(svc)
    assert [m["strategy"] for m in c.rebalance(strategy="fluid")] == ["fluid"]
    finish_all(svc)
    r = svc.http.delete("/v1/pool/executors/1?strategy=all_at_once", headers=auth())
    assert r.status_code == 202, r.text
    removal = r.json()
    assert removal["executor"] == 1 and removal["state"] == "draining"
    assert removal["moving"] == ["k/win/0"]
    assert [(m["kind"], m["strategy"]) for m in c.migrations("k")][-1] == (
        "move_instance", "all_at_once")
    assert svc.rt.executors == [0, 2, 3, 4]
    assert c.add_executors() == [5]


# -- permissions --------------------------------------------------------------------------------
def test_a_tenant_reconfigures_its_own_dataflows_only(svc: Service) -> None:
    svc.client(ADMIN).submit(keyed("theirs", tenant="analytics"))
    ops = svc.client(svc.tenant_token("ops"))
    ops.submit(keyed("mine"))
    assert ops.scale("mine", "win", 2)["state"] == "running"
    for call in (lambda: ops.scale("theirs", "win", 2),
                 lambda: ops.migrate("theirs", "win", bins=[1], to_instance=0),
                 lambda: ops.migrations("theirs")):
        with pytest.raises(ServiceError) as e:
            call()
        assert e.value.status == 404 and e.value.code == "not_found"  # no leak: as if absent
    svc.client(ADMIN).scale("theirs", "win", 2)
    assert [m["dataflow"] for m in ops.migrations()] == ["mine"]  # only its own
    assert {m["dataflow"] for m in svc.client(ADMIN).migrations()} == {"mine", "theirs"}
    assert [m["dataflow"] for m in ops.migrations("mine")] == ["mine"]


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/pool/rebalance", {}),
    ("POST", "/v1/pool/executors", {"count": 1}),
    ("DELETE", "/v1/pool/executors/0", None),
])
def test_pool_endpoints_are_for_the_admin(svc: Service, method: str, path: str,
                                          body: Any) -> None:
    token = svc.tenant_token("ops")
    r = svc.http.request(method, path, headers=auth(token),
                         content=None if body is None else json.dumps(body))
    assert r.status_code == 403 and error(r)["code"] == "forbidden", r.text
    assert "admin" in error(r)["message"]
    assert svc.rt.executors == [0, 1] and svc.rt.moves == {}


def test_the_client_pool_calls_are_refused_for_a_tenant(svc: Service) -> None:
    ops = svc.client(svc.tenant_token("ops"))
    for call in (ops.rebalance, ops.add_executors, lambda: ops.remove_executor(0)):
        with pytest.raises(ServiceError) as e:
            call()
        assert e.value.status == 403


# -- bad requests -------------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "field"), [
    ({"step": "win", "parallelism": 0}, "parallelism"),
    ({"step": "win", "parallelism": True}, "parallelism"),
    ({"step": "win", "parallelism": "2"}, "parallelism"),
    ({"step": "win", "parallelism": 10**30}, "parallelism"),
    ({"step": "win", "parallelism": 2.0}, "parallelism"),
    ({"step": "win", "parallelism": None}, "parallelism"),
    ({"parallelism": 2}, "step"),
    ({"step": 5, "parallelism": 2}, "step"),
    ({"step": "win", "parallelism": 2, "strategy": "warp"}, "strategy"),
    ({"step": "win", "parallelism": 2, "batch_bins": 0}, "batch_bins"),
    ({"step": "win", "parallelism": 2, "batch_bins": False}, "batch_bins"),
    ({"step": "win", "parallelism": 2, "speed": 1}, "speed"),
])
def test_a_bad_scale_body_is_a_422_naming_the_field(svc: Service, body: dict[str, Any],
                                                    field: str) -> None:
    svc.client(ADMIN).submit(keyed())
    r = svc.http.post("/v1/dataflows/k/scale", headers=auth(), json=body)
    assert r.status_code == 422, r.text
    e = error(r)
    assert e["code"] == "invalid_request" and field in e["message"]
    assert e["expected"] and field in e["fix"]
    if field in body:  # what arrived: the value (none for null), or the whole body
        assert e.get("got") == body[field]
    else:
        assert e["got"] == repr(body)
    assert svc.rt.moves == {}


@pytest.mark.parametrize(("body", "where"), [
    ({"step": "win"}, "bins and to_instance"),
    ({"step": "win", "bins": [1]}, "bins and to_instance"),
    ({"step": "win", "instance": 0}, "instance and to_executor"),
    ({"step": "win", "bins": [1], "to_instance": 0, "to_executor": 1}, "or instance"),
    ({"step": "win", "bins": [-1], "to_instance": 0}, "bins"),
    ({"step": "win", "bins": [True], "to_instance": 0}, "bins"),
    ({"step": "win", "bins": [], "to_instance": 0}, "bins"),
    ({"step": "win", "bins": "1,2", "to_instance": 0}, "bins"),
    ({"step": "win", "bins": [1], "to_instance": "0"}, "to_instance"),
    ({"step": "win", "instance": 0, "to_executor": -1}, "to_executor"),
])
def test_a_bad_migrate_body_is_a_422(svc: Service, body: dict[str, Any], where: str) -> None:
    svc.client(ADMIN).submit(keyed())
    r = svc.http.post("/v1/dataflows/k/migrate", headers=auth(), json=body)
    assert r.status_code == 422, r.text
    assert where in error(r)["message"]
    assert svc.rt.moves == {}


@pytest.mark.parametrize(("method", "path", "body", "field"), [
    ("POST", "/v1/pool/executors", {"count": 0}, "count"),
    ("POST", "/v1/pool/executors", {"count": 65}, "count"),
    ("POST", "/v1/pool/executors", {"count": True}, "count"),
    ("POST", "/v1/pool/executors", {"count": "1"}, "count"),
    ("POST", "/v1/pool/executors", {"n": 1}, "n"),
    ("POST", "/v1/pool/rebalance", {"strategy": "warp"}, "strategy"),
    ("POST", "/v1/pool/rebalance", [], "rebalance"),
    ("DELETE", "/v1/pool/executors/-1", None, "index"),
    ("DELETE", "/v1/pool/executors/abc", None, "index"),
    ("DELETE", "/v1/pool/executors/" + "9" * 30, None, "index"),
    ("DELETE", "/v1/pool/executors/0?strategy=warp", None, "strategy"),
])
def test_bad_pool_requests_are_422(svc: Service, method: str, path: str, body: Any,
                                   field: str) -> None:
    r = svc.http.request(method, path, headers=auth(),
                         content=None if body is None else json.dumps(body))
    assert r.status_code == 422, r.text
    assert field in error(r)["message"]
    assert svc.rt.executors == [0, 1] and svc.rt.moves == {}


def test_a_malformed_or_missing_body_is_a_400(svc: Service) -> None:
    svc.client(ADMIN).submit(keyed())
    r = svc.http.post("/v1/dataflows/k/scale", headers=auth())
    assert r.status_code == 400 and error(r)["code"] == "malformed_body"
    r = svc.http.post("/v1/dataflows/k/scale", headers=auth(), content=b'{"step": ')
    assert r.status_code == 400


def test_the_runtimes_refusals_are_422_409_and_404(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(keyed())
    c.submit(flow("plain"))
    r = svc.http.post("/v1/dataflows/k/scale", headers=auth(),
                      json={"step": "o", "parallelism": 2})
    assert r.status_code == 422 and error(r)["code"] == "bad_reconfiguration"
    assert "step 'o'" in error(r)["message"] and "key_by" in error(r)["expected"]
    r = svc.http.post("/v1/dataflows/k/scale", headers=auth(),
                      json={"step": "nowhere", "parallelism": 2})
    assert r.status_code == 422 and "nowhere" in error(r)["message"]
    r = svc.http.post("/v1/dataflows/plain/scale", headers=auth(),
                      json={"step": "filter_1", "parallelism": 2})
    assert r.status_code == 422 and error(r)["got"] == "a filter step"
    r = svc.http.post("/v1/dataflows/nowhere/scale", headers=auth(),
                      json={"step": "win", "parallelism": 2})
    assert r.status_code == 404
    # A migration under way: a second one of the same dataflow conflicts.
    first = c.scale("k", "win", 2)
    r = svc.http.post("/v1/dataflows/k/scale", headers=auth(),
                      json={"step": "win", "parallelism": 3})
    assert r.status_code == 409 and error(r)["code"] == "reconfiguration_conflict"
    assert first["id"] in error(r)["got"] and error(r)["fix"]
    with pytest.raises(ServiceError) as e:
        c.migrate("k", "win", bins=[1], to_instance=0)
    assert e.value.status == 409
    finish_all(svc)
    assert c.scale("k", "win", 3)["state"] == "running"  # once it is done
    # An ended dataflow: 409 dataflow_ended.
    svc.rt.end("plain", "finished")
    r = svc.http.post("/v1/dataflows/plain/scale", headers=auth(),
                      json={"step": "filter_1", "parallelism": 2})
    assert r.status_code == 409 and error(r)["code"] == "dataflow_ended"


def test_pool_conflicts_and_bad_indices(svc: Service) -> None:
    c = svc.client(ADMIN)
    r = svc.http.delete("/v1/pool/executors/7", headers=auth())
    assert r.status_code == 422 and error(r)["code"] == "bad_reconfiguration"
    c.remove_executor(1)
    with pytest.raises(ServiceError) as e:
        c.remove_executor(0)
    assert e.value.status == 409 and e.value.code == "reconfiguration_conflict"
    assert "last" in str(e.value) and "cameo pool add" in str(e.value)


def test_reconfiguration_is_refused_while_the_service_stops(svc: Service) -> None:
    svc.client(ADMIN).submit(keyed())
    svc.core.stopping = True
    r = svc.http.post("/v1/dataflows/k/scale", headers=auth(),
                      json={"step": "win", "parallelism": 2})
    assert r.status_code == 503
    assert svc.http.post("/v1/pool/executors", headers=auth()).status_code == 503


def test_the_openapi_document_describes_the_new_operations(svc: Service) -> None:
    paths = svc.http.get("/openapi.json", headers=auth()).json()["paths"]
    for path in ("/v1/dataflows/{name}/scale", "/v1/dataflows/{name}/migrate",
                 "/v1/dataflows/{name}/migrations", "/v1/migrations", "/v1/pool/rebalance",
                 "/v1/pool/executors", "/v1/pool/executors/{index}"):
        assert path in paths, path


# -- metrics ------------------------------------------------------------------------------------
def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_metrics_count_migrations_bins_bytes_and_the_last_duration(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(keyed())
    c.submit(keyed("theirs", tenant="analytics"))
    c.scale("k", "win", 2, strategy="all_at_once")
    finish_all(svc)
    c.scale("k", "win", 4, strategy="all_at_once")
    c.scale("theirs", "win", 2)
    got = samples(c.metrics())
    assert got[("cameo_migrations_in_progress", ())] == 2
    k = (("dataflow", "k"), ("step", "win"))
    assert got[("cameo_migration_bins_moved_total", k)] == 2048  # the first one, done
    assert got[("cameo_migration_bytes_moved_total", k)] == 2048 * 1000
    assert got[("cameo_migration_duration_seconds", (*k, ("strategy", "all_at_once")))] \
        == pytest.approx(0.01)
    finish_all(svc)
    got = samples(c.metrics())
    assert got[("cameo_migrations_in_progress", ())] == 0
    assert got[("cameo_migration_bins_moved_total", k)] == 2048 + 2048
    # A tenant's scrape: its own dataflows' migrations only.
    mine = samples(svc.client(svc.tenant_token("analytics")).metrics())
    assert {dict(labels).get("dataflow") for name, labels in mine
            if name.startswith("cameo_migration_")} == {"theirs"}


def test_metrics_without_migrations_in_the_snapshot() -> None:
    text = prom.render(lambda: {"dataflows": [], "executors": []}).decode()
    assert "cameo_migrations_in_progress 0.0" in text
    last = prom.migration_families([
        {"id": "a", "dataflow": "d", "step": "w", "kind": "scale", "strategy": "batched",
         "state": "done", "from_parallelism": 1, "to_parallelism": 2, "bins_total": 8,
         "bins_moved": 8, "epochs_total": 1, "epochs_done": 1, "bytes_moved": 5,
         "started_at": 1.0, "ended_at": 9.0, "duration_s": 8.0, "error": None},
        {"id": "b", "dataflow": "d", "step": "w", "kind": "scale", "strategy": "batched",
         "state": "done", "from_parallelism": 2, "to_parallelism": 3, "bins_total": 8,
         "bins_moved": 8, "epochs_total": 1, "epochs_done": 1, "bytes_moved": 5,
         "started_at": 10.0, "ended_at": 12.0, "duration_s": 2.0, "error": None},
        {"id": "c", "dataflow": "d", "step": "w", "kind": "scale", "strategy": "batched",
         "state": "failed", "from_parallelism": 3, "to_parallelism": 4, "bins_total": 8,
         "bins_moved": 2, "epochs_total": 1, "epochs_done": 0, "bytes_moved": 1,
         "started_at": 20.0, "ended_at": 21.0, "duration_s": 1.0, "error": "boom"},
    ])
    durations = [s.value for s in last[3].samples]
    assert durations == [2.0]  # the last done one, not the failed one
    assert [s.value for s in last[1].samples] == [18] and [s.value for s in last[2].samples] == [11]


# -- the CLI ------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    # --wait polls: the fake's migration is running at the first look, done at the next.
    monkeypatch.setattr("time.sleep", lambda _s: None)


def test_cameo_scale_and_migrate(svc: Service, run_cli: Any) -> None:
    run_cli.client.submit(keyed())
    code, out, _ = run_cli("scale", "k", "win", "4", "--strategy", "fluid")
    assert code == 0 and out.strip() == \
        "k/win: scale 1 -> 4 instances (fluid, 3072 bins), migration m1 running"
    code, _, err = run_cli("scale", "k", "win", "2")
    assert code == 1 and "HTTP 409 reconfiguration_conflict" in err
    finish_all(svc)
    code, out, _ = run_cli("scale", "k", "win", "2", "--batch-bins", "1024", "--wait")
    lines = out.splitlines()
    assert code == 0 and lines[0].endswith("migration m2 running")
    assert lines[1].startswith("migration m2 (k/win): done in 0.0 s, 2048/2048 bins, 2/2 epochs, "
                               "2.05 MB moved, ended " + iso_time(301.5))
    code, out, _ = run_cli("migrate", "k", "win", "--bins", "0-3,9", "--to-instance", "1")
    assert code == 0 and "migrate (batched, 5 bins), migration m3 running" in out
    finish_all(svc)
    code, out, _ = run_cli("migrate", "k", "win", "--instance", "0", "--to-executor", "1",
                           "--wait")
    assert code == 0 and "move_instance" in out and ": done in" in out
    code, _, err = run_cli("migrate", "k", "win", "--bins", "1")
    assert code == 1 and "--bins B --to-instance I, or --instance I --to-executor X" in err
    code, _, err = run_cli("migrate", "k", "win", "--bins", "x", "--to-instance", "1")
    assert code == 1 and "--bins: expected bin numbers" in err


def test_cameo_migrations_table_and_json(svc: Service, run_cli: Any) -> None:
    assert run_cli("migrations")[1].strip() == "no migrations"
    run_cli.client.submit(keyed())
    run_cli.client.scale("k", "win", 2)
    code, out, _ = run_cli("migrations", "k")
    header, row = out.splitlines()
    assert code == 0 and header.split() == ["id", "dataflow", "step", "kind", "strategy",
                                            "state", "bins", "epochs", "mb_moved",
                                            "duration_s", "started_at"]
    assert row.split() == ["m1", "k", "win", "scale", "1->2", "batched", "running", "0/2048",
                           "0/8", "0.00", "0.0", iso_time(300.0)]
    code, out, _ = run_cli("migrations", "--json")
    assert json.loads(out)[0]["state"] == "done" and json.loads(out)[0]["started_at"] == 300.0
    code, out, _ = run_cli("status", "k", "--once")
    assert "migrations" in out and "scale 1->2" in out


def test_cameo_pool(svc: Service, run_cli: Any) -> None:
    run_cli.client.submit(keyed())
    code, out, _ = run_cli("pool", "add", "--count", "2")
    assert code == 0 and out.startswith("executors added: 2, 3")
    code, out, _ = run_cli("pool", "rebalance")
    assert code == 0 and out.strip() == "rebalance: the pool is even, nothing moves"
    code, out, _ = run_cli("pool", "remove", "0", "--wait")
    lines = out.splitlines()
    assert lines[0] == "executor 0: draining, 1 instance(s) move off it (`cameo migrations` " \
        "shows them)"
    assert lines[1:] == ["  k/win/0", "executor 0: removed"] and code == 0
    code, _, err = run_cli("pool", "remove")
    assert code == 1 and "an executor index" in err
    code, _, err = run_cli("pool", "remove", "7")
    assert code == 1 and "HTTP 422 bad_reconfiguration" in err


def test_the_migrations_view_says_why_one_failed() -> None:
    m = {"id": "m9", "dataflow": "d", "step": "w", "kind": "migrate", "strategy": "batched",
         "state": "failed", "bins_total": 10, "bins_moved": 4, "epochs_total": 2,
         "epochs_done": 1, "bytes_moved": 0, "duration_s": 1.0, "started_at": None,
         "error": "executor 2 died"}
    assert migration_row(m)["bins"] == "4/10"
    assert render_migrations([m]).splitlines()[-1] == "m9: failed: executor 2 died"
    with pytest.raises(ConfigError, match="--bins"):
        cli.parse_bins("3-1")
    assert cli.parse_bins("5") == [5]
