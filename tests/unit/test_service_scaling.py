"""The scaling controller through the service: its status (the admin's and a tenant's
view), a dataflow's own settings and pins, their refusals, the CLI, the status page and
the metrics, over the in-memory runtime of tests/shared/service_fakes.py taught the
runtime's two scaling calls (its settings are checked by the real `settings_from_dict`)."""

from __future__ import annotations

import doctest
import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors import Dataflow
from cameo_actors.dataflow.builder import count
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.dataflow.streams import stream_key
from cameo_actors.runtime.boundary import LIVE_STATES
from cameo_actors.runtime.exceptions import DataflowEnded, RuntimeUnavailable
from cameo_actors.scaling import ScalingConfigError, settings_from_dict
from cameo_actors.service import cli, config, view
from cameo_actors.service import metrics as prom
from cameo_actors.service import scaling as scaling_view
from cameo_actors.service.app import create_app
from cameo_actors.service.client import ServiceError
from cameo_actors.service.config import resolve_service_config
from cameo_actors.service.core import ServiceCore
from cameo_actors.service.errors import ConfigError
from tests.shared.service_fakes import (
    ADMIN,
    SCHEMA,
    FakeRuntime,
    Service,
    TestClient,
    auth,
    flow,
)
from tests.unit.conftest import cli_runner

#: The pool's scaling settings in the fake (RuntimeConfig.scaling).
POOL = {"policy": "ds2", "max_parallelism": 8}


def keyed(name: str = "k", tenant: str = "ops") -> Dataflow:
    """source -> key_by -> a tumbling window "win" (the scalable step) -> sink."""
    return (Dataflow(name, latency_target_ms=50, tenant=tenant)
            .source("s", schema=SCHEMA, event_time="ts").key_by("key", id="kb")
            .window(tumbling_ms=1000, id="win").aggregate(n=count()).sink("o"))


class ScalingRuntime(FakeRuntime):
    """The fake runtime with `scaling` and `set_scaling`: each live dataflow measured, its
    keyed steps scalable (at their pinned or spec parallelism), 1000 true events/s per
    instance, busy 0.5; decisions, misses and failed actions as a test puts them."""

    def __init__(self) -> None:
        super().__init__()
        self.own: dict[str, dict[str, Any]] = {}
        self.pins: dict[str, dict[str, int]] = {}
        self.decisions: list[dict[str, Any]] = []
        self.misses: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.looks = 0  # scaling() calls
        self.down = False  # scaling() raises RuntimeUnavailable

    def _scalable(self, name: str) -> list[str]:
        raw = self._get(name)["spec"]
        spec = DataflowSpec.from_dict(raw)
        return [s["id"] for s in raw["steps"] if s["op"] in ("window", "join", "process")
                and all(stream_key(spec, i) is not None for i in s["inputs"])]

    def _view(self, name: str) -> dict[str, Any]:
        f = self._get(name)
        scalable = self._scalable(name)
        steps = {}
        for s in f["spec"]["steps"]:
            p = self.pins.get(name, {}).get(s["id"], s.get("parallelism", 1))
            steps[s["id"]] = {"parallelism": p, "scalable": s["id"] in scalable, "lessees": 0,
                              "events_in_eps": 500.0 * p, "events_out_eps": 250.0 * p,
                              "true_processing_eps": 1000.0, "true_output_eps": 500.0,
                              "busy": 0.5, "backlog_events": 0.0}
        return {"policy": self.own.get(name, {}).get("policy", POOL["policy"]),
                "within_target": 0.99, "steps": steps,
                "sources": {"s": {"rate_eps": 500.0, "backlog_events": 0.0,
                                  "backlog_growth_eps": 0.0}},
                "instances": {step: [{"instance": f"{name}/{step}/0", "events_in_eps": 500.0,
                                      "busy": 0.5, "true_processing_eps": 1000.0,
                                      "useful_split_ms": {"deserialization": 1.0,
                                                          "processing": 8.0,
                                                          "serialization": 1.0},
                                      "queue_delay_ms": 2.0, "waiting": 0}]
                              for step in scalable}}

    def scaling(self, name: str | None = None) -> dict[str, Any]:
        self.looks += 1
        if self.down:
            raise RuntimeUnavailable("the pool did not answer within 30 s")
        if name is not None:
            self._get(name)
        live = [n for n, f in self.flows.items() if f["state"] in LIVE_STATES
                and (name is None or n == name)]
        return {"policy": POOL["policy"], "enabled": True, "executors": len(self.executors),
                "wanted_executors": 3,
                "bounds": {"min_executors": 1, "max_executors": 8, "max_parallelism": 8},
                "dataflows": {n: self._view(n) for n in live},
                "decisions": [dict(d) for d in self.decisions
                              if name is None or d["dataflow"] == name],
                "misses": [dict(m) for m in self.misses if name is None or m["dataflow"] == name],
                "errors": [dict(e) for e in self.failures
                           if name is None or e["where"] in (name, "pool")]}

    def set_scaling(self, name: str, settings: dict[str, Any] | None = None, *,
                    pin: dict[str, int | None] | None = None) -> dict[str, Any]:
        f = self._get(name)
        if f["state"] not in LIVE_STATES:
            raise DataflowEnded(name, f["state"], f["cause"])
        where = f"dataflow {name!r}: scaling"
        if settings is not None:
            settings_from_dict({**POOL, **settings}, where=where)  # ScalingConfigError
        scalable = self._scalable(name)
        for step in pin or {}:
            if step not in scalable:
                raise ScalingConfigError(f"{where}.pin", f"one of its scalable steps "
                                         f"{scalable}", step, "pin a keyed window, join or "
                                         "process step")
        if settings is None:
            self.own.pop(name, None)
        else:
            self.own[name] = dict(settings)
        for step, p in (pin or {}).items():
            if p is None:
                self.pins.get(name, {}).pop(step, None)
            else:
                self.pins.setdefault(name, {})[step] = p
        return self.scaling(name)


