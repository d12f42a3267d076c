"""The runtime's boundary: the records that cross it, typed once.

Everything a caller of the runtime sees (the Python API `Runtime`, the
service, the Spark tier) is one of these records; the operations that return
them are declared in `interface.py`. The records stay plain data (TypedDicts
over dicts, tuples), because they travel as JSON to HTTP clients and over Ray
between processes; `ActivationId` is the one value type with behaviour.

Pure: no Ray, so the service's unit tests and fakes use it too.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict, get_args

from cameo_actors.operators.base import Event
from cameo_actors.runtime import lifecycle
from cameo_actors.runtime.lifecycle import DataflowState


@dataclass(frozen=True, order=True, slots=True)
class ActivationId:
    """One instance of one step of one dataflow: `dataflow/step/instance` as text.

    The text form keys messages, routing and result logs (it is what travels on
    the wire and in Spark's offsets); this value keeps the parts, so nothing
    parses them back out of the text.

    >>> a = ActivationId("alerts", "sink", 1)
    >>> str(a), a.step
    ('alerts/sink/1', 'sink')
    """

    dataflow: str
    step: str
    instance: int

    def __str__(self) -> str:
        return f"{self.dataflow}/{self.step}/{self.instance}"

    @classmethod
    def of_step(cls, dataflow: str, step: str, parallelism: int) -> builtins.list[ActivationId]:
        """Every instance of a step, in instance order."""
        return [cls(dataflow, step, i) for i in range(parallelism)]


#: Latency histogram bucket upper bounds in ms (1 ms .. 10 s); counts come per bucket plus
#: one overflow bucket, non-cumulative (Prometheus's cumulative form is made on export).
LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)

#: A result (or error-output) row: (event, ingest_ms, egress_ms).
ResultRow = tuple[Event, float, float]
#: An output log's (committed offset, end offset).
LogOffsets = tuple[int, int]
#: An error log's (committed offset, end offset, records dropped unread).
ErrorLogOffsets = tuple[int, int, int]


def error_log_id(dataflow: str, executor: int) -> str:
    """The id of a dataflow's error log on one executor (its Spark partition name)."""
    return f"{dataflow}/errors/{executor}"


class Rejected(TypedDict):
    """An event `push` refused at the edge (msgpack cannot carry it); it went to the
    dataflow's error output as well (kind "unencodable"), the rest of its batch went on."""

    index: int  # position in the events given to push
    field: str | None  # the field at fault; None when the event as a whole is
    reason: str  # what was expected, what arrived, and the fix


#: A dataflow's lifecycle (`lifecycle.py`: the states, the events, and the one table of
#: the moves between them). `running` until its sources are closed, then `finishing` while
#: the backlog drains, then `finished` (its results stay readable); or `cancelled`, or
#: `failed` (with a cause) at any time; `recovering` (with the cause) while it is restored
#: from its last checkpoint after an executor it ran on died, then running (or finishing)
#: again. Ended dataflows are kept for a while, to be seen. Each is a `DataflowState`,
#: equal to its string (records hold the strings).
RUNNING, FINISHING, FINISHED, CANCELLED, FAILED, RECOVERING = (
    DataflowState.RUNNING, DataflowState.FINISHING, DataflowState.FINISHED,
    DataflowState.CANCELLED, DataflowState.FAILED, DataflowState.RECOVERING)
STATES = lifecycle.STATES
#: States in which a dataflow's activations run (it takes events, or drains), or are
#: being restored.
LIVE_STATES = lifecycle.LIVE_STATES
#: States in which its parts on the executors are freed (nothing to read any more).
RELEASED_STATES = lifecycle.RELEASED_STATES

#: How a reconfiguration moves a keyed step's bins: in one epoch, in batches, one bin per
#: epoch. Callers (the service's requests) take these names; the runtime plans by them.
Strategy = Literal["all_at_once", "batched", "fluid"]
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)
#: The most key bins a keyed step may have (`RuntimeConfig.bins`, a power of two): also
#: the most instances one step may scale to.
MAX_BINS = 65536
#: The most executors one `add_executors` call may start.
MAX_ADD_EXECUTORS = 64
#: How long a caller waits for the pool's answer to one call. An executor answers a
#: control call within its own 60 s, and an ingest call blocked by backpressure gives
#: up after 60 s too; longer than both, so a timeout here means the pool is gone.
CALL_TIMEOUT_S = 120.0


class DataflowSummary(TypedDict):
    """One entry of `list()`."""

    name: str
    tenant: str
    latency_target_ms: float
    state: str
    executors: list[int]
    submitted_at: float
    ended_at: float | None
    # the service's list with ?detail=true: a live dataflow's figures
    figures: NotRequired[DataflowFigures | None]


class DataflowFigures(TypedDict):
    """A live dataflow's figures in the service's list."""

    weight: float
    p99_ms: float | None
    within_target: float | None  # share of results, None before the first
    events_in_per_s: float
    backlog: int
    results: int


class Transition(TypedDict):
    """One change of a dataflow's state."""

    state: str
    at: float  # epoch seconds
    reason: str | None


