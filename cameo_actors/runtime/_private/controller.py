"""The controller: a named, detached Ray actor that owns the executor pool,
the registry of dataflows with their lifecycle, and placement. It outlives
the process that started it, so a restarted service finds its dataflows.

A monitor thread watches the pool every `monitor_interval_s`:
- an executor that died (Ray restarts it, a new incarnation) has the
  dataflows it hosted restored from their last checkpoint: they are
  `recovering` meanwhile, the other dataflows never stop; one that does not
  come back within `recovery_timeout_s` fails them and takes no new ones;
- a `finishing` dataflow (sources closed) becomes `finished` once every
  activation saw the end of its inputs;
- a dataflow over its state budget fails and its state is freed;
- each dataflow's rates and costs are sampled (`load.py`): admission control
  predicts with them whether a new dataflow fits, and the pool's overload report
  (who misses or will miss, by how much, whose load causes it) is kept current
  and logged when it changes;
- ended dataflows are forgotten after `ended_retention_s`.

A checkpointer thread takes each dataflow's checkpoints (`checkpoint.py`)
and commits their manifests to the checkpoint storage, where the registry of
dataflows is kept too: a controller that Ray restarts, or a new service on a
new Ray, reads it and goes on (adopting the executors that live, restoring the
dataflows whose executors are gone).

Live reconfiguration (scale a keyed step, move bins or instances, rebalance,
add and remove executors) runs here too: each operation is planned
(`rescale.py`), checked before anything changes, and carried out epoch by
epoch in a thread of its own while the dataflow runs (`migration.py`).
"""

from __future__ import annotations

import builtins
import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import ray

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.dataflow.validate import check_live_settings, check_pool_limits
from cameo_actors.errors import CameoError, ReconfigConflict, ReconfigError
from cameo_actors.operators.lease import can_lease
from cameo_actors.runtime._private.autoscale import AutoScaling
from cameo_actors.runtime._private.autoscale import logger as autoscale_logger
from cameo_actors.runtime._private.checkpoint import interval_s
from cameo_actors.runtime._private.cluster import (
    NAMESPACE,
    executor_name,
    find_actor,
    get,
    get_each,
)
from cameo_actors.runtime._private.executor import Executor
from cameo_actors.runtime._private.load import LoadTracker
from cameo_actors.runtime._private.rescale import (
    STRATEGIES,
    Migration,
    next_instance,
    plan,
    scale_plan,
)
from cameo_actors.runtime._private.routing import Placement, is_keyed_step, place
from cameo_actors.runtime._private.stats import dataflow_stats
from cameo_actors.runtime._private.storage import CheckpointStorage, StorageError
from cameo_actors.runtime._private.traces import TraceCollector, lower_thread_priority
from cameo_actors.runtime.boundary import (
    CANCELLED,
    FAILED,
    FINISHED,
    FINISHING,
    LIVE_STATES,
    RECOVERING,
    RUNNING,
    ActivationId,
    DataflowInfo,
    DataflowSummary,
    ExecutorStats,
)
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import (
    AdmissionRefused,
    DataflowEnded,
    DataflowExists,
    DataflowNotFound,
    RuntimeUnavailable,
)
from cameo_actors.scaling import ScalingConfigError, settings_from_dict
from cameo_actors.scheduling.admission import Prediction, predict

logger = logging.getLogger(__name__)
#: Operator failures kept with a dataflow's record when it ends.
EXCEPTIONS_KEPT = 10
#: Reconfigurations kept for `migrations()` (the running ones always).
MIGRATIONS_KEPT = 200
#: How long one call waits on an executor for an epoch to be done (then it asks again,
#: so that a cancelled dataflow or a timeout is noticed).
EPOCH_WAIT_S = 1.0
#: Lessees one keyed window may have.
MAX_LESSEES = 8
#: Executors `add_executors` adds in one call at most.
MAX_ADD = 64
#: How long a checkpoint may take from its barriers to its last part written.
CHECKPOINT_TIMEOUT_S = 60.0
#: Checkpoints under way at once (over all dataflows).
CHECKPOINT_THREADS = 4


class QuietWhenStopped(logging.Filter):
    """Drops what the controller's own threads (named "cameo-...") log once the pool is
    shutting down: executors going away then is the plan, not news."""

    def __init__(self, stopped: threading.Event) -> None:
        super().__init__()
        self.stopped = stopped

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.stopped.is_set() and (record.threadName or "").startswith("cameo-"))