class ScalingService(Service):
    """`Service` over `ScalingRuntime`, /metrics pulling its scaling status."""

    def __init__(self) -> None:
        super().__init__()
        self.rt = ScalingRuntime()
        self.core = ServiceCore(self.rt, clock=self.clock, allowed_modules=("tests.",))
        self.app = create_app(self.core, self.tokens, max_spec_bytes=4096, max_body_bytes=8192,
                              snapshot=self.rt.snapshot, scaling=self.rt.scaling,
                              info=lambda: {"pool": "fake"})
        self.http = TestClient(self.app)


@pytest.fixture()
def ssvc() -> Any:
    s = ScalingService()
    yield s
    s.http.close()


@pytest.fixture()
def scaling_cli(ssvc: ScalingService, monkeypatch: pytest.MonkeyPatch,
                capsys: pytest.CaptureFixture[str]) -> Any:
    """`cameo ARGS` in-process against `ssvc` as the admin: (exit code, stdout, stderr)."""
    return cli_runner(ssvc.client(ADMIN), monkeypatch, capsys)


def error(r: Any) -> dict[str, Any]:
    return r.json()["error"]  # type: ignore[no-any-return]


def two_tenants(ssvc: ScalingService) -> None:
    """k (ops, keyed), theirs (analytics, keyed), with a decision, a miss and a failed
    action each, and a failure of the pool."""
    admin = ssvc.client(ADMIN)
    admin.submit(keyed())
    admin.submit(keyed("theirs", tenant="analytics"))
    for i, name in enumerate(("k", "theirs")):
        ssvc.rt.decisions.append({"at": 10.0 + i, "dataflow": name, "step": "win",
                                  "from_parallelism": 1, "to_parallelism": 2, "policy": "ds2",
                                  "reason": f"{name} needs 1.6 instances at 800 ev/s"})
        ssvc.rt.misses.append({"dataflow": name, "reason": f"{name}: 9 executors needed, 8 "
                                                           "at most"})
        ssvc.rt.failures.append({"at": 1_700_000_000.0, "where": name,
                                 "error": f"scaling {name} failed"})
    ssvc.rt.failures.append({"at": 1_700_000_001.0, "where": "pool",
                             "error": "adding 1 executors failed"})


# -- status: the admin's and a tenant's view ---------------------------------------------------
def test_the_admin_sees_the_whole_pool(ssvc: ScalingService) -> None:
    two_tenants(ssvc)
    r = ssvc.http.get("/v1/scaling", headers=auth())
    assert r.status_code == 200, r.text
    s = r.json()
    assert (s["policy"], s["enabled"], s["executors"], s["wanted_executors"]) == (
        "ds2", True, 2, 3)
    assert sorted(s["dataflows"]) == ["k", "theirs"]
    win = s["dataflows"]["k"]["steps"]["win"]
    assert (win["parallelism"], win["scalable"], win["true_processing_eps"], win["busy"]) == (
        1, True, 1000.0, 0.5)
    assert s["dataflows"]["k"]["steps"]["o"]["scalable"] is False
    assert s["dataflows"]["k"]["instances"]["win"][0]["useful_split_ms"]["processing"] == 8.0
    assert [d["dataflow"] for d in s["decisions"]] == ["k", "theirs"]
    assert len(s["misses"]) == 2 and len(s["errors"]) == 3


