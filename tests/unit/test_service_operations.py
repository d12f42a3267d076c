"""The table of operations: every route of the API comes from it, each operation's
permission is checked once, and a row added to it is a route, a client call and a CLI
command (listed by `cameo --help`) without touching app.py, client.py or the cli package.

In-process (FastAPI's TestClient over the in-memory runtime): no Ray, no sleep.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import pytest
from fastapi.routing import APIRoute

from cameo_actors.service import cli, operations
from cameo_actors.service.app import create_app
from cameo_actors.service.auth import Principal
from cameo_actors.service.client import Client, ServiceError
from cameo_actors.service.console import OLD_PREFIX, PREFIX
from cameo_actors.service.core import ServiceCore
from cameo_actors.service.operations import (
    ADMIN,
    OPERATION,
    OPERATIONS,
    PUBLIC,
    Body,
    Operation,
    Param,
)
from cameo_actors.service.protocol import ScaleRequest
from tests.shared.service_fakes import ADMIN as ADMIN_TOKEN
from tests.shared.service_fakes import FakeRuntime, Service, TestClient, auth, flow

#: The framework's own routes (the OpenAPI document), not operations.
FRAMEWORK_PATHS = {"/openapi.json"}


def api_routes(app: Any) -> set[tuple[str, str, str]]:
    """(method, path, name) of every route of the API (the console's files aside)."""
    return {(method, r.path, r.name) for r in app.routes
            if r.path not in FRAMEWORK_PATHS and not r.path.startswith((PREFIX, OLD_PREFIX))
            for method in getattr(r, "methods", ())}


def test_every_route_of_the_app_comes_from_the_table(svc: Service) -> None:
    assert api_routes(svc.app) == {(op.method, op.path, op.name) for op in OPERATIONS}
    routes = {r.name: r for r in svc.app.routes if isinstance(r, APIRoute)}
    for op in OPERATIONS:
        route = routes[op.name]
        assert route.status_code == op.status and route.summary == op.summary, op.name
        assert route.tags == [op.tag], op.name


def test_the_table_is_whole_and_consistent() -> None:
    assert len(OPERATION) == len(OPERATIONS)  # one row per name
    assert len({(op.method, op.path) for op in OPERATIONS}) == len(OPERATIONS)
    for op in OPERATIONS:
        if op.permission == ADMIN:  # a tenant's 403 says what it asked for
            assert op.forbidden.endswith((" is", " are")), op.name
        target, _, method = op.call.partition(".")
        if target == "core":
            params = inspect.signature(getattr(ServiceCore, method)).parameters
            wanted = [p.keyword for p in op.path_params() + op.query_params()]
            if op.body is not None:
                wanted += list(op.body.model.model_fields) if op.body.model else ["data"]
            assert set(wanted) <= set(params), (op.name, wanted, list(params))
    with pytest.raises(ValueError, match="one row per name"):
        operations.by_name([OPERATION["cancel"], OPERATION["cancel"]])


@pytest.mark.parametrize("op", [op for op in OPERATIONS if op.permission == ADMIN],
                         ids=lambda op: op.name)
def test_an_admin_operation_refuses_a_tenant_before_anything_runs(
        svc: Service, op: Operation, monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[str] = []
    target = svc.core if op.call.startswith("core.") else None
    if target is not None:
        monkeypatch.setattr(target, op.call.split(".")[1],
                            lambda *a, **k: called.append(op.name))
    token = svc.tenant_token("ops")
    path = op.url(**{name: "0" for name in op.path_names})
    r = svc.http.request(op.method, path, headers=auth(token),
                         content=b"{not json" if op.body is not None else None)
    assert r.status_code == 403, (op.name, r.text)  # before the (malformed) body is read
    assert r.json()["error"] == {"code": "forbidden", "message": f"{op.forbidden} for the admin",
                                 "expected": "the admin token", "got": "tenant 'ops'",
                                 "fix": "ask the service operator"}
    assert called == [] and len(svc.tokens.list()) == 1  # nothing ran, no token came or went


def test_each_request_passes_the_permission_check_once(
        svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    real = operations.authorize

    def counting(op: Operation, principal: Principal) -> None:
        checked.append(op.name)
        real(op, principal)

    monkeypatch.setattr(operations, "authorize", counting)
    c = svc.client(ADMIN_TOKEN)
    c.submit(flow("a"))
    c.status("a")
    c.rebalance()
    c.executors()
    c.tokens()
    svc.http.get("/healthz")  # public: no caller, no check
    assert checked == ["submit", "status", "rebalance", "executors", "list_tokens"]
    assert "_admin_only" not in inspect.getsource(ServiceCore)  # no second check left there


def test_the_core_reconfigures_the_pool_for_whoever_the_table_let_through() -> None:
    core = ServiceCore(FakeRuntime())
    tenant = Principal("ops", False, "t1")
    assert core.add_executors(tenant, 1) == [2]  # the table (not the core) says admin


def test_an_operation_added_to_the_table_is_a_route_a_client_call_and_a_command(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    class Core(ServiceCore):
        def rename_step(self, principal: Principal, name: str, *, step: str,
                        parallelism: int, strategy: str = "batched",
                        batch_bins: int | None = None, dry_run: bool = False
                        ) -> dict[str, Any]:
            self._entry(principal, name)
            return {"name": name, "step": step, "parallelism": parallelism,
                    "dry_run": dry_run, "by": principal.label}

    new = Operation("rename_step", "POST", "/v1/dataflows/{name}/rename", "dataflows",
                    "Try out a new operation", call="core.rename_step",
                    body=Body(ScaleRequest, 4096, "rename", "the step"),
                    params=(Param("dry_run", bool, False, {"description": "change nothing"}),),
                    status=202, cli="rename")
    table = OPERATIONS + (new,)
    svc = Service()
    app = create_app(Core(svc.rt, clock=svc.clock), svc.tokens, operations_table=table)
    http = TestClient(app)
    client = Client("http://testserver", ADMIN_TOKEN, http=TestClient(app))
    client.submit(flow("a"))

    assert ("POST", "/v1/dataflows/{name}/rename", "rename_step") in api_routes(app)
    got = client.call(new, body={"step": "o", "parallelism": 2}, params={"dry_run": "true"},
                      name="a")
    assert got == {"name": "a", "step": "o", "parallelism": 2, "dry_run": True, "by": "admin"}
    doc = http.get("/openapi.json", headers=auth()).json()
    assert doc["paths"]["/v1/dataflows/{name}/rename"]["post"]["summary"] == new.summary
    r = http.post("/v1/dataflows/a/rename", headers=auth(), json={"step": "o"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"

    monkeypatch.setattr(cli, "_client", lambda args: client)
    parser = cli.build_parser(table)
    assert "cameo rename NAME" in parser.format_help()
    args = parser.parse_args(["rename", "a", "--step", "o", "--parallelism", "3", "--dry-run"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out) == {"name": "a", "step": "o", "parallelism": 3,
                                                   "dry_run": True, "by": "admin"}


def test_a_row_with_neither_a_call_nor_a_route_of_its_own_is_refused() -> None:
    svc = Service()
    lost = Operation("lost", "GET", "/v1/lost", "service")
    with pytest.raises(ValueError, match="operation 'lost': expected a call"):
        create_app(svc.core, svc.tokens, operations_table=OPERATIONS + (lost,))


def test_the_public_paths_are_the_public_operations(svc: Service) -> None:
    assert {op.path for op in OPERATIONS if op.permission == PUBLIC} == operations.PUBLIC_PATHS
    assert svc.http.get("/healthz").status_code == 200
    assert svc.http.get("/v1/whoami").status_code == 401


def test_client_call_names_what_it_expected() -> None:
    c = Service().client(ADMIN_TOKEN)
    with pytest.raises(ValueError, match="expected an operation of the service"):
        c.call("no_such_operation")
    with pytest.raises(TypeError, match="expected path parameters"):
        c.call("status")
    with pytest.raises(ServiceError) as e:
        c.call("status", name="nope")
    assert e.value.status == 404
