"""Results and the error output over the API: pages after a cursor, commits, bad cursors,
several sinks and sink instances, tenancy, msgpack and NaN, the client's follow() and
`cameo results`.

The fake runtime keeps its outputs as the real one does (tests/shared/service_fakes.py):
offsets from the first row ever, a committed offset below which rows are forgotten, reads
that commit nothing.
"""

from __future__ import annotations

import base64
import json
import math
import threading
from typing import Any

import msgpack
import pyarrow as pa
import pytest

from cameo_actors import Dataflow
from cameo_actors.operators.column_ipc import ARROW_STREAM
from cameo_actors.service.client import Client, ServiceError
from cameo_actors.service.outputs import ERRORS, RESULTS, Cursor, plan_page
from cameo_actors.service.protocol import encode_answer, wants_arrow, wants_msgpack
from tests.shared.service_fakes import ADMIN, SCHEMA, Service, auth, flow


def events(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"ts": start + i, "level": "ERROR", "key": f"k{i}"} for i in range(n)]


def two_sinks(name: str = "m", tenant: str = "ops") -> Dataflow:
    d = Dataflow(name, latency_target_ms=50, tenant=tenant)
    s = d.source("s", schema=SCHEMA, event_time="ts")
    s.sink("hi")
    s.filter("level == 'ERROR'").sink("lo")
    return d


def parallel_sink(name: str, instances: int) -> dict[str, Any]:
    spec = flow(name).spec.to_dict()
    spec["steps"][-1]["parallelism"] = instances
    return spec


def committed(svc: Service, name: str) -> dict[str, int]:
    return {log: c for log, (c, _) in svc.rt.result_offsets(name).items()}


def refused(call: Any) -> ServiceError:
    with pytest.raises(ServiceError) as e:
        call()
    return e.value