def test_a_tenant_sees_its_own_dataflows_and_not_the_pools_executors(
        ssvc: ScalingService) -> None:
    two_tenants(ssvc)
    ops = ssvc.tenant_token("ops")
    s = ssvc.http.get("/v1/scaling", headers=auth(ops)).json()
    assert list(s["dataflows"]) == ["k"]
    assert [d["dataflow"] for d in s["decisions"]] == ["k"]
    assert [m["dataflow"] for m in s["misses"]] == ["k"]
    assert [e["where"] for e in s["errors"]] == ["k"]  # not the pool's, not theirs
    assert s["executors"] is None and s["wanted_executors"] is None
    assert s["policy"] == "ds2" and s["bounds"]["max_parallelism"] == 8
    assert "theirs" not in json.dumps(s)
    one = ssvc.http.get("/v1/dataflows/k/scaling", headers=auth(ops)).json()
    assert list(one["dataflows"]) == ["k"] and one["executors"] is None
    assert [e["where"] for e in one["errors"]] == ["k"]  # the runtime's "pool" line too: no
    # Another tenant's dataflow is not there for this token, as its status is not.
    for path in ("/v1/dataflows/theirs/scaling", "/v1/dataflows/nowhere/scaling"):
        r = ssvc.http.get(path, headers=auth(ops))
        assert r.status_code == 404 and error(r)["code"] == "not_found"


def test_the_client_reads_the_status(ssvc: ScalingService) -> None:
    two_tenants(ssvc)
    s = ssvc.client(ssvc.tenant_token("analytics")).scaling()
    assert list(s["dataflows"]) == ["theirs"]
    assert ssvc.client(ADMIN).scaling("k")["dataflows"]["k"]["policy"] == "ds2"


# -- setting a dataflow's scaling --------------------------------------------------------------
def test_the_owner_sets_its_settings_and_pins(ssvc: ScalingService) -> None:
    two_tenants(ssvc)
    ops = ssvc.tenant_token("ops")
    r = ssvc.http.put("/v1/dataflows/k/scaling", headers=auth(ops), json={
        "settings": {"policy": "threshold", "max_parallelism": 4, "high": 0.9, "low": 0.2,
                     "warmup_s": 5, "lessees": True},
        "pin": {"win": 3}})
    assert r.status_code == 200, r.text
    assert ssvc.rt.own["k"] == {"policy": "threshold", "max_parallelism": 4, "high": 0.9,
                                "low": 0.2, "warmup_s": 5, "lessees": True}  # only the keys given
    assert ssvc.rt.pins == {"k": {"win": 3}}
    s = r.json()
    assert s["dataflows"]["k"]["policy"] == "threshold"
    assert s["dataflows"]["k"]["steps"]["win"]["parallelism"] == 3
    assert s["executors"] is None and [e["where"] for e in s["errors"]] == ["k"]
    # null: the pool's settings again; a step mapped to null is unpinned.
    r = ssvc.http.put("/v1/dataflows/k/scaling", headers=auth(ops),
                      json={"settings": None, "pin": {"win": None}})
    assert r.status_code == 200 and "k" not in ssvc.rt.own and ssvc.rt.pins == {"k": {}}
    # The admin may set any dataflow's; the client sends the same body.
    got = ssvc.client(ADMIN).set_scaling("theirs", {"policy": "off"}, pin={"win": 2})
    assert got["dataflows"]["theirs"]["policy"] == "off" and got["executors"] == 2


@pytest.mark.parametrize(("settings", "subject", "got"), [
    ({"policy": "warp"}, "policy", "warp"),
    ({"min_parallelism": 5, "max_parallelism": 2}, "min_parallelism", 5),
    ({"min_parallelism": 9}, "min_parallelism", 9),  # above the pool's max_parallelism 8
    ({"high": 0.2, "low": 0.5}, "low", 0.5),
])
def test_settings_the_runtime_refuses_are_422_with_its_fields(
        ssvc: ScalingService, settings: dict[str, Any], subject: str, got: Any) -> None:
    ssvc.client(ADMIN).submit(keyed())
    r = ssvc.http.put("/v1/dataflows/k/scaling", headers=auth(), json={"settings": settings})
    assert r.status_code == 422, r.text
    e = error(r)
    assert e["code"] == "invalid_scaling" and subject in e["message"]
    assert e["expected"] and e["fix"] and e["got"] == got
    assert ssvc.rt.own == {}


def test_a_pin_on_a_step_that_cannot_scale_is_422(ssvc: ScalingService) -> None:
    c = ssvc.client(ADMIN)
    c.submit(keyed())
    with pytest.raises(ServiceError) as e:
        c.set_scaling("k", None, pin={"o": 2})
    assert (e.value.status, e.value.code, e.value.got) == (422, "invalid_scaling", "o")
    assert "win" in str(e.value.expected) and ssvc.rt.pins == {}


