"""Runtime configuration: typed, frozen, read once at the edge."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

from cameo_actors.operators.state_store import BACKENDS, StateBackend, backend_folder
from cameo_actors.operators.stateless import DEFAULT_MAX_STRING_CHARS
from cameo_actors.runtime.boundary import MAX_BINS
from cameo_actors.scaling import settings_from_dict

ISOLATION_MODES = ("shared", "isolated")
#: How a shared pool places a new dataflow (`placement.place`).
PLACEMENTS = ("targets_apart", "even")
ADMISSION_MODES = ("admit", "warn", "refuse")
DELIVERY_MODES = ("exactly_once", "at_least_once")


@dataclass(frozen=True)
class RuntimeConfig:
    """How the executor pool runs.

    Attributes:
        num_executors: executor actors in the pool; None = one per CPU of the Ray cluster.
        policy: scheduling policy of every executor ("cameo", "fifo", "edf", "sjf",
            "fair_share", "token_bucket", or one registered by the user).
        policy_params: keyword arguments for the policy.
        isolation: "shared" (all dataflows share the pool) or "isolated" (each
            dataflow gets dedicated executors, the slot-per-job style).
        executors_per_dataflow: in isolated mode, executors each dataflow gets.
        placement: in shared mode, where a new dataflow starts: "targets_apart" (the
            executor hosting the loosest targets among those within one dataflow's
            instances of the least loaded) or "even" (the least loaded).
        quantum_ms: the longest an activation runs before yielding to others.
        tenant_floor: guarantee each tenant its weighted share of every executor's time
            under overload (the dataflows' `scheduling.weight`; a tenant's weight is its
            dataflows' largest); within the spare capacity the policy decides as before.
        floor_slack_ms: executor time a tenant may take above its share while others wait
            before its work is demoted behind theirs.
        admission: what a submit predicted to make some dataflow miss its target gets:
            "admit" (the prediction is only reported), "warn" (admitted, with warnings)
            or "refuse" (refused with the reasons).
        admission_headroom: the share of the pool's executor time a prediction plans to
            use; above it, targets are at risk.
        credit_events: events in flight per channel before the sender is held.
        ingress_events: events waiting at a source before ingest blocks (backpressure).
        max_message_events: ingress batches are cut into messages of at most this many
            events: the runtime preempts at message boundaries, so this bounds how long
            one bulk message can keep urgent work waiting.
        result_capacity: results kept uncommitted per sink before the sink is held.
        allowed_modules: module prefixes user functions may come from; None = any.
        executor_cpus: CPUs each executor reserves in Ray.
        switch_interval_s: the interpreter's thread switch interval inside executors;
            short, so that Ray's threads hand urgent messages in promptly.
        max_windows_per_event: the most windows one event may open (a sliding window's
            size / slide); a spec asking more is refused at deploy.
        state_budget_bytes: a dataflow's operator state and unread results, estimated
            over its executors, when its spec sets no `limits.state_bytes`; over its
            budget a dataflow fails and its state is freed.
        max_state_bytes: the largest `limits.state_bytes` a spec may ask for.
        state_disk_budget_bytes: a dataflow's operator state on disk (the `rocksdb`
            backend's table files, over its executors) when its spec sets no
            `limits.state_disk_bytes`; over it a dataflow fails as over its memory budget.
        max_state_disk_bytes: the largest `limits.state_disk_bytes` a spec may ask for.
        ended_retention_s: how long an ended dataflow (finished, cancelled, failed) stays
            listed with its state and cause; a finished one keeps its results as long.
        ended_kept: at most this many ended dataflows are kept (the oldest go first).
        monitor_interval_s: how often the controller checks finishing dataflows, state
            budgets and retention (executors' liveness: every 0.2 s, or this if shorter).
        max_string_chars: the longest text a source's `str` field may hold, in characters;
            a longer one sends its event to the error output (run_local uses the same default).
        bins: key bins of every keyed step (a power of two): the unit of scaling and
            migration; at most this many instances per keyed step.
        epoch_timeout_s: how long one epoch of a migration may take before the
            migration is reported failed.
        checkpoint_interval_s: how often each dataflow's state is checkpointed, unless its
            spec says otherwise (`fault_tolerance.checkpoint_interval_ms`); 0 turns
            checkpoints off (a dataflow then fails with an executor instead of recovering).
        checkpoint_url: where checkpoints and the controller's registry go: a folder, or
            any URL `pyarrow.fs` understands (s3://, gs://, hdfs://); None: a folder
            `checkpoints/<pool>` under the run folder.
        checkpoints_kept: completed checkpoints kept per dataflow (the older are deleted,
            but for the parts a kept one builds on).
        incremental_checkpoints: a window's part of a checkpoint holds only the state
            changed since the one before, on top of the parts before it, until those
            changes add up to half of the last full part (then a full one again); False:
            every part is full.
        delivery: "exactly_once" (results readable once the checkpoint after them
            completed) or "at_least_once" (readable at once), unless a spec says otherwise.
        ingress_log_dir: the folder of the sources' write-ahead logs (every accepted push
            is written there before it is acknowledged); on a cluster, a folder every node
            mounts. None: `ingress/<pool>` under the run folder.
        ingress_fsync: fsync each accepted push (survives the loss of the machine, not
            only of a process; costs a disk flush per push).
        local_recovery: each executor also keeps a copy of the checkpoint parts it writes
            on its node (`local_recovery_dir`), which it reads first when it is restarted
            there. None: on when the checkpoint storage is not a local folder (a copy of a
            local folder gains nothing).
        local_recovery_dir: where, on each node. None: `local/<pool>` under the run folder.
        gc_freeze: in each executor, what a full pass of Python's cycle collector found
            alive, with no garbage among it, is frozen out of later passes (`gc.freeze`):
            long-lived state is walked once, not again at every full pass (0.6 s each on
            the worker thread at 100 MB of state). False: Python's default.
        recovery_timeout_s: how long a restarted executor may take to come back, and how
            long a client's call waits for a recovering dataflow.
        standby_executors: empty executors the pool keeps warm besides `num_executors`
            (they take no dataflow): a lost executor's dataflows are restored on one at
            once, without waiting for the platform to start the lost process again (about
            a second here), and the lost one, once restarted, is the next spare.
        replace_lost_after_s: how long recovery waits for Ray to restart a lost executor
            (on a node with room) before it restores that executor's dataflows on the
            executors left instead and retires it (its node died and no other has room).
        max_recoveries: recoveries of one dataflow in a row without a checkpoint completing
            in between before it is failed (a poison event that crashes its executor).
        trace_sample: the share of messages from clients whose story is traced, with
            everything they cause downstream (`cameo explain`, docs/runtime.md, "Critical paths");
            0 turns tracing off, 1 traces every message.
        trace_capacity: activities each executor keeps for the controller to collect (a
            ring: the oldest go first when it collects too slowly).
        trace_snapshot_s: the interval of one program activity graph (SnailTrail's snapshot).
        trace_history_s: how far back the controller keeps activities to follow a result's
            path (results whose latency is longer are explained up to there).
        trace_history_activities: the most activities the controller keeps (the oldest go
            first): bounds its memory at high rates, whatever `trace_history_s` says.
        trace_snapshots_kept: analysed snapshots kept for `explain --last`.
        trace_watch_s: how long after the last read (`explain`, the web page, a metrics
            scrape) snapshots are still analysed as they come; unread, only the executors
            trace, and the first read analyses the last `trace_history_s`.
        trace_niceness: the OS priority (Linux nice, 0-19) of the controller's analysis
            thread: above 0 it takes the CPU the executors leave, so that explaining the
            pool costs its dataflows little; 0 keeps the controller's priority.
        scaling: the scaling controller's settings (`cameo_actors.scaling.settings_from_dict`):
            its policy ("off", the default, "ds2" or "threshold"), the pool's bounds
            (min/max executors, max parallelism per step), warm-up and scale-down
            windows, lessees. Dataflows may have their own (`Runtime.set_scaling`).
        exchange_linger_ms: the longest a message for another executor waits to share one
            call with others while this executor's worker is busy (an idle worker sends
            at once); a message waits at most a twentieth of what is left of its
            latency target, so a tight target's messages go sooner.
        exchange_batch_events: a link's gathered events that make it send at once (at
            most a quarter of `credit_events`, so a sender is never held on its own
            unsent events).
        state_backend: where keyed steps keep the state of aligned (tumbling, sliding)
            windows, session windows, windowed and interval joins and keyed processes
            (their states and timers): "memory" (Python objects on the executor's heap)
            or "rocksdb" (an embedded store per activation, a bounded cache of hot
            entries in memory; checkpoints are the store's own files, a restore opens
            them). Lessees' partials stay in memory in both (docs/runtime.md, "State").
        store_dir: where the executors' stores live (a local disk of each node; a store
            is deleted with its activation). None: `cameo-state` in the system's temp folder.
        state_cache_entries: decoded entries each store keeps in memory; beyond, the
            oldest are written back and dropped, a few after each batch.
        service_capacity_eps: a simulated executor speed for benchmarks on one machine:
            each instance of a keyed step processes at most this many events per second
            (it sleeps the rest of each event's share), so that an added executor adds
            capacity as on a cluster. None: as fast as the machine.
    """

    num_executors: int | None = None
    policy: str = "cameo"
    policy_params: dict[str, Any] = field(default_factory=dict)
    isolation: str = "shared"
    executors_per_dataflow: int = 1
    placement: str = "targets_apart"
    quantum_ms: float = 5.0
    tenant_floor: bool = True
    floor_slack_ms: float = 50.0
    admission: str = "warn"
    admission_headroom: float = 0.9
    credit_events: int = 20_000
    ingress_events: int = 20_000
    max_message_events: int = 500
    result_capacity: int = 1_000_000
    allowed_modules: tuple[str, ...] | None = None
    executor_cpus: float = 1.0
    switch_interval_s: float = 0.0005
    max_windows_per_event: int = 1_000
    state_budget_bytes: int = 512 * 1024 * 1024
    max_state_bytes: int = 4 * 1024 * 1024 * 1024
    state_disk_budget_bytes: int = 16 * 1024 * 1024 * 1024
    max_state_disk_bytes: int = 256 * 1024 * 1024 * 1024
    ended_retention_s: float = 3600.0
    ended_kept: int = 1_000
    monitor_interval_s: float = 1.0
    max_string_chars: int = DEFAULT_MAX_STRING_CHARS
    bins: int = 4096
    epoch_timeout_s: float = 120.0
    checkpoint_interval_s: float = 2.0
    checkpoint_url: str | None = None
    checkpoints_kept: int = 2
    incremental_checkpoints: bool = True
    delivery: str = "exactly_once"
    ingress_log_dir: str | None = None
    ingress_fsync: bool = False
    local_recovery: bool | None = None
    local_recovery_dir: str | None = None
    gc_freeze: bool = True
    recovery_timeout_s: float = 60.0
    standby_executors: int = 0
    replace_lost_after_s: float = 20.0
    max_recoveries: int = 3
    trace_sample: float = 1.0
    trace_capacity: int = 100_000
    trace_snapshot_s: float = 1.0
    trace_history_s: float = 30.0
    trace_history_activities: int = 400_000
    trace_snapshots_kept: int = 300
    trace_watch_s: float = 300.0
    trace_niceness: int = 10
    scaling: dict[str, Any] = field(default_factory=dict)
    service_capacity_eps: float | None = None
    exchange_linger_ms: float = 10.0
    exchange_batch_events: int = 5_000
    state_backend: str = "memory"
    store_dir: str | None = None
    state_cache_entries: int = 1_000_000

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATION_MODES:
            raise ValueError(f"RuntimeConfig.isolation: expected one of {ISOLATION_MODES}, "
                             f"got {self.isolation!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"RuntimeConfig.placement: expected one of {PLACEMENTS}, "
                             f"got {self.placement!r}")
        if self.num_executors is not None and self.num_executors < 1:
            raise ValueError(f"RuntimeConfig.num_executors: expected >= 1 or None, got {self.num_executors}")
        for name in ("quantum_ms", "credit_events", "ingress_events", "max_message_events",
                     "result_capacity", "max_windows_per_event", "state_budget_bytes",
                     "max_state_bytes", "state_disk_budget_bytes", "max_state_disk_bytes", "ended_kept", "monitor_interval_s", "exchange_batch_events"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RuntimeConfig.{name}: expected > 0, got {getattr(self, name)}")
        if type(self.bins) is not int or not 1 <= self.bins <= MAX_BINS or self.bins & (self.bins - 1):
            raise ValueError(f"RuntimeConfig.bins: expected a power of two from 1 to {MAX_BINS}, "
                             f"got {self.bins!r}")
        if not 0 <= self.exchange_linger_ms <= 1000:
            raise ValueError(f"RuntimeConfig.exchange_linger_ms: expected 0 to 1000, got "
                             f"{self.exchange_linger_ms}")
        if not self.epoch_timeout_s > 0:
            raise ValueError(f"RuntimeConfig.epoch_timeout_s: expected > 0, got {self.epoch_timeout_s}")
        if not (self.checkpoint_interval_s == 0 or 0.1 <= self.checkpoint_interval_s <= 3600):
            raise ValueError(f"RuntimeConfig.checkpoint_interval_s: expected 0 (off) or 0.1 to "
                             f"3600, got {self.checkpoint_interval_s}")
        if not 0 < self.floor_slack_ms < float("inf"):
            raise ValueError(f"RuntimeConfig.floor_slack_ms: expected > 0 (ms), got {self.floor_slack_ms}")
        if self.admission not in ADMISSION_MODES:
            raise ValueError(f"RuntimeConfig.admission: expected one of {ADMISSION_MODES}, got "
                             f"{self.admission!r}")
        if not 0 < self.admission_headroom <= 1:
            raise ValueError(f"RuntimeConfig.admission_headroom: expected a share in (0, 1], got "
                             f"{self.admission_headroom}")
        if self.delivery not in DELIVERY_MODES:
            raise ValueError(f"RuntimeConfig.delivery: expected one of {DELIVERY_MODES}, got "
                             f"{self.delivery!r}")
        for name in ("checkpoints_kept", "recovery_timeout_s", "replace_lost_after_s",
                     "max_recoveries"):
            if not getattr(self, name) > 0:
                raise ValueError(f"RuntimeConfig.{name}: expected > 0, got {getattr(self, name)}")
        if not 0 <= self.trace_sample <= 1:
            raise ValueError(f"RuntimeConfig.trace_sample: expected a share from 0 (off) to 1, "
                             f"got {self.trace_sample}")
        for name in ("trace_capacity", "trace_snapshot_s", "trace_history_s",
                     "trace_history_activities", "trace_snapshots_kept", "trace_watch_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"RuntimeConfig.{name}: expected > 0, got {getattr(self, name)}")
        if type(self.trace_niceness) is not int or not 0 <= self.trace_niceness <= 19:
            raise ValueError(f"RuntimeConfig.trace_niceness: expected an int from 0 to 19, got "
                             f"{self.trace_niceness!r}")
        settings_from_dict(self.scaling, where="RuntimeConfig.scaling")  # ScalingConfigError
        if type(self.standby_executors) is not int or not 0 <= self.standby_executors <= 16:
            raise ValueError(f"RuntimeConfig.standby_executors: expected an int from 0 to 16, "
                             f"got {self.standby_executors!r}")
        if self.state_backend not in BACKENDS:
            raise ValueError(f"RuntimeConfig.state_backend: expected one of {BACKENDS}, got "
                             f"{self.state_backend!r}")
        if type(self.state_cache_entries) is not int or self.state_cache_entries < 1:
            raise ValueError(f"RuntimeConfig.state_cache_entries: expected an int >= 1, got "
                             f"{self.state_cache_entries!r}")
        if self.service_capacity_eps is not None and not 0 < self.service_capacity_eps < float("inf"):
            raise ValueError(f"RuntimeConfig.service_capacity_eps: expected events per second > 0, "
                             f"or None, got {self.service_capacity_eps}")
        # An int: the source operator compiles it into its schema check.
        if type(self.max_string_chars) is not int or self.max_string_chars <= 0:
            raise ValueError(f"RuntimeConfig.max_string_chars: expected an int > 0 (characters), "
                             f"got {self.max_string_chars!r}")

    def local_copies_dir(self, executor: int) -> str | None:
        """Where executor `executor` keeps local copies of its checkpoint parts (None: it
        keeps none: see `local_recovery`)."""
        url = self.checkpoint_url
        on = self.local_recovery
        if on is None:  # a URL with a scheme other than file:// is not a local folder
            on = bool(url) and "://" in str(url) and not str(url).startswith("file://")
        if not on or not url or not self.local_recovery_dir:
            return None
        return os.path.join(self.local_recovery_dir, f"executor-{executor}")

    def state_backend_of(self) -> StateBackend:
        """Where the executors keep keyed state (`state_backend`, `store_dir`)."""
        return StateBackend(self.state_backend, backend_folder(self.store_dir),
                            self.state_cache_entries)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RuntimeConfig:
        d = dict(d)
        if d.get("allowed_modules") is not None:
            d["allowed_modules"] = tuple(d["allowed_modules"])
        return cls(**d)


def storage_not_shared(given: RuntimeConfig, nodes: int) -> str | None:
    """Why a new pool on a Ray cluster of `nodes` live nodes cannot keep its checkpoints
    and ingress logs where `given` (the configuration as its user wrote it) says, or None.

    On more than one node, the defaults (folders under the run folder) are on the
    starting node only: an executor restarted on another node would find no checkpoint
    and no ingress log to restore from. Storage named explicitly is trusted to be shared
    (a folder every node mounts, or a URL every node reaches)."""
    if nodes <= 1:
        return None
    left = [what for what, value in (("checkpoint_url (cameo serve --checkpoint-url)",
                                      given.checkpoint_url),
                                     ("ingress_log_dir (cameo serve --ingress-log-dir)",
                                      given.ingress_log_dir)) if not value]
    if not left:
        return None
    return (f"starting a pool on a Ray cluster of {nodes} nodes: expected storage every node "
            f"reaches, got {' and '.join(left)} left to a folder under the run folder, on this "
            "node only (an executor restarted on another node would find nothing to restore). "
            "Fix: name them: a URL pyarrow.fs understands (s3://, gs://, hdfs://) or a folder "
            "every node mounts for the checkpoints, and a folder every node mounts for the "
            "ingress logs")


def default_run_dir() -> str:
    """The project's own run folder for Ray's and Spark's temporary files."""
    return os.path.abspath(os.environ.get("CAMEO_RUN_DIR", ".run"))


# A Unix socket's path holds at most 107 bytes, and Ray puts its sockets at
# `<temp dir>/session_<date>_<time>_<micros>_<pid>/sockets/plasma_store`.
_SOCKET_PATH_MAX = 107
_SESSION_SOCKET_SUFFIX = len("/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store")


#: Ray's settings for a local Ray started here. A call to an actor whose process died
#: fails only after Ray waited this long for the cluster to say why (1 s by default):
#: that wait was most of the time it took to notice a dead executor (1.2-1.7 s from
#: SIGKILL to the failed ping; 0.2-0.5 s with 100 ms). For a cluster started with `ray
#: start`, the same as variables in its environment: RAY_timeout_ms_task_wait_for_death_info=100.
RAY_SYSTEM_CONFIG = {"timeout_ms_task_wait_for_death_info": 100}


def ray_temp_dir(run_dir: str | None = None) -> str:
    """Ray's folder for a local node: `run_dir/ray`, or, where that path is too long
    for Ray's sockets, a short folder in the system's temp dir named after it (so
    one run folder always finds the same one)."""
    run = os.path.join(os.path.abspath(run_dir or default_run_dir()), "ray")
    if len(run.encode()) + _SESSION_SOCKET_SUFFIX > _SOCKET_PATH_MAX:
        digest = hashlib.sha256(run.encode()).hexdigest()[:12]
        run = os.path.join(tempfile.gettempdir(), f"cameo-ray-{digest}")
    os.makedirs(run, exist_ok=True)
    return run
