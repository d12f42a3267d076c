"""The answer side of the API: the pydantic models of what each operation answers (the
OpenAPI document, and a check of what the service returns), and the error body every
refusal has.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


# -- response models (documentation and a check of what the service returns) -----------------
class ErrorDetail(BaseModel):
    code: str
    message: str
    step: str | None = None
    expected: str | None = None
    got: Any = None
    fix: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class Outcome(BaseModel):
    name: str
    tenant: str
    verdict: str = Field(description="meets, at_risk, misses or unknown")
    demand_ms_per_s: float | None = Field(description="executor ms per second it needs")
    calls_ms_per_s: float | None = Field(
        default=None, description="of that, what receiving the calls that bring its events in "
                                  "takes, whatever its rate (null: not measured apart)")
    allocation_ms_per_s: float | None = Field(description="executor ms per second it gets "
                                                          "(its tenant's floor and what is spare)")
    sustainable_eps: float | None = Field(description="events/s it keeps up with")
    behind_s_per_s: float = Field(description="how much later its results get every second")
    reason: str


class Cause(BaseModel):
    tenant: str = Field(description="a tenant over its weighted share (others' tenants are "
                                    "not named to a tenant token)")
    over_share_ms_per_s: float


class Prediction(BaseModel):
    """Admission control's prediction (docs/service.md, "Admission and overload")."""

    feasible: bool = Field(description="no dataflow is predicted or measured to miss")
    capacity_ms_per_s: float = Field(description="executor ms per second of the pool")
    capacity_basis: str = Field("", description="how the capacity was found: the executors' "
                                                "hosts' cores less what other processes take")
    utilization: float | None = Field(description="known demand / capacity")
    outcomes: list[Outcome]
    causes: list[Cause]
    executors_needed: int | None = Field(description="executors for every known demand to "
                                                     "fit under the pool's headroom")
    max_rate_eps: float | None = Field(description="for a new dataflow: the highest rate that "
                                                   "keeps every target it does not already miss")
    warnings: list[str] = Field(default_factory=list,
                                description="on submit: the dataflows predicted to miss, why")


class SubmitResponse(BaseModel):
    id: str = Field(description="the dataflow's id: its name, unique in the pool")
    name: str
    tenant: str
    created: bool = Field(description="false when the same spec was running already")
    replaced: bool = False
    state: str
    admission: Prediction | None = Field(None, description="admission control's prediction "
                                                           "when it was created")


class DataflowFigures(BaseModel):
    """A live dataflow's figures in the list (`?detail=true`)."""

    weight: float
    p99_ms: float | None
    within_target: float | None = Field(description="share of results within the target")
    events_in_per_s: float
    backlog: int
    results: int


class DataflowSummary(BaseModel):
    name: str
    tenant: str
    latency_target_ms: float
    state: str = Field(description="running, finishing, finished, cancelled or failed")
    executors: list[int]
    submitted_at: float | None = None
    ended_at: float | None = None
    figures: DataflowFigures | None = Field(None, description="with ?detail=true, a live "
                                                              "dataflow's figures")


class DataflowList(BaseModel):
    dataflows: list[DataflowSummary]


class Latency(BaseModel):
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    mean_ms: float | None


class Throughput(BaseModel):
    events_in_per_s: float
    events_out_per_s: float
    results_per_s: float
    window_s: float = Field(description="the interval the rates were measured over")


class Transition(BaseModel):
    state: str
    at: float = Field(description="epoch seconds")
    reason: str | None


class DataflowStatus(BaseModel):
    name: str
    tenant: str
    state: str
    latency_target_ms: float
    weight: float
    latency: Latency
    within_target: float | None = Field(description="share of results within the target")
    results: int
    events_in: int
    events_out: int
    throughput: Throughput
    backlog: int
    errors: dict[str, int] = Field(description="error records per 'step:kind'")
    failures: list[str]
    executors: list[int]
    sources: list[str]
    submitted_at: float | None
    ended_at: float | None = None
    cause: str | None = Field(None, description="why it failed")
    exceptions: list[str] = Field([], description="its last operator failures")
    history: list[Transition] = Field([], description="its state changes, oldest first")
    recoveries: int = Field(0, description="times it was restored from a checkpoint after a "
                                           "part of the pool died")
    state_bytes: int = Field(0, description="estimated operator state and unread results")
    held: list[str] = Field([], description="activations held by flow control (e.g. a sink "
                                            "whose result log is full)")
    migrations: list[Migration] = Field([], description="its reconfigurations (running and "
                                                        "recent), oldest first")
    outlook: Outcome | None = Field(None, description="the pool's overload report for it: "
                                                      "whether it meets or will miss its target")
    scaling: DataflowScalingSummary | None = Field(
        None, description="the scaling controller's view of it: each step's parallelism, "
                          "lessees, true rates and busy share, its last decisions (None "
                          "when the controller has not measured it)")