@pytest.mark.parametrize(("body", "field"), [
    ({"pin": {"win": 2}}, "settings"),  # required: leaving it out never resets by accident
    ({"settings": "ds2"}, "settings"),
    ({"settings": {"policy": 5}}, "policy"),
    ({"settings": {"policy": "a b"}}, "policy"),
    ({"settings": {"min_parallelism": 0}}, "min_parallelism"),
    ({"settings": {"max_parallelism": "4"}}, "max_parallelism"),
    ({"settings": {"max_parallelism": True}}, "max_parallelism"),
    ({"settings": {"max_parallelism": 10**30}}, "max_parallelism"),
    ({"settings": {"target_utilization": 0}}, "target_utilization"),
    ({"settings": {"target_utilization": 1.5}}, "target_utilization"),
    ({"settings": {"warmup_s": -1}}, "warmup_s"),
    ({"settings": {"scale_down_window_s": 1e300}}, "scale_down_window_s"),
    ({"settings": {"catch_up_s": 0}}, "catch_up_s"),
    ({"settings": {"low": -0.1}}, "low"),
    ({"settings": {"lessees": "yes"}}, "lessees"),
    ({"settings": {"deadline_aware": 1}}, "deadline_aware"),
    ({"settings": {"max_lessees": -1}}, "max_lessees"),
    ({"settings": {"max_executors": 4}}, "max_executors"),  # the pool's, not a dataflow's
    ({"settings": {"interval_s": 1}}, "interval_s"),
    ({"settings": None, "pin": {"win": 0}}, "pin"),
    ({"settings": None, "pin": {"win": 2.0}}, "pin"),
    ({"settings": None, "pin": ["win"]}, "pin"),
    ({"settings": None, "pin": {"": 2}}, "pin"),
    ({"settings": None, "pins": {}}, "pins"),
])
def test_a_bad_scaling_body_is_a_422_naming_the_field(
        ssvc: ScalingService, body: dict[str, Any], field: str) -> None:
    ssvc.client(ADMIN).submit(keyed())
    looks = ssvc.rt.looks
    r = ssvc.http.put("/v1/dataflows/k/scaling", headers=auth(), json=body)
    assert r.status_code == 422, r.text
    e = error(r)
    assert e["code"] == "invalid_request" and field in e["message"] and e["fix"]
    assert ssvc.rt.looks == looks and ssvc.rt.own == {} and ssvc.rt.pins == {}  # never asked


def test_non_finite_numbers_and_size_and_body_limits(ssvc: ScalingService) -> None:
    import msgpack

    ssvc.client(ADMIN).submit(keyed())
    r = ssvc.http.put("/v1/dataflows/k/scaling", headers={
        **auth(), "Content-Type": "application/msgpack"},
        content=msgpack.packb({"settings": {"high": float("nan")}}))
    assert r.status_code == 422 and "high" in error(r)["message"]
    r = ssvc.http.put("/v1/dataflows/k/scaling", headers={
        **auth(), "Content-Type": "application/json"}, content=b'{"settings": {"low": NaN}}')
    assert r.status_code == 400 and "NaN" in r.text
    big = {"settings": None, "pin": {f"step{i}": 2 for i in range(500)}}  # over 4096 bytes
    r = ssvc.http.put("/v1/dataflows/k/scaling", headers=auth(), json=big)
    assert r.status_code == 413 and error(r)["code"] == "too_large"
    many = {"settings": None, "pin": {f"s{i}": 2 for i in range(257)}}  # under 4096 bytes
    r = ssvc.http.put("/v1/dataflows/k/scaling", headers=auth(), json=many)
    assert r.status_code == 422 and "pin" in error(r)["message"]
    r = ssvc.http.put("/v1/dataflows/k/scaling", headers=auth())
    assert r.status_code == 400 and error(r)["code"] == "malformed_body"
    assert ssvc.rt.own == {} and ssvc.rt.pins == {}


def test_who_may_set_and_when(ssvc: ScalingService) -> None:
    two_tenants(ssvc)
    ops = ssvc.tenant_token("ops")
    r = ssvc.http.put("/v1/dataflows/theirs/scaling", headers=auth(ops), json={"settings": None})
    assert r.status_code == 404  # another tenant's: as if it did not exist
    r = ssvc.http.put("/v1/dataflows/nowhere/scaling", headers=auth(), json={"settings": None})
    assert r.status_code == 404
    ssvc.rt.end("theirs", "failed", "boom")
    r = ssvc.http.put("/v1/dataflows/theirs/scaling", headers=auth(), json={"settings": None})
    assert r.status_code == 409 and error(r)["code"] == "dataflow_ended"
    ssvc.core.stopping = True
    r = ssvc.http.put("/v1/dataflows/k/scaling", headers=auth(ops), json={"settings": None})
    assert r.status_code == 503
    assert ssvc.rt.own == {} and ssvc.rt.pins == {}


