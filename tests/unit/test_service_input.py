"""Strict input: non-finite numbers, nesting depth, errors in the spec's words, no 5xx for
any client input, and the bad-input corpus, over the real app and an in-memory runtime."""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors import Dataflow, DataflowSpec, SpecError
from cameo_actors.dataflow.validate import MAX_NUMBER, check_live_settings, check_pool_limits
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import RuntimeUnavailable
from cameo_actors.service.app import create_app
from cameo_actors.service.config import ServiceConfig, resolve_service_config
from cameo_actors.service.errors import ConfigError
from cameo_actors.service.nesting import deeper_than, json_depth
from cameo_actors.service.protocol import UpdateRequest
from corpora import bad_input
from tests.shared.service_fakes import ADMIN, Service, TestClient, auth, flow

MSGPACK = {**auth(), "Content-Type": "application/msgpack"}


def spec_dict(name: str = "a", **changes: Any) -> dict[str, Any]:
    return {**flow(name).spec.to_dict(), **changes}


# -- non-finite numbers -----------------------------------------------------------------------
@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_json_nan_and_infinity_are_refused_with_400_naming_the_token(svc: Service,
                                                                       token: str) -> None:
    body = json.dumps(spec_dict()).replace('"latency_target_ms": 50',
                                           f'"latency_target_ms": {token}')
    r = svc.http.post("/v1/dataflows", content=body, headers=auth())
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "malformed_body" and err["got"] == token and "NaN" in err["expected"]
    assert svc.rt.deploys == 0
    svc.client(ADMIN).submit(flow("x"))
    r = svc.http.post("/v1/dataflows/x/sources/s/events", headers=auth(),
                      content=f'[{{"ts": 1, "value": {token}}}]')
    assert r.status_code == 400 and token in r.text  # events bodies too
    assert svc.rt.flows["x"]["events"] == 0


@pytest.mark.parametrize(("change", "field"), [
    ({"latency_target_ms": math.nan}, "latency_target_ms"),
    ({"latency_target_ms": math.inf}, "latency_target_ms"),
    ({"scheduling": {"weight": math.nan}}, "scheduling.weight"),
    ({"scheduling": {"weight": math.inf}}, "scheduling.weight"),
    ({"scheduling": {"weight": 1.0, "rate_limit_eps": math.inf}}, "scheduling.rate_limit_eps"),
])
def test_msgpack_non_finite_spec_numbers_are_422_naming_the_field(svc: Service,
                                                                  change: dict[str, Any],
                                                                  field: str) -> None:
    r = svc.http.post("/v1/dataflows", content=msgpack.packb(spec_dict(**change)),
                      headers=MSGPACK)
    assert r.status_code == 422, r.text  # was a 500: the answer's JSON could not hold NaN
    err = r.json()["error"]
    assert err["code"] == "invalid_spec" and field in err["message"]
    assert err["got"] in ("nan", "inf")  # shown as text: JSON has no number for it
    assert svc.rt.deploys == 0


@pytest.mark.parametrize(("step", "field", "value"), [
    (0, "allowed_lateness_ms", math.inf), (0, "allowed_lateness_ms", math.nan),
    (1, "parallelism", math.nan),
])
def test_non_finite_step_numbers_are_refused_by_the_definition_layer(step: int, field: str,
                                                                     value: float) -> None:
    data = spec_dict()
    data["steps"][step][field] = value
    with pytest.raises(SpecError) as e:
        DataflowSpec.from_msgpack(msgpack.packb(data))
    assert field in str(e.value) and e.value.step == data["steps"][step]["id"]


@pytest.mark.parametrize("size", [math.inf, math.nan, 1e300, 10**30, MAX_NUMBER + 1])
def test_window_sizes_must_be_finite_and_bounded(size: float) -> None:
    data = bad_input.broken_spec(steps={2: {"size_ms": size}})
    with pytest.raises(SpecError, match="size_ms > 0 and at most 9007199254740992"):
        DataflowSpec.from_dict(data)
    data["steps"][2]["size_ms"] = MAX_NUMBER  # the bound itself is a (very long) window
    assert DataflowSpec.from_dict(data).step("win").size_ms == MAX_NUMBER  # type: ignore[attr-defined]


def test_the_builder_refuses_non_finite_numbers_too() -> None:
    with pytest.raises(SpecError, match="scheduling.weight"):
        _ = Dataflow("d", latency_target_ms=10, weight=math.inf).source(
            "s", schema={"a": "int"}).sink("o").spec
    with pytest.raises(SpecError, match="latency_target_ms"):
        _ = Dataflow("d", latency_target_ms=math.nan).source("s", schema={"a": "int"}).sink("o").spec


