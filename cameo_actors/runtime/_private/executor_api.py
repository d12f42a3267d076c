"""The executor's calls, declared once: what the controller and the clients ask of an
executor, with the records that travel as their arguments and answers.

`ExecutorAPI` is implemented by `executor.host.ExecutorHost` (the executor without
Ray), which the Ray actor (`executor/actor.py`) and the in-process executors of the
unit tests both are. Callers name a call by reference to this interface, never by a
string: `gateway.call(executors, ExecutorAPI.cancel, name)` in the controller,
`actor.send(ExecutorAPI.read_results, ...)` in a client (`remote.py`), so a type
checker follows every call across the process boundary.

Imported by every side (controller, client, executor); it imports none of them.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

from cameo_actors.runtime._private.placement import Placement
from cameo_actors.runtime.boundary import (
    DataflowPart,
    ErrorLogOffsets,
    ExecutorStats,
    LogOffsets,
    ResultRow,
)

#: A spec's dict form (`DataflowSpec.to_dict`): how a spec travels, so that executors of
#: another code version (during a rolling upgrade) read it too.
SpecDict = dict[str, Any]
#: Activation -> the paths in storage of its checkpoint part, after those it builds on.
PartChains = dict[str, builtins.list[str]]
#: A restore that rescales a Kafka source (`controller/source_rescale.py`): each new
#: instance -> the old instances whose offsets it takes too, each with whether it runs
#: that one's in-flight messages.
MergedParts = dict[str, builtins.list[tuple[str, bool]]]


@dataclass(frozen=True, slots=True)
class Placed:
    """A dataflow as the controller places it on the executors: what `deploy`,
    `restore`, `add_instances` and `add_lessees` take.

    Attributes:
        spec: its spec (`SpecDict`).
        placement: where each of its activations runs.
        deployment: names this deployment (a redeploy under the same name gets another).
        generation: times it was restored after a failure (a restored source counts its
            calls anew).
        merged: a restore that rescales a Kafka source (`MergedParts`).
    """

    spec: SpecDict
    placement: Placement
    deployment: str = ""
    generation: int = 0
    merged: MergedParts = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec["name"])


@dataclass(frozen=True, slots=True)
class Incarnation:
    """Which run of an executor's process answers (a restart changes it); `process`: its
    process (`process_watch.identity`, "" where unknown), which a controller on the same
    host watches to know of its death at once. An executor of an older release answers
    without it (read it with `getattr`)."""

    index: int
    incarnation: str
    process: str = ""


@dataclass(frozen=True, slots=True)
class WrittenPart:
    """One activation's checkpoint part, written to storage by its executor.

    Attributes:
        path: where in storage.
        positions: a source's positions (client -> last call applied) at its barrier.
        nbytes: its size.
        bases: the stored parts it builds on (an incremental part's chain).
        times: when (epoch ms) it passed each phase (`checkpoint.parts.PHASES`); an
            executor of an older release sends none.
    """

    path: str
    positions: dict[str, int]
    nbytes: int
    bases: builtins.list[str]
    times: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Fetched:
    """The checkpoint parts an executor read ahead of a restore: bytes in all, and how
    many of them came from its local copies."""

    read_bytes: int
    local_bytes: int


@dataclass(frozen=True, slots=True)
class SourcePressure:
    """A dataflow's backpressure on one executor, read from counters (never waiting for
    the worker thread).

    Attributes:
        waiting: source activation -> events waiting there.
        inside: events queued at its other steps here, before their sinks.
        rooms: sink activation -> events its result log can still take (`Egress.room`).
    """

    waiting: dict[str, int]
    inside: int
    rooms: dict[str, int]


@dataclass(frozen=True, slots=True)
class Traces:
    """The activities an executor traced since it was last asked, and how many were lost
    before anyone collected them."""

    activities: builtins.list[tuple[Any, ...]]
    lost: int


@dataclass(frozen=True, slots=True)
class StorageMarks:
    """What one executor found of the marks a check of the pool's storage left: its
    node's address, and the storage in which it did not find them."""

    address: str
    missing: builtins.list[str]


class EpochProgress(TypedDict):
    """One instance of a keyed step in a migration: the last routing version it finished,
    and the bins and bytes it gave away."""

    done: int
    bins_given: int
    bytes_sent: int


class DataflowWork(TypedDict):
    """What an executor still has to do for one dataflow (see `Reports.unsettled`):
    messages queued in its mailboxes, ingest calls parked until an earlier one came,
    instances in a migration epoch, activations held (credits, a full result log), the
    last batch sent to each other executor with its messages, and result rows waiting
    for a checkpoint before a reader sees them."""

    queued: int
    parked: int
    moving: int
    held: builtins.list[str]
    sent: dict[int, int]
    awaiting_checkpoint: int


