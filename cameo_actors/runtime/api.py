"""The Python API of the runtime: start or join a pool, deploy dataflows, push
events, read results and latency.

>>> from cameo_actors import Dataflow, Runtime
>>> rt = Runtime.start()                                  # doctest: +SKIP
>>> rt.deploy(Dataflow("errors", latency_target_ms=50)
...           .source("logs", schema={"ts": "int", "level": "str"}, event_time="ts")
...           .filter("level == 'ERROR'").sink("alerts"))  # doctest: +SKIP
>>> rt.push("errors", "logs", [{"ts": 1, "level": "ERROR"}])  # doctest: +SKIP
>>> rt.close("errors"); rt.wait_idle()                    # doctest: +SKIP
>>> rt.results("errors")                                  # doctest: +SKIP
[{'ts': 1, 'level': 'ERROR'}]

The embedded default starts a private local Ray (`address="local"`), so it
never attaches by accident to a cluster someone else started; pass
`address=` to join one.
"""

from __future__ import annotations

import atexit
import builtins
import itertools
import logging
import os
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import pyarrow as pa
import ray

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError
from cameo_actors.operators.base import END_OF_STREAM, ErrorRecord, Event
from cameo_actors.operators.columns import concat_results, conform
from cameo_actors.runtime._private import cluster
from cameo_actors.runtime._private.checkpoint.shared import FIX as SHARED_STORAGE_FIX
from cameo_actors.runtime._private.checkpoint.shared import storage_unseen
from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage
from cameo_actors.runtime._private.client import settle
from cameo_actors.runtime._private.cluster import NAMESPACE, controller_name, get
from cameo_actors.runtime._private.controller.actor import Controller
from cameo_actors.runtime._private.exchange.ingest import pack_columns, pack_ingest
from cameo_actors.runtime._private.exchange.wire import pack_events
from cameo_actors.runtime._private.stats import dataflow_metrics, dataflow_stats
from cameo_actors.runtime.boundary import (
    FINISHED,
    LIVE_STATES,
    RECOVERING,
    ActivationId,
    DataflowInfo,
    DataflowMetrics,
    DataflowStats,
    DataflowSummary,
    ErrorLogOffsets,
    ExecutorStats,
    LogOffsets,
    MigrationInfo,
    PoolSnapshot,
    Pressure,
    Rejected,
    ResultRow,
    error_log_id,
)
from cameo_actors.runtime.config import RuntimeConfig, default_run_dir, storage_not_shared
from cameo_actors.runtime.exceptions import (
    DataflowEnded,
    DataflowNotFound,
    PoolInUse,
    PoolKept,
    PoolNotFound,
    ReconfigFailed,
    RuntimeUnavailable,
    StorageNotShared,
)

T = TypeVar("T")
logger = logging.getLogger(__name__)
#: An ingest call not yet answered: (Ray ref, dataflow, source activation, seq, blob).
InFlight = tuple[Any, str, str, int, bytes]

#: Events per ingest call: a Ray call costs about 1 ms, so batches, not single events.
DEFAULT_BATCH = 2_000
#: Ingest calls in flight per executor before push waits for one to return; only one
#: while that executor's answers say a source of it is pressed (`PRESSED_SHARE` full).
#: A call to a full source holds one of the executor's ingest threads until there is
#: room, so a writer that kept eight there would keep other tenants' batches out.
MAX_IN_FLIGHT = 8
PRESSED_SHARE = 0.5
#: How long a handle trusts what it knows of a dataflow (placement, state) before asking again.
DESCRIBE_TTL_S = 1.0
#: How often a push waiting for its batches' answers asks whether their sources moved.
MOVED_CHECK_S = 1.0
#: How long a reconfiguration called with `wait=True` is waited for by default.
WAIT_TIMEOUT_S = 120.0


# Aliases: inside the class, `list` names the Runtime.list method.
Rows = list[ResultRow]
Events = list[Event]


def start_local_ray(run_dir: str | None = None, num_cpus: int | None = None, *,
                    log_to_driver: bool = True) -> None:
    """Start a private local Ray on loopback for this process, before any pool (tests and
    benchmarks start one per session; `Runtime.start` then finds it running)."""
    cluster.init_local(run_dir, num_cpus, log_to_driver=log_to_driver)


def _start_afresh(storage: CheckpointStorage, config: RuntimeConfig, pool: str) -> None:
    """Before a new pool starts without `resume`: delete what an earlier run of it left
    (checkpoints, registry, ingress logs), unless that run was kept to be restored."""
    registry = storage.load_registry()
    if not registry:
        return
    names = sorted(registry.get("dataflows", {}))
    owner = registry.get("owner") or {}
    if owner.get("host") == socket.gethostname() and _is_controller(owner.get("pid")):
        raise PoolInUse(
            f"pool {pool!r} in {config.checkpoint_url} is in use: its controller runs in "
            f"process {owner['pid']} on this machine (another script or service). Fix: "
            "give this pool another name (Runtime.start(pool=...)) or run folder (run_dir=), "
            "or stop that one first")
    if registry.get("resumable"):
        raise PoolKept(
            f"pool {pool!r} was kept to be restored with {len(names)} dataflow(s) "
            f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}) in "
            f"{config.checkpoint_url}. Fix: Runtime.start(resume=True) (or `cameo serve`) "
            "restores them; Runtime.start(pool=...) with another name starts a pool beside "
            "it; deleting that folder drops them")
    storage.discard_registry(names)
    for folder in (config.ingress_log_dir, config.local_recovery_dir):
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    logger.info("pool %r starts empty: %d dataflow(s) of an earlier run deleted (%s); "
                "Runtime.start(resume=True) would have restored them", pool, len(names),
                ", ".join(names))


