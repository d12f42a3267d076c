"""The controller: a named, detached Ray actor that owns the executor pool, the
registry of dataflows with their lifecycle, and placement. It outlives the process
that started it, so a restarted service finds its dataflows.

It is a facade over managers with one job each (`control/`), which reach the
executors through one gateway (`control/gateway.py`; Ray actors here, in-process
cores in tests):

- `Pool` (`pool.py`): the executors' membership, incarnations and load;
- `Registry` (`registry.py`): each dataflow's record and lifecycle, kept in the
  checkpoint storage so that a restarted controller goes on; `Lifecycle`
  (`lifecycle.py`): deploy, cancel, close, update;
- `Admission` (`admission.py`): whether a new dataflow fits, where it goes, the
  overload report;
- `CheckpointCoordinator` (`checkpoints.py`): each dataflow's checkpoints;
- `Recovery` (`recovery.py`): executors that die (watched every 0.2 s), and restoring
  what they hosted;
- `Reconfiguration` (`reconfig.py`, carried out by `migrations.py`): scale,
  migrate, lease, rebalance, add and remove executors;
- `AutoScaling` (`scaling.py`), `Tracing` (`tracing.py`), and the `Monitor`
  (`monitor.py`) that watches it all every `monitor_interval_s`.
"""

from __future__ import annotations

import builtins
import logging
import threading
from collections.abc import Sequence
from typing import Any

import ray

from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage
from cameo_actors.runtime._private.codebase import code_id, versioned
from cameo_actors.runtime._private.controller.admission import Admission
from cameo_actors.runtime._private.controller.checkpoints import CheckpointCoordinator
from cameo_actors.runtime._private.controller.lifecycle import Lifecycle
from cameo_actors.runtime._private.controller.monitor import Monitor
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.ray_gateway import RayGateway
from cameo_actors.runtime._private.controller.reconfig import Reconfiguration
from cameo_actors.runtime._private.controller.recovery import Recovery
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.controller.scaling import AutoScaling
from cameo_actors.runtime._private.controller.tracing import Tracing
from cameo_actors.runtime.boundary import DataflowInfo, DataflowSummary, ExecutorStats
from cameo_actors.runtime.config import RuntimeConfig

logger = logging.getLogger(__name__)
#: The managers' loggers (what their threads log once the pool stops is dropped).
CONTROL_PARTS = [f"{__package__}.{m}" for m in (
    "admission", "checkpoints", "lifecycle", "migrations", "monitor", "ray_gateway", "reconfig", "recovery",
    "registry", "scaling", "tracing")]


class QuietWhenStopped(logging.Filter):
    """Drops what the controller's own threads (named "cameo-...") log once the pool is
    shutting down: executors going away then is the plan, not news."""

    def __init__(self, stopped: threading.Event) -> None:
        super().__init__()
        self.stopped = stopped

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.stopped.is_set() and (record.threadName or "").startswith("cameo-"))