@pytest.mark.parametrize(("target", "weight"), [
    (math.inf, None), (math.nan, None), (0, None), (86_400_000, None), (True, None),
    (None, math.inf), (None, math.nan), (None, 0), (None, MAX_NUMBER * 2), (None, "2"),
])
def test_live_settings_follow_the_specs_rules(target: Any, weight: Any) -> None:
    # What Controller.update runs before it changes a running dataflow.
    with pytest.raises(SpecError) as e:
        check_live_settings(target, weight)
    assert ("latency_target_ms" if target is not None else "weight") in str(e.value)
    assert isinstance(e.value, ValueError)  # its callers caught ValueError before
    check_live_settings(30, 2.5)
    check_live_settings(None, None)


@pytest.mark.parametrize(("body", "status", "needle"), [
    (b'{"latency_target_ms": Infinity}', 400, "Infinity"),
    (b'{"weight": NaN}', 400, "NaN"),
    (b'{"latency_target_ms": 1e999}', 422, "finite"),  # Python reads 1e999 as Infinity
    (msgpack.packb({"latency_target_ms": math.inf}), 422, "finite"),
    (msgpack.packb({"weight": math.nan}), 422, "finite"),
    (b'{"weight": true}', 422, "valid number"),
    (b'{"latency_target_ms": "30"}', 422, "valid number"),
    (b'{"latency_target_ms": 1e9}', 422, "less than"),
])
def test_patch_never_stores_a_non_finite_or_out_of_range_number(svc: Service, body: bytes,
                                                                 status: int, needle: str) -> None:
    svc.client(ADMIN).submit(flow("u"))
    ctype = "application/msgpack" if body[:1] != b"{" else "application/json"
    r = svc.http.patch("/v1/dataflows/u", content=body,
                       headers={**auth(), "Content-Type": ctype})
    assert r.status_code == status and needle in r.text, r.text
    assert svc.rt.flows["u"]["spec"]["latency_target_ms"] == 50
    assert svc.rt.flows["u"]["spec"]["scheduling"]["weight"] == 1.0
    assert svc.http.get("/v1/dataflows/u", headers=auth()).json()["latency_target_ms"] == 50


def test_update_request_model_refuses_non_finite_values() -> None:
    for bad in ({"weight": math.inf}, {"latency_target_ms": math.nan}, {"weight": True}):
        with pytest.raises(ValueError, match="weight|latency_target_ms"):
            UpdateRequest.model_validate(bad)
    assert UpdateRequest.model_validate({"latency_target_ms": 30}).latency_target_ms == 30


# -- nesting depth ------------------------------------------------------------------------------
def _depth(data: Any) -> int:
    if isinstance(data, dict):
        return 1 + max(map(_depth, data.values()), default=0)
    if isinstance(data, list):
        return 1 + max(map(_depth, data), default=0)
    return 0


_leaves = st.one_of(st.none(), st.integers(), st.floats(allow_nan=False),
                    st.text(alphabet='[]{}"\\ab\n\u00e9', max_size=8))
_json_values = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=3)
                            | st.dictionaries(st.text(alphabet='[]{}"\\k', max_size=3), inner,
                                              max_size=3), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_json_values, st.booleans(), st.integers(0, 12))
def test_the_depth_scan_agrees_with_the_parsed_data(data: Any, ascii_only: bool,
                                                    limit: int) -> None:
    # Brackets and escaped quotes inside strings must not count; the scan never parses.
    text = json.dumps(data, ensure_ascii=ascii_only).encode()
    assert json_depth(text) == _depth(data)
    over = deeper_than(data, limit)
    assert (over is not None) == (_depth(data) > limit)


def test_the_depth_scan_keeps_its_count_across_chunks() -> None:
    # Strings and nesting that straddle the scan's 1 MiB pieces.
    data = [{"s": "[" * (i % 97) + '\\"{', "n": [[i]]} for i in range(60_000)]
    text = json.dumps(data).encode()
    assert len(text) > 3 * 2**20 and json_depth(text) == 4


