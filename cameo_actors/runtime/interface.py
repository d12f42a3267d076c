"""The runtime's operations, declared once: `ControlAPI` (the pool's control plane),
`DataAPI` (events in, outputs out) and `RuntimeAPI` (both: what a `Runtime` handle is,
and what the service and the Spark tier hold).

Who implements what:

- the controller serves `ControlAPI` (`_private/controller/plane.py`): each operation
  by the manager whose method is marked `@serves(ControlAPI.<operation>)`, with the
  same signature (a type checker holds the two against each other);
- a client is a `ControlAPI` whose operations go to the controller: each operation
  declared here (`@operation`) is passed, by its name and arguments, to the client's
  `_forward`, which a `Runtime` makes a Ray call of (`_private/remote.py`);
- the service holds a `RuntimeAPI`: a `Runtime` in `cameo serve`, an in-memory fake in
  its unit tests (which does what it does itself, in place of `_forward`).

Adding an operation touches this interface, the manager that does it (`@serves`), and,
to offer it over HTTP, the service's operation table.

Pure: no Ray, so the service's unit tests and fakes use it too.
"""

# The operations' bodies are declarations: `@operation` gives each its body (a call of
# `_forward`), so a type checker must not ask them for a return statement.
# mypy: disable-error-code="empty-body"

from __future__ import annotations

import builtins
import functools
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.base import ErrorRecord, Event
from cameo_actors.runtime.boundary import (
    Cancelled,
    DataflowInfo,
    DataflowStats,
    DataflowSummary,
    ErrorLogOffsets,
    ExecutorRemoval,
    ExecutorStats,
    Explanation,
    LogOffsets,
    MigrationInfo,
    NodeDrained,
    PoolSnapshot,
    Prediction,
    Pressure,
    Rejected,
    ResultRow,
    ScalingStatus,
    Updated,
)

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")

#: How long a reconfiguration called with `wait=True` is waited for by default.
WAIT_TIMEOUT_S = 120.0
#: Events per ingest call: a Ray call costs about 1 ms, so batches, not single events.
DEFAULT_BATCH = 2_000


class HasSpec(Protocol):
    """A builder's `Dataflow` (anything with the spec it built)."""

    @property
    def spec(self) -> DataflowSpec: ...


#: What `deploy` and `predict` take: a builder's `Dataflow`, a `DataflowSpec`, or a spec's
#: dict form (validated where it arrives).
Deployable = HasSpec | DataflowSpec | Mapping[str, Any]


def spec_of(dataflow: Deployable) -> DataflowSpec:
    """The spec of what `deploy` was given; a dict is validated (`SpecError`)."""
    if isinstance(dataflow, DataflowSpec):
        return dataflow
    if isinstance(dataflow, Mapping):
        return DataflowSpec.from_dict(dict(dataflow))
    spec = getattr(dataflow, "spec", None)
    if not isinstance(spec, DataflowSpec):
        raise TypeError(f"deploy: expected a Dataflow, DataflowSpec or spec dict, got "
                        f"{type(dataflow).__name__}")
    return spec


