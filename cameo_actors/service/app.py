"""The RPC API: FastAPI routes over a `ServiceCore`, bearer auth, /metrics.

Bodies are JSON, or msgpack with `Content-Type: application/msgpack`, and are
read with a size limit before anything is parsed (and a nesting limit: JSON before
it is parsed, msgpack after). No request ends its connection: `LastResort` turns
what escapes the routes into a JSON 500 (503 for a runtime that did not answer). The OpenAPI document is at
`GET /openapi.json`. Every request needs `Authorization: Bearer <token>`
except `GET /healthz` (liveness: it says "ok" and nothing else); a missing or
wrong token gets 401 before the body is even read.

Handlers are `async` and hand the blocking runtime calls (Ray round trips)
to a worker thread, so a slow push does not stall the event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Annotated, Any

from anyio import to_thread
from fastapi import FastAPI, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cameo_actors import __version__
from cameo_actors.dataflow.validate import NAME_RE
from cameo_actors.errors import SpecError, UserError
from cameo_actors.runtime.boundary import PoolSnapshot
from cameo_actors.service import metrics as prom
from cameo_actors.service import ui
from cameo_actors.service.auth import Principal, TokenStore
from cameo_actors.service.core import ServiceCore
from cameo_actors.service.errors import ApiError, TokenLimitError
from cameo_actors.service.limits import TenantLimits
from cameo_actors.service.outputs import DEFAULT_PAGE, MAX_CURSOR_CHARS, MAX_PAGE
from cameo_actors.service.protocol import (
    DEFAULT_MAX_DEPTH,
    ERROR_RESPONSES,
    MAX_EXECUTOR_INDEX,
    MSGPACK_TYPE,
    AddExecutorsRequest,
    CancelResponse,
    CommitRequest,
    CommitResponse,
    DataflowList,
    DataflowStatus,
    ErrorBody,
    ErrorsCommitRequest,
    ErrorsPage,
    Exceptions,
    ExecutorRemoval,
    ExecutorsAdded,
    Explanation,
    MigrateRequest,
    Migration,
    MigrationList,
    Prediction,
    PushResponse,
    RebalanceRequest,
    ResultsPage,
    ScaleRequest,
    ScalingRequest,
    ScalingStatus,
    Strategy,
    SubmitResponse,
    TokenCreated,
    TokenInfo,
    TokenRequest,
    UpdateRequest,
    UpdateResponse,
    WhoAmI,
    check_length,
    decode_body,
    encode_answer,
    json_safe,
    parse_events,
    parse_last,
    parse_model,
    too_large,
)
from cameo_actors.service.scaling import DecisionCounter

PUBLIC_PATHS = frozenset({"/healthz"})
#: Retry-After (s) of a 503 when the runtime did not answer in time.
UNAVAILABLE_RETRY_S = 5.0
#: A body declared larger than its limit is still read and dropped, so the connection stays
#: usable (a client sends it all before it reads the answer), up to this many bytes; a larger
#: one, or one of unknown length, gets `Connection: close` instead.
DRAIN_MAX_BYTES = 64 * 1024 * 1024

log = logging.getLogger("cameo.service")
#: Worker threads kept for the admin's requests beyond those tenants may use.
ADMIN_THREADS = 16

STEP_OPS = ["source", "filter", "map", "flat_map", "key_by", "window", "join", "process", "union",
            "sink"]
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
#: A commit body: a cursor (one offset per sink instance or executor) and a sink name.
COMMIT_BODY_BYTES = 2 * MAX_CURSOR_CHARS
#: A reconfiguration body: a step and a few numbers, or a list of bins (a migrate).
RECONFIG_BODY_BYTES = 4096
MIGRATE_BODY_BYTES = 512 * 1024
PAGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {MSGPACK_TYPE: {"schema": {
        "type": "string", "format": "binary",
        "description": "the same structure, msgpack-encoded (Accept: application/msgpack); "
                       "NaN and infinities kept (JSON has them as null)"}}}},
    410: {"model": ErrorBody, "description": "the dataflow was replaced since the cursor was "
                                             "made"},
}


def _body(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"requestBody": {"required": True, "description": description, "content": {
        "application/json": {"schema": schema},
        MSGPACK_TYPE: {"schema": {"type": "string", "format": "binary",
                                  "description": "the same structure, msgpack-encoded"}}}}}


def _error_response(e: ApiError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else {}
    if e.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, round(e.retry_after_s)))
    if e.close_connection:
        headers["Connection"] = "close"
    return JSONResponse(e.to_dict(), status_code=e.status, headers=headers)


def internal_error(e: BaseException) -> ApiError:
    """The answer to a request the service failed on (a bug, not the caller's doing)."""
    return ApiError(500, "internal_error", "the service failed on this request; nothing is "
                    "known to have changed, and the traceback is in the service's log",
                    expected="an answer", got=type(e).__name__,
                    fix="retry; if it fails again, report it with the time of the request")


def unavailable(e: TimeoutError) -> ApiError:
    """The runtime did not answer in time (`RuntimeUnavailable`, or any TimeoutError)."""
    return ApiError(503, "unavailable", "the runtime did not answer in time",
                    expected="a pool that answers", got=str(e) or type(e).__name__,
                    fix="retry in a few seconds; if it persists, `cameo executors` and the "
                        "service's log show which executor is stuck or gone",
                    retry_after_s=UNAVAILABLE_RETRY_S)


class LastResort:
    """ASGI, the outermost layer: no exception ends a connection.

    Starlette's error layer answers an unexpected exception with the JSON 500 of the
    `Exception` handler, then raises it again, and uvicorn closes a connection whose
    request raised (verified: the client's next request on it gets a reset). Here the
    exception is logged with its traceback and stops. Only an answer that broke off
    half-way (its body promised more) still closes the connection: the framing is lost.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = finished = False

        async def watch(message: Message) -> None:
            nonlocal started, finished
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                finished = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as e:
            log.error("%s %s failed", scope.get("method"), scope.get("path"), exc_info=e)
            if not started:
                await _error_response(internal_error(e))(scope, receive, send)
            elif not finished:
                raise


class _App(FastAPI):
    """FastAPI with `LastResort` around its whole stack, Starlette's error layer included."""

    def build_middleware_stack(self) -> ASGIApp:
        return LastResort(super().build_middleware_stack())


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
        if ui.is_ui_path(scope["path"]):  # a browser: the header or the UI's cookie, or the
            # UI's login form (its routes answer a caller without a token themselves)
            scope.setdefault("state", {})["principal"] = ui.browser_caller(
                self.tokens, header, scope.get("headers", []))
            await self.app(scope, receive, send)
            return
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


class TenantLimit:
    """ASGI middleware: a tenant's request over its limits gets 429 at once (see
    `TenantLimits`); the admin's requests are not limited, and find a worker thread
    because tenants together may use only some of them."""

    def __init__(self, app: ASGIApp, limits: TenantLimits) -> None:
        self.app = app
        self.limits = limits
        self._sized = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal = scope.get("state", {}).get("principal")
        if scope["type"] != "http" or principal is None or principal.admin:
            await self.app(scope, receive, send)
            return
        if not self._sized:  # the worker threads: every tenant slot, and some for the admin
            to_thread.current_default_thread_limiter().total_tokens = \
                self.limits.max_concurrent_total + ADMIN_THREADS
            self._sized = True
        refusal = self.limits.enter(principal.tenant)
        if refusal is not None:
            await _error_response(refusal)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.limits.leave(principal.tenant)


_bearer = HTTPBearer(auto_error=False, description="the admin token or a tenant token")


def current(request: Request, _credentials: Annotated[HTTPAuthorizationCredentials | None,
                                                      Security(_bearer)]) -> Principal:
    """The caller (checked by BearerAuth already); declares bearer auth in OpenAPI."""
    return request.state.principal  # type: ignore[no-any-return]


Caller = Annotated[Principal, Security(current)]
#: The window of an explanation: seconds, or a number with a unit (`parse_last` checks it).
LastQuery = Annotated[str, Query(description="the window explained: seconds "
                                 "(60) or with a unit (60s, 500ms, 5m, 1h); at most a day")]


async def read_body(request: Request, limit: int, what: str) -> Any:
    """The decoded body, refusing more than `limit` bytes without reading further, and
    more nesting than the service's `max_json_depth`."""
    declared = request.headers.get("content-length")
    try:
        check_length(declared, limit, what)
    except ApiError as e:
        # Uvicorn reads and drops the rest after the answer, so the connection stays usable;
        # for a huge rest, closing it is cheaper.
        e.close_connection = e.status == 413 and int(declared or 0) > DRAIN_MAX_BYTES
        raise
    chunks: list[bytes] = []
    size = 0
    stream = request.stream()
    async for chunk in stream:
        size += len(chunk)
        if size > limit:  # a chunked body (a declared length is checked above)
            err = too_large(f"more than {limit}", limit, what)
            # Read and drop a bounded rest: the client reads the answer once it sent all.
            async for rest in stream:
                size += len(rest)
                if size > DRAIN_MAX_BYTES:
                    err.close_connection = True
                    break
            raise err
        chunks.append(chunk)
    depth = getattr(request.app.state, "max_json_depth", DEFAULT_MAX_DEPTH)
    return decode_body(b"".join(chunks), request.headers.get("content-type"), what,
                       max_depth=depth)


async def read_optional_body(request: Request, limit: int, what: str) -> Any:
    """Like `read_body`, but a request without a body reads as {} (every field defaulted)."""
    if request.headers.get("content-length") in (None, "0") \
            and "transfer-encoding" not in request.headers:
        return {}
    return await read_body(request, limit, what)


def create_app(core: ServiceCore, tokens: TokenStore, *, max_spec_bytes: int = 256 * 1024,
               max_body_bytes: int = 16 * 1024 * 1024,
               snapshot: Callable[[], PoolSnapshot] | None = None,
               info: Callable[[], dict[str, Any]] | None = None,
               limits: TenantLimits | None = None,
               max_json_depth: int = DEFAULT_MAX_DEPTH,
               scaling: Callable[[], dict[str, Any]] | None = None) -> FastAPI:
    """The FastAPI app of a service.

    Args:
        core: what the routes call.
        tokens: bearer tokens (admin and tenants).
        max_spec_bytes, max_body_bytes: largest spec / events body accepted.
        snapshot: returns the runtime's metrics snapshot, pulled at each scrape (None: /metrics
            is empty).
        info: returns facts about the deployment for GET /v1/info.
        limits: per-tenant request limits (None: the defaults of `TenantLimits`).
        max_json_depth: deepest nesting of lists and objects a body may have.
        scaling: returns the scaling controller's status (`Runtime.scaling`), pulled once
            at each scrape with the snapshot (None: /metrics has no scaling families).
    """
    limits = limits or TenantLimits()
    app = _App(
        title="cameo", version=__version__, docs_url=None, redoc_url=None,
        description="Deadline-aware multi-tenant stream processing: submit, list, watch, update "
                    "and cancel dataflows. Bodies are JSON or msgpack (application/msgpack). "
                    "Every request carries `Authorization: Bearer <token>`.",
        responses=ERROR_RESPONSES)
    app.add_middleware(TenantLimit, limits=limits)  # inside BearerAuth: it needs the caller
    app.add_middleware(BearerAuth, tokens=tokens)
    app.state.max_json_depth = max_json_depth  # read_body's

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError) -> JSONResponse:
        return _error_response(e)

    @app.exception_handler(UserError)
    async def _user_error(_: Request, e: UserError) -> JSONResponse:
        # Bad input a route did not turn into an ApiError itself (e.g. the runtime's own
        # check of an update): still the caller's mistake, never a 500.
        code = "invalid_spec" if isinstance(e, SpecError) else "invalid_request"
        return _error_response(ApiError.from_user_error(e, 422, code))

    @app.exception_handler(TimeoutError)  # RuntimeUnavailable is one
    async def _unavailable(request: Request, e: TimeoutError) -> JSONResponse:
        log.warning("%s %s: %s", request.method, request.url.path, e)
        return _error_response(unavailable(e))

    @app.exception_handler(Exception)  # Starlette's error layer calls it; LastResort logs
    async def _internal(_: Request, e: Exception) -> JSONResponse:
        return _error_response(internal_error(e))

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

    @app.post("/v1/admission", tags=["dataflows"], response_model=Prediction,
              summary="Would this spec, and every running dataflow, meet its target? "
                      "(nothing is started)",
              openapi_extra=_body(SPEC_SCHEMA, "the dataflow spec"))
    async def check(request: Request, p: Caller) -> Any:
        data = await read_body(request, max_spec_bytes, "spec")
        return await run_in_threadpool(core.check, p, data)

    @app.get("/v1/overload", tags=["dataflows"], response_model=Prediction,
             summary="Who misses or will miss its target, by how much, and whose load causes it")
    async def overload(p: Caller) -> Any:
        return await run_in_threadpool(core.overload, p)

    @app.get("/v1/explain", tags=["dataflows"], response_model=Explanation,
             summary="Why targets were missed, pool-wide: the critical path over the last "
                     "seconds (a tenant sees other tenants' dataflows unnamed)")
    async def explain_pool(p: Caller, last: LastQuery = "60s") -> Any:
        seconds = parse_last(last)
        return json_safe(await run_in_threadpool(lambda: core.explain(p, None, last_s=seconds)))

    @app.get("/v1/dataflows", tags=["dataflows"], response_model=DataflowList,
             summary="The dataflows this token may see, live and ended (kept for a while)")
    async def list_dataflows(p: Caller, state: Annotated[list[str] | None, Query(
            description="only dataflows in these states (repeat the parameter)")] = None
            ) -> dict[str, Any]:
        return {"dataflows": await run_in_threadpool(core.list, p, state)}

    @app.get("/v1/dataflows/{name}", tags=["dataflows"], response_model=DataflowStatus,
             summary="State, throughput, latency percentiles vs target, backlog, errors")
    async def status(name: str, p: Caller) -> dict[str, Any]:
        return await run_in_threadpool(core.status, p, name)

    @app.get("/v1/dataflows/{name}/explain", tags=["dataflows"], response_model=Explanation,
             summary="Why it missed (or met) its target: its critical path over the last "
                     "seconds, ranked, in words")
    async def explain(name: str, p: Caller, last: LastQuery = "60s") -> Any:
        seconds = parse_last(last)
        return json_safe(await run_in_threadpool(lambda: core.explain(p, name, last_s=seconds)))

    @app.get("/v1/dataflows/{name}/exceptions", tags=["dataflows"], response_model=Exceptions,
             summary="Why it failed, and its last operator failures")
    async def exceptions(name: str, p: Caller) -> dict[str, Any]:
        return await run_in_threadpool(core.exceptions, p, name)

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
              response_model=PushResponse,
              summary="Push a batch of events to a source; each event enters or is refused alone",
              openapi_extra=_body(EVENTS_SCHEMA, "events: a list of objects"))
    async def push(name: str, source: str, request: Request,
                   p: Caller) -> dict[str, Any]:
        """An event that cannot be carried (an integer beyond 64 bits, text with a lone
        surrogate, nesting too deep) is refused alone: counted in `rejected`, described in
        `rejections` (the first 10) and written to the error output; the other events of
        the batch go on. Events off the source's schema are accepted here and go to the
        error output when the source checks them (kind `malformed`)."""
        # Refusals first (unknown, ended, full: 4xx at once), before a large body is parsed.
        await run_in_threadpool(core.admit_push, p, name, source)
        events = parse_events(await read_body(request, max_body_bytes, "events batch"))
        return await run_in_threadpool(lambda: core.push(p, name, source, events, admitted=True))

    @app.post("/v1/dataflows/{name}/close", tags=["events"],
              summary="End every source: windows fire, no more events are expected")
    async def close(name: str, p: Caller) -> dict[str, str]:
        await run_in_threadpool(core.close, p, name)
        return {"name": name, "state": "sources closed"}

    # -- outputs: pages after a cursor; a commit frees what was read ---------------------------
    def answer(request: Request, data: Any) -> Response:
        body, kind = encode_answer(data, request.headers.get("accept"))
        return Response(body, media_type=kind)

    @app.get("/v1/dataflows/{name}/results", tags=["outputs"], response_model=ResultsPage,
             summary="A page of results after a cursor (reading commits nothing)",
             responses={**PAGE_RESPONSES, 409: {"model": ErrorBody, "description":
                        "rows before the cursor were committed already"}})
    async def results(name: str, request: Request, p: Caller,
                      sink: Annotated[str | None, Query(
                          description="the sink (optional when there is one, or with a cursor)")
                      ] = None,
                      cursor: Annotated[str | None, Query(
                          description="from the last answer; none: from the committed rows",
                          max_length=MAX_CURSOR_CHARS)] = None,
                      limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="rows at most")
                                       ] = DEFAULT_PAGE) -> Response:
        page = await run_in_threadpool(lambda: core.read_results(p, name, sink=sink,
                                                                 cursor=cursor, limit=limit))
        return answer(request, page)

    @app.post("/v1/dataflows/{name}/results/commit", tags=["outputs"],
              response_model=CommitResponse, responses=PAGE_RESPONSES,
              summary="Free the results before a cursor (a sink held on a full log resumes)",
              openapi_extra=_body(CommitRequest.model_json_schema(), "the cursor"))
    async def commit_results(name: str, request: Request, p: Caller) -> Response:
        req = parse_model(CommitRequest, await read_body(request, COMMIT_BODY_BYTES, "commit"),
                          "commit")
        done = await run_in_threadpool(lambda: core.commit_results(p, name, cursor=req.cursor,
                                                                   sink=req.sink))
        return answer(request, done)

    @app.get("/v1/dataflows/{name}/errors", tags=["outputs"], response_model=ErrorsPage,
             responses=PAGE_RESPONSES,
             summary="A page of the error output after a cursor (reading commits nothing)")
    async def errors(name: str, request: Request, p: Caller,
                     cursor: Annotated[str | None, Query(
                         description="from the last answer; none: from the committed records",
                         max_length=MAX_CURSOR_CHARS)] = None,
                     limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="rows at most")
                                      ] = DEFAULT_PAGE) -> Response:
        page = await run_in_threadpool(lambda: core.read_errors(p, name, cursor=cursor,
                                                                limit=limit))
        return answer(request, page)

    @app.post("/v1/dataflows/{name}/errors/commit", tags=["outputs"],
              response_model=CommitResponse, responses=PAGE_RESPONSES,
              summary="Free the error-output records before a cursor",
              openapi_extra=_body(ErrorsCommitRequest.model_json_schema(), "the cursor"))
    async def commit_errors(name: str, request: Request, p: Caller) -> Response:
        req = parse_model(ErrorsCommitRequest,
                          await read_body(request, COMMIT_BODY_BYTES, "commit"), "commit")
        done = await run_in_threadpool(lambda: core.commit_errors(p, name, cursor=req.cursor))
        return answer(request, done)

    @app.get("/v1/executors", tags=["service"], summary="Per-executor scheduler counters (admin)")
    async def executors(p: Caller) -> dict[str, Any]:
        return {"executors": await run_in_threadpool(core.executors, p)}

    # -- live reconfiguration: each answers 202 with the migration started (see its progress
    # in GET /v1/migrations); 409 while another migration of the dataflow is under way ---------
    @app.post("/v1/dataflows/{name}/scale", tags=["reconfiguration"], status_code=202,
              response_model=Migration,
              summary="Change the parallelism of a keyed step while it runs",
              openapi_extra=_body(ScaleRequest.model_json_schema(), "the step and parallelism"))
    async def scale(name: str, request: Request, p: Caller) -> Any:
        req = parse_model(ScaleRequest, await read_body(request, RECONFIG_BODY_BYTES, "scale"),
                          "scale")
        return await run_in_threadpool(lambda: core.scale(
            p, name, req.step, req.parallelism, strategy=req.strategy,
            batch_bins=req.batch_bins))

    @app.post("/v1/dataflows/{name}/migrate", tags=["reconfiguration"], status_code=202,
              response_model=Migration,
              summary="Move key bins of a keyed step to an instance, or an instance to an "
                      "executor",
              openapi_extra=_body(MigrateRequest.model_json_schema(), "what moves where"))
    async def migrate(name: str, request: Request, p: Caller) -> Any:
        req = parse_model(MigrateRequest, await read_body(request, MIGRATE_BODY_BYTES,
                                                          "migrate"), "migrate")
        return await run_in_threadpool(lambda: core.migrate(
            p, name, req.step, bins=req.bins, to_instance=req.to_instance,
            instance=req.instance, to_executor=req.to_executor, strategy=req.strategy,
            batch_bins=req.batch_bins))

    @app.get("/v1/dataflows/{name}/migrations", tags=["reconfiguration"],
             response_model=MigrationList,
             summary="A dataflow's reconfigurations, running and recent, with their progress")
    async def dataflow_migrations(name: str, p: Caller) -> dict[str, Any]:
        return {"migrations": await run_in_threadpool(core.migrations, p, name)}

    @app.get("/v1/migrations", tags=["reconfiguration"], response_model=MigrationList,
             summary="Reconfigurations of the dataflows this token may see (admin: all)")
    async def all_migrations(p: Caller) -> dict[str, Any]:
        return {"migrations": await run_in_threadpool(core.migrations, p)}

    @app.post("/v1/pool/rebalance", tags=["reconfiguration"], status_code=202,
              response_model=MigrationList,
              summary="Even out the executors' load: instances and bins move (admin)",
              openapi_extra=_body(RebalanceRequest.model_json_schema(),
                                  "the strategy (optional: no body is batched)"))
    async def rebalance(request: Request, p: Caller) -> dict[str, Any]:
        admin_only(p, "rebalancing the pool")
        req = parse_model(RebalanceRequest, await read_optional_body(
            request, RECONFIG_BODY_BYTES, "rebalance"), "rebalance")
        return {"migrations": await run_in_threadpool(
            lambda: core.rebalance(p, strategy=req.strategy))}

    @app.post("/v1/pool/executors", tags=["reconfiguration"], status_code=201,
              response_model=ExecutorsAdded, summary="Start executors (admin)",
              openapi_extra=_body(AddExecutorsRequest.model_json_schema(),
                                  "how many (optional: no body is one)"))
    async def add_executors(request: Request, p: Caller) -> dict[str, Any]:
        admin_only(p, "adding executors")
        req = parse_model(AddExecutorsRequest, await read_optional_body(
            request, RECONFIG_BODY_BYTES, "executors request"), "executors")
        return {"added": await run_in_threadpool(core.add_executors, p, req.count)}

    @app.delete("/v1/pool/executors/{index}", tags=["reconfiguration"], status_code=202,
                response_model=ExecutorRemoval,
                summary="Drain an executor: its instances move elsewhere, then it stops (admin)")
    async def remove_executor(
            p: Caller,
            index: Annotated[int, Path(ge=0, le=MAX_EXECUTOR_INDEX,
                                       description="the executor's index")],
            strategy: Annotated[Strategy, Query(description="how its instances' bins move")
                                ] = "batched") -> Any:
        admin_only(p, "removing executors")
        return await run_in_threadpool(lambda: core.remove_executor(p, index,
                                                                    strategy=strategy))

    # -- self-scaling: the controller's view; a dataflow's own settings and pins ----------------
    @app.get("/v1/scaling", tags=["scaling"], response_model=ScalingStatus,
             summary="The scaling controller: each dataflow's steps (parallelism, lessees, "
                     "true rates, busy share), its last decisions and why, misses, failures "
                     "(a tenant sees its own dataflows)")
    async def scaling_status(p: Caller) -> Any:
        return json_safe(await run_in_threadpool(core.scaling, p, None))

    @app.get("/v1/dataflows/{name}/scaling", tags=["scaling"], response_model=ScalingStatus,
             summary="The scaling controller's view of one dataflow")
    async def dataflow_scaling(name: str, p: Caller) -> Any:
        return json_safe(await run_in_threadpool(core.scaling, p, name))

    @app.put("/v1/dataflows/{name}/scaling", tags=["scaling"], response_model=ScalingStatus,
             summary="Set a dataflow's own scaling settings (over the pool's; null: the "
                     "pool's) and pin steps to a parallelism",
             openapi_extra=_body(ScalingRequest.model_json_schema(),
                                 "the settings (required, null for the pool's) and the pins"))
    async def set_scaling(name: str, request: Request, p: Caller) -> Any:
        req = parse_model(ScalingRequest, await read_body(request, RECONFIG_BODY_BYTES,
                                                          "scaling request"), "scaling")
        settings = None if req.settings is None else req.settings.given()
        return json_safe(await run_in_threadpool(lambda: core.set_scaling(
            p, name, settings, dict(req.pin))))

    # -- tokens --------------------------------------------------------------------------------
    @app.post("/v1/tokens", tags=["tokens"], status_code=201, response_model=TokenCreated,
              summary="Create a tenant token (admin)",
              openapi_extra=_body(TokenRequest.model_json_schema(), "the tenant"))
    async def create_token(request: Request, p: Caller) -> dict[str, Any]:
        admin_only(p, "creating tokens")
        req = parse_model(TokenRequest, await read_body(request, 4096, "token request"), "token")
        try:
            token, record = tokens.create(req.tenant)
        except TokenLimitError as e:  # 409: the request is fine, the tenant's token set is full
            raise ApiError(409, "token_limit", f"no new token for tenant {req.tenant!r}: "
                           f"{e.subject} holds as many tokens as allowed",
                           expected=e.expected, got=e.got, fix=e.fix) from None
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

    ui.add_routes(app, core, tokens)

    # -- metrics -------------------------------------------------------------------------------
    decisions = DecisionCounter()  # cameo_scaling_decisions_total, counted across scrapes

    @app.get("/metrics", tags=["service"], response_class=Response,
             summary="Prometheus metrics of the whole cluster (a tenant token sees its own)")
    async def metrics(p: Caller) -> Response:
        def snap() -> PoolSnapshot:
            return snapshot() if snapshot else {"dataflows": [], "executors": []}

        text = await run_in_threadpool(prom.render, snap, tenant=None if p.admin else p.tenant,
                                       include_executors=p.admin, timer=time.perf_counter,
                                       scaling_fn=scaling, decisions=decisions)
        return Response(text, media_type=prom.CONTENT_TYPE)

    return app
