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

import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

import pyarrow as pa
from anyio import to_thread
from fastapi import FastAPI, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cameo_actors import __version__
from cameo_actors.errors import SpecError, UserError
from cameo_actors.operators.column_ipc import ARROW_STREAM, to_ipc
from cameo_actors.runtime.boundary import PoolSnapshot
from cameo_actors.service import console, operations
from cameo_actors.service import metrics as prom
from cameo_actors.service.auth import Principal, TokenAdmin, TokenStore
from cameo_actors.service.core import ServiceCore
from cameo_actors.service.errors import ApiError
from cameo_actors.service.limits import TenantLimits
from cameo_actors.service.operations import OPERATIONS, PUBLIC, PUBLIC_PATHS, Operation, Param
from cameo_actors.service.protocol import (
    DEFAULT_MAX_DEPTH,
    ERROR_RESPONSES,
    SubmitResponse,
    check_length,
    decode_body,
    encode_answer,
    json_safe,
    media_type,
    parse_events,
    parse_model,
    read_columns,
    too_large,
    wants_arrow,
)
from cameo_actors.service.scaling import DecisionCounter

#: Retry-After (s) of a 503 when the runtime did not answer in time.
UNAVAILABLE_RETRY_S = 5.0
#: A body declared larger than its limit is still read and dropped, so the connection stays
#: usable (a client sends it all before it reads the answer), up to this many bytes; a larger
#: one, or one of unknown length, gets `Connection: close` instead.
DRAIN_MAX_BYTES = 64 * 1024 * 1024

log = logging.getLogger("cameo.service")
#: Worker threads kept for the admin's requests beyond those tenants may use.
ADMIN_THREADS = 16


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

    def __init__(self, app: ASGIApp, tokens: TokenStore,
                 public: frozenset[str] = PUBLIC_PATHS) -> None:
        self.app = app
        self.tokens = tokens
        self.public = public  # the paths of the operations anyone may call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.public \
                or console.is_console_path(scope["path"]):
            # (the console's files and redirects hold no data: what the page fetches is
            # checked as any client's call is)
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


async def read_body(request: Request, limit: int, what: str) -> Any:
    """The decoded body, refusing more than `limit` bytes without reading further, and
    more nesting than the service's `max_json_depth`."""
    raw = await read_raw(request, limit, what)
    depth = getattr(request.app.state, "max_json_depth", DEFAULT_MAX_DEPTH)
    return decode_body(raw, request.headers.get("content-type"), what, max_depth=depth)


async def read_raw(request: Request, limit: int, what: str) -> bytes:
    """The body's bytes, refusing more than `limit` without reading further."""
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
    return b"".join(chunks)


async def read_optional_body(request: Request, limit: int, what: str) -> Any:
    """Like `read_body`, but a request without a body reads as {} (every field defaulted)."""
    if request.headers.get("content-length") in (None, "0") \
            and "transfer-encoding" not in request.headers:
        return {}
    return await read_body(request, limit, what)


def _param(prm: Param, kind: Any) -> inspect.Parameter:
    """A FastAPI parameter of an endpoint's signature (a path or query one)."""
    annotation = Annotated[prm.type, kind(**prm.bounds)] if prm.bounds or prm.query \
        else prm.type
    default = prm.default if prm.query else inspect.Parameter.empty
    return inspect.Parameter(prm.name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=default)


def _answer(op: Operation, request: Request, result: Any) -> Any:
    """A result as `op` answers it."""
    if op.wrap:
        result = {op.wrap: result}
    if op.answer == "json_safe":
        return json_safe(result)
    if op.answer == "columns" and isinstance(result.get("rows"), pa.Table):
        page = {k: str(v) for k, v in result.items() if k != "rows" and v is not None}
        return Response(to_ipc(result["rows"]), media_type=ARROW_STREAM,
                        headers={f"Cameo-{k.capitalize()}": v for k, v in page.items()})
    if op.answer in ("negotiated", "columns"):
        body, kind = encode_answer(result, request.headers.get("accept"))
        return Response(body, media_type=kind)
    return result


def _endpoint(op: Operation, targets: dict[str, Any], limits: dict[str, int]
              ) -> Callable[..., Awaitable[Any]]:
    """The route of an operation the core (or the token admin) answers: its parameters
    and body become the call's keyword arguments, the caller comes first."""
    owner, _, method = op.call.partition(".")
    target = targets[owner]
    params = op.path_params() + op.query_params()

    async def endpoint(request: Request, p: Principal, **values: Any) -> Any:
        args = {prm.keyword: prm.read(values[prm.name]) if prm.read else values[prm.name]
                for prm in params}
        body = op.body
        if body is not None:
            limit = body.limit if body.limit is not None else limits[body.what]
            reader = read_optional_body if body.optional else read_body
            data = await reader(request, limit, body.what)
            args.update(parse_model(body.model, data, body.model_what or body.what).arguments()
                        if body.model is not None else {"data": data})
        if op.answer == "columns" and wants_arrow(request.headers.get("accept")):
            args["columns"] = True
        call = getattr(target, method)  # at each request, as a method replaced later is
        return _answer(op, request, await run_in_threadpool(lambda: call(p, **args)))

    kinds = {False: Path, True: Query}
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                           annotation=Request),
         inspect.Parameter("p", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Caller)]
        + [_param(prm, kinds[prm.query]) for prm in params])
    return endpoint


