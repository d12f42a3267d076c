"""The RPC API: FastAPI routes over a `ServiceCore`, bearer auth, /metrics.

Bodies are JSON, or msgpack with `Content-Type: application/msgpack`, and are
read with a size limit before anything is parsed. The OpenAPI document is at
`GET /openapi.json`. Every request needs `Authorization: Bearer <token>`
except `GET /healthz` (liveness: it says "ok" and nothing else); a missing or
wrong token gets 401 before the body is even read.

Handlers are `async` and hand the blocking runtime calls (Ray round trips)
to a worker thread, so a slow push does not stall the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from cameo_actors import __version__
from cameo_actors.dataflow.validate import NAME_RE
from cameo_actors.runtime.boundary import PoolSnapshot
from cameo_actors.service import metrics as prom
from cameo_actors.service.auth import Principal, TokenStore
from cameo_actors.service.core import ServiceCore
from cameo_actors.service.errors import ApiError
from cameo_actors.service.protocol import (
    ERROR_RESPONSES,
    MSGPACK_TYPE,
    CancelResponse,
    DataflowList,
    DataflowStatus,
    PushResponse,
    SubmitResponse,
    TokenCreated,
    TokenInfo,
    TokenRequest,
    UpdateRequest,
    UpdateResponse,
    WhoAmI,
    check_length,
    decode_body,
    parse_events,
    parse_model,
    too_large,
)

PUBLIC_PATHS = frozenset({"/healthz"})

STEP_OPS = ["source", "filter", "map", "flat_map", "key_by", "window", "join", "union", "sink"]
#: The spec's outline for the OpenAPI document; the definition layer checks the rest.
SPEC_SCHEMA: dict[str, Any] = {
    "title": "DataflowSpec",
    "description": "A dataflow spec (docs/spec.md). Checked by the definition layer: an error "
                   "names the step, what was expected, what arrived and the fix.",
    "type": "object",
    "required": ["name", "latency_target_ms", "steps"],
    "additionalProperties": False,
    "properties": {
        "version": {"type": "integer", "enum": [1]},
        "name": {"type": "string", "pattern": NAME_RE.pattern},
        "tenant": {"type": "string", "pattern": NAME_RE.pattern, "default": "default"},
        "latency_target_ms": {"type": "number", "exclusiveMinimum": 0},
        "scheduling": {"type": "object", "properties": {
            "weight": {"type": "number", "exclusiveMinimum": 0, "default": 1.0},
            "rate_limit_eps": {"type": ["number", "null"]}}},
        "errors": {"type": ["object", "null"]},
        "steps": {"type": "array", "minItems": 2, "items": {
            "type": "object", "required": ["op", "id"],
            "properties": {"op": {"type": "string", "enum": STEP_OPS},
                           "id": {"type": "string", "pattern": NAME_RE.pattern},
                           "inputs": {"type": "array", "items": {"type": "string"}},
                           "parallelism": {"type": "integer", "minimum": 1}}}},
    },
}
EVENTS_SCHEMA: dict[str, Any] = {
    "oneOf": [{"type": "array", "items": {"type": "object"}},
              {"type": "object", "required": ["events"],
               "properties": {"events": {"type": "array", "items": {"type": "object"}}}}]}


def _body(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"requestBody": {"required": True, "description": description, "content": {
        "application/json": {"schema": schema},
        MSGPACK_TYPE: {"schema": {"type": "string", "format": "binary",
                                  "description": "the same structure, msgpack-encoded"}}}}}


def _error_response(e: ApiError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
    return JSONResponse(e.to_dict(), status_code=e.status, headers=headers)


class BearerAuth:
    """ASGI middleware: resolve the bearer token before routing or reading the body."""

    def __init__(self, app: ASGIApp, tokens: TokenStore) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        header = None
        for key, value in scope.get("headers", []):
            if key == b"authorization":
                header = value.decode("latin-1")
                break
        principal = self.tokens.authenticate(header)
        if principal is None:
            why = "missing" if not header else "wrong"
            err = ApiError(401, "unauthorized", f"the bearer token is {why}",
                           expected="Authorization: Bearer <token>",
                           got="no Authorization header" if not header else "an unknown token",
                           fix="pass the token (cameo --token-file / CAMEO_TOKEN); the admin "
                               "token is in the service's state folder, tenant tokens come "
                               "from `cameo token create`")
            await _error_response(err)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


_bearer = HTTPBearer(auto_error=False, description="the admin token or a tenant token")


def current(request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None,
                                                      Security(_bearer)]) -> Principal:
    """The caller (checked by BearerAuth already); declares bearer auth in OpenAPI."""
    return request.state.principal  # type: ignore[no-any-return]


Caller = Annotated[Principal, Security(current)]


async def read_body(request: Request, limit: int, what: str) -> Any:
    """The decoded body, refusing more than `limit` bytes without reading further."""
    check_length(request.headers.get("content-length"), limit, what)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"more than {limit}", limit, what)
        chunks.append(chunk)
    return decode_body(b"".join(chunks), request.headers.get("content-type"), what)


def create_app(core: ServiceCore, tokens: TokenStore, *, max_spec_bytes: int = 256 * 1024,
               max_body_bytes: int = 16 * 1024 * 1024,
               snapshot: Callable[[], PoolSnapshot] | None = None,
               info: Callable[[], dict[str, Any]] | None = None) -> FastAPI:
    """The FastAPI app of a service.

    Args:
        core: what the routes call.
        tokens: bearer tokens (admin and tenants).
        max_spec_bytes, max_body_bytes: largest spec / events body accepted.
        snapshot: returns the runtime's metrics snapshot, pulled at each scrape (None: /metrics
            is empty).
        info: returns facts about the deployment for GET /v1/info.
    """
    app = FastAPI(
        title="cameo", version=__version__, docs_url=None, redoc_url=None,
        description="Deadline-aware multi-tenant stream processing: submit, list, watch, update "
                    "and cancel dataflows. Bodies are JSON or msgpack (application/msgpack). "
                    "Every request carries `Authorization: Bearer <token>`.",
        responses=ERROR_RESPONSES)
    app.add_middleware(BearerAuth, tokens=tokens)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError) -> JSONResponse:
        return _error_response(e)

    @app.exception_handler(RequestValidationError)
    async def _bad_params(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _error_response(ApiError(422, "invalid_request", f"{where}: {first.get('msg')}",
                                        expected=first.get("msg"), got=first.get("input"),
                                        fix="see GET /openapi.json for the parameters"))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return _error_response(ApiError(e.status_code, "http_error", str(e.detail),
                                        got=f"{request.method} {request.url.path}",
                                        fix="see GET /openapi.json for the operations"))

    def admin_only(p: Principal, what: str) -> None:
        if not p.admin:
            raise ApiError(403, "forbidden", f"{what} is for the admin", expected="the admin token",
                           got=p.label, fix="ask the service operator")

    @app.get("/healthz", tags=["service"], summary="Liveness (no token needed)")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/whoami", tags=["service"], response_model=WhoAmI)
    async def whoami(p: Caller) -> dict[str, Any]:
        return {"tenant": p.tenant, "admin": p.admin, "token_id": p.token_id}

    @app.get("/v1/info", tags=["service"],
             summary="The deployment: pool, policy; Ray and executors for the admin")
    async def get_info(p: Caller) -> dict[str, Any]:
        facts = {"version": __version__, **(await run_in_threadpool(info) if info else {})}
        if not p.admin:  # the cluster's layout is the operator's business
            facts = {k: v for k, v in facts.items() if k in ("version", "pool", "policy")}
        return facts

    # -- dataflows ---------------------------------------------------------------------------
    @app.post("/v1/dataflows", tags=["dataflows"], status_code=201, response_model=SubmitResponse,
              summary="Submit a spec (idempotent by name)",
              openapi_extra=_body(SPEC_SCHEMA, "the dataflow spec"),
              responses={200: {"model": SubmitResponse, "description": "the same spec runs already"}})
    async def submit(request: Request, p: Caller, replace: Annotated[bool, Query(
            description="cancel a running dataflow of the same name and a different spec and "
                        "start this one")] = False) -> Any:
        data = await read_body(request, max_spec_bytes, "spec")
        status, body = await run_in_threadpool(core.submit, p, data, replace=replace)
        return JSONResponse(SubmitResponse(**body).model_dump(), status_code=status)

    @app.get("/v1/dataflows", tags=["dataflows"], response_model=DataflowList,
             summary="The dataflows this token may see")
    async def list_dataflows(p: Caller) -> dict[str, Any]:
        return {"dataflows": await run_in_threadpool(core.list, p)}

    @app.get("/v1/dataflows/{name}", tags=["dataflows"], response_model=DataflowStatus,
             summary="State, throughput, latency percentiles vs target, backlog, errors")
    async def status(name: str, p: Caller) -> dict[str, Any]:
        return await run_in_threadpool(core.status, p, name)

    @app.patch("/v1/dataflows/{name}", tags=["dataflows"], response_model=UpdateResponse,
               summary="Change the latency target or tenant weight while it runs",
               openapi_extra=_body(UpdateRequest.model_json_schema(), "what to change"))
    async def update(name: str, request: Request, p: Caller) -> Any:
        req = parse_model(UpdateRequest, await read_body(request, 4096, "update"), "update")
        return await run_in_threadpool(lambda: core.update(
            p, name, latency_target_ms=req.latency_target_ms, weight=req.weight))

    @app.delete("/v1/dataflows/{name}", tags=["dataflows"], response_model=CancelResponse,
                summary="Cancel a dataflow")
    async def cancel(name: str, p: Caller) -> dict[str, Any]:
        return await run_in_threadpool(core.cancel, p, name)

    @app.post("/v1/dataflows/{name}/sources/{source}/events", tags=["events"], status_code=202,
              response_model=PushResponse, summary="Push a batch of events to a source",
              openapi_extra=_body(EVENTS_SCHEMA, "events: a list of objects"))
    async def push(name: str, source: str, request: Request,
                   p: Caller) -> dict[str, Any]:
        events = parse_events(await read_body(request, max_body_bytes, "events batch"))
        return {"accepted": await run_in_threadpool(core.push, p, name, source, events)}

    @app.post("/v1/dataflows/{name}/close", tags=["events"],
              summary="End every source: windows fire, no more events are expected")
    async def close(name: str, p: Caller) -> dict[str, str]:
        await run_in_threadpool(core.close, p, name)
        return {"name": name, "state": "sources closed"}

    @app.get("/v1/executors", tags=["service"], summary="Per-executor scheduler counters (admin)")
    async def executors(p: Caller) -> dict[str, Any]:
        return {"executors": await run_in_threadpool(core.executors, p)}

    # -- tokens --------------------------------------------------------------------------------
    @app.post("/v1/tokens", tags=["tokens"], status_code=201, response_model=TokenCreated,
              summary="Create a tenant token (admin)",
              openapi_extra=_body(TokenRequest.model_json_schema(), "the tenant"))
    async def create_token(request: Request, p: Caller) -> dict[str, Any]:
        admin_only(p, "creating tokens")
        req = parse_model(TokenRequest, await read_body(request, 4096, "token request"), "token")
        token, record = tokens.create(req.tenant)
        return {**record, "token": token}

    @app.get("/v1/tokens", tags=["tokens"], response_model=list[TokenInfo],
             summary="Tenant tokens (ids, not secrets; admin)")
    async def list_tokens(p: Caller) -> list[dict[str, Any]]:
        admin_only(p, "listing tokens")
        return tokens.list()

    @app.delete("/v1/tokens/{token_id}", tags=["tokens"], summary="Revoke a tenant token (admin)")
    async def revoke_token(token_id: str, p: Caller) -> dict[str, Any]:
        admin_only(p, "revoking tokens")
        if not tokens.revoke(token_id):
            raise ApiError(404, "not_found", f"no tenant token with id {token_id!r}",
                           expected="an id from GET /v1/tokens", got=token_id,
                           fix="list the tokens with `cameo token list`")
        return {"id": token_id, "revoked": True}

    # -- metrics -------------------------------------------------------------------------------
    @app.get("/metrics", tags=["service"], response_class=Response,
             summary="Prometheus metrics of the whole cluster (a tenant token sees its own)")
    async def metrics(p: Caller) -> Response:
        def snap() -> PoolSnapshot:
            return snapshot() if snapshot else {"dataflows": [], "executors": []}

        text = await run_in_threadpool(prom.render, snap, tenant=None if p.admin else p.tenant,
                                       include_executors=p.admin, timer=time.perf_counter)
        return Response(text, media_type=prom.CONTENT_TYPE)

    return app