@ray.remote(num_cpus=0, max_concurrency=16)  # type: ignore[call-overload]
@versioned
class Controller:
    def __init__(self, pool: str, config: dict[str, Any], resumable: bool = False) -> None:
        self.config = RuntimeConfig.from_dict(config)
        storage = CheckpointStorage(self.config.checkpoint_url) \
            if self.config.checkpoint_url else None
        if storage is not None:
            storage.check_writable()
        self._stopped = threading.Event()
        for part in (__name__, *CONTROL_PARTS):  # a logger's filter sees its own records only
            logging.getLogger(part).addFilter(QuietWhenStopped(self._stopped))
        # Membership and the registry change together, one change at a time; reads take
        # a copy of a dict without it.
        self.pool = Pool(RayGateway(pool, self.config), threading.RLock())
        self.registry = Registry(pool, self.pool, storage, resumable)
        self.admission = Admission(self.config, self.pool, self.registry)
        self.checkpoints = CheckpointCoordinator(self.config, self.pool, self.registry)
        self.recovery = Recovery(self.config, self.pool, self.registry, self.checkpoints,
                                 self._stopped)
        self.reconfig = Reconfiguration(self.config, self.pool, self.registry,
                                        self.checkpoints)
        self.scaling = AutoScaling(self.config, self.pool, self.registry, self.reconfig)
        self.tracing = Tracing(self.config, self.pool)
        self.lifecycle = Lifecycle(self.config, self.pool, self.registry, self.admission,
                                   self.checkpoints, self.reconfig)
        self.monitor = Monitor(self.config, self.pool, self.registry, self.admission,
                               self.checkpoints)
        self.registry.on_release += [self.scaling.forget, self.checkpoints.forget]
        saved = storage.load_registry() if storage is not None else None
        if saved:
            self.recovery.resume(saved)
        else:
            n = self.config.num_executors or max(1, int(ray.cluster_resources().get("CPU", 1)))
            self.pool.gateway.start(range(n))
            self.pool.link()
        self.admission.report()
        loops = [("watch", self.recovery.watch), ("monitor", self.monitor.run),
                 ("checkpointer", self.checkpoints.run),
                 ("scaling", self.scaling.run)]
        if self.config.trace_sample > 0:
            loops.append(("tracer", self.tracing.run))
        for name, loop in loops:
            threading.Thread(target=loop, args=(self._stopped,), name=f"cameo-{name}",
                             daemon=True).start()

    # -- deploy and end (control/lifecycle.py) --------------------------------------------
    def deploy(self, spec_dict: dict[str, Any]) -> dict[str, Any]:
        return self.lifecycle.deploy(spec_dict)

    def predict(self, spec_dict: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.lifecycle.predict(spec_dict)

    def cancel(self, name: str) -> dict[str, Any]:
        return self.lifecycle.cancel(name)

    def closing(self, name: str) -> None:
        self.lifecycle.closing(name)

    def update(self, name: str, latency_target_ms: float | None = None,
               weight: float | None = None) -> dict[str, Any]:
        return self.lifecycle.update(name, latency_target_ms, weight)

    # -- live reconfiguration (control/reconfig.py) ---------------------------------------
    def scale(self, name: str, step: str, parallelism: int, strategy: str = "batched",
              batch_bins: int | None = None) -> dict[str, Any]:
        return self.reconfig.scale(name, step, parallelism, strategy, batch_bins)

    def migrate(self, name: str, step: str, bins: Sequence[int] | None = None,
                to_instance: int | None = None, instance: int | None = None,
                to_executor: int | None = None, strategy: str = "batched",
                batch_bins: int | None = None) -> dict[str, Any]:
        return self.reconfig.migrate(name, step, bins, to_instance, instance, to_executor,
                                     strategy, batch_bins)

    def lease(self, name: str, step: str, lessees: int) -> dict[str, Any]:
        return self.reconfig.lease(name, step, lessees)

    def rebalance(self, strategy: str = "batched", window_s: float = 1.0
                  ) -> builtins.list[dict[str, Any]]:
        return self.reconfig.rebalance(strategy, window_s)

    def add_executors(self, n: int = 1) -> builtins.list[int]:
        return self.reconfig.add_executors(n)

    def remove_executor(self, index: int, strategy: str = "batched") -> dict[str, Any]:
        return self.reconfig.remove_executor(index, strategy)

    def wait_removed(self, index: int, timeout_s: float = 120.0) -> dict[str, Any]:
        return self.reconfig.wait_removed(index, timeout_s)

    def drain_node(self, node: str) -> dict[str, Any]:
        return self.recovery.drain(node)

    def wait_migration(self, mid: str, timeout_s: float = 120.0) -> dict[str, Any]:
        return self.reconfig.wait_migration(mid, timeout_s)

    def list_migrations(self, name: str | None = None) -> builtins.list[dict[str, Any]]:
        return self.reconfig.list_migrations(name)

    # -- lookups ----------------------------------------------------------------------------
    def describe(self, name: str) -> DataflowInfo:
        """Spec, placement and lifecycle: what a client needs to push to and read from it."""
        return self.registry.record(name)

    def list(self, states: Sequence[str] | None = None) -> builtins.list[DataflowSummary]:
        """Every dataflow kept (live and ended), or those in `states`."""
        return self.registry.summaries(states)

    def settling(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        return self.lifecycle.settling(names)

    def lifecycle_counts(self) -> tuple[builtins.list[tuple[str, str, int]], dict[str, int]]:
        """(transitions per (tenant, state) since the pool started, dataflows per state now)."""
        return self.registry.lifecycle_counts()

    def executor_handles(self) -> builtins.list[Any]:
        return self.pool.gateway.handles()

    def config_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    def code_id(self) -> str:
        """The digest of the code this controller runs (`codebase.code_id`)."""
        return code_id()

    def executor_stats(self) -> builtins.list[ExecutorStats]:
        return self.pool.stats()

    # -- checkpoints, critical paths, scaling ---------------------------------------------
    def checkpoint_now(self, names: Sequence[str] | None = None) -> dict[str, bool]:
        """Checkpoint these dataflows (every live one with checkpoints, by default) now, in
        parallel; returns which completed. With exactly-once delivery, their results so
        far become readable (`Runtime.wait_idle` ends with this)."""
        return self.checkpoints.now(names)

    def explain(self, name: str | None = None, last_s: float = 60.0) -> dict[str, Any]:
        """What the critical paths of `name`'s results (None: of the whole pool) were
        made of over the last `last_s` seconds (`cameo_actors.tracing.explain`)."""
        target = None
        if name is not None:
            target = float(self.registry.record(name)["spec"]["latency_target_ms"])
        return self.tracing.explain(name, last_s, target)

    def critical_path(self) -> dict[str, Any]:
        """The newest snapshot's critical participation per operator and executor."""
        return self.tracing.latest()

    def scaling_status(self, name: str | None = None) -> dict[str, Any]:
        if name is not None:
            self.registry.live(name)
        return self.scaling.status(name)

    def set_scaling(self, name: str, settings: dict[str, Any] | None = None,
                    pin: dict[str, int | None] | None = None) -> dict[str, Any]:
        return self.scaling.configure(name, settings, pin)

    def report_backlog(self, name: str, source: str, events: float) -> None:
        self.scaling.report_backlog(name, source, events)

    def shutdown(self, forget: bool = True) -> None:
        """Stop the executors. `forget`: the pool is stopped for good (its registry and
        checkpoints go); else a next controller on this storage restores its dataflows."""
        self._stopped.set()
        gateway = self.pool.gateway
        gateway.call_each(self.pool.live(), "stop")
        for i in range(self.pool.size()):
            gateway.kill(i)
        if forget:
            self.registry.forget_all()
        else:  # kept on purpose: a start afresh must not delete it
            self.registry.resumable = True
            self.registry.save()