def test_a_runtime_that_does_not_answer_is_503(ssvc: ScalingService) -> None:
    ssvc.client(ADMIN).submit(keyed())
    ssvc.rt.down = True
    r = ssvc.http.get("/v1/scaling", headers=auth())
    assert r.status_code == 503 and error(r)["code"] == "unavailable"
    # The dataflow's status still answers, without its scaling line.
    s = ssvc.http.get("/v1/dataflows/k", headers=auth()).json()
    assert s["scaling"] is None and s["state"] == "running"


def test_a_runtime_without_a_scaling_controller(svc: Service) -> None:
    svc.client(ADMIN).submit(flow("plain"))
    r = svc.http.get("/v1/scaling", headers=auth())
    assert r.status_code == 501 and error(r)["code"] == "not_supported"
    assert svc.http.get("/v1/dataflows/plain", headers=auth()).json()["scaling"] is None


def test_the_openapi_document_describes_the_scaling_operations(ssvc: ScalingService) -> None:
    doc = ssvc.http.get("/openapi.json", headers=auth()).json()
    assert "get" in doc["paths"]["/v1/scaling"]
    assert {"get", "put"} <= set(doc["paths"]["/v1/dataflows/{name}/scaling"])
    assert "DataflowScalingSettings" in json.dumps(doc)


# -- the status page ---------------------------------------------------------------------------
def test_a_dataflows_status_shows_its_steps_parallelism_and_true_rates(
        ssvc: ScalingService) -> None:
    two_tenants(ssvc)
    c = ssvc.client(ADMIN)
    c.set_scaling("k", {"policy": "ds2"}, pin={"win": 4})
    s = c.status("k")
    sc = s["scaling"]
    assert sc["policy"] == "ds2" and sc["steps"]["win"]["parallelism"] == 4
    assert [d["dataflow"] for d in sc["decisions"]] == ["k"]
    assert sc["misses"] == ["k: 9 executors needed, 8 at most"]
    assert [e["where"] for e in sc["errors"]] == ["k"]
    text = view.render_status(s, now=0)
    assert "  scaling     policy ds2" in text
    assert "    win  4 instances   true 1,000 ev/s   busy 50%" in text
    assert "    last decision  win 1 -> 2 (ds2): k needs 1.6 instances at 800 ev/s" in text
    assert "    will miss  k: 9 executors needed, 8 at most" in text
    assert "o  " not in text.split("scaling", 1)[1]  # only the scalable steps
    ssvc.rt.end("k", "failed", "boom")
    assert c.status("k")["scaling"] is None


def test_summary_and_visible_are_pure() -> None:
    status = {"policy": "ds2", "executors": 2, "wanted_executors": 2, "dataflows": {},
              "decisions": [{"dataflow": "a", "step": "w"}] * 8, "misses": [],
              "errors": [{"where": "a", "error": str(i)} for i in range(5)]}
    got = scaling_view.summary(status, "a")
    assert got is not None and got["policy"] == "ds2" and got["steps"] == {}
    assert len(got["decisions"]) == scaling_view.DECISIONS_SHOWN
    assert [e["error"] for e in got["errors"]] == ["2", "3", "4"]
    assert scaling_view.summary(status, "b") is None
    assert scaling_view.visible(status, None) == status
    assert scaling_view.visible(status, set())["decisions"] == []


# -- the CLI -----------------------------------------------------------------------------------
STATUS: dict[str, Any] = {
    "policy": "ds2", "enabled": True, "executors": 3, "wanted_executors": 4,
    "bounds": {"min_executors": 1, "max_executors": 8, "max_parallelism": 16},
    "dataflows": {"alerts": {
        "policy": "ds2", "within_target": 0.97,
        "steps": {"win": {"parallelism": 4, "scalable": True, "lessees": 1,
                          "events_in_eps": 8000.0, "events_out_eps": 40.0,
                          "true_processing_eps": 12000.0, "true_output_eps": 60.0,
                          "busy": 0.634, "backlog_events": 0.0},
                  "out": {"parallelism": 1, "scalable": False, "lessees": 0,
                          "events_in_eps": 40.0, "events_out_eps": 40.0,
                          "true_processing_eps": None, "true_output_eps": None,
                          "busy": None, "backlog_events": 0.0}},
        "sources": {"logs": {"rate_eps": 8000.0, "backlog_events": 1200.0,
                             "backlog_growth_eps": 3.0}},
        "instances": {}}},
    "decisions": [{"at": 812.5, "dataflow": "alerts", "step": "win", "from_parallelism": 2,
                   "to_parallelism": 4, "policy": "ds2",
                   "reason": "8,000 ev/s at 2,000 true ev/s an instance needs 4"},
                  {"at": 1_700_000_000.0, "dataflow": "alerts", "step": "win",
                   "from_parallelism": 0, "to_parallelism": 1, "policy": "ds2",
                   "reason": "one key holds 90% of the input", "kind": "lessees"},
                  {"at": 700.0, "dataflow": "gone", "step": "j", "from_parallelism": 3,
                   "to_parallelism": 2, "policy": "threshold", "reason": "idle"}],
    "misses": [{"dataflow": "alerts", "reason": "needs 9 executors, 8 at most"},
               {"dataflow": "bulk", "reason": "needs 20 instances of w, 16 at most"}],
    "errors": [{"at": 1_700_000_000.0, "where": "pool", "error": "adding 1 executors failed"}],
}