def _is_controller(pid: Any) -> bool:
    """Whether process `pid` on this machine is a pool's controller (a Ray actor)."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as f:
            return f.read().startswith(b"ray::Controller")
    except (OSError, TypeError, ValueError):  # gone, or no /proc: nobody to protect
        return False


def _spec_dict(dataflow: Any) -> dict[str, Any]:
    """A spec's dict form from a builder's `Dataflow` (anything with `.spec`), a
    `DataflowSpec` or a dict (validated)."""
    if isinstance(dataflow, dict):
        return DataflowSpec.from_dict(dataflow).to_dict()
    spec = getattr(dataflow, "spec", dataflow)
    if not isinstance(spec, DataflowSpec):
        raise TypeError(f"deploy: expected a Dataflow, DataflowSpec or spec dict, got "
                        f"{type(dataflow).__name__}")
    return spec.to_dict()


class Runtime:
    """A handle on one executor pool and its dataflows. Cheap to create; many
    processes may hold handles on the same pool."""

    def __init__(self, pool: str, controller: Any, owns_ray: bool, *, found: bool = True,
                 embedded: bool = False, like: Runtime | None = None) -> None:
        self.pool = pool
        self.controller = controller
        # Another handle on the pool (`handle`) takes what this process knows already.
        self.config: RuntimeConfig = like.config if like is not None else \
            RuntimeConfig.from_dict(get(controller.config_dict.remote()))
        self.executors: list[Any] = list(like.executors) if like is not None else \
            get(controller.executor_handles.remote())
        self._owns_ray = owns_ray
        #: whether the pool was running before `start` (see `start`)
        self.found = found
        #: whether this handle started a private Ray (it ends with this process)
        self.embedded = embedded
        self._client = uuid.uuid4().hex
        #: the next call number per source activation (a source applies each client's
        #: calls in order, once: a call sent again after a failure is dropped if applied)
        self._seq: dict[str, itertools.count[int]] = {}
        #: calls not yet answered, per executor: kept to be sent again after a failure
        self._in_flight: dict[int, builtins.list[InFlight]] = {}
        #: executors whose last answers said a source of theirs was pressed (backpressure)
        self._pressed: set[int] = set()
        self._described: dict[str, tuple[float, DataflowInfo]] = {}  # name -> (when, info)
        self._offsets: dict[tuple[str, str], int] = {}
        self._recoveries: dict[str, int] = {}  # dataflow -> recoveries when last read
        self._deployments: dict[str, str] = {}  # dataflow -> the deployment pushed to
        self._round_robin = itertools.count()
        self._stopped = False  # shut down through this handle

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def start(cls, config: RuntimeConfig | None = None, *, pool: str = "default",
              address: str | None = None, run_dir: str | None = None,
              num_cpus: int | None = None, node_ip: str = "127.0.0.1",
              resume: bool = False) -> Runtime:
        """Start (or find) the pool `pool`, starting Ray first if needed.

        A new pool starts empty: what an earlier run of a pool of this name left in its
        storage (a script that ended without `shutdown`, or was killed) is deleted, unless
        `resume` asks to restore its dataflows from their checkpoints. A pool kept on
        purpose (by `cameo serve`, by a start with `resume=True`, or `shutdown(forget=False)`)
        is never deleted: starting it afresh raises `PoolKept`. A pool that is running
        (on a joined cluster) is found as it is; the handle's `found` says so, and its
        configuration is then the one it was started with.

        An embedded pool (a private Ray, `address=None`) ends with this process: at exit it
        is shut down, its storage deleted unless it was started with `resume=True`.

        Args:
            config: how the pool runs (used only when the pool is created).
            pool: the pool's name; several pools (e.g. one per scheduling mode) can coexist.
            address: a Ray cluster to join ("auto", "ray://host:10001", "host:6379");
                None starts a private local Ray.
            run_dir: where a private Ray keeps its files, and the pool its checkpoints and
                ingress logs unless `config` says where (default: ./.run).
            num_cpus: logical CPUs of a private Ray (default: 4x the cores, so that
                several pools fit; the executor count defaults to the cores).
            node_ip: the address a private Ray binds (loopback by default).
            resume: restore the dataflows an earlier run of this pool left in its storage.

        Raises:
            PoolKept: not `resume`, and the storage holds a pool kept to be restored.
            PoolInUse: not `resume`, and a process on this machine runs the pool whose
                storage this is (another script with the same pool name and run folder).
            StorageNotShared: a new pool on a Ray cluster of more than one node, its
                checkpoints or ingress logs left to the run folder of this node.
        """
        given = config = config or RuntimeConfig()
        # Checkpoints, ingress logs and local copies under the run folder unless the config
        # says where.
        run = os.path.abspath(run_dir or default_run_dir())
        config = replace(
            config,
            checkpoint_url=config.checkpoint_url or os.path.join(run, "checkpoints", pool),
            ingress_log_dir=config.ingress_log_dir or os.path.join(run, "ingress", pool),
            local_recovery_dir=config.local_recovery_dir or os.path.join(run, "local", pool))
        storage = CheckpointStorage(config.checkpoint_url or "")
        storage.check_writable()  # fails here, clearly
        owns = False
        private = not ray.is_initialized() and address is None
        if private and not resume:  # no pool can run yet: refuse before Ray starts
            _start_afresh(storage, config, pool)
        if not ray.is_initialized():
            if address is None:
                cluster.init_local(run_dir, num_cpus, node_ip=node_ip)
                if config.num_executors is None:
                    config = RuntimeConfig.from_dict({**config.to_dict(),
                                                      "num_executors": os.cpu_count() or 1})
            else:
                cluster.join(address)
            owns = True
        running = cluster.find_actor(controller_name(pool))
        found = running is not None
        if running is not None and not private:
            cluster.replace_other_code(running, controller_name(pool))
        if not found and address is not None:
            problem = storage_not_shared(given, cluster.alive_nodes())
            if problem:
                raise StorageNotShared(problem)
        if not found and not resume and not private:
            _start_afresh(storage, config, pool)
        # Ray restarts a controller that dies; it reads its registry back from storage.
        controller = Controller.options(  # type: ignore[attr-defined]
            name=controller_name(pool), namespace=NAMESPACE, lifetime="detached",
            max_restarts=-1, max_task_retries=-1, get_if_exists=True,
            **cluster.ON_THE_HEAD).remote(
                pool, config.to_dict(), resume)
        rt = cls(pool, controller, owns, found=found, embedded=owns and address is None)
        if not found and address is not None:
            problem = rt._storage_unseen(cluster.alive_nodes())
            if problem:
                rt.shutdown(stop_ray=False)
                raise StorageNotShared(problem)
        if rt.embedded:
            atexit.register(rt._at_exit, keep=resume)
        return rt

    @classmethod
    def connect(cls, *, pool: str = "default", address: str | None = "auto", auth: str = "auto",
                log_to_driver: bool = True) -> Runtime:
        """A handle on a pool that is already running (e.g. after a service restart).

        Joins the Ray cluster at `address` first unless this process is on one;
        `auth` is Ray's token auth mode for the join ("auto", "token", "disabled").

        Raises:
            ConnectionError: Ray cannot be joined there, or this process is on another cluster.
            PoolNotFound: no pool of that name runs on the cluster.
        """
        if not ray.is_initialized():
            cluster.join(address or "auto", auth=auth, log_to_driver=log_to_driver)
        elif address not in (None, "auto") and cluster.gcs_address() != address:
            raise ConnectionError(f"this process is on the Ray cluster at {cluster.gcs_address()}, "
                                  f"not {address}: one process talks to one cluster")
        controller = cluster.find_actor(controller_name(pool))
        if controller is None:
            raise PoolNotFound(f"no cameo pool named {pool!r} on this Ray cluster; start one with "
                               "Runtime.start() or `cameo serve`")
        return cls(pool, controller, owns_ray=False)

    def _storage_unseen(self, nodes: int) -> str | None:
        """Why the pool's storage is not one that every executor's node reaches, or None
        (a folder of the same name on each node is a disk of each node's own)."""
        unseen = storage_unseen(self.config, lambda token: enumerate(
            get([e.marks_missing.remote(token) for e in self.executors])))
        if unseen is None:
            return None
        return (f"starting a pool on a Ray cluster of {nodes} nodes: expected storage every "
                f"node reaches, got folders that are each node's own ({unseen}). "
                f"Fix: {SHARED_STORAGE_FIX}")

    def handle(self, client: str | None = None) -> Runtime:
        """Another handle on the same pool, with its own ingest order (for another thread).
        `client` names its calls instead of a random id: a writer that may push the same
        events again (a retried Spark task) names them the same, and each source drops
        the calls it applied already."""
        rt = type(self)(self.pool, self.controller, owns_ray=False, like=self)
        if client is not None:
            rt._client = client
        return rt

    def shutdown(self, *, stop_ray: bool | None = None, forget: bool = True) -> None:
        """Stop the pool's executors and controller (and Ray, if this handle started it).
        `forget=False` keeps the registry and checkpoints: a pool started again on the
        same storage with `resume=True` restores its dataflows."""
        self._stopped = True
        get(self.controller.shutdown.remote(forget))
        ray.kill(self.controller)
        if stop_ray if stop_ray is not None else self._owns_ray:
            ray.shutdown()

    def _at_exit(self, keep: bool) -> None:
        """An embedded pool ends with its process: stopped quietly before Ray's own exit
        handler takes its processes away (its storage kept only if it was resumed)."""
        if self._stopped or not ray.is_initialized() \
                or cluster.find_actor(controller_name(self.pool)) is None:
            return  # shut down already (through another handle)
        try:
            self.shutdown(forget=not keep)
        except Exception as e:  # exiting anyway: say why the storage may be left behind
            logger.warning("the pool %r did not shut down cleanly at exit: %s", self.pool, e)

    def disconnect(self) -> None:
        """Leave the Ray cluster; the pool goes on in a joined cluster (not in a private one)."""
        ray.shutdown()

    def cluster_info(self) -> dict[str, Any]:
        """The pool and the Ray cluster it runs on, for people (`cameo serve`'s /v1/info)."""
        return {"pool": self.pool, "policy": self.config.policy, "executors": len(self.executors),
                "allowed_modules": list(self.config.allowed_modules)
                if self.config.allowed_modules is not None else None,
                "ray": {"address": self.address, "embedded": self.embedded, **cluster.info()}}

    # -- dataflows -----------------------------------------------------------------------------
    def deploy(self, dataflow: Any) -> str:
        """Validate and start a dataflow (a `Dataflow`, a `DataflowSpec` or a spec dict);
        returns its name. A bad spec changes nothing."""
        info = get(self.controller.deploy.remote(_spec_dict(dataflow)))
        self._forget(str(info["name"]))  # an earlier run's record and read offsets are gone
        return str(info["name"])

    def _forget(self, name: str) -> None:
        self._described.pop(name, None)
        self._deployments.pop(name, None)
        self._forget_seq(name)
        for key in [k for k in self._offsets if k[0] == name]:
            del self._offsets[key]

    def predict(self, dataflow: Any = None) -> dict[str, Any]:
        """Admission control's prediction: whether every running dataflow, and `dataflow`
        (a `Dataflow`, `DataflowSpec` or spec dict) as if it were admitted, will meet its
        target at the measured rates and costs; who misses, by how much, which tenants'
        load causes it, and what would be needed (executors, a lower rate). Without
        `dataflow`: the pool's overload report now."""
        spec = None if dataflow is None else _spec_dict(dataflow)
        return dict(get(self.controller.predict.remote(spec)))

    def explain(self, name: str | None = None, *, last_s: float = 60.0) -> dict[str, Any]:
        """Why `name` (None: the pool) was late: its share of results within target and
        the ranked parts of its results' critical paths over the last `last_s` seconds
        (SnailTrail's critical participation, from traced activities; docs/runtime.md,
        "Critical paths").

        Example:
            >>> rt.explain("alerts", last_s=60)["words"][0]  # doctest: +SKIP
            'alerts: 93% of 1,200 traced results within the 50 ms target over the last 60 s'
        """
        return dict(get(self.controller.explain.remote(name, float(last_s))))

    def cancel(self, name: str) -> dict[str, Any]:
        result = get(self.controller.cancel.remote(name))
        self._forget(name)
        return dict(result)

    def update(self, name: str, *, latency_target_ms: float | None = None,
               weight: float | None = None) -> dict[str, Any]:
        result = dict(get(self.controller.update.remote(name, latency_target_ms, weight)))
        self._described.pop(name, None)  # stats() and describe() read the new target
        return result

    def list(self, states: Sequence[str] | None = None) -> builtins.list[DataflowSummary]:
        """The dataflows kept by the pool, live and ended (or only those in `states`, e.g.
        `boundary.LIVE_STATES`): name, tenant, target, state, executors, times."""
        return list(get(self.controller.list.remote(list(states) if states else None)))

    def describe(self, name: str, *, refresh: bool = False) -> DataflowInfo:
        """Spec, placement and lifecycle. Cached for up to `DESCRIBE_TTL_S`, so that pushes
        cost no extra call and still learn within a second that a dataflow ended;
        `refresh` asks the controller now."""
        now = time.monotonic()
        cached = self._described.get(name)
        if refresh or cached is None or now - cached[0] > DESCRIBE_TTL_S:
            cached = self._described[name] = (now, get(self.controller.describe.remote(name)))
            if max(cached[1]["executors"], default=-1) >= len(self.executors):
                self._refresh_executors()  # placed on an executor added since
        return cached[1]

    def _refresh_executors(self) -> None:
        self.executors = get(self.controller.executor_handles.remote())

    def _executor(self, index: int) -> Any:
        """Executor `index`'s handle. One retired for good has none (a handle of an
        actor whose job ended cannot be read): RuntimeUnavailable, as for a dead one, so
        that the call is made again from the dataflow's new record."""
        handle = self.executors[index]
        if handle is None:
            raise RuntimeUnavailable(f"executor {index} was retired: its dataflows were "
                                     "restored on the executors left")
        return handle

    # -- live reconfiguration ------------------------------------------------------------------
    def scale(self, name: str, step: str, parallelism: int, *, strategy: str = "batched",
              batch_bins: int | None = None, wait: bool = False,
              timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        """Give keyed step `step` (a window or join on a keyed stream) `parallelism`
        instances while the dataflow runs: bins move to new instances (or off retired
        ones) epoch by epoch, `strategy` "all_at_once", "batched" (`batch_bins` bins per
        epoch, default an eighth) or "fluid" (one bin per epoch). Returns at once (watch
        it with `migrations`, or wait with `wait_migration`), or with `wait` once it is
        done (up to `timeout_s`).

        Raises:
            ReconfigError: not a keyed step, a parallelism of 0 or above the pool's bins,
                an unknown strategy; nothing changed.
            ReconfigConflict: a migration of the dataflow is under way.
            ReconfigFailed: with `wait`, the migration failed (the dataflow goes on).
            TimeoutError: with `wait`, it was still under way after `timeout_s`.
        """
        return self._migration_started(name, self.controller.scale.remote(
            name, step, parallelism, strategy, batch_bins), wait, timeout_s)

    def migrate(self, name: str, step: str, *, bins: Sequence[int] | None = None,
                to_instance: int | None = None, instance: int | None = None,
                to_executor: int | None = None, strategy: str = "batched",
                batch_bins: int | None = None, wait: bool = False,
                timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        """Move `bins` of keyed step `step` to its instance `to_instance`, or move its
        `instance` (every bin it owns) to executor `to_executor`. Like `scale`."""
        return self._migration_started(name, self.controller.migrate.remote(
            name, step, list(bins) if bins is not None else None, to_instance, instance,
            to_executor, strategy, batch_bins), wait, timeout_s)

    def _migration_started(self, name: str, ref: Any, wait: bool = False,
                           timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        info: MigrationInfo = get(ref)
        self._described.pop(name, None)
        return self._migration_ended(info, timeout_s) if wait else info

    def _migration_ended(self, started: MigrationInfo, timeout_s: float) -> MigrationInfo:
        """The migration's record once it ended; raises if it failed or is still running."""
        info = self.wait_migration(started["id"], timeout_s)
        what = f"migration {info['id']} ({info['kind']} of {info['dataflow']}/{info['step']})"
        if info["state"] == "running":
            raise TimeoutError(f"{what} still under way after {timeout_s:g} s: "
                               f"{info['epochs_done']}/{info['epochs_total']} epochs done; "
                               "watch it with migrations()")
        if info["state"] != "done":
            raise ReconfigFailed(f"{what} failed: {info['error']}; the dataflow goes on",
                                 dict(info))
        return info

    def migrations(self, name: str | None = None) -> builtins.list[MigrationInfo]:
        """Reconfigurations kept by the pool (running and recent), or those of `name`."""
        return list(get(self.controller.list_migrations.remote(name)))

    def wait_migration(self, migration_id: str, timeout_s: float = 120.0) -> MigrationInfo:
        """Block until a migration is done or failed (or `timeout_s` passed); its info."""
        info: MigrationInfo = get(self.controller.wait_migration.remote(migration_id, timeout_s),
                                  timeout_s=timeout_s + 30.0)
        self._described.pop(info["dataflow"], None)
        return info

    def rebalance(self, *, strategy: str = "batched", wait: bool = False,
                  timeout_s: float = WAIT_TIMEOUT_S) -> builtins.list[MigrationInfo]:
        """Move keyed instances from the busiest executors (busy time over a second) to the
        least busy, at most one per dataflow; the migrations started (with `wait`: ended)."""
        started = list(get(self.controller.rebalance.remote(strategy)))
        return [self._migration_ended(m, timeout_s) for m in started] if wait else started

    def add_executors(self, n: int = 1) -> builtins.list[int]:
        """Add `n` executors to the running pool; their indices. Returns once they answer
        and are linked to the others: new work may go there from then on (nothing moves
        there by itself: `rebalance` or `migrate`)."""
        added = list(get(self.controller.add_executors.remote(n)))
        self._refresh_executors()
        return added

    def remove_executor(self, index: int, *, strategy: str = "batched", wait: bool = False,
                        timeout_s: float = WAIT_TIMEOUT_S) -> dict[str, Any]:
        """Move every keyed instance off executor `index`, then stop it: in the background
        (watch `migrations` and `executor_stats`), or with `wait` until it is removed.

        Raises:
            ReconfigError: an unknown executor, or one hosting what cannot move (sources,
                sinks, stateless steps); nothing changed.
            ReconfigConflict: the last executor, or a migration of its dataflows under way.
            ReconfigFailed: with `wait`, an instance could not move (the executor stays).
            TimeoutError: with `wait`, still draining after `timeout_s`.
        """
        started = dict(get(self.controller.remove_executor.remote(index, strategy)))
        if not wait:
            return started
        ended = dict(get(self.controller.wait_removed.remote(index, timeout_s),
                         timeout_s=timeout_s + cluster.CALL_TIMEOUT_S))
        if ended["state"] == "draining":
            raise TimeoutError(f"executor {index} still draining after {timeout_s:g} s; "
                               "watch migrations()")
        if ended["state"] == "kept":
            raise ReconfigFailed(f"executor {index} was not removed: {ended['error']}; it "
                                 "stays in the pool", ended)
        return {**started, **ended}

    def drain_node(self, node: str) -> dict[str, Any]:
        """Take the executors on `node` (its address, or its Ray node id or the first 8+
        hex digits of it) out of the pool before the node is removed: each dataflow with
        instances there is checkpointed, its instances restored on the executors left,
        and those executors stopped; the dataflows pause meanwhile (pushes wait). The
        node is drained at Ray too: nothing new is placed there.
        Returns {"node", "executors", "dataflows", "ray_refused", "seconds"} once done.

        Raises:
            ReconfigError: no live executor is on that node.
            ReconfigConflict: no executor would be left, or a dataflow there takes no
                checkpoints (nothing changed).
        """
        return dict(get(self.controller.drain_node.remote(node),
                        timeout_s=self.config.recovery_timeout_s + cluster.CALL_TIMEOUT_S))

    # -- self-scaling ------------------------------------------------------------------------
    def scaling(self, name: str | None = None) -> dict[str, Any]:
        """The scaling controller's view: the policy and bounds, executors there are and
        wanted, per dataflow each step's parallelism, lessees, rates (observed and true:
        events per second of useful time), busy share and backlog, per instance the
        useful time split (deserialization, processing, serialization) and queueing
        delay; the last decisions with their reasons, the dataflows that will miss their
        target even at the pool's maximum, and failed actions."""
        return dict(get(self.controller.scaling_status.remote(name)))

    def set_scaling(self, name: str, settings: dict[str, Any] | None = None, *,
                    pin: dict[str, int | None] | None = None) -> dict[str, Any]:
        """Give dataflow `name` its own scaling settings (keys as `RuntimeConfig.scaling`,
        over the pool's; {"policy": "off"} stops scaling it; None without pins: the pool's
        again), and pin steps to a parallelism (a manual override the policy keeps; None
        unpins; pins alone keep the dataflow's settings).

        Raises:
            ScalingConfigError: an unknown policy or key, contradicting bounds (min > max),
                a step that cannot scale; nothing changed.
        """
        return dict(get(self.controller.set_scaling.remote(name, settings, pin)))

    def lease(self, name: str, step: str, lessees: int, *, wait: bool = False,
              timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        """Give keyed window `step` `lessees` lessee instances (Dirigo) on other executors:
        events whose owner has more waiting than a lessee go there, folded into partial
        aggregates that are merged into the owner before its windows fire; results are
        those of a run without them. This is what relieves one hot key, which moving
        bins cannot split. 0 gives them back (each ends its stream, its last partials
        merged). Returns at once, or with `wait` once done, like `scale`; no bins of the
        step move while it has lessees.

        Raises:
            ReconfigError: not a tumbling or sliding window on a keyed stream, or too many.
            ReconfigConflict: a migration of the dataflow is under way.
            ReconfigFailed, TimeoutError: with `wait`, as `scale`.
        """
        return self._migration_started(name, self.controller.lease.remote(name, step, lessees),
                                       wait, timeout_s)

    def report_backlog(self, name: str, source: str, events: int) -> None:
        """Tell the scaling controller how many events this writer holds for `source`
        that it has not pushed yet (its lag): it is the source's backlog, and its growth
        the part of the offered rate that did not get in. Fire and forget."""
        self.controller.report_backlog.remote(name, source, events)

    def _live(self, name: str) -> DataflowInfo:
        """The dataflow's record, if its parts still run on the executors (else
        DataflowEnded); while it is recovering, waits (up to `recovery_timeout_s`)."""
        info = self.describe(name)
        if info["state"] == RECOVERING:
            info = self._await_recovered(name)
        if info["released"]:
            raise DataflowEnded(name, info["state"], info["cause"])
        return info

    def _await_recovered(self, name: str) -> DataflowInfo:
        """Wait until `name` is no longer recovering; its fresh record."""
        deadline = time.monotonic() + self.config.recovery_timeout_s
        while True:
            info = self.describe(name, refresh=True)
            if info["state"] != RECOVERING:
                return info
            if time.monotonic() > deadline:
                raise RuntimeUnavailable(f"dataflow {name!r} is still recovering after "
                                         f"{self.config.recovery_timeout_s:g} s ({info['cause']})")
            time.sleep(0.05)

    def _on_parts(self, name: str, call: Callable[[], T]) -> T:
        """A call to the executors hosting a dataflow. One that ended meanwhile (the
        executor no longer knows it: KeyError) raises DataflowEnded with its state and
        cause; one that failed because an executor died is made again once the dataflow
        was restored (after `recovery_timeout_s`, RuntimeUnavailable)."""
        deadline = time.monotonic() + self.config.recovery_timeout_s
        while True:
            try:
                return call()
            except KeyError:
                self.describe(name, refresh=True)  # DataflowNotFound if it is gone altogether
                self._live(name)  # DataflowEnded if it ended
                if time.monotonic() > deadline:
                    raise
                self._await_change(name)  # live: an executor restarted, not restored yet
            except RuntimeUnavailable:
                if time.monotonic() > deadline:
                    raise
                self._await_change(name)

    def _await_change(self, name: str) -> None:
        """After a call failed for want of an executor: wait until the monitor noticed
        (the dataflow recovers) and it is done, or a moment if it noticed nothing."""
        time.sleep(0.1)
        self.describe(name, refresh=True)
        self._live(name)

    # -- input ----------------------------------------------------------------------------------
    def push(self, name: str, source: str, events: Sequence[Event] | pa.RecordBatch | pa.Table,
             *, batch_size: int = DEFAULT_BATCH) -> builtins.list[Rejected]:
        """Send events to a source of a running dataflow, in batches.

        Returns when the batches are handed over; blocks while the source has
        too many events waiting (backpressure). Events keep their order per
        source instance. One handle pushes from one thread at a time: feed
        from several threads with a handle each (`Runtime.connect(pool=...)`).

        Returns the events refused here because msgpack cannot carry them (an int
        beyond 64 bits, a Decimal, nesting deeper than 128 levels, ...): each also
        goes to the error output (kind "unencodable"), and the rest of its batch goes
        on. Events that do not match the schema are found later, by the source, and
        show in the error output only (kind "malformed").

        Columns (a `pyarrow.RecordBatch` or `Table`) travel as Arrow, without an object
        per event, and run as columns where a step has a kernel for them (`columns.py`);
        results are the same as for the same events as dicts. Their columns are checked
        against the source's schema first: a column missing, or of a type that cannot
        hold its field, raises `ColumnsRefused` (a ValueError) and nothing is sent.
        """
        if isinstance(events, (pa.RecordBatch, pa.Table)):
            step = self._source_step(name, source)
            for batch in conform(source, events, step.schema):
                for i in range(0, batch.num_rows, batch_size):
                    self._send_packed(name, source, pack_columns(batch.slice(i, batch_size)))
            return []
        rejected: builtins.list[Rejected] = []
        for i in range(0, len(events), batch_size):
            rejected += self._send(name, source, list(events[i:i + batch_size]), i)
        return rejected

    def watermark(self, name: str, source: str, ts: float) -> None:
        """Declare that no event older than `ts` will follow on `source`."""
        for target in self._source_instances(name, source):
            self._send_to(name, target, pack_events([float(ts)]))

    def close(self, name: str) -> None:
        """End every source of the dataflow: all windows fire, it drains (`finishing`)
        and then is `finished`, its results still readable."""
        self.flush()  # every batch before it in (sent again after a failure, if need be)
        for src in self._spec(name).sources:
            self.watermark(name, src.id, END_OF_STREAM)
        self.flush()
        get(self.controller.closing.remote(name))

    def flush(self) -> None:
        """Wait until every pushed batch was accepted by its executor (written to its
        source's ingress log: it survives a failure from then on). Batches to a dataflow
        that failed or was cancelled meanwhile are dropped: it takes no more input."""
        for host in list(self._in_flight):
            self._settle(host, len(self._in_flight[host]))

    def _send(self, name: str, source: str, events: builtins.list[Any],
              first_index: int) -> builtins.list[Rejected]:
        # Packed before the call takes its sequence number: an event that cannot be
        # packed must not leave a gap that the executor's in-order delivery waits on.
        packed = pack_ingest(source, events, first_index)
        self._send_packed(name, source, packed.blob)
        return packed.rejected

    def _send_packed(self, name: str, source: str, blob: bytes) -> None:
        targets = self._source_instances(name, source)
        self._send_to(name, targets[next(self._round_robin) % len(targets)], blob)

    def _send_to(self, name: str, target: str, blob: bytes) -> None:
        deployment = self.describe(name)["deployment"]
        if self._deployments.setdefault(name, deployment) != deployment:
            self._deployments[name] = deployment  # deployed again: its sources count from 0
            self._forget_seq(name)
        seq = next(self._seq.setdefault(target, itertools.count()))
        self._call_ingest(name, target, seq, blob)

    def _forget_seq(self, name: str) -> None:
        for target in [t for t in self._seq if t.startswith(f"{name}/")]:
            del self._seq[target]

    def _call_ingest(self, name: str, target: str, seq: int, blob: bytes) -> None:
        host = self.describe(name)["hosts"][target]
        if self.executors[host] is None:  # retired since: the dataflow runs elsewhere now
            host = self._await_recovered(name)["hosts"][target]
        pending = self._in_flight.setdefault(host, [])
        answered = len(ray.wait([p[0] for p in pending], num_returns=len(pending),
                                timeout=0)[0]) if pending else 0
        # The answered calls are taken in order (and any that failed sent again), so that a
        # failure is noticed by the next push, not left as a gap a source would wait on.
        most = 1 if host in self._pressed else MAX_IN_FLIGHT
        want = max(answered, len(pending) - most + 1)
        if want > 0:
            self._settle(host, want)
            pending = self._in_flight.setdefault(host, [])
        ref = self._executor(host).ingest.remote(self._client, seq, target, blob)
        pending.append((ref, name, target, seq, blob))

    def _settle(self, host: int, n: int) -> None:
        """Wait for the oldest `n` ingest calls to `host`. If one failed because an
        executor died or its dataflow is being restored, every call not yet answered
        there is sent again once the dataflow runs (a source drops what it applied), and
        waited for (up to `recovery_timeout_s`); those to a dataflow that ended meanwhile
        are dropped (the next push to it raises DataflowEnded)."""
        deadline = time.monotonic() + self.config.recovery_timeout_s
        while True:
            pending = self._in_flight.get(host, [])
            want = min(n, len(pending))
            done, moved = self._answered(host, pending, want)
            if len(done) < want and not moved:
                raise RuntimeUnavailable(f"executor {host} accepted no batch in "
                                         f"{cluster.CALL_TIMEOUT_S:g} s")
            finished = set(done)
            failed = moved
            waiting = 0
            for ref in done:
                try:
                    waiting = max(waiting, get(ref, timeout_s=0))
                except RuntimeUnavailable:  # an executor died, or the source is being restored
                    failed = True
            if waiting >= PRESSED_SHARE * self.config.ingress_events:
                self._pressed.add(host)
            elif done:
                self._pressed.discard(host)
            if not failed:
                self._in_flight[host] = [p for p in pending if p[0] not in finished]
                return
            if time.monotonic() > deadline:
                raise RuntimeUnavailable(f"batches to executor {host} were not accepted within "
                                         f"{self.config.recovery_timeout_s:g} s of a failure")
            # Every call not answered yet may fail as well: all of them again, in order,
            # but those to a dataflow that ended: it takes no more input, and its end must
            # not fail the batches of the others sharing the executor.
            if not moved:  # let them finish (or fail) first
                cluster.get_each([p[0] for p in pending])
            self._in_flight[host] = []
            ended = set()
            for name in dict.fromkeys(p[1] for p in pending):
                try:
                    self._await_change(name)
                except (DataflowEnded, DataflowNotFound):
                    ended.add(name)
            for _, name, target, seq, blob in sorted(pending, key=lambda p: (p[2], p[3])):
                if name in ended:
                    continue
                to = self.describe(name)["hosts"][target]
                ref = self._executor(to).ingest.remote(self._client, seq, target, blob)
                self._in_flight.setdefault(to, []).append((ref, name, target, seq, blob))
            n = len(self._in_flight.get(host, []))

    def _answered(self, host: int, pending: builtins.list[Any], want: int
                  ) -> tuple[builtins.list[Any], bool]:
        """The calls of `pending` (to `host`) answered once the oldest `want` are, or after
        `CALL_TIMEOUT_S`; with True as soon as a source they went to is hosted elsewhere
        (`host` was retired and its dataflows restored on the others: they never will be)."""
        refs = [p[0] for p in pending]
        deadline = time.monotonic() + cluster.CALL_TIMEOUT_S
        while True:
            done, _ = ray.wait(refs, num_returns=want, timeout=MOVED_CHECK_S)
            if len(done) >= want or time.monotonic() > deadline:
                return done, False
            for name in dict.fromkeys(p[1] for p in pending):
                try:
                    hosts = self.describe(name, refresh=True)["hosts"]
                except CameoError:  # ended, or the controller is busy: the deadline decides
                    continue
                if any(hosts.get(p[2], host) != host for p in pending if p[1] == name):
                    return done, True

    def _source_instances(self, name: str, source: str) -> builtins.list[str]:
        spec = self._spec(name)
        try:
            step = spec.step(source)
        except KeyError:
            raise CameoError(f"dataflow {name!r} has no source {source!r}; sources: "
                             f"{[s.id for s in spec.sources]}") from None
        return [str(a) for a in ActivationId.of_step(name, step.id, step.parallelism)]

    def _parts_get(self, name: str, refs: Callable[[DataflowInfo], Any]) -> Any:
        """`get` of calls to a dataflow's executors, made by `refs` from its record: again
        from its new record after a recovery (`_on_parts`), which may have moved its
        instances to other executors."""
        return self._parts(name, refs)[1]

    def _parts(self, name: str, refs: Callable[[DataflowInfo], Any]) -> tuple[DataflowInfo, Any]:
        """`_parts_get`, with the record the calls were made from."""
        def call() -> tuple[DataflowInfo, Any]:
            info = self._live(name)
            return info, get(refs(info))
        return self._on_parts(name, call)

    def _at(self, info: DataflowInfo, aid: str) -> Any:
        """The executor hosting activation `aid`."""
        return self._executor(info["hosts"][aid])

    def _source_step(self, name: str, source: str) -> Any:
        self._source_instances(name, source)  # raises for a source the dataflow lacks
        return self._spec(name).step(source)

    def _spec(self, name: str) -> DataflowSpec:
        return DataflowSpec.from_dict(self._live(name)["spec"])

    # -- output ---------------------------------------------------------------------------------
    def result_rows(self, name: str, sink: str | None = None, *, commit: bool = True
                    ) -> Rows:
        """New results since the last read: (event, ingest_ms, egress_ms) rows.
        With commit, the runtime forgets them (and a sink held on a full log resumes)."""
        return [row for part in self._read_new(name, sink, commit, columns=False)
                for row in part]

    def result_table(self, name: str, sink: str | None = None, *, commit: bool = True
                     ) -> pa.Table:
        """The new results of `result_rows` as one Arrow table (a sink fed columns kept
        them: no object per row on the way): the results' columns, then `_ingest_ms` and
        `_egress_ms`, each sink instance's in their order. `ResultsNotColumnar` if they do
        not form columns."""
        return concat_results(self._read_new(name, sink, commit, columns=True))

    def _read_new(self, name: str, sink: str | None, commit: bool, columns: bool
                  ) -> builtins.list[Any]:
        """Each sink activation's new results (rows, or a table with `columns`)."""
        spec = self._spec(name)
        sinks = [s for s in spec.sinks if sink is None or s.id == sink]
        info = self._live(name)
        if self._recoveries.setdefault(name, info["recoveries"]) != info["recoveries"]:
            self._recoveries[name] = info["recoveries"]
            if (spec.fault_tolerance.delivery or self.config.delivery) == "at_least_once":
                # Restored: the rows after its checkpoint are made again, maybe in another
                # order; read again from the last commit (rows come again with their ids).
                for key in [k for k in self._offsets if k[0] == name]:
                    del self._offsets[key]
        return [self._read_sink(name, aid, commit, columns)
                for s in sinks for aid in map(str, ActivationId.of_step(name, s.id, s.parallelism))]

    def _read_sink(self, name: str, aid: str, commit: bool, columns: bool) -> Any:
        """One sink activation's new results, from this handle's offset (or the committed
        one): rows, or a table with `columns`."""
        start = self._offsets.get((name, aid))
        if start is None:
            start = self._parts_get(name, lambda i: self._at(i, aid).result_offsets.remote(name)
                                    )[aid][0]
        read = "read_result_columns" if columns else "read_results"
        got = self._parts_get(name, lambda i: getattr(self._at(i, aid), read)
                              .remote(name, aid, start, None))
        end = start + len(got)
        self._offsets[(name, aid)] = end
        if commit:
            self._parts_get(name, lambda i: self._at(i, aid).commit_results.remote(name, aid, end))
        return got if columns else [(e, ing, eg) for e, ing, eg in got]

    def results(self, name: str, sink: str | None = None) -> Events:
        """New results since the last read (and committed)."""
        return [e for e, _, _ in self.result_rows(name, sink)]

    # -- outputs with offsets, read exactly once (the Spark tier) -------------------------------
    @property
    def address(self) -> str:
        """The Ray GCS address ("host:port") other processes join this pool's cluster by."""
        return str(cluster.gcs_address())

    def result_offsets(self, name: str, sink: str | None = None) -> dict[str, LogOffsets]:
        """sink activation -> (committed offset, end offset) of each sink's result log."""
        sinks = [s for s in self._spec(name).sinks if sink is None or s.id == sink]
        wanted = {str(a) for s in sinks for a in ActivationId.of_step(name, s.id, s.parallelism)}
        parts = self._parts_get(name, lambda i: [self._executor(h).result_offsets.remote(name)
                                                 for h in sorted({i["hosts"][a] for a in wanted})])
        return {a: (int(c), int(e)) for part in parts for a, (c, e) in part.items() if a in wanted}

    def read_results(self, name: str, sink_activation: str, start: int, end: int | None = None
                     ) -> builtins.list[ResultRow]:
        """Rows [start, end) of one sink activation's result log, without committing."""
        return list(self._parts_get(name, lambda i: self._at(i, sink_activation).read_results
                                    .remote(name, sink_activation, start, end)))

    def read_result_columns(self, name: str, sink_activation: str, start: int,
                            end: int | None = None) -> pa.Table:
        """The rows of `read_results` as one Arrow table: the results' columns, then
        `_ingest_ms` and `_egress_ms` (`ResultsNotColumnar` if they do not form columns)."""
        return self._parts_get(name, lambda i: self._at(i, sink_activation).read_result_columns
                               .remote(name, sink_activation, start, end))

    def commit_results(self, name: str, sink_activation: str, offset: int) -> None:
        """Let the runtime forget rows below `offset` (a reader persisted them)."""
        self._parts_get(name, lambda i: self._at(i, sink_activation).commit_results
                        .remote(name, sink_activation, offset))

    def error_offsets(self, name: str) -> dict[str, ErrorLogOffsets]:
        """Error log id (`error_log_id`, one per executor the dataflow runs on) ->
        (committed, end, dropped unread) of the error output."""
        info, parts = self._parts(name, lambda i: [self._executor(h).error_offsets.remote(name)
                                                   for h in i["executors"]])
        return {error_log_id(name, h): (int(c), int(e), int(d))
                for h, (c, e, d) in zip(info["executors"], parts, strict=True)}

    def read_errors(self, name: str, log: str, start: int, end: int | None = None
                    ) -> tuple[int, builtins.list[ResultRow]]:
        """(offset of the first row, rows) of one error log (a key of error_offsets);
        each row is (ErrorRecord dict, ingest_ms, egress_ms)."""
        first, rows = self._parts_get(name, lambda i: self._error_log_host(name, log)
                                      .read_errors.remote(name, start, end))
        return int(first), list(rows)

    def commit_errors(self, name: str, log: str, offset: int) -> None:
        self._parts_get(name, lambda i: self._error_log_host(name, log)
                        .commit_errors.remote(name, offset))

    def _error_log_host(self, name: str, log: str) -> Any:
        for h in self._live(name)["executors"]:
            if error_log_id(name, h) == log:
                return self._executor(h)
        raise CameoError(f"dataflow {name!r} has no error log {log!r}; its logs: "
                         f"{[error_log_id(name, h) for h in self._live(name)['executors']]}")

    def mark_input_batch(self, name: str, source: str, batch_id: int, query: str = "") -> None:
        """Hand a Spark input batch id to the runtime: every event of it was pushed (and
        flushed) before this call; recorded on each executor hosting the source."""
        sources = self._source_instances(name, source)
        self._parts_get(name, lambda i: [
            self._executor(h).mark_input_batch.remote(name, f"{source}@{query}", int(batch_id))
            for h in sorted({i["hosts"][t] for t in sources})])

    def input_batches(self, name: str) -> dict[str, int]:
        """"<source>@<query>" -> the last input batch id marked (see mark_input_batch)."""
        parts = self._parts_get(name, lambda i: [self._executor(h).input_batches.remote(name)
                                                 for h in i["executors"]])
        merged: dict[str, int] = {}
        for part in parts:
            for key, batch in part.items():
                merged[key] = max(batch, merged.get(key, batch))
        return merged

    def stats(self, name: str) -> DataflowStats:
        """Latency percentiles, share within target, throughput counters, backlog, the executor
        time its operators took (busy_ms), errors. For an ended dataflow whose parts were
        freed, DataflowEnded (its last statistics are in describe()["final"])."""
        return dataflow_stats(*self._parts(name, lambda i: [
            self._executor(h).dataflow_stats.remote(name) for h in i["executors"]]))

    def errors(self, name: str, limit: int = 100) -> builtins.list[ErrorRecord]:
        """Recent records of the dataflow's error output (counts are in stats())."""
        parts = self._parts_get(name, lambda i: [self._executor(h).error_records.remote(name, limit)
                                                 for h in i["executors"]])
        return [ErrorRecord(**r) for part in parts for r in part][-limit:]

    def executor_stats(self) -> builtins.list[ExecutorStats]:
        return list(get(self.controller.executor_stats.remote()))

    def wait_idle(self, timeout_s: float = 60.0, *,
                  dataflows: Sequence[str] | None = None) -> None:
        """Block until every event pushed so far to `dataflows` (None: every dataflow of
        the pool) was processed and every result it made can be read: no message queued
        or in flight between executors, no migration or recovery under way, and under
        exactly-once delivery a checkpoint completed after the last result (taken now if
        none is due). Events pushed through this handle are flushed first.

        Name the dataflows in a pool that other tenants keep busy: the pool as a whole
        is idle only when nobody pushes. After `close(name)`, `wait_idle(dataflows=[name])`
        returns once its last results (every window fired) are readable.

        Raises:
            TimeoutError: not so within `timeout_s`; the message says what was under way.
            DataflowEnded: a dataflow named in `dataflows` was cancelled or failed.
            DataflowNotFound: no dataflow of a name in `dataflows`.
        """
        self.flush()
        names = None if dataflows is None else builtins.list(dataflows)
        deadline = time.monotonic() + timeout_s
        pause = 0.002
        while True:
            waiting, to_checkpoint = self._unsettled(names)
            if not waiting and to_checkpoint:
                left = max(1.0, deadline - time.monotonic())
                made = get(self.controller.checkpoint_now.remote(to_checkpoint),
                           timeout_s=left + cluster.CALL_TIMEOUT_S)
                waiting = [f"{n}: results wait for a checkpoint, which did not complete "
                           "(see describe(name)['checkpoints'])" for n, ok in made.items() if not ok]
                if not waiting:
                    continue  # the next round sees them readable
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"not settled after {timeout_s:g} s: " + "; ".join(waiting[:6])
                                   + (f"; and {len(waiting) - 6} more" if len(waiting) > 6 else ""))
            time.sleep(pause)
            pause = min(0.05, 2 * pause)

    def _unsettled(self, names: builtins.list[str] | None
                   ) -> tuple[builtins.list[str], builtins.list[str]]:
        """(why the dataflows are not settled yet, those settled but for a checkpoint that
        makes their results readable), from one call to the controller and one round of
        calls to the executors hosting them (`settle.py`)."""
        pool = get(self.controller.settling.remote(names))
        waiting, live = settle.pool_reasons(pool, named=names is not None)
        if waiting:
            return waiting, []
        if live and live[-1] >= len(self.executors):
            self._refresh_executors()
        listed = builtins.list(pool["dataflows"])
        answers = cluster.get_each([self._executor(i).unsettled.remote(listed) for i in live])
        return settle.executor_reasons(listed, dict(zip(live, answers, strict=True)))

    def pressure(self, name: str) -> Pressure:
        """Whether the dataflow can take more events now, in one parallel round of calls
        that never wait on a busy executor: its full result logs (a reader is behind) and
        the events waiting at its sources against the limit (`ingress_events`). A log is
        full when the events taken in and not yet at the sinks (waiting at the sources or
        queued between steps) would fill it: a guess on the high side for steps that
        filter or aggregate, so the refusals start a little early, when the log is nearly
        full anyway."""
        answers = self._parts_get(name, lambda i: [self._executor(h).pressure.remote(name)
                                                   for h in i["executors"]])
        waiting: dict[str, int] = {}
        room_here: dict[str, int] = {}
        inside = 0
        for part_waiting, part_inside, part_rooms in answers:
            waiting.update(part_waiting)
            room_here.update(part_rooms)
            inside += part_inside
        taken_in = sum(waiting.values()) + inside
        rooms = {sink: max(0, room - taken_in) for sink, room in room_here.items()}
        return {"full_sinks": sorted(s for s, room in rooms.items() if room == 0),
                "rooms": rooms, "waiting": waiting, "limit": self.config.ingress_events}

    # -- for the service (cameo serve): fresh reads and one-round snapshots ----------------------
    def stats_all(self) -> PoolSnapshot:
        """Counters of every dataflow and executor of the pool in one parallel round of
        Ray calls (what a metrics scrape needs). A dataflow cancelled while the round runs
        is left out, and so is an executor that does not answer."""
        listed = self.list(states=(*LIVE_STATES, FINISHED))
        handles = [e for e in self.executors if e is not None]  # (not the retired)
        calls: builtins.list[Any] = [e.executor_stats.remote() for e in handles]
        lifecycle = self.controller.lifecycle_counts.remote()
        overload = self.controller.predict.remote(None)
        critical = self.controller.critical_path.remote()
        spans: builtins.list[tuple[int, int]] = []  # (first ref, ref count) per dataflow
        for d in listed:
            if any(self.executors[i] is None for i in d["executors"]):
                continue  # a part on a retired executor: left out, as one that does not answer
            start = len(calls)
            calls.append(self.controller.describe.remote(d["name"]))
            calls.extend(self.executors[i].dataflow_stats.remote(d["name"]) for i in d["executors"])
            spans.append((start, len(calls) - start))
        values = cluster.get_each(calls)
        executors = [v for v in values[:len(handles)] if v is not None]
        dataflows: builtins.list[DataflowMetrics] = []
        for start, n in spans:
            info, parts = values[start], values[start + 1:start + n]
            if info is not None and all(p is not None for p in parts):
                dataflows.append(dataflow_metrics(info, parts))
        transitions, states = get(lifecycle)
        return {"dataflows": dataflows, "executors": executors, "transitions": transitions,
                "states": states, "migrations": self.migrations(), "overload": get(overload),
                "critical_path": get(critical)}