class DataflowInfo(TypedDict):
    """`describe()`: the spec, where each activation runs, and the lifecycle."""

    name: str
    spec: dict[str, Any]  # DataflowSpec.to_dict()
    hosts: dict[str, int]  # str(ActivationId) -> executor index
    executors: list[int]
    state: str
    submitted_at: float
    ended_at: float | None
    cause: str | None  # why it failed (or was cancelled by the runtime)
    history: list[Transition]
    exceptions: list[str]  # the last operator failures, kept when it ended
    final: dict[str, Any] | None  # its last statistics (DataflowStats), kept when released
    released: bool  # its parts on the executors were freed (nothing to read any more)
    lost: bool  # it failed because a part of the pool died, not by its own doing
    state_bytes: int  # estimated operator state and unread results, all executors
    state_disk_bytes: int  # operator state on disk (a store backend's files), all executors
    deployment: str  # names this deployment (a redeploy under the same name gets another)
    checkpoints: CheckpointSummary
    recoveries: int  # times it was restored after a failure
    recoveries_in_a_row: int  # since its last completed checkpoint (a poison event?)
    resume_state: str | None  # while recovering: the state it goes back to
    # the admission prediction made when it was submitted (`Runtime.predict`), with
    # "warnings" naming who was predicted to miss
    admission: dict[str, Any] | None
    # its live settings changed while it ran (`update`), oldest first; a record saved
    # before these were kept has none
    changes: NotRequired[list[Change]]


class Change(TypedDict):
    """A live setting changed while the dataflow ran (`update`)."""

    at: float  # epoch seconds
    what: str  # in words: "latency target 50 ms -> 20 ms"


class CheckpointSummary(TypedDict):
    """A dataflow's checkpoints: the last completed, and counts."""

    interval_s: float  # 0: none taken
    last: int | None  # the number of the last completed checkpoint
    last_at: float | None  # when it completed (epoch seconds)
    last_duration_s: float | None  # from its barriers to its manifest
    last_bytes: int  # the size of its parts
    completed: int
    failed: int  # not completed in time, or a part not written
    last_restore: RestoreSummary | None  # its last restore after a failure
    # the last checkpoints, completed or not, oldest first (`CHECKPOINTS_KEPT`); a record
    # saved before these were kept has none
    history: NotRequired[list[CheckpointRecord]]


class CheckpointRecord(TypedDict):
    """One checkpoint of a dataflow, completed or not."""

    id: int
    at: float  # when it completed or was given up (epoch seconds)
    ok: bool
    duration_s: float  # from its barriers to its manifest, or to being given up
    bytes: int  # the size of its parts (0 if not completed)
    parts: int  # one per activation
    incremental_parts: int  # of them, parts that build on earlier ones (a chain)
    executors: dict[str, int]  # executor index -> bytes of its parts
    reason: str | None  # why it did not complete
    # seconds from its first barrier put in to the last part past each phase (None: not
    # known, as for a checkpoint not completed; a record saved before these has none)
    phases: NotRequired[CheckpointPhases | None]


class CheckpointPhases(TypedDict):
    """Where a checkpoint's time went: seconds from its first barrier put in (into a
    source's mailbox) to the last of its parts past each phase."""

    barriers_s: float  # its barrier came (behind the messages before it)
    aligned_s: float  # every input channel's barrier came
    packed_s: float  # its state was packed (in steps, among other work)
    written_s: float  # it was written to storage (off the worker thread)


class RestoreSummary(TypedDict):
    """A restore after a failure, phase by phase (from the dataflow's `recovering`)."""

    checkpoint: int  # restored from
    waited_s: float  # until its executors answered (a dead one restarted by Ray)
    read_s: float  # its parts read, checked and unpacked by its executors
    read_bytes: int
    read_local_bytes: int  # of them, from the executors' local copies (local recovery)
    restored_s: float  # the state put back, the inputs after it queued to replay


class LatencySummary(TypedDict):
    results: int
    target_ms: float
    within_target: float | None  # share of results, None before the first
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    mean_ms: float | None


class DataflowStats(LatencySummary):
    """`stats()`: one dataflow over every executor it runs on."""

    name: str
    tenant: str
    events_in: int
    events_out: int
    backlog: int  # messages queued
    busy_ms: float  # executor time its operators took
    errors: dict[str, int]  # "step:kind" -> records
    failures: list[str]
    held: list[str]  # activations held by flow control
    sources: list[str]
    latency_buckets: list[int]  # non-cumulative, LATENCY_BUCKETS_MS + overflow
    #: instance -> its Kafka reader's or writer's state: per partition offset and lag
    #: (a source), position and rows written (a sink), and the broker's last error
    connectors: dict[str, dict[str, Any]]


class DataflowPart(TypedDict):
    """What one executor knows of one dataflow; `merge_parts` folds them together."""

    executor: int
    latency: dict[str, Any]  # LatencyStats.to_dict()
    events_in: int
    events_out: int
    errors: dict[str, int]
    failures: list[str]
    backlog: int
    busy_ms: float
    held: list[str]
    connectors: NotRequired[dict[str, dict[str, Any]]]  # the executor's, not the core's