def test_deep_json_is_refused_before_it_is_parsed(svc: Service,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def no_parse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a body over the depth limit was parsed")

    with monkeypatch.context() as m:  # json.loads is the json module's: httpx's too
        m.setattr("cameo_actors.service.protocol.encoding.json.loads", no_parse)
        r = svc.http.post("/v1/dataflows", content=b"[" * 2000 + b"]" * 2000, headers=auth())
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "too_deep" and err["got"] == "2000 levels"
    assert err["expected"] == "at most 64 levels of nesting" and "--max-json-depth" in err["fix"]


@pytest.mark.parametrize(("raw", "got"), [
    (b"\x91" * 2000 + b"\x90", "more than 1024 levels"),  # msgpack's own stack limit
    (msgpack.packb(bad_input.nested(70)), "more than 64 levels"),
])
def test_deep_msgpack_is_refused_after_unpacking(svc: Service, raw: bytes, got: str) -> None:
    r = svc.http.post("/v1/dataflows", content=raw, headers=MSGPACK)
    assert r.status_code == 400 and r.json()["error"]["got"] == got, r.text


def test_the_depth_limit_is_a_service_setting(svc: Service) -> None:
    http = TestClient(create_app(svc.core, svc.tokens, max_json_depth=8))
    svc.client(ADMIN).submit(flow("d"))
    event = {"ts": 1, "level": "ERROR", "key": "k", "nested": bad_input.nested(6)}  # 8 deep
    for body, ctype in ((json.dumps([event]).encode(), "application/json"),
                        (msgpack.packb([event]), "application/msgpack")):
        r = http.post("/v1/dataflows/d/sources/s/events", content=body,
                      headers={**auth(), "Content-Type": ctype})
        assert r.status_code == 202, r.text
    event["nested"] = bad_input.nested(7)
    r = http.post("/v1/dataflows/d/sources/s/events", json=[event], headers=auth())
    assert r.status_code == 400 and r.json()["error"]["got"] == "9 levels"
    assert resolve_service_config({"max_json_depth": "100"}, env={}).max_json_depth == 100
    with pytest.raises(ConfigError, match="max_json_depth"):
        ServiceConfig(max_json_depth=4)


def test_huge_integers_in_json_are_a_400_not_a_500(svc: Service) -> None:
    # Python refuses to read an int of more than 4300 digits (a ValueError, not a JSON error).
    body = '[{"ts": ' + "9" * 5000 + "}]"
    svc.client(ADMIN).submit(flow("x"))
    r = svc.http.post("/v1/dataflows/x/sources/s/events", content=body, headers=auth())
    assert r.status_code == 400 and "4300 digits" in r.json()["error"]["fix"], r.text


# -- no 5xx for client input; unexpected failures are a JSON 500 ---------------------------------
def test_an_unexpected_exception_is_a_json_500_logged_with_its_traceback(
        svc: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(svc.core, "list", broken)
    with caplog.at_level(logging.ERROR, logger="cameo.service"):
        r = svc.http.get("/v1/dataflows", headers=auth())  # TestClient would raise the error
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert err["code"] == "internal_error" and err["got"] == "RuntimeError" and err["fix"]
    assert "a bug" not in r.text  # the details are in the log, not in the answer
    record = next(rec for rec in caplog.records if "GET /v1/dataflows failed" in rec.getMessage())
    assert record.exc_info and "a bug" in str(record.exc_info[1])
    assert svc.http.get("/v1/whoami", headers=auth()).status_code == 200


@pytest.mark.parametrize("error", [RuntimeUnavailable("the pool did not answer within 30 s"),
                                   TimeoutError("timed out")])
def test_an_unavailable_runtime_is_a_503_with_retry_after(svc: Service,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          error: Exception) -> None:
    def stuck(*_args: object, **_kwargs: object) -> None:
        raise error

    monkeypatch.setattr(svc.core, "list", stuck)
    r = svc.http.get("/v1/dataflows", headers=auth())
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    err = r.json()["error"]
    assert err["code"] == "unavailable" and err["got"] == str(error)


def test_bad_input_that_escapes_a_route_is_still_a_422(svc: Service,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # E.g. the runtime's own check of an update (a SpecError crossing Ray).
    def refuse(*_args: object, **_kwargs: object) -> None:
        check_live_settings(math.inf, None)

    svc.client(ADMIN).submit(flow("r"))
    monkeypatch.setattr(svc.core, "update", refuse)
    r = svc.http.patch("/v1/dataflows/r", json={"weight": 2}, headers=auth())
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_spec", r.text
    assert r.json()["error"]["got"] == "inf"


def test_a_body_over_the_limit_keeps_the_connection_unless_the_rest_is_huge(
        svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    r = svc.http.post("/v1/dataflows", content=b"x" * 5000, headers=auth())
    assert r.status_code == 413 and "connection" not in r.headers  # uvicorn drains the rest
    monkeypatch.setattr("cameo_actors.service.app.DRAIN_MAX_BYTES", 4500)
    r = svc.http.post("/v1/dataflows", content=b"x" * 5000, headers=auth())
    assert r.status_code == 413 and r.headers["connection"] == "close"
    r = svc.http.post("/v1/dataflows", content=iter([b"x" * 4000, b"x" * 4000]), headers=auth())
    assert r.status_code == 413 and r.headers["connection"] == "close"  # chunked, rest > 4500


# -- spec errors speak the spec's words ---------------------------------------------------------
#: Builder calls and keyword arguments (`.key_by(`, `event_time=`), not spec fields.
BUILDER_WORDS = re.compile(r"\.(source|sink|filter|map|key_by|window|join|aggregate)\(|"
                           r"\b[a-z_]+=(?!=)")


def test_a_json_window_without_time_field_is_told_about_time_field() -> None:
    data = bad_input.broken_spec(steps={0: {"event_time": None}, 2: {"time_field": ...}})
    with pytest.raises(SpecError) as e:
        DataflowSpec.from_dict(data)
    assert "'time_field' on the window step" in e.value.fix
    assert "'event_time' on the source step" in e.value.fix and "=" not in e.value.fix


def test_every_spec_error_of_the_corpus_speaks_the_specs_words() -> None:
    checked = 0
    for case in bad_input.corpus("victim", "events"):
        if case.kind != "spec" or case.auth != "admin" or case.params:
            continue
        decode = msgpack.unpackb if case.content_type == bad_input.MSGPACK else json.loads
        try:
            DataflowSpec.from_dict(decode(case.body or b""))
        except SpecError as e:
            checked += 1
            assert not BUILDER_WORDS.search(f"{e.expected} {e.fix}"), (case.description, str(e))
    assert checked > 80


# -- the corpus ---------------------------------------------------------------------------------
def test_the_corpus_describes_each_case_once_and_names_what_a_reader_needs() -> None:
    cases = bad_input.corpus("victim", "events")
    descriptions = [c.description for c in cases]
    assert len(descriptions) == len(set(descriptions)) and len(cases) > 150
    assert {c.kind for c in cases} == {"body", "spec", "update", "reconfig", "path", "dataflow",
                                       "token", "events"}
    assert all(c.expect is None or 400 <= c.expect < 500 for c in cases)


def test_every_bad_input_gets_its_4xx_and_harms_no_running_dataflow(
        svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    # The real pool checks its limits when it deploys (Controller.deploy); so does this fake.
    deploy, pool = svc.rt.deploy, RuntimeConfig()

    def checked_deploy(spec: dict[str, Any]) -> str:
        check_pool_limits(DataflowSpec.from_dict(spec), max_state_bytes=pool.max_state_bytes,
                          max_windows_per_event=pool.max_windows_per_event)
        return deploy(spec)

    monkeypatch.setattr(svc.rt, "deploy", checked_deploy)
    admin = svc.client(ADMIN)
    admin.submit(bad_input.victim_dataflow())
    admin.submit(flow("bystander", tenant="ops"))
    report = bad_input.probe("http://testserver", ADMIN, svc.tenant_token("ops"), "input-victim",
                             source="events", http=svc.http, max_spec_bytes=4096,
                             max_body_bytes=8192)
    assert report["non_4xx"] == []
    assert report["unexpected"] == []
    assert report["harmed"] == []
    assert report["tried"] == report["answered_4xx"] > 150
    assert svc.rt.flows["input-victim"]["events"] == 2  # the two good events of the checks
    assert set(svc.rt.flows) == {"input-victim", "bystander"}


def test_the_probe_reports_harm_it_did_not_prevent(svc: Service) -> None:
    admin = svc.client(ADMIN)
    admin.submit(bad_input.victim_dataflow())
    # A "bad" request that a broken service would accept: the probe must notice the change.
    lowered = bad_input.BadRequest("update", "a valid update, as if it were bad", "PATCH",
                                   "/v1/dataflows/input-victim",
                                   json.dumps({"latency_target_ms": 7}).encode())
    report = bad_input.probe("http://testserver", ADMIN, svc.tenant_token("ops"), "input-victim",
                             source="events", http=svc.http, cases=[lowered])
    assert report["non_4xx"] == ["a valid update, as if it were bad: 200 "
                                 + '{"name":"input-victim","latency_target_ms":7.0,"weight":1.0}']
    assert report["harmed"] == ["input-victim: (tenant, state, target, weight) "
                                "('victims', 'running', 1000.0, 1.0) -> "
                                "('victims', 'running', 7.0, 1.0)"]
    with pytest.raises(ValueError, match="tenant other than the victim's"):
        bad_input.probe("http://testserver", ADMIN, svc.tenant_token("victims"), "input-victim",
                        source="events", http=svc.http, cases=[])