def short_cause(e: BaseException) -> str:
    """The first line of an error (Ray's death notices run to many lines)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


@ray.remote(num_cpus=0, max_concurrency=16)  # type: ignore[call-overload]
class Controller:
    def __init__(self, pool: str, config: dict[str, Any], resumable: bool = False) -> None:
        self.pool = pool
        #: the registry says a next start may restore it (`Runtime.start(resume=True)`,
        #: `cameo serve`): a start afresh then refuses to delete it
        self.resumable = resumable
        self.config = RuntimeConfig.from_dict(config)
        self.storage = CheckpointStorage(self.config.checkpoint_url) \
            if self.config.checkpoint_url else None
        if self.storage is not None:
            self.storage.check_writable()
        self.executors: builtins.list[Any] = []
        #: executor index -> the incarnation it runs as (a restart changes it)
        self.incarnations: dict[int, str] = {}
        #: executors lost and waited for (Ray restarts them)
        self.restarting: set[int] = set()
        #: dataflows a thread restores now; how many times each lost a part (a loss during
        #: a restore makes it try again)
        self.restoring: set[str] = set()
        self.losses: Counter[str] = Counter()
        #: every dataflow, live or ended (kept for `ended_retention_s`)
        self.dataflows: dict[str, DataflowInfo] = {}
        self.load: dict[int, int] = {}
        #: executor index -> why it is out of the pool (it died, or was removed)
        self.dead: dict[int, str] = {}
        #: executors being emptied before they are removed: no new work goes there
        self.draining: set[int] = set()
        #: executor index -> why its last removal failed (it stays in the pool)
        self.kept: dict[int, str] = {}
        #: where each kept dataflow's instances run, and its routing tables
        self.placements: dict[str, Placement] = {}
        #: reconfigurations by id (oldest first), and the one under way per dataflow
        self.migrations: dict[str, Migration] = {}
        self.migrating: dict[str, str] = {}
        self._migration_seq = 0
        #: (tenant, state) -> transitions into that state since the pool started
        self.transitions: Counter[tuple[str, str]] = Counter()
        # Changes of the registry (deploy, end, placement load), one at a time; reads take
        # a copy of the dict without it.
        self._lock = threading.RLock()
        self._adding = threading.Lock()
        self._stopped = threading.Event()
        for name in (__name__, autoscale_logger.name):
            logging.getLogger(name).addFilter(QuietWhenStopped(self._stopped))
        #: dataflows with a checkpoint under way, and when each one's next is due
        self._checkpointing: set[str] = set()
        self._due: dict[str, float] = {}
        self._checkpoints = ThreadPoolExecutor(CHECKPOINT_THREADS, thread_name_prefix="cameo-ckpt")
        #: recent rates and learned costs, and the last overload report made from them
        self.loads = LoadTracker()
        self.overload: dict[str, Any] = {}  # made below, once the executors are known
        self._missing: set[str] = set()
        #: the executors' traced activities, analysed per snapshot interval (`cameo explain`)
        self.traces = TraceCollector(self.config)
        settings = settings_from_dict(self.config.scaling)
        self.scaling = AutoScaling(self, settings)
        registry = self.storage.load_registry() if self.storage is not None else None
        if registry:
            self._resume(registry)
        else:
            n = self.config.num_executors or max(1, int(ray.cluster_resources().get("CPU", 1)))
            self.executors = [self._new_executor(i) for i in range(n)]
            self._link()
        self.overload = self._predict(None).to_dict()
        threading.Thread(target=self._monitor, name="cameo-monitor", daemon=True).start()
        threading.Thread(target=self._checkpointer, name="cameo-checkpointer", daemon=True).start()
        if self.config.trace_sample > 0:
            threading.Thread(target=self._tracer, name="cameo-tracer", daemon=True).start()
        threading.Thread(target=self.scaling.run, args=(self._stopped,), name="cameo-scaling",
                         daemon=True).start()

    def _link(self) -> None:
        """Tell every live executor the pool's executors and their incarnations."""
        live = [i for i in range(len(self.executors)) if i not in self.dead]
        for i, answer in zip(live, get([self.executors[i].ping.remote() for i in live]),
                             strict=True):
            self.incarnations[i] = answer[1]
        get([self.executors[i].set_peers.remote(self.executors, self.incarnations) for i in live])

    # -- the registry, kept in storage ----------------------------------------------------
    def _save(self) -> None:
        """Write the registry (dataflows, placements, executors) to storage: what a
        restarted controller or service needs to go on."""
        if self.storage is None:
            return
        with self._lock:
            data = {"pool": self.pool, "resumable": self.resumable,
                    "owner": {"host": socket.gethostname(), "pid": os.getpid()},
                    "executors": len(self.executors),
                    "incarnations": {str(i): inc for i, inc in self.incarnations.items()},
                    "dead": {str(i): why for i, why in self.dead.items()},
                    "dataflows": dict(self.dataflows),
                    "placements": {n: p.to_dict() for n, p in self.placements.items()},
                    "migration_seq": self._migration_seq}
        try:
            self.storage.save_registry(data)
        except Exception:  # the next change writes it again
            logger.exception("controller: the registry could not be saved")

    def _resume(self, registry: dict[str, Any]) -> None:
        """Go on from a registry: adopt the executors that live (their dataflows keep
        running), start new ones for those gone, and restore the dataflows that ran there."""
        self.dataflows = registry["dataflows"]
        self.placements = {n: Placement.from_dict(p) for n, p in registry["placements"].items()}
        self.dead = {int(i): why for i, why in registry["dead"].items()}
        self._migration_seq = registry["migration_seq"]
        known = {int(i): inc for i, inc in registry["incarnations"].items()}
        gone: set[int] = set()
        for i in range(registry["executors"]):
            handle = find_actor(executor_name(self.pool, i)) if i not in self.dead else None
            try:
                inc = get(handle.ping.remote(), timeout_s=10.0)[1] if handle is not None else None
            except CameoError:
                inc = None
            if handle is None or inc is None:
                handle = None if i in self.dead else self._new_executor(i)
                gone.add(i)
            elif inc != known.get(i):
                gone.add(i)  # restarted meanwhile: empty
            self.executors.append(handle)
        self._link()
        for name, info in self.placements.items():
            if self.dataflows[name]["released"]:
                continue
            self.load.update({ex: self.load.get(ex, 0) + 1 for ex in info.instances.values()})
        hit = [n for n, d in self.dataflows.items()
               if d["state"] in LIVE_STATES and set(d["executors"]) & gone]
        logger.warning("controller resumed pool %s: %d dataflow(s), %d to restore",
                       self.pool, len(self.dataflows), len(hit))
        for name in hit:
            self._mark_recovering(self.dataflows[name], "the pool restarted")
        if hit:
            threading.Thread(target=self._recover_all, args=(hit, "the pool restarted"),
                             name="cameo-resume", daemon=True).start()

    # -- deploy and end ----------------------------------------------------------------
    def deploy(self, spec_dict: dict[str, Any]) -> dict[str, Any]:
        """Validate and start a dataflow. A spec that fails changes nothing."""
        spec = DataflowSpec.from_dict(spec_dict)  # SpecError travels back to the caller
        check_pool_limits(spec, max_windows_per_event=self.config.max_windows_per_event,
                          max_state_bytes=self.config.max_state_bytes)
        with self._lock:
            old = self.dataflows.get(spec.name)
            if old is not None and old["state"] in LIVE_STATES:
                raise DataflowExists(f"a dataflow named {spec.name!r} is running already; "
                                     "cancel it first or choose another name")
            admission = self._admit(spec)
            placement = self._place(spec)
            involved = sorted(placement.executors())
            deployment = uuid.uuid4().hex[:12]
            if self.storage is not None and interval_s(spec, self.config) > 0:
                # Checkpoint 0: nothing yet, the placement to restore to before the first.
                self.storage.commit(spec.name, deployment, 0, {
                    "parts": {}, "positions": {}, "placement": placement.to_dict(),
                    "spec": spec.to_dict(), "bytes": 0})
            refs = [self.executors[i].deploy.remote(spec.to_dict(), placement, deployment)
                    for i in involved]
            try:
                get(refs)
            except Exception:
                # One executor refused (e.g. a function it cannot import): undo everywhere.
                get_each([self.executors[i].cancel.remote(spec.name) for i in involved])
                raise
            if old is not None:  # an ended run of the same name: its record (and results) go
                self._release(old)
            for i in involved:
                self.load[i] = self.load.get(i, 0) + len(placement.on(i))
            self.placements[spec.name] = placement
            now = time.time()
            self.dataflows[spec.name] = {
                "name": spec.name, "spec": spec.to_dict(), "hosts": placement.hosts,
                "executors": involved, "state": RUNNING, "submitted_at": now, "ended_at": None,
                "cause": None, "history": [], "exceptions": [], "final": None,
                "released": False, "lost": False, "state_bytes": 0, "deployment": deployment,
                "checkpoints": {"interval_s": interval_s(spec, self.config), "last": None,
                                "last_at": None, "last_duration_s": None, "last_bytes": 0,
                                "completed": 0, "failed": 0},
                "recoveries": 0, "recoveries_in_a_row": 0, "resume_state": None,
                "admission": admission}
            self._enter(self.dataflows[spec.name], RUNNING, "submitted")
            self._due[spec.name] = time.monotonic() + interval_s(spec, self.config)
        self._save()
        return {"name": spec.name, "hosts": placement.hosts}

    # -- admission control and the overload report ------------------------------------------
    def predict(self, spec_dict: dict[str, Any] | None = None) -> dict[str, Any]:
        """Whether every running dataflow (and the one in `spec_dict`, if given, as if it
        were admitted) is predicted to meet its target, from the measured rates and costs."""
        if spec_dict is None:
            return self.overload  # made by the monitor, at most a second ago
        spec = DataflowSpec.from_dict(spec_dict)
        check_pool_limits(spec, max_windows_per_event=self.config.max_windows_per_event,
                          max_state_bytes=self.config.max_state_bytes)
        return self._predict(spec).to_dict()

    def _predict(self, spec: DataflowSpec | None) -> Prediction:
        running = [d for d in list(self.dataflows.values())  # the monitor reads unlocked
                   if d["state"] in LIVE_STATES and (spec is None or d["name"] != spec.name)]
        capacity = 1000.0 * max(1, len(self._usable()))
        new = None if spec is None else self.loads.new(spec.to_dict())
        return predict(capacity, self.loads.running(running), new,
                       headroom=self.config.admission_headroom)

    def _admit(self, spec: DataflowSpec) -> dict[str, Any]:
        """The admission prediction for `spec` (kept with its record); refused with
        `AdmissionRefused` when some target would be missed and the pool says "refuse"."""
        prediction = self._predict(spec)
        verdict = prediction.to_dict()
        misses = [o for o in prediction.outcomes if o.verdict == "misses"]
        verdict["warnings"] = [f"{o.name}: {o.reason}" for o in misses]
        if misses and self.config.admission == "refuse":
            raise AdmissionRefused(
                f"admitting {spec.name!r} is predicted to make "
                f"{', '.join(repr(o.name) for o in misses)} miss {'its' if len(misses) == 1 else 'their'} "
                f"target: " + "; ".join(verdict["warnings"]) + ". Fix: "
                + _fix(prediction, spec.name), verdict)
        if misses and self.config.admission == "warn":
            logger.warning("admitted %r although %s", spec.name, "; ".join(verdict["warnings"]))
        return verdict

    def _report_overload(self) -> None:
        """Keep the pool's overload report current; log who starts and stops missing."""
        prediction = self._predict(None)
        self.overload = prediction.to_dict()
        missing = {o.name for o in prediction.misses()}
        for o in prediction.misses():
            if o.name not in self._missing:
                causes = ", ".join(f"{t!r} ({ms:,.0f} ms/s above its share)"
                                   for t, ms in prediction.causes) or "none measured"
                logger.warning("overload: %r misses its target: %s; tenants over their "
                               "share: %s", o.name, o.reason, causes)
        for name in self._missing - missing:
            logger.warning("overload: %r meets its target again", name)
        self._missing = missing

    def _new_executor(self, i: int) -> Any:
        # Detached: executors outlive a controller that dies (a restarted one adopts them);
        # Ray restarts one that dies, and the monitor restores what it hosted.
        return Executor.options(  # type: ignore[attr-defined]
            name=executor_name(self.pool, i), namespace=NAMESPACE, lifetime="detached",
            max_restarts=-1, max_task_retries=0, num_cpus=self.config.executor_cpus,
            scheduling_strategy="SPREAD").remote(i, self.config.to_dict())

    def _usable(self) -> builtins.list[int]:
        """Executors new work may go to: alive, not being removed."""
        return [i for i in range(len(self.executors)) if i not in self.dead and i not in self.draining]

    def _place(self, spec: DataflowSpec) -> Placement:
        all_ex = self._usable()
        if not all_ex:
            raise CameoError("every executor of the pool died; restart the service (or the "
                             "pool) to get new ones")
        if self.config.isolation == "shared":
            return place(spec, all_ex, dict(self.load), self.config.bins)
        taken = {i for d in self.dataflows.values() if not d["released"] for i in d["executors"]}
        free = [i for i in all_ex if i not in taken]
        want = self.config.executors_per_dataflow
        if len(free) < want:
            raise CameoError(f"isolated mode: dataflow {spec.name!r} needs {want} dedicated "
                             f"executor(s), {len(free)} free of {len(all_ex)}; cancel a dataflow "
                             "or start the pool with more executors")
        return place(spec, free[:want], {}, self.config.bins)

    def cancel(self, name: str) -> dict[str, Any]:
        """Stop a dataflow and free its parts. Cancelling an ended one frees what it kept
        (a finished one's results) and changes nothing else."""
        with self._lock:
            info = self._record(name)
            was_live = info["state"] in LIVE_STATES
            dropped = self._end(info, CANCELLED, "cancelled by a client") if was_live \
                else self._release(info)
        return {"name": name, "state": info["state"], "messages_dropped": dropped,
                "ended_before": not was_live}

    def closing(self, name: str) -> None:
        """A client closed the dataflow's sources: it drains, then it is finished."""
        with self._lock:
            info = self._info(name)
            if info["state"] == RUNNING:
                self._enter(info, FINISHING, "sources closed")
            elif info["state"] == RECOVERING:  # finishing once restored
                info["resume_state"] = FINISHING

    def fail(self, name: str, cause: str, *, lost: bool = False) -> None:
        """End a live dataflow as failed, free its parts on the executors that live.
        `lost`: a part of the pool died under it (a retry may work once it is restored)."""
        with self._lock:
            info = self.dataflows.get(name)
            if info is not None and info["state"] in (*LIVE_STATES, FINISHED):
                logger.warning("dataflow %s failed: %s", name, cause)
                info["lost"] = lost
                self._end(info, FAILED, cause)

    def _enter(self, info: DataflowInfo, state: str, reason: str | None) -> None:
        now = time.time()
        info["state"] = state
        info["history"].append({"state": state, "at": now, "reason": reason})
        if state not in LIVE_STATES:
            info["ended_at"] = now
        self.transitions[(info["spec"]["tenant"], state)] += 1
        self._save()

    def _end(self, info: DataflowInfo, state: str, reason: str) -> int:
        """Keep the last statistics and failures, free the parts, enter `state`."""
        live = [i for i in info["executors"] if i not in self.dead]
        parts = get_each([self.executors[i].dataflow_stats.remote(info["name"]) for i in live],
                         timeout_s=10.0)
        answered = [p for p in parts if p is not None]
        if answered:
            final = dataflow_stats(info, answered)
            info["final"] = dict(final)
            info["exceptions"] = list(final["failures"])[-EXCEPTIONS_KEPT:]
        dropped = self._release(info)
        if state == FAILED:
            info["cause"] = reason
        self._enter(info, state, reason)
        return dropped

    def _release(self, info: DataflowInfo) -> int:
        """Free a dataflow's parts on the executors that live; returns messages dropped."""
        if info["released"]:
            return 0
        live = [i for i in info["executors"] if i not in self.dead]
        dropped = get_each([self.executors[i].cancel.remote(info["name"]) for i in live])
        for i in info["executors"]:
            self.load[i] = self.load.get(i, 0) - sum(1 for h in info["hosts"].values() if h == i)
        info["released"] = True
        self.scaling.forget(info["name"])
        self._drop_storage(info)
        return sum(d for d in dropped if d is not None)

    def update(self, name: str, latency_target_ms: float | None = None,
               weight: float | None = None) -> dict[str, Any]:
        info = self._info(name)
        # The spec's own rules (SpecError, a ValueError): `> 0` alone would let NaN or
        # Infinity in, and a target no submit could set.
        check_live_settings(latency_target_ms, weight)
        get([self.executors[i].update.remote(name, latency_target_ms, weight)
                 for i in info["executors"]])
        if latency_target_ms is not None:
            info["spec"]["latency_target_ms"] = latency_target_ms
        if weight is not None:
            info["spec"]["scheduling"]["weight"] = weight
        return {"name": name, "latency_target_ms": info["spec"]["latency_target_ms"],
                "weight": info["spec"]["scheduling"]["weight"]}

    # -- live reconfiguration ------------------------------------------------------------
    def scale(self, name: str, step: str, parallelism: int, strategy: str = "batched",
              batch_bins: int | None = None) -> dict[str, Any]:
        """Give a keyed step `parallelism` instances while the dataflow runs."""
        with self._lock:
            info, placement, where = self._keyed(name, step, strategy, batch_bins)
            bins = placement.bins
            if type(parallelism) is not int or not 1 <= parallelism <= bins:
                raise ReconfigError(where, f"a parallelism from 1 to {bins} (the pool's bins)",
                                    parallelism, f"ask for 1 to {bins} instances")
            executors = self._usable() if self.config.isolation == "shared" \
                else [i for i in info["executors"] if i not in self.dead]
            m = scale_plan(self._migration_id(), placement, name, step, parallelism, executors,
                           self.load, strategy, batch_bins)
            return self._start(info, m)

    def migrate(self, name: str, step: str, bins: Sequence[int] | None = None,
                to_instance: int | None = None, instance: int | None = None,
                to_executor: int | None = None, strategy: str = "batched",
                batch_bins: int | None = None) -> dict[str, Any]:
        """Move bins of a keyed step to one of its instances, or one instance (all its bins)
        to another executor."""
        with self._lock:
            info, placement, where = self._keyed(name, step, strategy, batch_bins)
            table = placement.tables[step]
            instances = [a.instance for a in placement.of_step(step)]
            if bins is not None and to_instance is not None and instance is None:
                if to_instance not in instances:
                    raise ReconfigError(where, f"to_instance one of the step's instances {instances}",
                                        to_instance, "name an instance the step has (cameo status)")
                moved = sorted(set(bins)) if isinstance(bins, (list, tuple)) else None
                if not moved or any(type(b) is not int or not 0 <= b < placement.bins for b in moved):
                    raise ReconfigError(where, f"bins: a non-empty list of bin numbers from 0 to "
                                        f"{placement.bins - 1}", bins, "list the bins to move")
                owners = list(table.owners)
                for b in moved:
                    owners[b] = to_instance
                m = plan(self._migration_id(), "migrate", placement, name, step, owners, {}, [],
                         strategy, batch_bins)
            elif instance is not None and to_executor is not None and bins is None:
                if instance not in instances:
                    raise ReconfigError(where, f"instance one of the step's instances {instances}",
                                        instance, "name an instance the step has (cameo status)")
                self._check_executor(to_executor, f"{where}: to_executor")
                aid = next(a for a in placement.of_step(step) if a.instance == instance)
                if placement.instances[aid] == to_executor:
                    raise ReconfigError(where, f"an executor other than {to_executor}, where "
                                        f"instance {instance} runs", to_executor,
                                        "name another executor")
                new = next_instance(placement, step)
                owners = [new if o == instance else o for o in table.owners]
                m = plan(self._migration_id(), "move_instance", placement, name, step, owners,
                         {new: to_executor}, [instance], strategy, batch_bins)
            else:
                raise ReconfigError(where, "either bins with to_instance, or instance with "
                                    "to_executor", {"bins": bins, "to_instance": to_instance,
                                                    "instance": instance, "to_executor": to_executor},
                                    "give bins and to_instance to move bins, or instance and "
                                    "to_executor to move an instance")
            return self._start(info, m)

    def lease(self, name: str, step: str, lessees: int) -> dict[str, Any]:
        """Give keyed window `step` `lessees` lessee instances (Dirigo): new ones go to the
        least loaded executors without an instance of the step; fewer: the newest end
        their streams (their last partials merged) and go."""
        with self._lock:
            info, placement, where = self._keyed(name, step, "batched", None, lessees=True)
            spec = DataflowSpec.from_dict(info["spec"])
            why = can_lease(spec.step(step))
            if why is not None:
                raise ReconfigError(where, "a tumbling or sliding window", spec.step(step).OP, why)
            if type(lessees) is not int or not 0 <= lessees <= MAX_LESSEES:
                raise ReconfigError(where, f"a count of lessees from 0 to {MAX_LESSEES}", lessees,
                                    "ask for fewer lessees (0 gives them all back)")
            current = placement.lessees_of(step)
            new: dict[int, int] = {}
            if lessees > len(current):
                taken = {placement.instances[a] for a in placement.of_step(step) + current}
                load = dict(self.load)
                nxt = next_instance(placement, step)
                for k in range(lessees - len(current)):
                    ex = min(self._usable(), key=lambda x: (x in taken, load.get(x, 0), x))
                    new[nxt + k] = ex
                    load[ex] = load.get(ex, 0) + 1
                    taken.add(ex)
                added = {ActivationId(name, step, i): ex for i, ex in new.items()}
                placement = replace(placement, instances={**placement.instances, **added},
                                    lessees=placement.lessees | set(added))
            retire = [a.instance for a in current[lessees:]]
            m = Migration(self._migration_id(), name, step, "lease", "all_at_once", placement, [],
                          new, retire, len(current), lessees)
            return self._start(info, m)

    def _run_lease(self, info: DataflowInfo, m: Migration) -> None:
        """Add lessees (hosted, then lent to), or end some: each upstream ends its stream
        to them in-band, each sends its last partials and ends, then they go."""
        name, step = m.dataflow, m.step
        hosts = sorted(set(m.placement.executors()) - set(self.dead))
        if m.new:
            new = [f"{name}/{step}/{i}" for i in m.new]
            get([self.executors[i].add_lessees.remote(info["spec"], m.placement, step, new,
                                                      info["recoveries"], info["deployment"])
                 for i in hosts])
        if m.retire:
            gone = [f"{name}/{step}/{i}" for i in m.retire]
            get([self.executors[i].unlease.remote(name, step, gone) for i in hosts])
            deadline = time.monotonic() + self.config.epoch_timeout_s
            while not all(get_each([self.executors[i].lessees_ended.remote(name, gone)
                                    for i in hosts], timeout_s=10.0)):
                if time.monotonic() > deadline:
                    raise CameoError(f"lessees {gone} did not end within "
                                     f"{self.config.epoch_timeout_s:g} s")
                time.sleep(0.01)
            get([self.executors[i].drop_lessees.remote(name, gone) for i in hosts])

    def rebalance(self, strategy: str = "batched", window_s: float = 1.0
                  ) -> builtins.list[dict[str, Any]]:
        """Move keyed instances from the busiest executors to the least busy ones (busy time
        measured over `window_s`), at most one instance per dataflow and executor pair."""
        if strategy not in STRATEGIES:
            raise ReconfigError("pool", f"a strategy in {list(STRATEGIES)}", strategy,
                                "choose one of them")
        usable = self._usable()
        first = get_each([self.executors[i].executor_stats.remote() for i in usable])
        time.sleep(window_s)
        second = get_each([self.executors[i].executor_stats.remote() for i in usable])
        busy = {i: (b["busy_ms"] - a["busy_ms"]) / (window_s * 1000.0)
                for i, a, b in zip(usable, first, second, strict=True) if a and b}
        started: builtins.list[dict[str, Any]] = []
        with self._lock:
            for _ in range(len(busy)):
                hot = max(busy, key=lambda i: busy[i])
                cold = min(busy, key=lambda i: busy[i])
                if busy[hot] - busy[cold] < 0.2:
                    break
                movable = [(n, a) for n, p in self.placements.items()
                           if n not in self.migrating and self.dataflows[n]["state"] in LIVE_STATES
                           for a in p.on(hot) if a.step in p.tables]
                if not movable:
                    break
                name, aid = movable[0]
                share = busy[hot] / max(1, self.load.get(hot, 1))
                started.append(self.migrate(name, aid.step, instance=aid.instance, to_executor=cold,
                                            strategy=strategy))
                busy[hot] -= share
                busy[cold] += share
        return started

    def add_executors(self, n: int = 1) -> builtins.list[int]:
        """Add `n` executors to the pool (on a multi-node cluster, Ray's autoscaler is asked
        for the CPUs first); new dataflows and moved instances may go there."""
        if type(n) is not int or not 1 <= n <= MAX_ADD:
            raise ReconfigError("pool", f"a count of executors from 1 to {MAX_ADD}", n,
                                "add fewer executors per call")
        with self._adding:  # one at a time: new executors are named by their index
            start = len(self.executors)
            _request_cpus(self.config.executor_cpus * (len(self._usable()) + n))
            added = [self._new_executor(i) for i in range(start, start + n)]
            # Started before they join the pool (the registry is not held meanwhile): one
            # that cannot start (no room on the cluster) must never be given work.
            wait_s = self.config.recovery_timeout_s
            ready, _ = ray.wait([a.ping.remote() for a in added], num_returns=n, timeout=wait_s)
            if len(ready) < n:
                for a in added:
                    ray.kill(a)
                raise ReconfigError("pool", f"{n} new executors started within {wait_s:g} s",
                                    f"{len(ready)} started", "the cluster has no room for "
                                    f"{n} x {self.config.executor_cpus:g} CPUs: add nodes (or let "
                                    "Ray's autoscaler add them), or ask for fewer; the pool is "
                                    "as it was")
            with self._lock:
                self.executors.extend(added)
                self._link()
        self._save()
        return list(range(start, start + n))

    def remove_executor(self, index: int, strategy: str = "batched") -> dict[str, Any]:
        """Move every keyed instance off executor `index`, then stop it. Refused (nothing
        changes) when it hosts what cannot move yet (sources, sinks, stateless steps)."""
        with self._lock:
            self._check_executor(index, "pool: executor")
            others = [i for i in self._usable() if i != index]
            if not others:
                raise ReconfigConflict(f"executor {index}", "another executor to move its work to",
                                       "the last executor of the pool",
                                       "add an executor first (cameo pool add)")
            fixed = sorted(str(a) for n, p in self.placements.items()
                           if not self.dataflows[n]["released"] for a in p.on(index)
                           if a.step not in p.tables)
            if fixed:
                raise ReconfigError(f"executor {index}", "only instances of keyed steps (windows, "
                                    "joins on keyed streams), which can move", fixed[:10],
                                    "cancel those dataflows first, or keep the executor")
            busy = sorted({n for n, p in self.placements.items() if p.on(index)} & set(self.migrating))
            if busy:
                raise ReconfigConflict(f"executor {index}", "no migration under way of the "
                                       "dataflows it hosts", busy, "wait for them and retry")
            self.draining.add(index)
            self.kept.pop(index, None)
            moving = [(n, a) for n, p in self.placements.items() for a in p.on(index)]
        threading.Thread(target=self._drain, args=(index, moving, strategy),
                         name=f"cameo-drain-{index}", daemon=True).start()
        return {"executor": index, "state": "draining", "moving": [str(a) for _, a in moving]}

    def _drain(self, index: int, moving: builtins.list[tuple[str, Any]], strategy: str) -> None:
        """Move each keyed instance off `index` (one after the other), then stop it."""
        try:
            for name, aid in moving:
                others = [i for i in self._usable() if i != index]
                target = min(others, key=lambda i: (self.load.get(i, 0), i))
                started = self.migrate(name, aid.step, instance=aid.instance, to_executor=target,
                                       strategy=strategy)
                self._wait(started["id"])
                if self.migrations[started["id"]].state != "done":
                    raise CameoError(f"moving {aid} failed: {self.migrations[started['id']].error}")
        except Exception as e:  # the executor stays: something could not move
            logger.exception("removing executor %d failed", index)
            self.kept[index] = short_cause(e)
            self.draining.discard(index)
            return
        get_each([self.executors[index].stop.remote()])
        ray.kill(self.executors[index])
        with self._lock:
            self.dead[index] = f"executor {index} removed by a client"
            self.draining.discard(index)

    def _wait(self, mid: str, timeout_s: float | None = None) -> None:
        deadline = time.time() + (timeout_s or 10 * self.config.epoch_timeout_s)
        while self.migrations[mid].state == "running" and time.time() < deadline:
            time.sleep(0.01)

    def wait_removed(self, index: int, timeout_s: float = 120.0) -> dict[str, Any]:
        """Block until the removal of executor `index` ended (or `timeout_s` passed):
        {"executor", "state": "removed" | "draining" | "kept", "error"}."""
        deadline = time.monotonic() + timeout_s
        while index in self.draining and time.monotonic() < deadline:
            time.sleep(0.01)
        state = "removed" if index in self.dead else "draining" if index in self.draining \
            else "kept"
        return {"executor": index, "state": state, "error": self.kept.get(index)}

    def wait_migration(self, mid: str, timeout_s: float = 120.0) -> dict[str, Any]:
        if mid not in self.migrations:
            raise ReconfigError("migration", f"one of {list(self.migrations)[-10:]}", mid,
                                "name a migration listed by migrations()")
        self._wait(mid, timeout_s)
        return self.migrations[mid].info()

    def list_migrations(self, name: str | None = None) -> builtins.list[dict[str, Any]]:
        return [m.info() for m in list(self.migrations.values()) if name is None or m.dataflow == name]

    def _keyed(self, name: str, step: str, strategy: str, batch_bins: int | None,
               lessees: bool = False) -> tuple[DataflowInfo, Placement, str]:
        """The checks every operation on a keyed step makes before it changes anything."""
        info = self._info(name)
        spec = DataflowSpec.from_dict(info["spec"])
        ids = [s.id for s in spec.steps]
        if step not in ids:
            raise ReconfigError(f"dataflow {name!r}", f"one of its steps {ids}", step,
                                "name a window, join or process step of the dataflow")
        where = f"dataflow {name!r}, step {step!r}"
        if not is_keyed_step(spec, spec.step(step)):
            raise ReconfigError(where, "a window or join on a keyed stream, or a process (only "
                                "those keep state by key, which can be split and moved)",
                                f"a {spec.step(step).OP} step on an unkeyed stream"
                                if spec.step(step).OP in ("window", "join")
                                else f"a {spec.step(step).OP} step",
                                "add key_by before the window to make it scalable, or scale "
                                "a keyed window or join")
        if strategy not in STRATEGIES:
            raise ReconfigError(where, f"a strategy in {list(STRATEGIES)}", strategy,
                                "choose one of them")
        if batch_bins is not None and (type(batch_bins) is not int or batch_bins < 1):
            raise ReconfigError(where, "batch_bins an integer >= 1, or none", batch_bins,
                                "give the bins per epoch of a batched migration")
        running = self.migrating.get(name)
        if running is not None:
            raise ReconfigConflict(where, "no other migration of the dataflow under way",
                                   f"migration {running} is running",
                                   "wait for it to finish (cameo migrations) and retry")
        lent = self.placements[name].lessees_of(step)
        if lent and not lessees:  # a lessee's partials are no key's whole state: none moves
            raise ReconfigConflict(where, "a step without lessees", [str(a) for a in lent],
                                   "give them back first (lease the step 0 lessees), then retry")
        return info, self.placements[name], where

    def _check_executor(self, index: Any, where: str) -> None:
        known = [i for i in range(len(self.executors)) if i not in self.dead]
        if type(index) is not int or index not in known:
            why = f" ({self.dead[index]})" if type(index) is int and index in self.dead else ""
            raise ReconfigError(where, f"one of the pool's live executors {known}",
                                index, f"name a live executor{why}; see `cameo executors`")
        if index in self.draining:
            raise ReconfigConflict(where, "an executor that is not being removed", index,
                                   "name another executor")

    def _migration_id(self) -> str:
        self._migration_seq += 1
        return f"m{self._migration_seq}"

    def _start(self, info: DataflowInfo, m: Migration) -> dict[str, Any]:
        """Register `m` and carry it out in its own thread."""
        self.migrations[m.id] = m
        for old in [k for k, v in self.migrations.items() if v.state != "running"][:-MIGRATIONS_KEPT]:
            del self.migrations[old]
        if not m.epochs and not m.new and not m.retire:
            m.finish()
            return m.info()
        self.migrating[m.dataflow] = m.id
        threading.Thread(target=self._run, args=(info, m), name=f"cameo-{m.id}", daemon=True).start()
        return m.info()

    def _await_checkpoint_done(self, name: str) -> None:
        """A migration starts once the dataflow's checkpoint under way is done (none starts
        while it runs): a checkpoint's cut and a routing switch do not mix."""
        deadline = time.monotonic() + CHECKPOINT_TIMEOUT_S
        while name in self._checkpointing and time.monotonic() < deadline:
            time.sleep(0.005)

    def _run(self, info: DataflowInfo, m: Migration) -> None:
        """Create the new instances, switch epoch after epoch, retire the old instances."""
        name, step = m.dataflow, m.step
        try:
            self._await_checkpoint_done(name)
            if m.kind == "lease":
                self._run_lease(info, m)
            else:
                self._switch(info, m)
            with self._lock:
                self._placed(info, m.final_placement())
                if m.kind != "lease":
                    info["spec"]["steps"] = [{**s, "parallelism": m.to_parallelism}
                                             if s["id"] == step else s for s in info["spec"]["steps"]]
            error = None
        except Exception as e:  # reported with the migration; the dataflow goes on
            logger.exception("migration %s of %s failed", m.id, name)
            error = short_cause(e)
        live = sorted(set(m.placement.executors()) - set(self.dead))
        get_each([self.executors[i].end_migration.remote(name, step) for i in live])
        with self._lock:
            self.migrating.pop(name, None)
            self._due[name] = 0.0  # the new placement's first checkpoint: at once
        self._save()
        m.finish(error)  # last: a client that waited for it may start the next one

    def _switch(self, info: DataflowInfo, m: Migration) -> None:
        """Create the new instances, switch epoch after epoch, retire the old instances."""
        name, step = m.dataflow, m.step
        spec = DataflowSpec.from_dict(info["spec"])
        hosts = sorted(set(m.placement.executors()) - set(self.dead))
        if m.new:
            new = [f"{name}/{step}/{i}" for i in m.new]
            get([self.executors[i].add_instances.remote(info["spec"], m.placement, new,
                                                        info["recoveries"], info["deployment"])
                 for i in hosts])
            with self._lock:
                self._placed(info, m.placement)
        inputs = set(spec.step(step).inputs)
        base = self._bytes_sent(m)  # the counters are per instance, over its life
        while m.epochs_done < len(m.epochs):
            table = m.next_table()
            moves = m.epochs[m.epochs_done]
            on_step = sorted({ex for a, ex in m.placement.instances.items() if a.step == step})
            upstream = sorted({ex for a, ex in m.placement.instances.items() if a.step in inputs})
            get([self.executors[i].prepare.remote(name, step, table.version, moves)
                 for i in on_step])
            self._await_index(info, m, on_step)
            get([self.executors[i].reroute.remote(name, step, table.version,
                                                  list(table.owners), m.instances())
                 for i in upstream])
            m.bytes_moved = self._await_epoch(info, m, on_step, table.version) - base
            m.epoch_done(table, len(moves))
            with self._lock:
                self.placements[name] = m.placement
        if m.retire:
            gone = [f"{name}/{step}/{i}" for i in m.retire]
            get([self.executors[i].retire.remote(name, gone) for i in hosts])

    def _bytes_sent(self, m: Migration) -> int:
        on_step = sorted({ex for a, ex in m.placement.instances.items() if a.step == m.step})
        parts = get([self.executors[i].epochs.remote(m.dataflow, m.step) for i in on_step])
        return sum(d["bytes_sent"] for part in parts for d in part.values())

    def _await_index(self, info: DataflowInfo, m: Migration, executors: builtins.list[int]
                     ) -> None:
        """Let the instances that give bins index their state before the switch (only a
        migration's first epoch has to): nothing is held meanwhile, so the switch that
        follows is short."""
        deadline = time.time() + self.config.epoch_timeout_s
        while info["state"] in LIVE_STATES and time.time() < deadline:
            parts = get([self.executors[i].epochs.remote(m.dataflow, m.step) for i in executors])
            if not any(d.get("indexing") for part in parts for d in part.values()):
                return
            time.sleep(0.02)

    def _await_epoch(self, info: DataflowInfo, m: Migration, executors: builtins.list[int],
                     version: int) -> int:
        """Wait until every instance of the step finished `version`; returns bytes moved."""
        deadline = time.time() + self.config.epoch_timeout_s
        while True:
            if info["state"] not in LIVE_STATES:
                raise CameoError(f"dataflow {m.dataflow!r} ended during the migration "
                                 f"({info['state']})")
            parts = get([self.executors[i].await_epoch.remote(m.dataflow, m.step, version,
                                                                EPOCH_WAIT_S)
                         for i in executors])
            done = [d for part in parts for d in part.values()]
            if done and all(d["done"] >= version for d in done):
                return sum(d["bytes_sent"] for d in done)
            if not done:  # its parts are being freed: the state says why next time
                time.sleep(0.01)
            if time.time() > deadline:
                raise CameoError(f"epoch {version} of migration {m.id} did not finish within "
                                 f"{self.config.epoch_timeout_s:g} s")

    def _placed(self, info: DataflowInfo, placement: Placement) -> None:
        """Record a dataflow's new placement: hosts, executors, load."""
        old = self.placements.get(info["name"])
        if old is not None:
            for ex in old.instances.values():
                self.load[ex] = self.load.get(ex, 0) - 1
        for ex in placement.instances.values():
            self.load[ex] = self.load.get(ex, 0) + 1
        self.placements[info["name"]] = placement
        info["hosts"] = placement.hosts
        info["executors"] = sorted(placement.executors())

    # -- lookups ----------------------------------------------------------------------------
    def _record(self, name: str) -> DataflowInfo:
        info = self.dataflows.get(name)
        if info is None:
            raise DataflowNotFound(name, sorted(self.dataflows))
        return info

    def _info(self, name: str) -> DataflowInfo:
        """A live dataflow's record (running or finishing)."""
        info = self._record(name)
        if info["state"] not in LIVE_STATES:
            raise DataflowEnded(name, info["state"], info["cause"])
        return info

    def describe(self, name: str) -> DataflowInfo:
        """Spec, placement and lifecycle: what a client needs to push to and read from it."""
        return self._record(name)

    def list(self, states: Sequence[str] | None = None) -> builtins.list[DataflowSummary]:
        """Every dataflow kept (live and ended), or those in `states`."""
        return [{"name": n, "tenant": d["spec"]["tenant"],
                 "latency_target_ms": d["spec"]["latency_target_ms"], "state": d["state"],
                 "executors": d["executors"], "submitted_at": d["submitted_at"],
                 "ended_at": d["ended_at"]}
                for n, d in list(self.dataflows.items()) if not states or d["state"] in states]

    def settling(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """What a client waiting for `names` (None: every live or finished dataflow whose
        results are kept) must know of the pool: each one's state, cause, executors and
        the migration under way, and the executors restarting or gone."""
        with self._lock:
            if names is None:
                names = [n for n, d in self.dataflows.items()
                         if d["state"] in LIVE_STATES or not d["released"]]
            dataflows = {}
            for name in names:
                info = self._record(name)
                dataflows[name] = {"state": info["state"], "cause": info["cause"],
                                   "released": info["released"],
                                   "executors": list(info["executors"]),
                                   "migration": self.migrating.get(name)}
            return {"dataflows": dataflows, "restarting": sorted(self.restarting),
                    "dead": sorted(self.dead)}

    def lifecycle_counts(self) -> tuple[builtins.list[tuple[str, str, int]], dict[str, int]]:
        """(transitions per (tenant, state) since the pool started, dataflows per state now)."""
        now = Counter(d["state"] for d in list(self.dataflows.values()))
        return [(t, s, n) for (t, s), n in sorted(self.transitions.items())], dict(now)

    def executor_handles(self) -> builtins.list[Any]:
        return list(self.executors)

    def config_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    def executor_stats(self) -> builtins.list[ExecutorStats]:
        live = [i for i in range(len(self.executors)) if i not in self.dead]
        answers = get_each([self.executors[i].executor_stats.remote() for i in live])
        out: dict[int, ExecutorStats] = {i: a for i, a in zip(live, answers, strict=True) if a}
        for i in range(len(self.executors)):
            if i not in out:
                out[i] = {"executor": i, "alive": i not in self.dead,
                          "faults": [self.dead.get(i, "did not answer in time")]}
        return [out[i] for i in sorted(out)]

    def shutdown(self, forget: bool = True) -> None:
        """Stop the executors. `forget`: the pool is stopped for good (its registry and
        checkpoints go); else a next controller on this storage restores its dataflows."""
        self._stopped.set()
        get_each([e.stop.remote() for i, e in enumerate(self.executors) if i not in self.dead])
        for e in self.executors:
            if e is not None:
                ray.kill(e)
        if forget and self.storage is not None:
            for info in list(self.dataflows.values()):
                self._drop_storage(info)
            self.storage.save_registry({})
        elif not forget:  # kept on purpose: a start afresh must not delete it
            self.resumable = True
            self._save()

    def _drop_storage(self, info: DataflowInfo) -> None:
        """Delete a dataflow's checkpoints (a part still being written may be in the way
        for a moment: tried again once)."""
        for attempt in (1, 2):
            try:
                if self.storage is not None:
                    self.storage.drop(info["name"], info["deployment"])
                return
            except StorageError as e:
                if attempt == 2:
                    logger.warning("the checkpoints of %s could not be deleted: %s",
                                   info["name"], e)
                time.sleep(0.2)

    # -- checkpoints (checkpoint.py) ------------------------------------------------------------
    def _checkpointer(self) -> None:
        """Start each dataflow's checkpoint when it is due (one under way per dataflow;
        none during a migration or a recovery of it)."""
        while not self._stopped.wait(0.05):
            now = time.monotonic()
            with self._lock:
                due = [n for n, d in self.dataflows.items()
                       if d["state"] in (RUNNING, FINISHING) and d["checkpoints"]["interval_s"] > 0
                       and n not in self.migrating and n not in self._checkpointing
                       and self._due.get(n, 0.0) <= now]
                self._checkpointing.update(due)
            for name in due:
                self._checkpoints.submit(self._checkpoint_quietly, name)

    def _checkpoint_quietly(self, name: str) -> None:
        try:
            self._take_checkpoint(name)
        except CameoError as e:  # an executor is gone: the monitor restores; next one on time
            self._count_failed(name)
            logger.warning("checkpoint of %s failed: %s", name, e)
        except Exception:  # counted; the next one is tried on time
            self._count_failed(name)
            logger.exception("checkpoint of %s failed", name)
        finally:
            with self._lock:
                self._checkpointing.discard(name)
                info = self.dataflows.get(name)
                if info is not None:  # at least twice its last duration apart, as Flink's
                    counts = info["checkpoints"]  # min pause: it never takes the executor over
                    self._due[name] = time.monotonic() + max(
                        counts["interval_s"], 2 * (counts["last_duration_s"] or 0.0))

    def _take_checkpoint(self, name: str) -> bool:
        """Checkpoint `name` now: barriers at its sources, wait for every activation's
        part, then the manifest (the checkpoint counts from then on) and the news to the
        executors (results before it readable, ingress logs trimmed). True if completed."""
        info = self.dataflows[name]
        placement = self.placements[name]
        counts = info["checkpoints"]
        # Numbers never repeat, not even across a controller's restart: a barrier of an
        # abandoned checkpoint still in flight must not count for a new one.
        ckpt = max((counts["last"] or 0) + 1, int(time.time() * 1000))
        started = time.monotonic()
        by_executor: dict[int, builtins.list[str]] = {}
        for aid, ex in placement.hosts.items():
            by_executor.setdefault(ex, []).append(aid)
        sources = {str(a) for s in info["spec"]["steps"] if s["op"] == "source"
                   for a in placement.of_step(s["id"])}
        get([self.executors[i].checkpoint.remote(name, ckpt)
             for i in sorted({placement.hosts[a] for a in sources})])
        answers = get_each([self.executors[i].await_checkpoint.remote(
            name, ckpt, ids, CHECKPOINT_TIMEOUT_S) for i, ids in sorted(by_executor.items())],
            timeout_s=CHECKPOINT_TIMEOUT_S + 30.0)
        written: dict[str, tuple[str, dict[str, int], int]] = {}
        for part in answers:
            written.update(part or {})
        if set(written) != set(placement.hosts) or info["state"] not in (RUNNING, FINISHING) \
                or info["released"] or self.placements.get(name) is not placement \
                or self.storage is None:
            self._count_failed(name)
            return False
        positions = {a: pos for a, (_, pos, _) in written.items() if a in sources}
        size = sum(n for _, _, n in written.values())
        self.storage.commit(name, info["deployment"], ckpt, {
            "parts": {a: path for a, (path, _, _) in written.items()}, "positions": positions,
            "placement": placement.to_dict(), "spec": info["spec"], "bytes": size})
        get_each([self.executors[i].checkpointed.remote(name, ckpt, positions)
                  for i in sorted(by_executor)])
        self.storage.retire(name, info["deployment"], self.config.checkpoints_kept)
        with self._lock:
            counts["last"], counts["last_at"], counts["last_bytes"] = ckpt, time.time(), size
            counts["last_duration_s"] = time.monotonic() - started
            counts["completed"] += 1
            info["recoveries_in_a_row"] = 0
        return True

    def _count_failed(self, name: str) -> None:
        with self._lock:
            info = self.dataflows.get(name)
            if info is not None:
                info["checkpoints"]["failed"] += 1

    def checkpoint_now(self, names: Sequence[str] | None = None) -> dict[str, bool]:
        """Checkpoint these dataflows (every live one with checkpoints, by default) now, in
        parallel; returns which completed. With exactly-once delivery, their results so
        far become readable (`Runtime.wait_idle` ends with this)."""
        with self._lock:
            wanted = [n for n, d in self.dataflows.items()
                      if (names is None or n in names) and d["state"] in (RUNNING, FINISHING)
                      and d["checkpoints"]["interval_s"] > 0]
        futures = {n: self._checkpoints.submit(self._checkpoint_when_free, n) for n in wanted}
        return {n: f.result() for n, f in futures.items()}

    def _checkpoint_when_free(self, name: str) -> bool:
        """A checkpoint of `name` after the one under way (if any); none while it migrates
        (the checkpoint after the migration follows at once)."""
        deadline = time.monotonic() + CHECKPOINT_TIMEOUT_S
        while time.monotonic() < deadline:
            with self._lock:
                if name in self.migrating:
                    return False
                if name not in self._checkpointing:
                    self._checkpointing.add(name)
                    break
            time.sleep(0.005)
        else:
            return False
        try:
            return self._take_checkpoint(name)
        except Exception as e:
            self._count_failed(name)
            logger.warning("checkpoint of %s failed: %s", name, short_cause(e))
            return False
        finally:
            with self._lock:
                self._checkpointing.discard(name)

    # -- critical paths (traces.py) -----------------------------------------------------------
    def _tracer(self) -> None:
        """Collect the executors' activities and analyse each snapshot interval; a thread
        of its own, so that analysing never delays the monitor's liveness checks, and at
        a lower OS priority (`trace_niceness`), so that it takes the CPU the executors leave."""
        lower_thread_priority(self.config.trace_niceness)
        while not self._stopped.wait(self.config.trace_snapshot_s):
            try:
                live = [i for i in range(len(self.executors))
                        if i not in self.dead and i not in self.restarting]
                answers = get_each([self.executors[i].traces.remote() for i in live],
                                   timeout_s=10.0)
                self.traces.tick(time.time() * 1000.0, {
                    i: a for i, a in zip(live, answers, strict=True) if a is not None})
            except Exception:  # a bug here must not stop tracing for good
                logger.exception("controller: analysing traces failed")

    def explain(self, name: str | None = None, last_s: float = 60.0) -> dict[str, Any]:
        """What the critical paths of `name`'s results (None: of the whole pool) were
        made of over the last `last_s` seconds (`cameo_actors.tracing.explain`)."""
        target = None
        if name is not None:
            target = float(self._record(name)["spec"]["latency_target_ms"])
        return self.traces.explain(name, last_s, time.time() * 1000.0, target)

    def critical_path(self) -> dict[str, Any]:
        """The newest snapshot's critical participation per operator and executor."""
        return self.traces.latest(time.time() * 1000.0)

    # -- self-scaling (autoscale.py) -------------------------------------------------------
    def scaling_status(self, name: str | None = None) -> dict[str, Any]:
        if name is not None:
            self._info(name)
        return self.scaling.status(name)

    def set_scaling(self, name: str, settings: dict[str, Any] | None = None,
                    pin: dict[str, int | None] | None = None) -> dict[str, Any]:
        """A dataflow's own scaling settings (None without pins: the pool's again), and
        steps pinned to a parallelism by an operator (a step mapped to None is unpinned;
        pins alone keep the dataflow's settings)."""
        info = self._info(name)
        spec = DataflowSpec.from_dict(info["spec"])
        own = None if settings is None else settings_from_dict(
            {**self.config.scaling, **settings}, where=f"dataflow {name!r}: scaling")
        ids = [s.id for s in spec.steps if is_keyed_step(spec, s)]
        for step, p in (pin or {}).items():
            if step not in ids:
                raise ScalingConfigError(f"dataflow {name!r}: pin", f"one of its scalable "
                                         f"steps {ids}", step, "pin a keyed window, join or "
                                         "process step")
            if p is not None and (type(p) is not int or not 1 <= p <= self.config.bins):
                raise ScalingConfigError(f"dataflow {name!r}: pin {step!r}", "a parallelism "
                                         f"from 1 to {self.config.bins}", p, "give a whole "
                                         "number of instances, or null to unpin")
        if settings is not None or not pin:  # pins alone keep the dataflow's settings
            self.scaling.set_dataflow(name, own)
        for step, p in (pin or {}).items():
            self.scaling.scaler.pin(name, step, p)
        return self.scaling.status(name)

    def report_backlog(self, name: str, source: str, events: float) -> None:
        """Events a writer holds for `source` that it could not send yet (its lag): the
        scaling policies count it as backlog, and its growth as offered rate."""
        if name in self.dataflows and isinstance(events, (int, float)) and events >= 0:
            self.scaling.rates.report_backlog(time.time(), name, source, float(events))

    def lessees_of(self, name: str) -> dict[str, builtins.list[str]]:
        """step -> its lessee instances (Dirigo), for the dataflows that have some."""
        placement = self.placements.get(name)
        if placement is None:
            return {}
        out: dict[str, builtins.list[str]] = {}
        for aid in sorted(placement.lessees, key=str):
            out.setdefault(aid.step, []).append(str(aid))
        return out

    def only_keyed_on(self, index: int) -> bool:
        """Whether executor `index` hosts nothing that cannot move (sources, sinks,
        stateless steps, lessees): it can be given back."""
        return not any(a.step not in p.tables or a in p.lessees
                       for n, p in self.placements.items()
                       if not self.dataflows[n]["released"] for a in p.on(index))

    # -- the monitor -----------------------------------------------------------------------
    def _monitor(self) -> None:
        while not self._stopped.wait(self.config.monitor_interval_s):
            for check in (self._check_executors, self._check_finishing, self._check_usage,
                          self._expire):
                try:
                    check()
                except Exception:  # a bug here must not stop the other checks
                    logger.exception("controller: %s failed", check.__name__)

    def _check_executors(self) -> None:
        # An executor being added has no incarnation recorded yet: not a restart.
        live = [i for i in range(len(self.executors))
                if i not in self.dead and i not in self.restarting and i in self.incarnations]
        refs = [self.executors[i].ping.remote() for i in live]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=10.0)
        done = set(ready)
        for i, ref in zip(live, refs, strict=True):
            if ref not in done:
                continue  # slow, not dead: asked again next time
            try:
                _, incarnation = ray.get(ref, timeout=0)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                self._executor_lost(i, short_cause(e))
                continue
            if incarnation != self.incarnations.get(i):
                self._executor_lost(i, "it was restarted")

    def _executor_lost(self, index: int, cause: str) -> None:
        """Executor `index` died: its dataflows are `recovering` until Ray restarted it
        and they are restored there from their last checkpoints."""
        why = f"executor {index} died: {cause}"
        with self._lock:
            if index in self.restarting:
                return
            self.restarting.add(index)
            logger.error("%s", why)
            hit = [n for n, d in self.dataflows.items()
                   if d["state"] in LIVE_STATES and not d["released"] and index in d["executors"]]
            for name in hit:
                self._mark_recovering(self.dataflows[name], why)
        threading.Thread(target=self._restart, args=(index, why, hit), daemon=True,
                         name=f"cameo-restart-{index}").start()

    def _mark_recovering(self, info: DataflowInfo, why: str) -> None:
        info["cause"] = why  # first: a reader never sees `recovering` without its cause
        self.losses[info["name"]] += 1
        if info["state"] != RECOVERING:
            info["resume_state"] = info["state"]
            self._enter(info, RECOVERING, why)

    def _restart(self, index: int, why: str, hit: builtins.list[str]) -> None:
        """Wait for Ray to restart executor `index` (on any node with room), link it to
        the others, then restore the dataflows it hosted; fail them if it never comes."""
        deadline = time.time() + self.config.recovery_timeout_s
        incarnation = None
        while incarnation is None and time.time() < deadline and not self._stopped.is_set():
            try:
                incarnation = ray.get(self.executors[index].ping.remote(), timeout=5.0)[1]
            except Exception:  # still restarting
                time.sleep(0.1)
        if incarnation is None:
            with self._lock:
                self.dead[index] = f"{why}; it was not restarted within " \
                                   f"{self.config.recovery_timeout_s:g} s"
                self.restarting.discard(index)
            for name in hit:
                self.fail(name, self.dead[index], lost=True)
            return
        with self._lock:
            self.incarnations[index] = incarnation
            others = [i for i in range(len(self.executors))
                      if i not in self.dead and i != index]
            get(self.executors[index].set_peers.remote(self.executors, self.incarnations))
            get_each([self.executors[i].relink.remote(index, self.executors[index], incarnation)
                      for i in others])
            self.restarting.discard(index)
        self._recover_all(hit, why)

    def _recover_all(self, names: builtins.list[str], why: str) -> None:
        """Restore each of `names`. A part of the pool that dies meanwhile (a second
        executor killed during the restore) is waited for and the restore tried again,
        until `recovery_timeout_s`; one thread restores a dataflow at a time."""
        deadline = time.time() + self.config.recovery_timeout_s
        for name in names:
            with self._lock:
                if name in self.restoring:
                    continue  # that thread tries again once the pool is whole
                self.restoring.add(name)
            try:
                attempt = 0
                while not self._recover(name, why, again=attempt > 0):
                    attempt += 1
                    if not self._await_pool(deadline):
                        raise RuntimeUnavailable(f"a part of the pool died again during "
                                                 f"the restore, {attempt} times")
            except Exception as e:
                logger.exception("recovering %s failed", name)
                self.fail(name, f"{why}; restoring it failed: {short_cause(e)}", lost=True)
            finally:
                with self._lock:
                    self.restoring.discard(name)

    def _await_pool(self, deadline: float) -> bool:
        """Wait until no executor is restarting, noticing restarts the monitor has not
        noticed yet; False at `deadline`."""
        while time.time() < deadline and not self._stopped.is_set():
            self._check_executors()
            with self._lock:
                if not self.restarting:
                    return True
            time.sleep(0.2)
        return False

    def _recover(self, name: str, why: str, again: bool = False) -> bool:
        """Restore `name` on its executors from its last completed checkpoint, its inputs
        replayed from the sources' ingress logs after it. False if a part of the pool
        died meanwhile (`again`: the same loss, tried once more)."""
        info = self.dataflows[name]
        if info["state"] != RECOVERING:
            return True
        losses = self.losses[name]
        spec = DataflowSpec.from_dict(info["spec"])
        manifest = self.storage.latest(name, info["deployment"]) \
            if self.storage is not None and interval_s(spec, self.config) > 0 else None
        if manifest is None:
            self.fail(name, f"{why}; it has no checkpoint to restore (checkpoints off: "
                            "fault_tolerance.checkpoint_interval_ms is 0)", lost=True)
            return True
        info["recoveries"] += 1  # also the restore's generation: a new one per attempt
        in_a_row = info["recoveries_in_a_row"] = info["recoveries_in_a_row"] + (not again)
        if in_a_row > self.config.max_recoveries:
            self.fail(name, f"{why}; it was restored {in_a_row - 1} times in a row without a "
                            "checkpoint completing in between (an event that crashes its "
                            "executor?). Fix: see its error output and exceptions, then "
                            "deploy it again", lost=True)
            return True
        # The checkpoint's steps (their parallelism) and placement, today's target and weight.
        restored = {**manifest["spec"], "latency_target_ms": info["spec"]["latency_target_ms"],
                    "scheduling": info["spec"]["scheduling"]}
        placement = Placement.from_dict(manifest["placement"])
        before = self.placements.get(name)
        left = set(before.executors()) - placement.executors() if before else set()
        get_each([self.executors[i].cancel.remote(name) for i in sorted(left)
                  if i not in self.dead])
        involved = sorted(placement.executors())
        timeout = self.config.recovery_timeout_s
        try:
            get([self.executors[i].restore.remote(restored, placement, info["deployment"],
                                                  manifest["parts"], info["recoveries"])
                 for i in involved], timeout_s=timeout)
            get([self.executors[i].resume.remote(name) for i in involved], timeout_s=timeout)
        except RuntimeUnavailable as e:
            logger.warning("restoring %s: %s; trying again once the pool is whole", name, e)
            return False
        with self._lock:
            if self.losses[name] != losses:  # an executor of it died after its restore
                return False
            self._placed(info, placement)
            info["spec"] = restored
            if info["state"] == RECOVERING:
                back, info["resume_state"] = info["resume_state"] or RUNNING, None
                self._enter(info, back, f"restored from checkpoint {manifest['checkpoint']}")
                info["cause"] = None
        logger.warning("dataflow %s restored from checkpoint %s", name, manifest["checkpoint"])
        return True

    def _check_finishing(self) -> None:
        finishing = [d for d in list(self.dataflows.values()) if d["state"] == FINISHING]
        for info in finishing:
            live = [i for i in info["executors"] if i not in self.dead]
            answers = get_each([self.executors[i].ended.remote(info["name"]) for i in live],
                               timeout_s=10.0)
            if answers and all(answers):
                # The last results become readable (exactly-once) and need no replay.
                if info["checkpoints"]["interval_s"] > 0 and \
                        not self.checkpoint_now([info["name"]]).get(info["name"]):
                    continue
                with self._lock:
                    if info["state"] == FINISHING:
                        self._enter(info, FINISHED, "every source closed and drained")

    def _check_usage(self) -> None:
        """State budgets, and the samples of rates and costs behind the overload report."""
        live = [i for i in range(len(self.executors)) if i not in self.dead]
        usage: dict[str, Counter[str]] = {}
        for part in get_each([self.executors[i].usage.remote() for i in live], timeout_s=10.0):
            for name, counts in (part or {}).items():
                usage.setdefault(name, Counter()).update(counts)
        self.loads.observe(time.monotonic(), usage, {
            n: d["spec"] for n, d in list(self.dataflows.items()) if d["state"] in LIVE_STATES})
        self._report_overload()
        default = self.config.state_budget_bytes
        for name, used in ((n, int(u["bytes"])) for n, u in usage.items()):
            info = self.dataflows.get(name)
            if info is None or info["released"]:
                continue
            info["state_bytes"] = used
            budget = info["spec"].get("limits", {}).get("state_bytes") or default
            if used > budget and info["state"] in LIVE_STATES:
                self.fail(name, f"over its state budget: about {used} bytes of operator state "
                                f"and unread results, budget {budget} bytes. Fix: read and "
                                "commit results sooner, use smaller or fewer windows, or set "
                                "limits.state_bytes in the spec (up to the pool's "
                                "max_state_bytes)")

    def _expire(self) -> None:
        now = time.time()
        with self._lock:
            ended = sorted((d for d in self.dataflows.values() if d["ended_at"] is not None),
                           key=lambda d: d["ended_at"] or 0.0)
            excess = len(ended) - self.config.ended_kept
            for i, info in enumerate(ended):
                if i < excess or now - (info["ended_at"] or now) > self.config.ended_retention_s:
                    self._release(info)
                    del self.dataflows[info["name"]]
                    self.placements.pop(info["name"], None)


def _request_cpus(cpus: float) -> None:
    """Ask Ray's autoscaler for `cpus` in all (a no-op without one, as on one machine)."""
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(num_cpus=int(cpus + 0.999))
    except Exception:  # no autoscaler here: the executors start where CPUs are free
        logger.debug("no autoscaler to ask for %s CPUs", cpus, exc_info=True)


def _fix(prediction: Prediction, name: str) -> str:
    """What would make a refused dataflow fit, in words."""
    ways = []
    have = prediction.capacity_ms_per_s / 1000.0
    if prediction.executors_needed is not None and prediction.executors_needed > have:
        ways.append(f"grow the pool to {prediction.executors_needed} executors (it has "
                    f"{have:.0f})")
    if prediction.max_rate_eps is not None:
        ways.append(f"send {name!r} at most {prediction.max_rate_eps:,.0f} events/s "
                    "(scheduling.expected_rate_eps)")
    ways.append("lower the load of the tenants over their share, or submit to a pool whose "
                "admission setting is \"warn\" or \"admit\"")
    return "; or ".join(ways)