class ExecutorStats(TypedDict, total=False):
    """`executor_stats()`: one executor's scheduler counters."""

    executor: int
    node: str  # Ray's node id
    address: str  # the node's address
    activations: int
    backlog: int
    executed: int
    slices: int
    preempted: int
    overdue: int
    busy_ms: float
    overhead_ms: float
    overhead_us_per_message: float
    held: int
    ingest_waiting: int  # clients' ingest calls blocked now by backpressure (a thread each)
    faults: list[str]
    demotions: int  # times a tenant went over its share here and was demoted
    # tenant -> weight, busy_ms, over_share_ms, demoted, demotions (tenant floors on)
    tenants: dict[str, dict[str, Any]]
    pid: int
    version: str  # cameo's version in the executor's process (mixed during an upgrade)
    code: str  # the digest of its code (`codebase.code_id`): two commits differ here
    worker_tid: int  # the worker thread's id in the OS (/proc/PID/task/TID)
    # calls sent to other executors, and the messages and events they carried
    exchange: dict[str, int]
    alive: bool  # False: the executor died (its dataflows failed)
    # Python's cycle collector in the executor's process, per generation: passes, their
    # total and longest time in ms, objects found unreachable; objects frozen out of it
    gc: dict[str, Any]
    cpu_s: float  # the process's CPU time so far, every thread (for a share: two readings)
    rss_bytes: int  # the process's resident memory


class DataflowMetrics(TypedDict):
    """One dataflow in a `PoolSnapshot` (what a Prometheus scrape reads)."""

    name: str
    tenant: str
    target_ms: float
    weight: float
    results: int
    within_target_count: int
    sum_ms: float
    buckets: list[int]
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    events_in: int
    events_out: int
    backlog: int
    errors: dict[str, int]
    checkpoints: CheckpointSummary | None
    recoveries: int
    connectors: dict[str, dict[str, Any]]  # as in DataflowStats


class Pressure(TypedDict):
    """`pressure()`: whether a dataflow can take more events now."""

    full_sinks: list[str]  # sink activations whose result log is full (a reader is behind)
    rooms: dict[str, int]  # sink activation -> events the dataflow may still take for it
    waiting: dict[str, int]  # source activation -> events waiting to run
    limit: int  # events waiting at a source before its writers are held back


class MigrationInfo(TypedDict):
    """A reconfiguration of one keyed step (`scale`, `migrate`, `rebalance`,
    `remove_executor`) and its progress."""

    id: str
    dataflow: str
    step: str
    kind: str  # "scale", "migrate", "move_instance"
    strategy: str  # "all_at_once", "batched", "fluid"; "checkpoint" (a Kafka source)
    state: str  # "running", "done", "failed"
    from_parallelism: int
    to_parallelism: int
    bins_total: int
    bins_moved: int
    epochs_total: int
    epochs_done: int
    bytes_moved: int
    started_at: float
    ended_at: float | None
    duration_s: float
    error: str | None


class PoolSnapshot(TypedDict, total=False):
    """`stats_all()`: every dataflow and executor of the pool in one round."""

    dataflows: list[DataflowMetrics]
    executors: list[ExecutorStats]
    #: (tenant, state) -> dataflows that entered that state since the pool started
    transitions: list[tuple[str, str, int]]
    #: state -> dataflows in it now (the ended ones kept)
    states: dict[str, int]
    #: reconfigurations kept by the controller (running and recent)
    migrations: list[MigrationInfo]
    #: the overload report (`Runtime.predict()`): who misses or will miss, and why
    overload: dict[str, Any]
    #: the latest pool-wide critical-path snapshot's participation (may be missing or
    #: empty): {"by_operator": {"<dataflow>/<step>": share}, "by_executor": {"0": share}}
    critical_path: dict[str, dict[str, float]]


class Cancelled(TypedDict):
    """`cancel()`: the dataflow's state after it, and what it dropped."""

    name: str
    state: str
    messages_dropped: int  # messages queued or in flight that were dropped
    ended_before: bool  # it had ended already: only what it kept was freed


class Updated(TypedDict):
    """`update()`: the live settings in force after it."""

    name: str
    latency_target_ms: float
    weight: float


class ExecutorRemoval(TypedDict, total=False):
    """`remove_executor()`: the removal started ("draining"), or how it ended."""

    executor: int
    state: str  # "draining", "removed", or "kept" (an instance could not move)
    moving: list[str]  # the instances moved off it
    error: str | None  # why it was kept


class NodeDrained(TypedDict):
    """`drain_node()`: the executors retired on a node, and the dataflows restored."""

    node: str
    executors: list[int]
    dataflows: list[str]
    ray_refused: dict[str, str]  # Ray node id -> why Ray did not drain it
    seconds: float


#: Admission control's prediction (`predict`), an explanation of missed targets
#: (`explain`) and the scaling controller's view (`scaling`): nested records whose
#: shapes the service's models describe (`service/protocol.py`).
Prediction = dict[str, Any]
Explanation = dict[str, Any]
ScalingStatus = dict[str, Any]