class Unsettled(TypedDict):
    """An executor's `DataflowWork` per dataflow, and the batches it applied per sender."""

    dataflows: dict[str, DataflowWork]
    applied: dict[int, int]


class HostCpu(TypedDict):
    """One executor's CPU and its host's, cumulative (ms), read at `at_s` (monotonic)."""

    at_s: float
    #: the executor process's CPU, every thread
    process_ms: float
    #: its worker thread's CPU
    worker_ms: float
    #: which machine: executors with the same host share its cores (network namespaces
    #: on one machine share them too: the kernel's boot id names it)
    host: str
    #: the cores this process may run on
    cores: int
    #: the machine's CPU busy (not idle, not waiting for I/O), every process; None: unknown
    host_busy_ms: float | None


class ExecutorUsage(TypedDict):
    """`usage`: what each dataflow uses on one executor (bytes of state and unread
    outputs, events in, busy ms, CPU ms charged to it and the part of it for its calls,
    results and those within target; counters since it came there), and the CPU of
    the executor and its host."""

    dataflows: dict[str, dict[str, float]]
    cpu: HostCpu


class ExecutorAPI(Protocol):
    """The calls an executor answers. Ray runs each on one of its threads: those marked
    "worker thread" wait for the executor's worker thread (after the work handed to it
    before); the others answer from counters or storage, however busy it is."""

    # -- the pool ------------------------------------------------------------------------
    def ping(self) -> Incarnation:
        """Liveness and incarnation."""

    def set_peers(self, peers: builtins.list[Any], incarnations: dict[int, str]) -> str:
        """The pool's executors (their handles, by index) and incarnations; returns this
        one's incarnation."""

    def relink(self, peer: int, handle: Any, incarnation: str) -> None:
        """Executor `peer` was restarted (as `incarnation`): its link starts again."""

    def marks_missing(self, token: str) -> StorageMarks:
        """Whether this node sees the marks `token` left in the pool's storage."""

    def stop(self) -> None:
        """End the worker thread (the pool is shutting down)."""

    # -- data ----------------------------------------------------------------------------
    def deliver(self, blob: bytes) -> None:
        """A batch from another executor (`exchange/wire.py`)."""

    def ingest(self, client: str, seq: int, target: str, blob: bytes) -> int:
        """Call `seq` of `client` to source activation `target`: written to its ingress
        log before it returns; blocks while the source is full (backpressure). Returns
        the events waiting at the source after it. Raises `NotHosted` while the source is
        not here (being restored, or ended): the client sends it again."""

    def pressure(self, dataflow: str) -> SourcePressure:
        """The dataflow's backpressure here."""

    # -- a dataflow's life (worker thread) -----------------------------------------------
    def deploy(self, placed: Placed) -> builtins.list[str]:
        """Host this executor's activations of a new dataflow; their ids."""

    def cancel(self, dataflow: str) -> int:
        """Free the dataflow's parts here; the messages dropped."""

    def update(self, dataflow: str, latency_target_ms: float | None,
               weight: float | None) -> None:
        """New live settings (None: unchanged)."""

    def ended(self, dataflow: str) -> bool:
        """Every activation here saw the end of its inputs and ran what came before it."""

    # -- checkpoints and recovery --------------------------------------------------------
    def checkpoint(self, dataflow: str, ckpt: int) -> int:
        """Start checkpoint `ckpt` at the dataflow's sources here; barriers sent
        (worker thread)."""

    def await_checkpoint(self, dataflow: str, ckpt: int, ids: builtins.list[str],
                         timeout_s: float) -> dict[str, WrittenPart]:
        """The parts of checkpoint `ckpt` written here once all of `ids` are (or after
        `timeout_s`)."""

    def checkpointed(self, dataflow: str, ckpt: int,
                     positions: dict[str, dict[str, int]]) -> None:
        """Checkpoint `ckpt` completed: results before it become readable, ingress logs
        are trimmed, its parts are what the next ones build on."""

    def fetch(self, dataflow: str, placement: Placement, parts: PartChains,
              merged: MergedParts | None = None) -> Fetched:
        """Read and check this executor's parts of a checkpoint ahead of `restore` (and
        those of the old instances its new ones merge: `Placed.merged`). Raises
        `CheckpointDamaged` if a part is missing or damaged."""

    def restore(self, placed: Placed, parts: PartChains) -> builtins.list[str]:
        """Host the dataflow again from a checkpoint, held until `resume`; the ids."""

    def resume(self, dataflow: str) -> None:
        """A restored dataflow runs (worker thread)."""

    # -- changes of the physical plan (worker thread) ------------------------------------
    def add_instances(self, placed: Placed, new: builtins.list[str]) -> builtins.list[str]:
        """Host new instances of a keyed step (a scale-out); their ids here."""

    def add_lessees(self, placed: Placed, step: str,
                    new: builtins.list[str]) -> builtins.list[str]:
        """Host lessees of a window step (Dirigo); their ids here."""

    def unlease(self, dataflow: str, step: str, ids: builtins.list[str]) -> int:
        """Upstreams here end their streams to the lessees `ids`; how many did."""

    def lessees_ended(self, dataflow: str, ids: builtins.list[str], timeout_s: float) -> bool:
        """Whether the lessees `ids` here sent their last partials and ended (waited for
        up to `timeout_s`)."""

    def drop_lessees(self, dataflow: str, ids: builtins.list[str]) -> builtins.list[str]:
        """Unhost ended lessees; those dropped."""

    def prepare(self, dataflow: str, step: str, version: int,
                moves: dict[int, tuple[int, int]]) -> None:
        """The instances of `step` here learn which bins of routing `version` move
        (bin -> (from instance, to instance))."""

    def reroute(self, dataflow: str, step: str, version: int, owners: builtins.list[int],
                instances: builtins.list[int]) -> int:
        """Upstreams of `step` here switch to routing `version` (bin owners), sending the
        epoch's marker in-band; how many switched."""

    def retire(self, dataflow: str, ids: builtins.list[str]) -> builtins.list[str]:
        """Unhost instances that own no bins any more; those retired."""

    def epochs(self, dataflow: str, step: str) -> dict[str, EpochProgress]:
        """Each instance of `step` here: the routing version it finished, what it gave."""

    def await_epoch(self, dataflow: str, step: str, version: int,
                    timeout_s: float) -> dict[str, EpochProgress]:
        """`epochs` once every instance of `step` here finished `version` (or after
        `timeout_s`)."""

    # -- outputs and input positions (worker thread) -------------------------------------
    def read_results(self, dataflow: str, sink_activation: str, start: int,
                     end: int | None = None) -> builtins.list[ResultRow]:
        """Rows [start, end) of a sink activation's result log."""

    def read_result_columns(self, dataflow: str, sink_activation: str, start: int,
                            end: int | None = None) -> Any:
        """The same rows as one Arrow table (`ResultsNotColumnar` if they do not form
        columns)."""

    def commit_results(self, dataflow: str, sink_activation: str, offset: int) -> None:
        """Forget the rows below `offset` (a reader persisted them)."""

    def result_offsets(self, dataflow: str) -> dict[str, LogOffsets]:
        """Each sink activation here: (committed, end) of its result log."""

    def await_results(self, dataflow: str, after: dict[str, int],
                      timeout_s: float) -> dict[str, LogOffsets]:
        """`result_offsets` once a sink log here has readable rows past `after` (sink
        activation -> a reader's next offset), or after `timeout_s`. Watched from the
        caller's thread (the "watch" group), not the worker's."""

    def read_errors(self, dataflow: str, start: int,
                    end: int | None = None) -> tuple[int, builtins.list[ResultRow]]:
        """(offset of the first row, rows) of the dataflow's error log here."""

    def commit_errors(self, dataflow: str, offset: int) -> None:
        """Forget the error log's rows below `offset`."""

    def error_offsets(self, dataflow: str) -> ErrorLogOffsets:
        """(committed, end, dropped unread) of the dataflow's error log here."""

    def error_records(self, dataflow: str, limit: int = 100) -> builtins.list[dict[str, Any]]:
        """The last `limit` records of the dataflow's error output here."""

    def mark_input_batch(self, dataflow: str, key: str, batch_id: int) -> None:
        """Every event of a Spark input batch ("<source>@<query>") was enqueued here."""

    def input_batches(self, dataflow: str) -> dict[str, int]:
        """"<source>@<query>" -> the last input batch marked here."""

    # -- reports (worker thread, but `traces`) -------------------------------------------
    def dataflow_stats(self, dataflow: str) -> DataflowPart:
        """This executor's part of the dataflow's statistics."""

    def executor_stats(self) -> ExecutorStats:
        """The executor's statistics, process and code version."""

    def usage(self) -> ExecutorUsage:
        """Each dataflow: what it uses here (bytes, events, executor time and CPU,
        results); the CPU of the executor and its host."""

    def counters(self) -> dict[str, dict[str, builtins.list[float]]]:
        """Each dataflow's activations: DS2's counters since they came here."""

    def unsettled(self, names: builtins.list[str] | None = None) -> Unsettled:
        """What is still to do here for the dataflows `names` (None: every one)."""

    def traces(self) -> Traces:
        """The activities traced since the last call (`executor/tracing.py`)."""
