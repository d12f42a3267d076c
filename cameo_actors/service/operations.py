"""The operations of the service, declared once: the table the API, the client and the CLI
are built from.

A row says what an operation is called, who may call it (`permission`, checked by
`authorize` and nowhere else), the `ServiceCore` method that does it (`call`), its HTTP
route (method and path, status, OpenAPI words), its request body (`Body`: model, size
limit) and query parameters, the shape of its answer, and its CLI verb (`verbs.Verb`).
`app.create_app` registers one route per row; `Client.call` sends any row's request by its
name; `cli.build_parser` makes each verb a command whose arguments are the row's
parameters and body fields, and a verb without a command function of its own prints the
answer as JSON.

>>> OPERATION["cancel"].method, OPERATION["cancel"].url(name="a b")
('DELETE', '/v1/dataflows/a%20b')
>>> OPERATION["rebalance"].permission, OPERATION["rebalance"].call
('admin', 'core.rebalance')

Pure data and the permission check: no FastAPI here, so the client and the CLI import it
cheaply.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel

from cameo_actors.operators.column_ipc import ARROW_STREAM
from cameo_actors.runtime.boundary import Strategy
from cameo_actors.service.auth import Principal
from cameo_actors.service.errors import ApiError
from cameo_actors.service.outputs import DEFAULT_PAGE, MAX_CURSOR_CHARS, MAX_PAGE
from cameo_actors.service.protocol import (
    EVENTS_SCHEMA,
    MAX_EXECUTOR_INDEX,
    MSGPACK_TYPE,
    SPEC_SCHEMA,
    AddExecutorsRequest,
    CancelResponse,
    Checkpoints,
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
    Graph,
    Hotspots,
    MigrateRequest,
    Migration,
    MigrationList,
    NodeDrained,
    Prediction,
    PushResponse,
    RebalanceRequest,
    ResultsPage,
    ScaleRequest,
    ScalingRequest,
    ScalingStatus,
    SubmitResponse,
    Timeline,
    TokenCreated,
    TokenInfo,
    TokenRequest,
    UpdateRequest,
    UpdateResponse,
    WhoAmI,
    parse_last,
)
from cameo_actors.service.verbs import Arg, Flag, Verb, parse_bins, parse_pin

#: Who may call an operation: anyone (no token), any token (a tenant sees its own
#: dataflows, the admin all), or the admin token only.
Permission = Literal["public", "tenant", "admin"]
PUBLIC: Permission = "public"
TENANT: Permission = "tenant"
ADMIN: Permission = "admin"
#: How an answer is sent: through the response model, the same with NaN and infinities as
#: null (JSON has none), JSON or msgpack as the Accept header asks, the same or an Arrow
#: stream of its rows (the call gets `columns=True`; the rest of the page in headers), or
#: plain text.
Answer = Literal["model", "json_safe", "negotiated", "columns", "text"]

#: A commit body: a cursor (one offset per sink instance or executor) and a sink name.
COMMIT_BODY_BYTES = 2 * MAX_CURSOR_CHARS
#: A reconfiguration body: a step and a few numbers, or a list of bins (a migrate).
RECONFIG_BODY_BYTES = 4096
MIGRATE_BODY_BYTES = 512 * 1024
#: An update or a token request: a few fields.
SMALL_BODY_BYTES = 4096
#: Events per push request from the client and the CLI: big enough to amortise a round trip.
PUSH_BATCH = 5_000
PAGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {MSGPACK_TYPE: {"schema": {
        "type": "string", "format": "binary",
        "description": "the same structure, msgpack-encoded (Accept: application/msgpack); "
                       "NaN and infinities kept (JSON has them as null)"}}}},
    410: {"model": ErrorBody, "description": "the dataflow was replaced since the cursor was "
                                             "made"},
}

#: A results page as msgpack, or as an Arrow stream with the rest of the page in headers.
RESULTS_200: dict[str, Any] = {"content": {
    **PAGE_RESPONSES[200]["content"],
    ARROW_STREAM: {"schema": {
        "type": "string", "format": "binary",
        "description": "the rows as an Arrow IPC stream (Accept: " + ARROW_STREAM + "): the "
                       "results' columns, then _ingest_ms and _egress_ms; the cursor, sink and "
                       "pending rows in the Cameo-Cursor, Cameo-Sink and Cameo-Pending headers"}}}}


@dataclass(frozen=True)
class Body:
    """A request's body: its model, the most bytes read, and its names in errors.

    Attributes:
        model: the pydantic model it is checked against; None: plain data the core checks
            itself (a spec), handed over as the core's `data` argument.
        limit: the most bytes read; None: the service's `max_spec_bytes` (a spec) or
            `max_body_bytes` (events), as `create_app` was given.
        what: its name where it is too large or malformed ("the scale is larger...").
        model_what: its name where a field is invalid (422); default `what`.
        optional: a request without a body reads as {} (every field defaulted).
        description: the OpenAPI requestBody's description.
        schema: its OpenAPI schema; default the model's.
    """

    model: type[BaseModel] | None
    limit: int | None
    what: str
    description: str
    model_what: str = ""
    optional: bool = False
    schema: dict[str, Any] | None = None

    def openapi(self) -> dict[str, Any]:
        """The route's `openapi_extra`: the body as JSON, or the same as msgpack."""
        schema = self.schema if self.schema is not None else \
            self.model.model_json_schema() if self.model is not None else {}
        return {"requestBody": {"required": True, "description": self.description, "content": {
            "application/json": {"schema": schema},
            MSGPACK_TYPE: {"schema": {"type": "string", "format": "binary",
                                      "description": "the same structure, msgpack-encoded"}}}}}