# -- pages, cursors, commits ---------------------------------------------------------------
def test_pages_follow_the_cursor_and_reading_commits_nothing(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.push("a", "s", events(10))
    first = c.results("a", limit=4)
    assert [r["event"]["ts"] for r in first["rows"]] == [0, 1, 2, 3]
    assert first["rows"][0] == {"event": {"ts": 0, "level": "ERROR", "key": "k0"},
                                "ingest_ms": 0.0, "egress_ms": 5.0}
    assert (first["sink"], first["pending"]) == ("o", 6)
    second = c.results("a", cursor=first["cursor"], limit=4)
    third = c.results("a", cursor=second["cursor"], limit=4)
    assert [r["event"]["ts"] for r in second["rows"] + third["rows"]] == list(range(4, 10))
    assert third["pending"] == 0
    empty = c.results("a", cursor=third["cursor"])
    assert empty["rows"] == [] and empty["cursor"] == third["cursor"]
    # Nothing was committed: a reader without a cursor starts again at the first row.
    assert committed(svc, "a") == {"a/o/0": 0}
    assert [r["event"]["ts"] for r in c.results("a", limit=2)["rows"]] == [0, 1]


def test_commit_frees_the_rows_before_the_cursor_and_is_idempotent(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.push("a", "s", events(10))
    page = c.results("a", limit=7)
    assert c.commit_results("a", page["cursor"]) == {"cursor": page["cursor"], "freed": 7,
                                                      "pending": 3}
    assert committed(svc, "a") == {"a/o/0": 7}
    # A retried commit, or an older cursor's, frees nothing and is no error.
    assert c.commit_results("a", page["cursor"])["freed"] == 0
    old = c.results("a", cursor=None, limit=1)  # from the committed rows: row 7
    assert [r["event"]["ts"] for r in old["rows"]] == [7]
    rest = c.results("a", cursor=page["cursor"])
    assert [r["event"]["ts"] for r in rest["rows"]] == [7, 8, 9]
    assert c.commit_results("a", rest["cursor"], sink="o")["freed"] == 3
    assert c.results("a")["rows"] == [] and committed(svc, "a") == {"a/o/0": 10}


def test_a_cursor_before_the_committed_rows_is_refused_with_409(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.push("a", "s", events(6))
    early = c.results("a", limit=2)
    c.commit_results("a", c.results("a", limit=5)["cursor"])  # another reader went further
    e = refused(lambda: c.results("a", cursor=early["cursor"]))
    assert (e.status, e.code) == (409, "cursor_committed")
    assert "committed already" in e.message and "cursor 2, committed 5" in e.message
    assert "without a cursor" in (e.fix or "")


def test_a_page_is_shared_fairly_among_the_sink_instances_in_egress_order(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(parallel_sink("p", 3))
    c.push("p", "s", events(1))
    svc.rt.reads.clear()
    c.results("p")
    assert [log for log, _, _ in svc.rt.reads] == ["p/o/0"]  # logs without rows: no call
    c.push("p", "s", events(11, start=1))  # 12 events: 4 per instance
    page = c.results("p", limit=7)
    per_instance = {log: end - start for log, start, end in svc.rt.reads[1:]}
    assert per_instance == {"p/o/0": 3, "p/o/1": 2, "p/o/2": 2}
    egress = [r["egress_ms"] for r in page["rows"]]
    assert egress == sorted(egress) and page["pending"] == 5
    rest = c.results("p", cursor=page["cursor"])
    got = sorted(r["event"]["ts"] for r in page["rows"] + rest["rows"])
    assert got == list(range(12))  # nothing lost, nothing twice


def test_plan_page_gives_short_logs_their_rows_and_the_rest_to_the_others() -> None:
    assert plan_page({"a": 0, "b": 0, "c": 0}, {"a": 1, "b": 50, "c": 50}, 9) == \
        {"a": 1, "b": 4, "c": 4}
    assert plan_page({"a": 5, "b": 0}, {"a": 5, "b": 3}, 10) == {"a": 5, "b": 3}
    assert plan_page({"a": 0, "b": 0}, {"a": 9, "b": 9}, 1) == {"a": 1, "b": 0}


# -- sinks -------------------------------------------------------------------------------
def test_several_sinks_need_a_sink_or_a_cursor_of_one(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(two_sinks("m"))
    c.push("m", "s", events(3))
    e = refused(lambda: c.results("m"))
    assert (e.status, e.code) == (422, "sink_required")
    assert "['hi', 'lo']" in str(e.expected) and "?sink=" in (e.fix or "")
    hi = c.results("m", sink="hi", limit=2)
    assert hi["sink"] == "hi" and len(hi["rows"]) == 2
    # The cursor says which sink it is of: no sink needed to read on or to commit.
    assert c.results("m", cursor=hi["cursor"])["sink"] == "hi"
    assert c.commit_results("m", hi["cursor"])["freed"] == 2
    e = refused(lambda: c.results("m", sink="lo", cursor=hi["cursor"]))
    assert (e.status, e.code) == (422, "foreign_cursor") and "sink 'hi'" in e.message
    e = refused(lambda: c.results("m", sink="nope"))
    assert (e.status, e.code) == (404, "unknown_sink") and "['hi', 'lo']" in str(e.expected)


# -- bad cursors and parameters -------------------------------------------------------------
def _forge(fields: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


@pytest.mark.parametrize("cursor,status,code", [
    ("not a cursor!", 400, "bad_cursor"),
    (_forge({"o": "r"}), 400, "bad_cursor"),
    (_forge([1, 2]), 400, "bad_cursor"),
    (_forge({"o": "r", "f": "a", "d": "100.0", "s": "o", "p": {"a/o/0": -1}}), 400, "bad_cursor"),
    (_forge({"o": "r", "f": "a", "d": "100.0", "s": "o", "p": {"a/o/0": 99}}), 422,
     "foreign_cursor"),  # ahead of the rows there are
    (_forge({"o": "r", "f": "a", "d": "100.0", "s": "o", "p": {"a/o/7": 0}}), 422,
     "foreign_cursor"),  # logs the sink does not have
    (_forge({"o": "e", "f": "a", "d": "100.0", "s": None, "p": {}}), 422, "foreign_cursor"),
    ("x" * 9000, 422, "invalid_request"),
])
def test_bad_cursors_are_refused_with_the_fix(svc: Service, cursor: str, status: int,
                                              code: str) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.push("a", "s", events(3))
    for call in (lambda: c.results("a", cursor=cursor), lambda: c.commit_results("a", cursor)):
        e = refused(call)
        assert (e.status, e.code) == (status, code), e
        assert e.fix
    assert committed(svc, "a") == {"a/o/0": 0}


def test_a_cursor_of_another_dataflow_or_an_earlier_deployment_is_refused(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.submit(flow("b"))
    c.push("a", "s", events(2))
    of_b = c.results("b")["cursor"]
    e = refused(lambda: c.results("a", cursor=of_b))
    assert (e.status, e.code) == (422, "foreign_cursor") and "dataflow 'b'" in e.message
    of_a = c.results("a")["cursor"]
    svc.rt.flows["a"]["submitted_at"] = 150.0  # what a replace does: a new deployment
    e = refused(lambda: c.results("a", cursor=of_a))
    assert (e.status, e.code) == (410, "cursor_expired") and "replaced" in e.message
    errors_cursor = c.errors("a")["cursor"]
    e = refused(lambda: c.results("a", cursor=errors_cursor))
    assert (e.status, e.code) == (422, "foreign_cursor") and "of the errors" in e.message


@pytest.mark.parametrize("limit", [0, 10_001])
def test_limit_out_of_range_is_422(svc: Service, limit: int) -> None:
    svc.client(ADMIN).submit(flow("a"))
    r = svc.http.get("/v1/dataflows/a/results", params={"limit": limit}, headers=auth())
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    r = svc.http.get("/v1/dataflows/a/errors", params={"limit": limit}, headers=auth())
    assert r.status_code == 422


def test_commit_bodies_are_checked(svc: Service) -> None:
    svc.client(ADMIN).submit(flow("a"))
    for body in ({}, {"cursor": ""}, {"cursor": "x", "colour": 1}):
        r = svc.http.post("/v1/dataflows/a/results/commit", json=body, headers=auth())
        assert r.status_code == 422, body
    r = svc.http.post("/v1/dataflows/a/errors/commit", json={"cursor": "x", "sink": "o"},
                      headers=auth())
    assert r.status_code == 422 and "sink" in r.text


# -- tenancy -----------------------------------------------------------------------------
def test_another_tenants_outputs_answer_the_same_404(svc: Service) -> None:
    ops, ana = svc.client(svc.tenant_token("ops")), svc.client(svc.tenant_token("analytics"))
    ops.submit(flow("o1", tenant="ops"))
    ops.push("o1", "s", events(2))
    cursor = ops.results("o1")["cursor"]
    errors_cursor = ops.errors("o1")["cursor"]
    nobody = refused(lambda: ana.status("no-such-flow"))
    for call in (lambda: ana.results("o1"), lambda: ana.commit_results("o1", cursor),
                 lambda: ana.errors("o1"), lambda: ana.commit_errors("o1", errors_cursor),
                 lambda: ana.results("o1", cursor="garbage")):
        e = refused(call)
        assert (e.status, e.code) == (404, "not_found")
        assert e.message == nobody.message.replace("no-such-flow", "o1")
    assert committed(svc, "o1") == {"o1/o/0": 0}
    assert len(ops.results("o1")["rows"]) == 2


def test_outputs_stay_readable_until_the_dataflow_is_released(svc: Service) -> None:
    c = svc.client(ADMIN)
    e = refused(lambda: c.results("nope"))
    assert e.status == 404
    c.submit(flow("a"))
    c.push("a", "s", events(2))
    for state in ("finishing", "finished"):  # closed, draining or drained: still readable
        svc.rt.flows["a"]["state"] = state
        assert len(c.results("a")["rows"]) == 2
    svc.rt.flows["a"].update(state="failed", released=True)  # its parts were freed
    for call in (lambda: c.results("a"), lambda: c.errors("a")):
        e = refused(call)
        assert (e.status, e.code) == (409, "dataflow_ended") and "failed" in e.message


# -- encodings ---------------------------------------------------------------------------
def test_json_answers_have_null_for_non_finite_floats_and_msgpack_keeps_them(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.push("a", "s", [{"ts": 1, "level": "ERROR", "key": "k", "v": math.nan,
                       "big": math.inf, "nested": [-math.inf, 1.5]}])  # msgpack carries them
    r = svc.http.get("/v1/dataflows/a/results", headers=auth())
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert "NaN" not in r.text and "Infinity" not in r.text
    event = r.json()["rows"][0]["event"]
    assert (event["v"], event["big"], event["nested"]) == (None, None, [None, 1.5])
    r = svc.http.get("/v1/dataflows/a/results",
                     headers={**auth(), "Accept": "application/msgpack"})
    assert r.headers["content-type"] == "application/msgpack"
    event = msgpack.unpackb(r.content)["rows"][0]["event"]
    assert math.isnan(event["v"]) and event["big"] == math.inf and event["nested"][0] == -math.inf
    # The client asks for msgpack: Python gets the floats as they were.
    assert math.isnan(c.results("a")["rows"][0]["event"]["v"])


def test_results_read_as_arrow_match_the_rows_and_carry_the_page_in_headers(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(parallel_sink("p", 3))
    c.push("p", "s", events(12))
    page = c.results("p", limit=7, columns=True)
    table = page["rows"]
    assert isinstance(table, pa.Table) and table.num_rows == 7 and page["pending"] == 5
    assert table.column_names == ["ts", "level", "key", "_ingest_ms", "_egress_ms"]
    assert table["_egress_ms"].to_pylist() == sorted(table["_egress_ms"].to_pylist())
    rest = c.results("p", cursor=page["cursor"], columns=True)
    assert (rest["sink"], rest["pending"]) == ("o", 0)
    got = sorted(table["ts"].to_pylist() + rest["rows"]["ts"].to_pylist())
    assert got == list(range(12))
    # The same rows as JSON, page for page.
    rows = c.results("p", limit=7)["rows"]
    assert [{**r["event"], "_ingest_ms": r["ingest_ms"], "_egress_ms": r["egress_ms"]}
            for r in rows] == table.to_pylist()
    raw = svc.http.get("/v1/dataflows/p/results", params={"limit": 2},
                       headers={**auth(), "Accept": ARROW_STREAM})
    assert raw.headers["content-type"] == ARROW_STREAM and raw.headers["cameo-pending"] == "10"


def test_results_that_do_not_form_columns_are_406_and_read_as_json(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.push("a", "s", [{"ts": 1, "level": "ERROR", "key": "k", "v": 1},
                      {"ts": 2, "level": "ERROR", "key": "k", "v": "one"}])
    e = refused(lambda: c.results("a", columns=True))
    assert (e.status, e.code) == (406, "not_columnar") and "JSON or msgpack" in e.fix
    assert [r["event"]["v"] for r in c.results("a")["rows"]] == [1, "one"]
    # Each instance's rows form columns, the page does not: refused the same.
    c.submit(parallel_sink("p", 2))
    c.push("p", "s", [{"ts": i, "level": "ERROR", "key": "k", "v": [1, "one"][i % 2]}
                      for i in range(6)])
    e = refused(lambda: c.results("p", columns=True))
    assert (e.status, e.code) == (406, "not_columnar")


def test_accept_header_and_encoding_rules() -> None:
    assert wants_arrow(ARROW_STREAM + ", application/json;q=0.5")
    assert not wants_arrow("application/json, " + ARROW_STREAM) and not wants_arrow(None)
    assert wants_msgpack("application/msgpack")
    assert wants_msgpack("application/x-msgpack, application/json;q=0.5")
    assert not wants_msgpack("application/json, application/msgpack")
    assert not wants_msgpack(None) and not wants_msgpack("*/*")
    body, kind = encode_answer({"x": float("nan"), "b": b"\x00\x01"}, "*/*")
    assert (json.loads(body), kind) == ({"x": None, "b": "AAE="}, "application/json")


def test_cursors_round_trip_and_name_their_output() -> None:
    c = Cursor(ERRORS, "a", "100.0", None, {"a/errors/0": 4, "a/errors/1": 0})
    text = c.encode()
    assert Cursor.decode(text, ERRORS) == c
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    with pytest.raises(Exception, match="a cursor of the errors, not of the results"):
        Cursor.decode(text, RESULTS)


# -- the error output ---------------------------------------------------------------------
def bad(i: int) -> dict[str, Any]:
    return {"step": "s", "kind": "malformed", "message": "ts: expected int", "event": {"ts": f"x{i}"}}


def test_errors_are_read_over_every_executor_and_committed(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    svc.rt.add_errors("a", [bad(0), bad(1)], executor=0)
    svc.rt.add_errors("a", [bad(2)], executor=1)
    page = c.errors("a", limit=2)
    assert len(page["rows"]) == 2 and page["pending"] == 1
    assert page["rows"][0] == {"step": "s", "kind": "malformed", "message": "ts: expected int",
                               "event": {"ts": "x0"}, "ingest_ms": 0.0, "egress_ms": 5.0}
    rest = c.errors("a", cursor=page["cursor"])
    got = sorted(r["event"]["ts"] for r in page["rows"] + rest["rows"])
    assert got == ["x0", "x1", "x2"] and (rest["skipped"], rest["dropped"]) == (0, 0)
    assert c.commit_errors("a", rest["cursor"]) == {"cursor": rest["cursor"], "freed": 3,
                                                    "pending": 0}
    assert c.errors("a")["rows"] == []
    assert {log: o[0] for log, o in svc.rt.error_offsets("a").items()} == \
        {"a/errors/0": 2, "a/errors/1": 1}


def test_error_records_dropped_unread_are_skipped_and_counted(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    svc.rt.error_capacity = 3
    svc.rt.add_errors("a", [bad(0)])
    start = c.errors("a")  # read, not committed: rows 0.. are the reader's
    assert start["dropped"] == 0
    svc.rt.add_errors("a", [bad(i) for i in range(1, 6)])  # 6 records, 3 kept: 0..2 dropped
    page = c.errors("a")
    assert [r["event"]["ts"] for r in page["rows"]] == ["x3", "x4", "x5"]
    assert (page["skipped"], page["dropped"]) == (0, 3)  # no cursor: from the first kept
    # A reader whose cursor points at dropped records goes on after them, and is told.
    on = c.errors("a", cursor=start["cursor"])
    assert [r["event"]["ts"] for r in on["rows"]] == ["x3", "x4", "x5"]
    assert (on["skipped"], on["dropped"]) == (2, 3)


# -- reading never waits for a pusher ------------------------------------------------------
def test_reading_and_committing_never_take_the_push_lock(svc: Service,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.push("a", "s", events(3))

    def no_lock(name: str) -> threading.Lock:
        raise AssertionError(f"a read took dataflow {name!r}'s push lock")

    monkeypatch.setattr(svc.core, "flow_lock", no_lock)
    page = c.results("a")
    c.commit_results("a", page["cursor"])
    c.commit_errors("a", c.errors("a")["cursor"])
    assert committed(svc, "a") == {"a/o/0": 3}


def test_the_routes_are_in_the_openapi_document(svc: Service) -> None:
    paths = svc.http.get("/openapi.json", headers=auth()).json()["paths"]
    for path, method in (("/v1/dataflows/{name}/results", "get"),
                         ("/v1/dataflows/{name}/results/commit", "post"),
                         ("/v1/dataflows/{name}/errors", "get"),
                         ("/v1/dataflows/{name}/errors/commit", "post")):
        op = paths[path][method]
        assert op["summary"] and "application/msgpack" in json.dumps(op["responses"]["200"])


# -- follow() ------------------------------------------------------------------------------
def test_follow_yields_every_row_and_commits_each_page(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(parallel_sink("p", 2))
    c.push("p", "s", events(7))
    rows = list(c.follow("p", limit=3, until_caught_up=True))
    assert sorted(r["event"]["ts"] for r in rows) == list(range(7))
    assert sum(committed(svc, "p").values()) == 7
    c.push("p", "s", events(5, start=7))
    rows = list(c.follow("p", limit=2, max_rows=3))  # stops after 3, commits exactly those
    assert len(rows) == 3 and sum(committed(svc, "p").values()) == 10


def test_follow_without_commit_and_a_consumer_that_stops_mid_page(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.push("a", "s", events(4))
    assert len(list(c.follow("a", commit=False, until_caught_up=True))) == 4
    assert committed(svc, "a") == {"a/o/0": 0}
    for row in c.follow("a", limit=2):
        if row["event"]["ts"] == 0:
            break  # in the middle of the first page: it stays uncommitted (at least once)
    assert committed(svc, "a") == {"a/o/0": 0}


def test_follow_stops_when_asked_after_the_page_it_is_in(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.push("a", "s", events(3))
    stop = threading.Event()
    got = []
    for row in c.follow("a", stop=stop, poll_s=60):
        got.append(row["event"]["ts"])
        stop.set()  # finish this page, commit it, then stop (no 60 s wait: the event is set)
    assert got == [0, 1, 2] and committed(svc, "a") == {"a/o/0": 3}


def test_follow_until_ended_stops_once_a_finished_dataflow_is_read(svc: Service) -> None:
    c = svc.client(ADMIN)
    c.submit(flow("a"))
    c.push("a", "s", events(3))
    svc.rt.flows["a"]["state"] = "finished"  # its results stay readable until deleted
    assert [r["event"]["ts"] for r in c.follow("a", until_ended=True, limit=2)] == [0, 1, 2]
    c.submit(flow("b"))
    svc.rt.flows["b"].update(state="cancelled", released=True)
    assert list(c.follow("b", until_ended=True)) == []
    with pytest.raises(ServiceError):
        list(c.follow("b"))  # not told to stop at the end: the 410 is the caller's


def test_follow_checks_its_arguments(svc: Service) -> None:
    with pytest.raises(ValueError, match="poll_s >= 0"):
        next(svc.client(ADMIN).follow("a", poll_s=-1))


# -- cameo results ----------------------------------------------------------------------------


def test_cameo_results_prints_json_lines_and_commits_what_it_printed(svc: Service,
                                                                     run_cli: Any) -> None:
    c: Client = run_cli.client
    c.submit(flow("a"))
    c.push("a", "s", [*events(3), {"ts": 3, "level": "ERROR", "key": "k", "v": math.nan}])
    code, out, err = run_cli("results", "a", "--json", "--no-commit")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["event"]["ts"] for r in lines] == [0, 1, 2, 3]
    assert lines[3]["event"]["v"] is None and lines[0]["egress_ms"] == 5.0
    assert committed(svc, "a") == {"a/o/0": 0} and "4 rows" in err
    code, out, _ = run_cli("results", "a", "--json", "--limit", "3")
    assert len(out.splitlines()) == 3 and committed(svc, "a") == {"a/o/0": 3}
    code, out, _ = run_cli("results", "a")
    assert code == 0 and len(out.splitlines()) == 1 and committed(svc, "a") == {"a/o/0": 4}
    assert "5.0 ms" in out and '"ts": 3' in out and out.startswith("1970-01-01T00:00:00.008Z")
    code, out, err = run_cli("results", "a")
    assert out == "" and "0 rows" in err


def test_cameo_results_errors_and_sinks(svc: Service, run_cli: Any) -> None:
    c: Client = run_cli.client
    c.submit(two_sinks("m"))
    c.push("m", "s", events(2))
    code, _, err = run_cli("results", "m")
    assert code == 1 and "HTTP 422" in err and "--sink" in err
    code, out, _ = run_cli("results", "m", "--sink", "lo", "--json")
    assert code == 0 and len(out.splitlines()) == 2
    svc.rt.add_errors("m", [bad(0)])
    code, out, _ = run_cli("results", "m", "--errors")
    assert "s:malformed" in out and "ts: expected int" in out and '"ts": "x0"' in out
    assert c.errors("m")["rows"] == []  # committed
    svc.rt.flows["m"]["state"] = "finished"
    code, out, _ = run_cli("results", "m", "--sink", "hi", "--follow", "--json")
    assert code == 0 and len(out.splitlines()) == 2  # followed until the dataflow ended