class Migration(BaseModel):
    """A reconfiguration of one keyed step and its progress (the runtime's MigrationInfo)."""

    model_config = ConfigDict(extra="allow")

    id: str
    dataflow: str
    step: str
    kind: str = Field("", description="scale, migrate or move_instance")
    strategy: str = Field("", description="all_at_once, batched or fluid")
    state: str = Field(description="running, done or failed")
    from_parallelism: int = 0
    to_parallelism: int = 0
    bins_total: int = 0
    bins_moved: int = 0
    epochs_total: int = 0
    epochs_done: int = 0
    bytes_moved: int = Field(0, description="operator state moved between instances")
    started_at: float | None = Field(None, description="epoch seconds")
    ended_at: float | None = None
    duration_s: float = 0.0
    error: str | None = Field(None, description="why it failed")


class MigrationList(BaseModel):
    migrations: list[Migration]


class ExecutorsAdded(BaseModel):
    added: list[int] = Field(description="the new executors' indices")


class NodeDrained(BaseModel):
    node: str
    executors: list[int] = Field(description="the executors that were on it, now retired")
    dataflows: list[str] = Field(description="the dataflows restored on the executors left")
    ray_refused: dict[str, str] = Field(
        default_factory=dict, description="node id -> why Ray did not drain it (empty: Ray "
                                          "places nothing new there, and it leaves once idle)")
    seconds: float = Field(description="how long the drain took, checkpoints included")


class ExecutorRemoval(BaseModel):
    model_config = ConfigDict(extra="allow")

    executor: int
    moving: list[str] = Field(description="the instances that move elsewhere, one migration "
                              "each (see /v1/migrations)")
    state: str = Field(description="draining: it leaves once its instances moved")


class _Open(BaseModel):
    """A record of the scaling controller: the fields below are documented, more may come."""

    model_config = ConfigDict(extra="allow")


class StepScaling(_Open):
    """One step of a dataflow, measured over the scaling controller's window (its
    instances summed). True rates are per second of useful time (deserialization,
    processing, serialization): what the step could do unhindered (DS2)."""

    parallelism: int
    scalable: bool = Field(description="a keyed step the controller may scale")
    lessees: int = Field(0, description="lessee instances helping its hot keys")
    events_in_eps: float | None = None
    events_out_eps: float | None = None
    true_processing_eps: float | None = Field(None, description="events one instance "
                                                                "processes per useful second")
    true_output_eps: float | None = None
    busy: float | None = Field(None, description="mean share of time its instances work (0..1)")
    backlog_events: float | None = None


class SourceScaling(_Open):
    rate_eps: float | None = None
    backlog_events: float | None = Field(None, description="events waiting at the writers "
                                                           "(Runtime.report_backlog)")
    backlog_growth_eps: float | None = None


class DataflowScaling(_Open):
    policy: str = Field(description="the dataflow's policy (its own, or the pool's)")
    within_target: float | None = None
    steps: dict[str, StepScaling] = Field(default_factory=dict)
    sources: dict[str, SourceScaling] = Field(default_factory=dict)
    instances: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict, description="per scalable step, each instance's rates, busy "
        "share, useful time split (ms) and queueing delay")


class ScalingDecision(_Open):
    at: float = Field(description="when, in the controller's clock (seconds)")
    dataflow: str
    step: str
    from_parallelism: int
    to_parallelism: int
    policy: str
    reason: str = Field(description="why, with the numbers")
    kind: str = Field("parallelism", description="parallelism or lessees")


class ScalingMiss(_Open):
    dataflow: str
    reason: str


class ScalingFailure(_Open):
    at: float | None = Field(None, description="epoch seconds")
    where: str = Field(description="a dataflow, or pool")
    error: str