@dataclass(frozen=True)
class Param:
    """A path or query parameter: its name on the wire, type, default and bounds, and the
    core's keyword it is passed as (after `read`, e.g. a window's text to seconds).

    Attributes:
        type: its Python type (FastAPI checks a value against it: a 422 otherwise).
        default: a query parameter's default.
        bounds: FastAPI's Path / Query keywords (ge, le, max_length, description).
        query: a query parameter (else a path parameter: named in the row's path).
        arg: the core's keyword for it (default: its name).
        read: turns the checked value into the core's (its refusal is the answer).
    """

    name: str
    type: Any = str
    default: Any = None
    bounds: dict[str, Any] = field(default_factory=dict)
    query: bool = True
    arg: str = ""
    read: Callable[[Any], Any] | None = None

    @property
    def keyword(self) -> str:
        return self.arg or self.name


@dataclass(frozen=True)
class Operation:
    """One operation of the service (see the module's doc for what each part feeds).

    Attributes:
        name: its name: the route's (OpenAPI's operationId) and `Client.call`'s.
        method, path: the HTTP route; `{name}` parts are path parameters.
        tag, summary: its group and line in the OpenAPI document (no summary: its name).
        call: what does it, "core.<ServiceCore method>" or "tokens.<TokenAdmin method>";
            the caller comes first, then the parameters and the body's fields by keyword.
            Empty: the app answers it itself (a route of its own in `app.py`).
        permission: who may call it (`authorize`).
        forbidden: for an admin operation, what a tenant reads in its 403 ("... is").
        body: its request body, if any.
        params: its query parameters, and path parameters that are not plain text.
        status: the HTTP status of its success (None: 200).
        response: the response model (OpenAPI, and a check of what is returned).
        wrap: the result is answered as {wrap: result}.
        answer: how the answer is encoded (`Answer`).
        responses: more OpenAPI responses than the service's common ones.
        cli: its CLI verb ("pool add"), if any: a `Verb`, or its words alone.
    """

    name: str
    method: str
    path: str
    tag: str
    summary: str | None = None
    call: str = ""
    permission: Permission = TENANT
    forbidden: str = ""
    body: Body | None = None
    params: tuple[Param, ...] = ()
    status: int | None = None
    response: Any = None
    wrap: str = ""
    answer: Answer = "model"
    responses: dict[int | str, dict[str, Any]] | None = None
    cli: str | Verb = ""

    @property
    def verb(self) -> Verb | None:
        """Its CLI verb, if it has one (words alone are a verb with nothing else said)."""
        if isinstance(self.cli, Verb):
            return self.cli
        return Verb(self.cli) if self.cli else None

    @property
    def path_names(self) -> list[str]:
        """The path's parameters, in order."""
        return re.findall(r"{(\w+)}", self.path)

    def path_params(self) -> list[Param]:
        declared = {p.name: p for p in self.params if not p.query}
        return [declared.get(n, Param(n, query=False)) for n in self.path_names]

    def query_params(self) -> list[Param]:
        return [p for p in self.params if p.query]

    def url(self, **values: Any) -> str:
        """The path with its parameters filled in (each quoted whole: a name with a '/'
        stays one part)."""
        missing = [n for n in self.path_names if n not in values]
        if missing:
            raise TypeError(f"operation {self.name!r}: expected path parameters "
                            f"{self.path_names}, got {sorted(values)}; fix: pass "
                            f"{', '.join(missing)}")
        return re.sub(r"{(\w+)}", lambda m: quote(str(values[m.group(1)]), safe=""), self.path)