def test_render_scaling_shows_steps_decisions_misses_and_failures() -> None:
    text = view.render_scaling(STATUS)
    lines = text.splitlines()
    assert lines[0] == ("scaling: pool policy ds2; executors 3, wanted 4; bounds: executors 1-8, "
                        "parallelism at most 16")
    assert "alerts  policy ds2  within target 97.0 %" in lines
    header = next(line for line in lines if line.strip().startswith("step"))
    assert header.split() == ["step", "parallelism", "lessees", "true_eps", "busy", "in_eps",
                              "out_eps", "backlog"]
    assert next(line for line in lines if line.strip().startswith("win")).split() == [
        "win", "4", "1", "12,000", "63%", "8,000", "40", "0"]
    assert next(line for line in lines if line.strip().startswith("out")).split() == [
        "out", "1", "0", "-", "-", "40", "40", "0"]
    assert "  source logs: 8,000 ev/s in, 1,200 waiting at the writers (3 ev/s growth)" in lines
    assert "    win 2 -> 4 (ds2): 8,000 ev/s at 2,000 true ev/s an instance needs 4" in lines
    assert ("    2023-11-14T22:13:20Z  win lessees 0 -> 1 (ds2): one key holds 90% of the "
            "input") in lines
    assert "  will miss its target: needs 9 executors, 8 at most" in lines
    assert "  gone/j 3 -> 2 (threshold): idle" in lines
    assert "  bulk: needs 20 instances of w, 16 at most" in lines
    assert "  2023-11-14T22:13:20Z  pool: adding 1 executors failed" in lines
    tenant = view.render_scaling({**STATUS, "executors": None, "wanted_executors": None,
                                  "enabled": False, "dataflows": {}, "decisions": [],
                                  "misses": [], "errors": []})
    assert tenant.splitlines()[0] == ("scaling: pool policy ds2 (no dataflow is scaled); "
                                      "bounds: executors 1-8, parallelism at most 16")
    assert "no dataflow measured yet" in tenant


def test_cameo_scaling_shows_the_pool_and_one_dataflow(scaling_cli: Any) -> None:
    scaling_cli.client.submit(keyed())
    scaling_cli.client.submit(flow("plain"))
    code, out, _ = scaling_cli("scaling")
    assert code == 0 and out.startswith("scaling: pool policy ds2; executors 2, wanted 3")
    assert "k  policy ds2" in out and "plain  policy ds2" in out
    code, out, _ = scaling_cli("scaling", "k")
    assert code == 0 and "k  policy ds2" in out and "plain" not in out
    code, out, _ = scaling_cli("scaling", "k", "--json")
    assert json.loads(out)["dataflows"]["k"]["steps"]["win"]["parallelism"] == 1
    code, _, err = scaling_cli("scaling", "nowhere")
    assert code == 1 and "HTTP 404 not_found" in err


def test_cameo_scaling_set(ssvc: ScalingService, scaling_cli: Any) -> None:
    scaling_cli.client.submit(keyed())
    code, out, err = scaling_cli("scaling", "set", "k", "--policy", "threshold",
                                 "--min-parallelism", "2", "--max-parallelism", "6",
                                 "--setting", "target_utilization=0.7", "--setting",
                                 "lessees=true", "--pin", "win=4")
    assert code == 0, err
    assert out.splitlines()[0] == ("k: scaling settings lessees=True, max_parallelism=6, "
                                   "min_parallelism=2, policy=threshold, "
                                   "target_utilization=0.7; policy threshold; win pinned at 4")
    assert ssvc.rt.own["k"] == {"policy": "threshold", "min_parallelism": 2,
                                "max_parallelism": 6, "target_utilization": 0.7, "lessees": True}
    assert ssvc.rt.pins == {"k": {"win": 4}}
    code, out, _ = scaling_cli("scaling", "set", "k", "--unpin", "win", "--policy", "ds2")
    assert code == 0 and ssvc.rt.pins == {"k": {}} and ssvc.rt.own["k"] == {"policy": "ds2"}
    assert "win unpinned" in out.splitlines()[0]
    scaling_cli("scaling", "set", "k", "--pin", "win=3")
    assert "k" not in ssvc.rt.own  # a set gives the whole own settings: none, the pool's
    code, out, _ = scaling_cli("scaling", "set", "k", "--reset")
    assert code == 0 and ssvc.rt.pins == {"k": {}} and "k" not in ssvc.rt.own
    assert out.splitlines()[0] == "k: scaling settings the pool's; policy ds2; win unpinned"
    code, out, _ = scaling_cli("scaling", "set", "k", "--policy", "off", "--json")
    assert code == 0 and json.loads(out)["dataflows"]["k"]["policy"] == "off"