class ScalingStatus(_Open):
    """The scaling controller's view: pool-wide for the admin; a tenant sees its own
    dataflows, and not the pool's executors."""

    policy: str = Field(description="the pool's policy")
    enabled: bool = Field(description="some dataflow is scaled (by the pool's policy or its own)")
    executors: int | None = Field(None, description="executors now (admin)")
    wanted_executors: int | None = Field(None, description="executors the last plan wants "
                                                           "(admin)")
    bounds: dict[str, int | None] = Field(default_factory=dict)
    dataflows: dict[str, DataflowScaling] = Field(default_factory=dict)
    decisions: list[ScalingDecision] = Field(default_factory=list, description="the last "
                                             "changes asked for, oldest first")
    misses: list[ScalingMiss] = Field(default_factory=list, description="dataflows the pool "
                                      "cannot serve within their target even at its maximum")
    errors: list[ScalingFailure] = Field(default_factory=list, description="actions that "
                                         "failed (retried later)")


class DataflowScalingSummary(_Open):
    """A dataflow's line of the scaling view, in its status."""

    policy: str
    steps: dict[str, StepScaling] = Field(default_factory=dict)
    decisions: list[ScalingDecision] = Field(default_factory=list)
    misses: list[str] = Field(default_factory=list, description="why it will miss even at "
                                                                "the pool's maximum")
    errors: list[ScalingFailure] = Field(default_factory=list)


class Exceptions(BaseModel):
    name: str
    state: str
    cause: str | None
    exceptions: list[str]


class UpdateResponse(BaseModel):
    name: str
    latency_target_ms: float
    weight: float


class CancelResponse(BaseModel):
    name: str
    state: str
    messages_dropped: int
    ended_before: bool = Field(False, description="it had ended already; what it kept (a "
                                                  "finished dataflow's results) is freed")


class Rejection(BaseModel):
    """An event refused at the edge: msgpack cannot carry it (it is in the error output too)."""

    index: int = Field(description="its position in the request's events")
    field: str | None = Field(description="the field at fault; null when the event as a whole is")
    reason: str = Field(description="what was expected, what arrived, and the fix")


class PushResponse(BaseModel):
    accepted: int = Field(description="events handed to the source; those off its schema go "
                                      "to the error output later (kind malformed)")
    rejected: int = Field(description="events refused here, each alone (kind unencodable in "
                                      "the error output); the others went on")
    rejections: list[Rejection] = Field(description="the first 10 refused events")


class ResultItem(BaseModel):
    event: dict[str, Any] = Field(description="the result (non-finite floats are null in JSON)")
    ingest_ms: float | None = Field(description="when the message that made it computable "
                                                "arrived, ms since the epoch")
    egress_ms: float | None = Field(description="when the sink recorded it, ms since the epoch")


class ResultsPage(BaseModel):
    rows: list[ResultItem] = Field(description="in egress order; one sink instance's in its order")
    cursor: str = Field(description="opaque: read on from here, or commit up to here")
    sink: str
    pending: int = Field(description="rows after the cursor when this page was read")


class ErrorItem(BaseModel):
    step: str | None
    kind: str | None = Field(description="malformed, late, user_function, ...")
    message: str | None
    event: Any = Field(description="the record as it arrived at the step")
    ingest_ms: float | None
    egress_ms: float | None


class ErrorsPage(BaseModel):
    rows: list[ErrorItem]
    cursor: str
    pending: int = Field(description="records after the cursor when this page was read")
    skipped: int = Field(description="records between the cursor and this page, dropped "
                                     "unread (the error output keeps a bounded number)")
    dropped: int = Field(description="records dropped unread since the dataflow started")


class CommitResponse(BaseModel):
    cursor: str
    freed: int = Field(description="rows this commit let the runtime forget")
    pending: int = Field(description="rows kept after the cursor")


class TokenCreated(BaseModel):
    id: str
    tenant: str
    created: float
    token: str = Field(description="the secret; shown once, stored only as a hash")


class TokenInfo(BaseModel):
    id: str
    tenant: str
    created: float


class WhoAmI(BaseModel):
    tenant: str | None
    admin: bool
    token_id: str


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in (
        (400, "malformed body: not JSON or msgpack, NaN or Infinity in JSON, nested too deep"),
        (401, "missing or wrong bearer token"),
        (403, "the token's tenant may not do this"), (404, "no such dataflow for this token"),
        (409, "a different dataflow runs under this name, or a reconfiguration conflicts "
              "with one under way"), (413, "body too large"),
        (415, "neither JSON nor msgpack"), (422, "invalid spec or request"),
        (500, "a bug in the service (internal_error; the traceback is in its log)"),
        (503, "the service is stopping, or the runtime did not answer in time (Retry-After)"))
}


class LatencyPoint(BaseModel):
    """One 1-s snapshot of an explanation's latency."""

    t_ms: float = Field(description="when (epoch ms)")
    results: int
    within: int = Field(description="results within the target")
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