def serves(operation: Callable[Concatenate[Any, P], R]
           ) -> Callable[[Callable[Concatenate[S, P], R]], Callable[Concatenate[S, P], R]]:
    """Marks a manager's method as the one that does `operation` (a method of an
    interface here, or of the controller's own `ControllerAPI`); the method must take
    the same parameters and answer the same type. The controller routes the operation's
    calls to it (`controller/plane.py`)."""

    def mark(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
        method.serves = operation  # type: ignore[attr-defined]  # read by the controller
        return method

    return mark


def operation(declared: Callable[P, R]) -> Callable[P, R]:
    """Declares an operation of a client interface: a client's call of it is handed to
    the client's `_forward` with its name and arguments (a client may also define the
    operation itself, to add to it)."""
    name = declared.__name__

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._forward(name, args, kwargs)

    functools.update_wrapper(forward, declared)
    forward.operation = True  # type: ignore[attr-defined]  # what `operation_names` finds
    return forward  # type: ignore[return-value]  # its caller sees the declared signature


def one_way(declared: Callable[P, None]) -> Callable[P, None]:
    """Marks an operation whose caller does not wait for it (a report, fire and forget)."""
    declared.one_way = True  # type: ignore[attr-defined]  # read by a client's `_forward`
    return declared


def operation_names(interface: type) -> builtins.list[str]:
    """The operations an interface declares (`@operation`), its bases' included."""
    return sorted({name for cls in interface.__mro__ for name, value in vars(cls).items()
                   if getattr(value, "operation", False)})


class Interface:
    """An interface of operations (`@operation`): a client that implements it hands each
    operation it does not define itself to its `_forward`."""

    def _forward(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Do operation `name` with these arguments (a client's transport)."""
        raise NotImplementedError(f"{type(self).__name__} does not do {name!r}; fix: define "
                                  f"{name} on it, or a _forward that sends it on")


class ControlAPI(Interface):
    """The pool's control operations: dataflows, reconfiguration, scaling."""

    # -- dataflows ---------------------------------------------------------------------------
    @operation
    def deploy(self, dataflow: Deployable) -> str:
        """Validate and start a dataflow; returns its name. A bad spec changes nothing.

        Raises:
            SpecError: the spec is invalid, or asks more than the pool allows.
            DataflowExists: a live dataflow has that name.
            AdmissionRefused: the pool would not meet every target with it admitted.
        """

    @operation
    def predict(self, dataflow: Deployable | None = None) -> Prediction:
        """Admission control's prediction: whether every running dataflow, and
        `dataflow` as if it were admitted, will meet its target at the measured rates and
        costs; who misses, by how much, which tenants' load causes it, and what would be
        needed. Without `dataflow`: the pool's overload report now."""

    @operation
    def cancel(self, name: str) -> Cancelled:
        """Stop a dataflow and free its parts. Cancelling an ended one frees what it kept
        (a finished one's results) and changes nothing else."""

    @operation
    def update(self, name: str, *, latency_target_ms: float | None = None,
               weight: float | None = None) -> Updated:
        """Change a live dataflow's latency target or tenant weight (None: unchanged)."""

    @operation
    def list(self, states: Sequence[str] | None = None) -> builtins.list[DataflowSummary]:
        """The dataflows kept by the pool, live and ended (or only those in `states`)."""

    @operation
    def describe(self, name: str) -> DataflowInfo:
        """Spec, placement and lifecycle: what a client needs to push to and read from it."""

    @operation
    def explain(self, name: str | None = None, *, last_s: float = 60.0) -> Explanation:
        """Why `name` (None: the pool) was late: its share of results within target and
        the ranked parts of its results' critical paths over the last `last_s` seconds
        (docs/runtime.md, "Critical paths")."""

    @operation
    def executor_stats(self) -> builtins.list[ExecutorStats]:
        """Each executor's statistics; one gone or silent says so."""

    # -- live reconfiguration ----------------------------------------------------------------
    @operation
    def scale(self, name: str, step: str, parallelism: int, *, strategy: str = "batched",
              batch_bins: int | None = None, wait: bool = False,
              timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        """Give keyed step `step` `parallelism` instances while the dataflow runs: bins
        move epoch by epoch, `strategy` "all_at_once", "batched" (`batch_bins` bins per
        epoch, default an eighth) or "fluid" (one bin per epoch). Returns once started,
        or with `wait` once done (up to `timeout_s`). A Kafka source rescales through a
        checkpoint instead (its record's strategy "checkpoint"): the dataflow is
        checkpointed and restored from it with the source's new instances, each reading
        its share of the partitions on from the offsets there; done when this returns.

        Raises:
            ReconfigError: not a keyed step, a parallelism out of range, an unknown
                strategy; nothing changed.
            ReconfigConflict: a migration of the dataflow is under way.
            ReconfigFailed: with `wait`, the migration failed (the dataflow goes on).
            TimeoutError: with `wait`, it was still under way after `timeout_s`.
        """

    @operation
    def migrate(self, name: str, step: str, *, bins: Sequence[int] | None = None,
                to_instance: int | None = None, instance: int | None = None,
                to_executor: int | None = None, strategy: str = "batched",
                batch_bins: int | None = None, wait: bool = False,
                timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        """Move `bins` of keyed step `step` to its instance `to_instance`, or move its
        `instance` (every bin it owns) to executor `to_executor`. Like `scale`."""

    @operation
    def lease(self, name: str, step: str, lessees: int, *, wait: bool = False,
              timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        """Give keyed window `step` `lessees` lessee instances (Dirigo) on other
        executors, which take events whose owner has more waiting and fold them into
        partials merged before its windows fire; 0 gives them back. Like `scale`."""

    @operation
    def migrations(self, name: str | None = None) -> builtins.list[MigrationInfo]:
        """Reconfigurations kept by the pool (running and recent), or those of `name`."""

    @operation
    def wait_migration(self, migration_id: str,
                       timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        """Block until a migration is done or failed (or `timeout_s` passed); its record."""

    @operation
    def rebalance(self, *, strategy: str = "batched", wait: bool = False,
                  timeout_s: float = WAIT_TIMEOUT_S) -> builtins.list[MigrationInfo]:
        """Move keyed instances from the busiest executors (busy time over a second) to
        the least busy, at most one per dataflow; the migrations started (with `wait`:
        ended)."""

    @operation
    def add_executors(self, n: int = 1) -> builtins.list[int]:
        """Add `n` executors to the running pool; their indices, once they answer and are
        linked to the others (nothing moves there by itself: `rebalance`, `migrate`)."""

    @operation
    def remove_executor(self, index: int, *, strategy: str = "batched", wait: bool = False,
                        timeout_s: float = WAIT_TIMEOUT_S) -> ExecutorRemoval:
        """Move every keyed instance off executor `index`, then stop it: in the
        background, or with `wait` until it is removed.

        Raises:
            ReconfigError: an unknown executor, or one hosting what cannot move.
            ReconfigConflict: the last executor, or a migration of its dataflows under way.
            ReconfigFailed: with `wait`, an instance could not move (the executor stays).
            TimeoutError: with `wait`, still draining after `timeout_s`.
        """

    @operation
    def drain_node(self, node: str, *, timeout_s: float | None = None) -> NodeDrained:
        """Take the executors on `node` (its address, or its Ray node id or the first 8+
        hex digits of it) out of the pool before the node is removed: each dataflow there
        is checkpointed and restored on the executors left, then those executors stop.
        `timeout_s`: how long the caller waits (None: the pool's recovery timeout).

        Raises:
            ReconfigError: no live executor is on that node.
            ReconfigConflict: no executor would be left, or a dataflow there takes no
                checkpoints (nothing changed).
        """

    # -- self-scaling ------------------------------------------------------------------------
    @operation
    def scaling(self, name: str | None = None) -> ScalingStatus:
        """The scaling controller's view: policy and bounds, executors there are and
        wanted, each dataflow's steps (parallelism, rates, busy share, backlog), the last
        decisions with their reasons, and failed actions."""

    @operation
    def set_scaling(self, name: str, settings: dict[str, Any] | None = None, *,
                    pin: dict[str, int | None] | None = None) -> ScalingStatus:
        """Give dataflow `name` its own scaling settings (None: the pool's again) and pin
        steps to a parallelism (None unpins). Raises `ScalingConfigError`."""

    @operation
    @one_way
    def report_backlog(self, name: str, source: str, events: int) -> None:
        """A writer's events for `source` not pushed yet (its lag): the source's backlog,
        for the scaling controller. Fire and forget."""


class DataAPI(Protocol):
    """Events into a dataflow's sources, and its outputs out: calls a handle makes to the
    executors hosting the dataflow (following it across recoveries)."""

    # -- input -------------------------------------------------------------------------------
    def push(self, name: str, source: str, events: Sequence[Event] | Any, *,
             batch_size: int = DEFAULT_BATCH) -> builtins.list[Rejected]:
        """Send events (dicts, or a `pyarrow` RecordBatch or Table) to a source; blocks
        while it has too many waiting. Returns the events refused at the edge."""

    def watermark(self, name: str, source: str, ts: float) -> None:
        """No event older than `ts` follows on `source`."""

    def close(self, name: str) -> None:
        """End every source: all windows fire, it drains, then it is finished."""

    def flush(self) -> None:
        """Wait until every pushed batch was accepted (in its source's ingress log)."""

    def pressure(self, name: str) -> Pressure:
        """Whether the dataflow can take more events now."""

    def wait_idle(self, timeout_s: float = 60.0, *,
                  dataflows: Sequence[str] | None = None) -> None:
        """Block until every event pushed so far was processed and its results readable."""

    def mark_input_batch(self, name: str, source: str, batch_id: int,
                         query: str = "") -> None:
        """Every event of Spark input batch `batch_id` was pushed before this call."""

    def input_batches(self, name: str) -> dict[str, int]:
        """"<source>@<query>" -> the last input batch marked."""

    # -- outputs -----------------------------------------------------------------------------
    def stats(self, name: str) -> DataflowStats:
        """Latency percentiles, share within target, counters, backlog, errors."""

    def errors(self, name: str, limit: int = 100) -> builtins.list[ErrorRecord]:
        """Recent records of the dataflow's error output."""

    def result_offsets(self, name: str, sink: str | None = None) -> dict[str, LogOffsets]:
        """Sink activation -> (committed, end) of its result log."""

    def await_results(self, name: str, sink: str | None = None,
                      after: dict[str, int] | None = None,
                      timeout_s: float = 1.0) -> dict[str, LogOffsets]:
        """`result_offsets` once there are readable rows past `after` (sink activation
        -> next offset), or after `timeout_s` (at most 5 s)."""

    def read_results(self, name: str, sink_activation: str, start: int,
                     end: int | None = None) -> builtins.list[ResultRow]:
        """Rows [start, end) of one sink activation's result log, without committing."""

    def read_result_columns(self, name: str, sink_activation: str, start: int,
                            end: int | None = None) -> Any:
        """The same rows as one Arrow table (`ResultsNotColumnar` if they do not form
        columns)."""

    def commit_results(self, name: str, sink_activation: str, offset: int) -> None:
        """Let the runtime forget rows below `offset` (a reader persisted them)."""

    def error_offsets(self, name: str) -> dict[str, ErrorLogOffsets]:
        """Error log id -> (committed, end, dropped unread)."""

    def read_errors(self, name: str, log: str, start: int,
                    end: int | None = None) -> tuple[int, builtins.list[ResultRow]]:
        """(offset of the first row, rows) of one error log."""

    def commit_errors(self, name: str, log: str, offset: int) -> None:
        """Let the runtime forget an error log's rows below `offset`."""


class RuntimeAPI(ControlAPI, DataAPI):
    """A runtime as its callers hold it: a `Runtime` handle, or a test's fake."""

    #: the pool's name (other processes join it by name: `Runtime.connect(pool=...)`)
    pool: str

    @property
    @abstractmethod
    def address(self) -> str:
        """Where other processes join the runtime's cluster."""

    @abstractmethod
    def describe(self, name: str, *, refresh: bool = False) -> DataflowInfo:
        """The dataflow's record; a handle may answer from what it learnt a moment ago
        (its pushes cost no extra call), `refresh` asks the controller now."""

    def stats_all(self) -> PoolSnapshot:
        """Every dataflow and executor of the pool in one round of calls (a metrics
        scrape, the console's list and hotspots)."""
        raise NotImplementedError(f"{type(self).__name__} does not do 'stats_all'")

    @abstractmethod
    def handle(self, client: str | None = None) -> RuntimeAPI:
        """Another handle on the same pool, with its own ingest order (`client` names its
        calls, so that calls sent again are recognised)."""