def _guarded(op: Operation, handler: Callable[..., Awaitable[Any]]
             ) -> Callable[..., Awaitable[Any]]:
    """`handler` behind the one permission check of the API (`operations.authorize`),
    made before its body is read or anything is called."""
    if op.permission == PUBLIC:
        return handler

    @functools.wraps(handler)
    async def endpoint(*args: Any, **kwargs: Any) -> Any:
        operations.authorize(op, kwargs["p"])
        return await handler(*args, **kwargs)

    return endpoint


def create_app(core: ServiceCore, tokens: TokenStore, *, max_spec_bytes: int = 256 * 1024,
               max_body_bytes: int = 16 * 1024 * 1024,
               snapshot: Callable[[], PoolSnapshot] | None = None,
               info: Callable[[], dict[str, Any]] | None = None,
               limits: TenantLimits | None = None,
               max_json_depth: int = DEFAULT_MAX_DEPTH,
               scaling: Callable[[], dict[str, Any]] | None = None,
               operations_table: tuple[Operation, ...] = OPERATIONS) -> FastAPI:
    """The FastAPI app of a service: one route per operation of `operations_table`.

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
        operations_table: the operations served (`operations.OPERATIONS`).
    """
    limits = limits or TenantLimits()
    app = _App(
        title="cameo", version=__version__, docs_url=None, redoc_url=None,
        description="Deadline-aware multi-tenant stream processing: submit, list, watch, update "
                    "and cancel dataflows. Bodies are JSON or msgpack (application/msgpack). "
                    "Every request carries `Authorization: Bearer <token>`.",
        responses=ERROR_RESPONSES)
    app.add_middleware(TenantLimit, limits=limits)  # inside BearerAuth: it needs the caller
    app.add_middleware(BearerAuth, tokens=tokens,
                       public=frozenset(op.path for op in operations_table
                                        if op.permission == PUBLIC))
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

    @app.exception_handler(NotImplementedError)  # an operation this runtime does not do
    async def _not_supported(request: Request, e: NotImplementedError) -> JSONResponse:
        return _error_response(ApiError(
            501, "not_supported", f"this runtime does not do {request.url.path}",
            expected="a runtime that does it", got=str(e),
            fix="run the service on the cameo runtime (`cameo serve`)"))

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

    # -- the operations the app answers itself (the others: `_endpoint`) -----------------------
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    async def get_info(p: Caller) -> dict[str, Any]:
        facts = {"version": __version__, **(await run_in_threadpool(info) if info else {})}
        if not p.admin:  # the cluster's layout is the operator's business
            facts = {k: v for k, v in facts.items() if k in ("version", "pool", "policy")}
        return facts

    async def submit(request: Request, p: Caller, replace: Annotated[bool, Query(
            description="cancel a running dataflow of the same name and a different spec and "
                        "start this one")] = False) -> Any:
        data = await read_body(request, max_spec_bytes, "spec")
        status, body = await run_in_threadpool(core.submit, p, data, replace=replace)
        return JSONResponse(SubmitResponse(**body).model_dump(), status_code=status)

    async def push(name: str, source: str, request: Request,
                   p: Caller) -> dict[str, Any]:
        """An event that cannot be carried (an integer beyond 64 bits, text with a lone
        surrogate, nesting too deep) is refused alone: counted in `rejected`, described in
        `rejections` (the first 10) and written to the error output; the other events of
        the batch go on. Events off the source's schema are accepted here and go to the
        error output when the source checks them (kind `malformed`).

        With `Content-Type: application/vnd.apache.arrow.stream` the body is an Arrow IPC
        stream of the events as columns; a column missing or of a type that cannot hold
        its field refuses the whole body (422 `invalid_columns`, naming the column)."""
        # Refusals first (unknown, ended, full: 4xx at once), before a large body is parsed.
        await run_in_threadpool(core.admit_push, p, name, source)
        events: Any
        if media_type(request.headers.get("content-type")) == ARROW_STREAM:
            raw = await read_raw(request, max_body_bytes, "events batch")
            events = await run_in_threadpool(read_columns, source, raw)
        else:
            events = parse_events(await read_body(request, max_body_bytes, "events batch"))
        return await run_in_threadpool(lambda: core.push(p, name, source, events, admitted=True))

    decisions = DecisionCounter()  # cameo_scaling_decisions_total, counted across scrapes

    async def metrics(p: Caller) -> Response:
        def snap() -> PoolSnapshot:
            return snapshot() if snapshot else {"dataflows": [], "executors": []}

        text = await run_in_threadpool(prom.render, snap, tenant=None if p.admin else p.tenant,
                                       include_executors=p.admin, timer=time.perf_counter,
                                       scaling_fn=scaling, decisions=decisions)
        return Response(text, media_type=prom.CONTENT_TYPE)

    own: dict[str, Callable[..., Awaitable[Any]]] = {
        "healthz": healthz, "get_info": get_info, "submit": submit, "push": push,
        "metrics": metrics}
    targets = {"core": core, "tokens": TokenAdmin(tokens)}
    body_limits = {"spec": max_spec_bytes, "events batch": max_body_bytes}
    for op in operations_table:
        if not op.call and op.name not in own:
            raise ValueError(f"operation {op.name!r}: expected a call (core.METHOD) or a route "
                             "of the app's own, got neither; fix: name the ServiceCore method "
                             "that does it")
        handler = own[op.name] if not op.call else _endpoint(op, targets, body_limits)
        extra = op.body.openapi() if op.body is not None else None
        text: dict[str, Any] = {"response_class": Response} if op.answer == "text" else {}
        app.add_api_route(op.path, _guarded(op, handler), methods=[op.method], name=op.name,
                          tags=[op.tag], summary=op.summary, status_code=op.status,
                          response_model=op.response, responses=op.responses,
                          openapi_extra=extra, **text)

    console.add_routes(app)
    return app