@pytest.mark.parametrize(("argv", "needle"), [
    (("scaling", "k", "--policy", "ds2"), "only with `cameo scaling set NAME`"),
    (("scaling", "--pin", "win=2"), "only with `cameo scaling set NAME`"),
    (("scaling", "a", "b"), "at most one dataflow name"),
    (("scaling", "set"), "one dataflow name"),
    (("scaling", "set", "k", "extra"), "one dataflow name"),
    (("scaling", "set", "k", "--pin", "win"), "--pin: expected STEP=N"),
    (("scaling", "set", "k", "--pin", "win=0"), "--pin: expected STEP=N"),
    (("scaling", "set", "k", "--pin", "win=x"), "--pin: expected STEP=N"),
    (("scaling", "set", "k", "--pin", "win=2", "--unpin", "win"), "--unpin"),
    (("scaling", "set", "k", "--reset", "--policy", "ds2"), "--reset"),
    (("scaling", "set", "k", "--setting", "noequals"), "--setting: expected KEY=VALUE"),
    (("scaling", "set", "k", "--policy", "warp"), "HTTP 422 invalid_scaling"),
    (("scaling", "set", "k", "--min-parallelism", "0"), "HTTP 422 invalid_request"),
])
def test_cameo_scaling_refusals(ssvc: ScalingService, scaling_cli: Any, argv: tuple[str, ...],
                                needle: str) -> None:
    scaling_cli.client.submit(keyed())
    code, _, err = scaling_cli(*argv)
    assert code == 1 and needle in err, err
    assert ssvc.rt.own == {} and ssvc.rt.pins == {}


def test_cameo_status_shows_the_scaling_lines(scaling_cli: Any) -> None:
    scaling_cli.client.submit(keyed())
    code, out, _ = scaling_cli("status", "k", "--once")
    assert code == 0 and "scaling     policy ds2" in out
    assert "win  1 instance   true 1,000 ev/s   busy 50%" in out


def test_the_scaling_flag_of_cameo_serve() -> None:
    cfg = resolve_service_config({"scaling": ["policy=ds2,max_executors=4", "lessees=true"]},
                                 env={})
    assert cfg.scaling == {"policy": "ds2", "max_executors": 4, "lessees": True}
    cfg = resolve_service_config({}, env={"CAMEO_SCALING": "policy=threshold, high=0.9"})
    assert cfg.scaling == {"policy": "threshold", "high": 0.9}
    assert resolve_service_config({}, env={}).scaling == {}
    with pytest.raises(ConfigError, match="scaling.*max_executors.*int >= 1"):
        resolve_service_config({"scaling": ["max_executors=0"]}, env={})
    with pytest.raises(ConfigError, match="policy"):
        resolve_service_config({"scaling": ["policy=warp"]}, env={})
    with pytest.raises(ConfigError, match="scaling"):
        resolve_service_config({"scaling": ["policy"]}, env={})


def test_the_scaling_table_of_the_config_file(tmp_path: Any) -> None:
    path = tmp_path / "cameo.toml"
    path.write_text('[serve]\nport = 9000\n[serve.scaling]\npolicy = "ds2"\nmax_executors = 6\n')
    cfg = resolve_service_config({"config": str(path)}, env={})
    assert cfg.scaling == {"policy": "ds2", "max_executors": 6} and cfg.port == 9000