class CriticalSegment(BaseModel):
    """What one share of the critical path was spent on."""

    share: float = Field(description="of the critical path (0..1)")
    ms: float | None
    kind: str = Field(description="processing, waiting, transfer, ingest, egress, serialize, "
                                  "deserialize, idle or untraced")
    dataflow: str | None
    step: str | None
    executor: int | None
    from_executor: int | None = Field(description="transfer: the sending executor")
    behind: str | None = Field(description="waiting: the dataflow it waited behind")
    behind_step: str | None
    text: str


class CriticalSummary(BaseModel):
    """Shares of the critical path (0..1) by type, operator, executor, channel, dataflow."""

    by_type: dict[str, float]
    by_operator: dict[str, float] = Field(description='"dataflow/step" -> share')
    by_executor: dict[str, float] = Field(description='"0" -> share')
    by_channel: dict[str, float]
    by_dataflow: dict[str, float]
    waiting_behind: dict[str, float] = Field(description="dataflow waited behind -> share")


class Explanation(BaseModel):
    """Why a dataflow (or the pool) missed or met its target: its critical path over the
    last `last_s` seconds (online critical-path analysis of traced activities). Names of
    dataflows a tenant token may not see are replaced by "another tenant"."""

    dataflow: str | None = Field(description="None: the whole pool")
    last_s: float
    from_ms: float | None = Field(description="epoch ms covered, from")
    to_ms: float | None
    snapshots: int
    activities: int
    latency_target_ms: float | None
    results: int
    within_target: float | None = Field(description="share of traced results within target")
    latency: list[LatencyPoint] = Field(description="one per 1-s snapshot, oldest first")
    operators: dict[str, float] = Field(description="the dataflow's steps' share of its "
                                                    "critical path")
    critical_path: list[CriticalSegment] = Field(description="ranked, largest first")
    late_paths: int = Field(default=0, description="result messages that carried a result "
                                                   "over the target")
    late_path: list[CriticalSegment] = Field(
        default_factory=list, description="the critical path of those alone, ranked")
    summary: CriticalSummary
    words: list[str] = Field(description="the headline, then one line per critical_path entry")
    late_words: list[str] = Field(default_factory=list, description="the same of late_path "
                                                                    "(none if nothing was late)")
    tracing: dict[str, float | int | None] = Field(
        default_factory=dict, description="how tracing keeps up: activities collected and "
        "lost (overwritten before collected), analysed per second of analysis time against "
        "traced per second")


# -- what the console shows (GET /v1/dataflows/{name}/graph, .../checkpoints, .../timeline,
# /v1/hotspots)
class Instance(BaseModel):
    id: str = Field(description='"dataflow/step/instance"')
    executor: int | None = Field(description="where it runs (None: not placed)")


class GraphStep(BaseModel):
    id: str
    op: str
    inputs: list[str]
    parallelism: int
    instances: list[Instance]
    critical_share: float | None = Field(description="its share of the dataflow's critical "
                                                     "path (None: ended, or not traced)")
    busy_share: float | None = Field(None, description="the mean share of time its "
                                                       "instances work (the scaling "
                                                       "controller's measure; None: not yet)")
    held: int = Field(description="its instances held by flow control now (backpressure)")


class Graph(BaseModel):
    name: str
    state: str
    window_s: float = Field(description="the critical path's window")
    steps: list[GraphStep]


class TimelineEvent(BaseModel):
    at: float = Field(description="epoch seconds")
    kind: str = Field(description="state, change, migration, scaling or checkpoint")
    what: str


class Timeline(BaseModel):
    name: str
    events: list[TimelineEvent] = Field(description="oldest first")


class HotStep(BaseModel):
    dataflow: str
    tenant: str
    step: str
    critical_share: float


class HotMiss(BaseModel):
    dataflow: str
    tenant: str
    within_target: float | None
    p99_ms: float | None
    latency_target_ms: float


class HotBacklog(BaseModel):
    dataflow: str
    tenant: str
    backlog: int


class HotExecutor(BaseModel):
    executor: int | None
    busy_share: float | None = Field(description="since the service's snapshot before")
    backlog: int
    held: int
    activations: int


class Hotspots(BaseModel):
    window_s: float = Field(description="the critical path's window")
    words: list[str] = Field(description="the pool's critical path in words (explain)")
    steps: list[HotStep] = Field(description="by share of the pool's critical path")
    misses: list[HotMiss] = Field(description="the lowest shares within target first")
    backlogs: list[HotBacklog]
    executors: list[HotExecutor] = Field(description="the busiest first (the admin's only)")
