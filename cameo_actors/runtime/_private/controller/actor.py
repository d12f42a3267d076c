"""The controller: a named, detached Ray actor that owns the executor pool, the
registry of dataflows with their lifecycle, and placement. It outlives the process
that started it, so a restarted service finds its dataflows.

It is the control plane (`plane.py`) over Ray executors, with the managers' threads
running; each call of `ControllerAPI` is a Ray method of its own, routed to the manager
that serves it (`plane.routes`), so Ray's dashboard and timeouts see them one by one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import ray

from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage
from cameo_actors.runtime._private.cluster import cluster_cpus
from cameo_actors.runtime._private.codebase import versioned
from cameo_actors.runtime._private.controller.plane import ControlPlane
from cameo_actors.runtime._private.controller.ray_gateway import RayGateway
from cameo_actors.runtime._private.controller_api import ControllerAPI
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.interface import operation_names

logger = logging.getLogger(__name__)


class QuietWhenStopped(logging.Filter):
    """Drops what the controller's own threads (named "cameo-...") log once the pool is
    shutting down: executors going away then is the plan, not news."""

    def __init__(self, stopped: threading.Event) -> None:
        super().__init__()
        self.stopped = stopped

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.stopped.is_set() and (record.threadName or "").startswith("cameo-"))


class RayControlPlane(ControlPlane):
    def __init__(self, pool: str, config: dict[str, Any], resumable: bool = False) -> None:
        cfg = RuntimeConfig.from_dict(config)
        storage = CheckpointStorage(cfg.checkpoint_url) if cfg.checkpoint_url else None
        if storage is not None:
            storage.check_writable()
        stopped = threading.Event()
        for name in logging.root.manager.loggerDict:  # a filter sees its own logger's records
            if name.startswith(__package__ or ""):
                logging.getLogger(name).addFilter(QuietWhenStopped(stopped))
        # The base named, not `super()`: a process that loads this class by value (a
        # controller restarted on another node) rebuilds it, which `super()`'s cell does
        # not name.
        ControlPlane.__init__(self, pool, cfg, RayGateway(pool, cfg), storage,
                              resumable=resumable, stopped=stopped)
        saved = storage.load_registry() if storage is not None else None
        if saved:
            self.recovery.resume(saved)
        else:
            n = cfg.num_executors or max(1, int(cluster_cpus()))
            self.pool.gateway.start(range(n + cfg.standby_executors))
            self.pool.link()
            self.pool.keep_spares(cfg.standby_executors)
        self.admission.report()
        loops = [("watch", self.recovery.watch), ("processes", self.recovery.processes.run),
                 ("monitor", self.monitor.run),
                 ("checkpointer", self.checkpoints.run), ("scaling", self.scaling.run)]
        if cfg.trace_sample > 0:
            loops.append(("tracer", self.tracing.run))
        for name, loop in loops:
            threading.Thread(target=loop, args=(stopped,), name=f"cameo-{name}",
                             daemon=True).start()


def _route(name: str) -> Callable[..., Any]:
    """The Ray method of call `name`: the serving manager's method."""

    def method(self: ControlPlane, *args: Any, **kwargs: Any) -> Any:
        return self.routes[name](*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(ControllerAPI, name).__doc__
    return method


for _name in operation_names(ControllerAPI):
    setattr(RayControlPlane, _name, _route(_name))

# Ray restarts a controller that dies; it reads its registry back from storage.
Controller = ray.remote(num_cpus=0, max_concurrency=16)(  # type: ignore[call-overload]
    versioned(type("Controller", (RayControlPlane,), {"__module__": __name__})))