# -- metrics ------------------------------------------------------------------------------------
def samples(text: str | bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = text.decode() if isinstance(text, bytes) else text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def snapshot_of(*flows: tuple[str, str]) -> dict[str, Any]:
    """A PoolSnapshot with these (dataflow, tenant)s and nothing else."""
    return {"dataflows": [{"name": n, "tenant": t, "target_ms": 50.0, "weight": 1.0,
                           "results": 0, "within_target_count": 0, "sum_ms": 0.0,
                           "buckets": [0] * 14, "p50_ms": None, "p95_ms": None, "p99_ms": None,
                           "events_in": 0, "events_out": 0, "backlog": 0, "errors": {}}
                          for n, t in flows], "executors": []}


def test_scaling_metrics_from_a_fixed_status() -> None:
    status = {**STATUS, "dataflows": {**STATUS["dataflows"], "bulk": {
        "policy": "threshold", "steps": {"w": {"parallelism": 16, "scalable": True,
                                               "lessees": 0, "true_processing_eps": 50.0,
                                               "busy": 1.0}}}}}
    snap = snapshot_of(("alerts", "ops"), ("bulk", "analytics"))
    got = samples(prom.render(lambda: snap, scaling_fn=lambda: status,  # type: ignore[arg-type,return-value]
                              decisions=scaling_view.DecisionCounter()))
    win = (("dataflow", "alerts"), ("step", "win"))
    assert got[("cameo_step_parallelism", win)] == 4
    assert got[("cameo_step_lessees", win)] == 1
    assert got[("cameo_step_true_processing_eps", win)] == 12000.0
    assert got[("cameo_step_busy_ratio", win)] == pytest.approx(0.634)
    out = (("dataflow", "alerts"), ("step", "out"))
    assert got[("cameo_step_parallelism", out)] == 1
    assert ("cameo_step_true_processing_eps", out) not in got  # not measured: no sample
    assert got[("cameo_pool_executors_wanted", ())] == 4
    assert got[("cameo_pool_executors", ())] == 3
    assert got[("cameo_scaling_misses", (("dataflow", "alerts"),))] == 1
    assert got[("cameo_scaling_misses", (("dataflow", "bulk"),))] == 1
    assert got[("cameo_scaling_decisions_total", (("dataflow", "alerts"),))] == 2
    assert ("cameo_scaling_decisions_total", (("dataflow", "gone"),)) in got  # in the history
    assert not any("instance" in dict(labels) for _, labels in got)  # never per instance
    # A tenant's scrape: its own dataflows only, and no pool families.
    mine = samples(prom.render(lambda: snap, tenant="analytics",  # type: ignore[arg-type,return-value]
                               include_executors=False, scaling_fn=lambda: status,
                               decisions=scaling_view.DecisionCounter()))
    names = {dict(labels).get("dataflow") for name, labels in mine
             if name.startswith(("cameo_step_", "cameo_scaling_"))}
    assert names == {"bulk"}
    assert not any(name.startswith("cameo_pool_executors") for name, _ in mine)


def test_the_decisions_counter_is_monotone_over_a_sliding_history() -> None:
    counter = scaling_view.DecisionCounter()

    def d(at: float, name: str = "a") -> dict[str, Any]:
        return {"at": at, "dataflow": name, "step": "w", "from_parallelism": 1,
                "to_parallelism": 2}
    assert counter.observe([d(1), d(2)]) == {"a": 2}
    assert counter.observe([d(1), d(2)]) == {"a": 2}  # the same history: nothing new
    assert counter.observe([d(2), d(3), d(4, "b")]) == {"a": 3, "b": 1}  # d(1) left the window
    assert counter.observe([]) == {"a": 3, "b": 1}  # a count never goes down
    assert counter.observe([d(5, "b")], keep={"b"}) == {"b": 2}  # a's dataflow is gone


def test_metrics_count_decisions_across_scrapes_and_survive_a_failed_status(
        ssvc: ScalingService) -> None:
    two_tenants(ssvc)
    admin = ssvc.client(ADMIN)
    k = (("dataflow", "k"),)
    assert samples(admin.metrics())[("cameo_scaling_decisions_total", k)] == 1
    ssvc.rt.decisions.append({**ssvc.rt.decisions[0], "at": 20.0, "from_parallelism": 2,
                              "to_parallelism": 3})
    got = samples(admin.metrics())
    assert got[("cameo_scaling_decisions_total", k)] == 2
    assert got[("cameo_step_parallelism", (*k, ("step", "win")))] == 1
    # A tenant's scrape counts with the same counter, and sees its own.
    mine = samples(ssvc.client(ssvc.tenant_token("analytics")).metrics())
    assert mine[("cameo_scaling_decisions_total", (("dataflow", "theirs"),))] == 1
    assert ("cameo_scaling_decisions_total", k) not in mine
    # The runtime does not answer the scaling call: the rest of the scrape still does.
    ssvc.rt.down = True
    got = samples(admin.metrics())
    assert ("cameo_results_total", (("dataflow", "k"), ("tenant", "ops"))) in got
    assert not any(name.startswith("cameo_step_") for name, _ in got)


def test_doctests_of_the_modules_touched() -> None:
    for module in (scaling_view, view, cli, config, prom):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module.__name__