def authorize(op: Operation, principal: Principal) -> None:
    """The one permission check of the API: 403 unless `principal` may call `op`."""
    if op.permission == ADMIN and not principal.admin:
        raise ApiError(403, "forbidden", f"{op.forbidden} for the admin",
                       expected="the admin token", got=principal.label,
                       fix="ask the service operator")


_NAME_DF = "/v1/dataflows/{name}"
_LAST = Param("last", str, "60s", {"description": "the window explained: seconds (60) or "
                                   "with a unit (60s, 500ms, 5m, 1h); at most a day"},
              arg="last_s", read=parse_last)
_CURSOR = "from the last answer; none: from the committed "
_LIMIT = Param("limit", int, DEFAULT_PAGE, {"ge": 1, "le": MAX_PAGE, "description": "rows at most"})
_SPEC = Body(None, None, "spec", "the dataflow spec", schema=SPEC_SCHEMA)

# -- the command line's words (verbs.Verb): what the rows' inputs alone cannot say
_JSON = Flag("--json", "print the answer as JSON (times as epoch seconds)")
_WAIT = (Flag("--wait", "wait until the migration(s) ended, and say how"),
         Flag("--wait-timeout", "--wait: give up after S seconds", float, 120.0, "S"))
_SPEC_FILES = Arg(metavar="FILE", many=True,
                  help="a JSON spec (or a list of specs), '-' for stdin, or a Python file whose "
                       "top level defines Dataflow objects")
_RECONFIG_ARGS = {"step": Arg(positional=True), "batch_bins": Arg(metavar="N")}

#: Every operation of the API, in the order of its routes (and of the OpenAPI document).
OPERATIONS: tuple[Operation, ...] = (
    Operation("healthz", "GET", "/healthz", "service", "Liveness (no token needed)",
              permission=PUBLIC, response=dict[str, str]),
    Operation("whoami", "GET", "/v1/whoami", "service", call="core.whoami", response=WhoAmI,
              cli=Verb("info", "who you are, and the deployment")),
    Operation("get_info", "GET", "/v1/info", "service",
              "The deployment: pool, policy; Ray and executors for the admin",
              response=dict[str, Any], cli="info"),
    # -- dataflows
    # (a route of its own in app.py: its status says whether it was created, ?replace=true)
    Operation("submit", "POST", "/v1/dataflows", "dataflows", "Submit a spec (idempotent by name)",
              body=_SPEC, status=201, response=SubmitResponse,
              params=(Param("replace", bool, False, {"description": (
                  "cancel a running dataflow of the same name and a different spec and start "
                  "this one")}),),
              responses={200: {"model": SubmitResponse,
                               "description": "the same spec runs already"}},
              cli=Verb("submit", "submit dataflows from files (idempotent by name)",
                       input=_SPEC_FILES, flags=(Flag("--msgpack", "send the spec as msgpack"),))),
    Operation("check", "POST", "/v1/admission", "dataflows",
              "Would this spec, and every running dataflow, meet its target? (nothing is "
              "started)", call="core.check", body=_SPEC, response=Prediction,
              cli=Verb("submit --check", "start nothing: say whether it, and every running "
                       "dataflow, is predicted to meet its target (exit status 1 if not)",
                       input=_SPEC_FILES)),
    Operation("overload", "GET", "/v1/overload", "dataflows",
              "Who misses or will miss its target, by how much, and whose load causes it",
              call="core.overload", response=Prediction, cli=Verb("status", flags=(_JSON,))),
    Operation("explain_pool", "GET", "/v1/explain", "dataflows",
              "Why targets were missed, pool-wide: the critical path over the last seconds (a "
              "tenant sees other tenants' dataflows unnamed)", call="core.explain",
              params=(_LAST,), response=Explanation, answer="json_safe",
              cli=Verb("explain", args={"last": Arg(metavar="WINDOW")}, flags=(_JSON,))),
    Operation("list_dataflows", "GET", "/v1/dataflows", "dataflows",
              "The dataflows this token may see, live and ended (kept for a while)",
              call="core.list", response=DataflowList, wrap="dataflows",
              params=(Param("state", list[str] | None, None, {"description": (
                  "only dataflows in these states (repeat the parameter)")}, arg="states"),
                      Param("detail", bool, False, {"description": (
                          "each live dataflow's figures too: p99, share within target, "
                          "events in per second, backlog")})),
              cli=Verb("list", args={"state": Arg(metavar="STATE"),
                                     "detail": Arg(flag="--detail")}, flags=(_JSON,))),
    Operation("status", "GET", _NAME_DF, "dataflows",
              "State, throughput, latency percentiles vs target, backlog, errors",
              call="core.status", response=DataflowStatus,
              cli=Verb("status", "a dataflow's latency percentiles against its target, live; "
                       "without a name, the pool's overload report",
                       flags=(Flag("--once", "print one frame and exit"),
                              Flag("--interval", "seconds between frames", float, 1.0, "S"),
                              Flag("--count", "stop after this many frames", int, None, "N"),
                              _JSON))),
    Operation("explain", "GET", _NAME_DF + "/explain", "dataflows",
              "Why it missed (or met) its target: its critical path over the last seconds, "
              "ranked, in words", call="core.explain", params=(_LAST,), response=Explanation,
              answer="json_safe",
              cli=Verb("explain", "why a dataflow missed its target: its critical path, "
                       "ranked; without a name, the pool", args={"last": Arg(metavar="WINDOW")},
                       flags=(_JSON,))),
    Operation("spec", "GET", _NAME_DF + "/spec", "dataflows",
              "Its spec as submitted (and as changed since: targets, parallelism)",
              call="core.spec", response=dict[str, Any]),
    Operation("graph", "GET", _NAME_DF + "/graph", "dataflows",
              "Its steps with their instances and executors, backpressure and share of the "
              "critical path (the console's graph)", call="core.graph", params=(_LAST,),
              response=Graph),
    Operation("checkpoints", "GET", _NAME_DF + "/checkpoints", "dataflows",
              "Its checkpoints: counts, the last ones with durations, sizes and parts per "
              "executor, and its last restore's phases", call="core.checkpoints",
              response=Checkpoints),
    Operation("timeline", "GET", _NAME_DF + "/timeline", "dataflows",
              "Its history on one time line: states, changes, reconfigurations, scaling "
              "decisions with their reasons, failed checkpoints", call="core.timeline",
              response=Timeline),
    Operation("hotspots", "GET", "/v1/hotspots", "dataflows",
              "Across the pool: the steps most on the critical path, the dataflows furthest "
              "from their targets, the largest backlogs, the busiest executors (the admin's)",
              call="core.hotspots", params=(_LAST,), response=Hotspots),
    Operation("exceptions", "GET", _NAME_DF + "/exceptions", "dataflows",
              "Why it failed, and its last operator failures", call="core.exceptions",
              response=Exceptions, cli="exceptions"),
    Operation("update", "PATCH", _NAME_DF, "dataflows",
              "Change the latency target or tenant weight while it runs", call="core.update",
              body=Body(UpdateRequest, SMALL_BODY_BYTES, "update", "what to change"),
              response=UpdateResponse,
              cli=Verb("update", args={"latency_target_ms": Arg(flag="--target", metavar="MS"),
                                       "weight": Arg(metavar="W")})),
    Operation("cancel", "DELETE", _NAME_DF, "dataflows", "Cancel a dataflow", call="core.cancel",
              response=CancelResponse,
              cli=Verb("cancel", "cancel dataflows", args={"name": Arg(many=True)})),
    # -- events
    # (a route of its own in app.py: it refuses before it reads the body)
    Operation("push", "POST", _NAME_DF + "/sources/{source}/events", "events",
              "Push a batch of events to a source; each event enters or is refused alone",
              body=Body(None, None, "events batch", "events: a list of objects",
                        schema=EVENTS_SCHEMA),
              status=202, response=PushResponse,
              cli=Verb("push", "push the events of a file to a source",
                       input=Arg(metavar="FILE", help="JSON lines or a JSON list of events; "
                                                      "'-' for stdin"),
                       flags=(Flag("--batch", "events per request", int, PUSH_BATCH, "N"),
                              Flag("--close", "close the sources afterwards")))),
    Operation("close", "POST", _NAME_DF + "/close", "events",
              "End every source: windows fire, no more events are expected", call="core.close",
              response=dict[str, str], cli="close"),
    # -- outputs: pages after a cursor; a commit frees what was read
    Operation("results", "GET", _NAME_DF + "/results", "outputs",
              "A page of results after a cursor (reading commits nothing)",
              call="core.read_results", response=ResultsPage, answer="columns",
              params=(Param("sink", str | None, None, {"description": (
                          "the sink (optional when there is one, or with a cursor)")}),
                      Param("cursor", str | None, None, {
                          "description": _CURSOR + "rows", "max_length": MAX_CURSOR_CHARS}),
                      _LIMIT),
              responses={**PAGE_RESPONSES, 200: RESULTS_200,
                         409: {"model": ErrorBody, "description":
                               "rows before the cursor were committed already"},
                         406: {"model": ErrorBody, "description": "asked for Arrow, and the "
                               "results do not form columns (read them as JSON)"}},
              cli=Verb("results", "print a dataflow's results (or its error output), "
                       "committing them",
                       "Print the results waiting in a dataflow's sink, a page at a time, and "
                       "commit each page once printed (that frees a sink held on a full result "
                       "log). Without --follow: what is there now. Ctrl-C leaves the page being "
                       "printed uncommitted; a pipe closed by its reader (| head) ends the "
                       "command quietly, the rows it took committed.",
                       args={"limit": Arg(metavar="N", help="stop after N rows (default: all "
                                                           "there are)")},
                       flags=(Flag("--follow", "keep printing as results come, until the "
                                               "dataflow ended"),
                              Flag("--json", "one JSON object per row (NaN and infinities as "
                                             "null)"),
                              Flag("--no-commit", "leave the rows for the next reader"),
                              Flag("--interval", "--follow: seconds between polls when nothing "
                                                 "is new", float, 0.5, "S")))),
    Operation("commit_results", "POST", _NAME_DF + "/results/commit", "outputs",
              "Free the results before a cursor (a sink held on a full log resumes)",
              call="core.commit_results", response=CommitResponse, answer="negotiated",
              body=Body(CommitRequest, COMMIT_BODY_BYTES, "commit", "the cursor"),
              responses=PAGE_RESPONSES, cli="results"),
    Operation("errors", "GET", _NAME_DF + "/errors", "outputs",
              "A page of the error output after a cursor (reading commits nothing)",
              call="core.read_errors", response=ErrorsPage, answer="negotiated",
              params=(Param("cursor", str | None, None, {
                          "description": _CURSOR + "records", "max_length": MAX_CURSOR_CHARS}),
                      _LIMIT),
              responses=PAGE_RESPONSES,
              cli=Verb("results --errors", "the error output instead (bad records, with step, "
                                           "kind and message)")),
    Operation("commit_errors", "POST", _NAME_DF + "/errors/commit", "outputs",
              "Free the error-output records before a cursor", call="core.commit_errors",
              body=Body(ErrorsCommitRequest, COMMIT_BODY_BYTES, "commit", "the cursor"),
              response=CommitResponse, answer="negotiated", responses=PAGE_RESPONSES,
              cli="results --errors"),
    Operation("executors", "GET", "/v1/executors", "service",
              "Per-executor scheduler counters (admin)", call="core.executors",
              permission=ADMIN, forbidden="executor statistics are", response=dict[str, Any],
              wrap="executors", cli=Verb("executors", flags=(_JSON,))),
    # -- live reconfiguration: each answers 202 with the migration started (see its progress
    # in GET /v1/migrations); 409 while another migration of the dataflow is under way
    Operation("scale", "POST", _NAME_DF + "/scale", "reconfiguration",
              "Change the parallelism of a keyed step while it runs", call="core.scale",
              body=Body(ScaleRequest, RECONFIG_BODY_BYTES, "scale", "the step and parallelism"),
              status=202, response=Migration,
              cli=Verb("scale", description="A keyed step (a window or join after key_by) "
                       "goes to P instances while the dataflow runs: its key bins and their "
                       "state move epoch by epoch, no event is lost.",
                       args={**_RECONFIG_ARGS, "parallelism": Arg(positional=True, metavar="P")},
                       flags=_WAIT)),
    Operation("migrate", "POST", _NAME_DF + "/migrate", "reconfiguration",
              "Move key bins of a keyed step to an instance, or an instance to an executor",
              call="core.migrate",
              body=Body(MigrateRequest, MIGRATE_BODY_BYTES, "migrate", "what moves where"),
              status=202, response=Migration,
              cli=Verb("migrate", args={**_RECONFIG_ARGS,
                                        "bins": Arg(metavar="B", parse=parse_bins,
                                                    help="the key bins to move: 1,2,3 or 0-63"),
                                        "to_instance": Arg(metavar="I"),
                                        "instance": Arg(metavar="I"),
                                        "to_executor": Arg(metavar="X")},
                       flags=_WAIT)),
    Operation("dataflow_migrations", "GET", _NAME_DF + "/migrations", "reconfiguration",
              "A dataflow's reconfigurations, running and recent, with their progress",
              call="core.migrations", response=MigrationList, wrap="migrations",
              cli=Verb("migrations", "reconfigurations (running and recent) and their progress; "
                       "with a name, only that dataflow's", flags=(_JSON,))),
    Operation("all_migrations", "GET", "/v1/migrations", "reconfiguration",
              "Reconfigurations of the dataflows this token may see (admin: all)",
              call="core.migrations", response=MigrationList, wrap="migrations",
              cli=Verb("migrations", flags=(_JSON,))),
    Operation("rebalance", "POST", "/v1/pool/rebalance", "reconfiguration",
              "Even out the executors' load: instances and bins move (admin)",
              call="core.rebalance", permission=ADMIN, forbidden="rebalancing the pool is",
              body=Body(RebalanceRequest, RECONFIG_BODY_BYTES, "rebalance",
                        "the strategy (optional: no body is batched)", optional=True),
              status=202, response=MigrationList, wrap="migrations",
              cli=Verb("pool rebalance", flags=_WAIT)),
    Operation("add_executors", "POST", "/v1/pool/executors", "reconfiguration",
              "Start executors (admin)", call="core.add_executors", permission=ADMIN,
              forbidden="adding executors is",
              body=Body(AddExecutorsRequest, RECONFIG_BODY_BYTES, "executors request",
                        "how many (optional: no body is one)", model_what="executors",
                        optional=True),
              status=201, response=ExecutorsAdded, wrap="added",
              cli=Verb("pool add", args={"count": Arg(metavar="N")})),
    Operation("remove_executor", "DELETE", "/v1/pool/executors/{index}", "reconfiguration",
              "Drain an executor: its instances move elsewhere, then it stops (admin)",
              call="core.remove_executor", permission=ADMIN, forbidden="removing executors is",
              params=(Param("index", int, bounds={"ge": 0, "le": MAX_EXECUTOR_INDEX,
                                                  "description": "the executor's index"},
                            query=False),
                      Param("strategy", Strategy, "batched",
                            {"description": "how its instances' bins move"})),
              status=202, response=ExecutorRemoval, cli=Verb("pool remove", flags=_WAIT)),
    Operation("drain_node", "POST", "/v1/pool/nodes/{node}/drain", "reconfiguration",
              "Take a node's executors out of the pool before the node goes: its dataflows "
              "are checkpointed and restored on the executors left (admin)",
              call="core.drain_node", permission=ADMIN, forbidden="draining nodes is",
              params=(Param("node", str, bounds={"min_length": 1, "max_length": 64,
                                                 "description": "the node's address, or its "
                                                                "Ray node id (8+ hex digits)"},
                            query=False),),
              response=NodeDrained, cli="pool drain"),
    # -- self-scaling: the controller's view; a dataflow's own settings and pins
    Operation("scaling_status", "GET", "/v1/scaling", "scaling",
              "The scaling controller: each dataflow's steps (parallelism, lessees, true "
              "rates, busy share), its last decisions and why, misses, failures (a tenant "
              "sees its own dataflows)", call="core.scaling", response=ScalingStatus,
              answer="json_safe", cli=Verb("scaling", flags=(_JSON,))),
    Operation("dataflow_scaling", "GET", _NAME_DF + "/scaling", "scaling",
              "The scaling controller's view of one dataflow", call="core.scaling",
              response=ScalingStatus, answer="json_safe", cli=Verb("scaling", flags=(_JSON,))),
    Operation("set_scaling", "PUT", _NAME_DF + "/scaling", "scaling",
              "Set a dataflow's own scaling settings (over the pool's; null: the pool's) and "
              "pin steps to a parallelism", call="core.set_scaling",
              body=Body(ScalingRequest, RECONFIG_BODY_BYTES, "scaling request",
                        "the settings (required, null for the pool's) and the pins",
                        model_what="scaling"),
              response=ScalingStatus, answer="json_safe",
              cli=Verb("scaling set", description="Each set gives the dataflow's whole own "
                       "settings: what it leaves out is the pool's. Pins stay until unpinned.",
                       args={"pin": Arg(metavar="STEP=N", parse=parse_pin,
                                        help="keep STEP at N instances whatever the policy "
                                             "says; repeat it")},
                       flags=(Flag("--setting", "a setting as KEY=VALUE (the value as JSON); "
                                   "repeat it", str, None, "KEY=VALUE", repeat=True),
                              Flag("--unpin", "let the policy decide STEP's parallelism again; "
                                   "repeat it", str, None, "STEP", repeat=True),
                              Flag("--reset", "the pool's settings again, and every step "
                                              "unpinned")))),
    # -- tokens
    Operation("create_token", "POST", "/v1/tokens", "tokens", "Create a tenant token (admin)",
              call="tokens.create", permission=ADMIN, forbidden="creating tokens is",
              body=Body(TokenRequest, SMALL_BODY_BYTES, "token request", "the tenant",
                        model_what="token"),
              status=201, response=TokenCreated,
              cli=Verb("token create", args={"tenant": Arg(positional=True)})),
    Operation("list_tokens", "GET", "/v1/tokens", "tokens",
              "Tenant tokens (ids, not secrets; admin)", call="tokens.list", permission=ADMIN,
              forbidden="listing tokens is", response=list[TokenInfo],
              cli=Verb("token list", flags=(_JSON,))),
    Operation("revoke_token", "DELETE", "/v1/tokens/{token_id}", "tokens",
              "Revoke a tenant token (admin)", call="tokens.revoke", permission=ADMIN,
              forbidden="revoking tokens is", response=dict[str, Any], cli="token revoke"),
    # -- metrics
    Operation("metrics", "GET", "/metrics", "service",
              "Prometheus metrics of the whole cluster (a tenant token sees its own)",
              answer="text", cli="metrics"),
)


def by_name(operations: Iterable[Operation]) -> dict[str, Operation]:
    """A table's operations by name; two of one name are refused (a route would hide)."""
    seen: dict[str, Operation] = {}
    for op in operations:
        if op.name in seen:
            raise ValueError(f"operations: expected one row per name, got {op.name!r} twice; "
                             "fix: give the new operation a name of its own")
        seen[op.name] = op
    return seen


#: The operations by name.
OPERATION = by_name(OPERATIONS)
#: Paths no token is asked for.
PUBLIC_PATHS = frozenset(op.path for op in OPERATIONS if op.permission == PUBLIC)
