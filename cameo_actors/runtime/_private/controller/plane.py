"""The control plane: the managers wired as the controller runs them, and the route of
each of the controller's calls to the manager that does it.

Each manager has one job and its own module:

- `Pool` (`pool.py`): the executors' membership, incarnations and load;
- `Registry` (`registry.py`): each dataflow's record and lifecycle, kept in the
  checkpoint storage so that a restarted controller goes on; `Lifecycle`
  (`lifecycle.py`): deploy, cancel, close, update;
- `Admission` (`admission.py`): whether a new dataflow fits, where it goes, the
  overload report;
- `CheckpointCoordinator` (`checkpoints.py`): each dataflow's checkpoints;
- `Recovery` (`recovery.py`): executors that die, and restoring what they hosted;
- `Reconfiguration` (`reconfig.py`, carried out by `migrations.py`): scale, migrate,
  lease, rebalance, add and remove executors;
- `AutoScaling` (`scaling.py`), `Tracing` (`tracing.py`), and the `Monitor`
  (`monitor.py`) that watches it all every `monitor_interval_s`.

A manager's method marked `@serves(ControllerAPI.<call>)` (or `ControlAPI.<operation>`)
answers that call (`routes`); nothing here forwards by hand. The Ray actor
(`actor.py`) is this class with a Ray gateway, the managers' threads, and one Ray
method per call; the unit tests build it over in-process executors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage
from cameo_actors.runtime._private.codebase import code_id
from cameo_actors.runtime._private.controller.admission import Admission
from cameo_actors.runtime._private.controller.checkpoints import CheckpointCoordinator
from cameo_actors.runtime._private.controller.gateway import ExecutorGateway, Spawn, in_thread
from cameo_actors.runtime._private.controller.lifecycle import Lifecycle
from cameo_actors.runtime._private.controller.monitor import Monitor
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.reconfig import Reconfiguration
from cameo_actors.runtime._private.controller.recovery import Recovery
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.controller.scaling import AutoScaling
from cameo_actors.runtime._private.controller.tracing import Tracing
from cameo_actors.runtime._private.controller_api import ControllerAPI
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.interface import operation_names, serves


class ControlPlane:
    """The controller's managers over one pool of executors.

    Args:
        name: the pool's name.
        config: the pool's configuration.
        gateway: how the managers reach the executors.
        storage: the checkpoint storage, where the registry is kept (None: none).
        resumable: a next start may restore the registry (`Runtime.start(resume=True)`).
        stopped: set once the pool shuts down (the managers' loops end).
        spawn: how managers start long work (a unit test runs it at once).
    """

    def __init__(self, name: str, config: RuntimeConfig, gateway: ExecutorGateway,
                 storage: CheckpointStorage | None, *, resumable: bool = False,
                 stopped: threading.Event | None = None, spawn: Spawn = in_thread) -> None:
        self.config, self.gateway = config, gateway
        self.stopped = stopped or threading.Event()
        # Membership and the registry change together, one change at a time; reads take
        # a copy of a dict without it.
        self.pool = Pool(gateway, threading.RLock())
        self.registry = Registry(name, self.pool, storage, resumable)
        self.admission = Admission(config, self.pool, self.registry)
        self.checkpoints = CheckpointCoordinator(config, self.pool, self.registry)
        self.recovery = Recovery(config, self.pool, self.registry, self.checkpoints,
                                 self.stopped, spawn)
        self.reconfig = Reconfiguration(config, self.pool, self.registry, self.checkpoints,
                                        spawn, self.recovery)
        self.scaling = AutoScaling(config, self.pool, self.registry, self.reconfig)
        self.tracing = Tracing(config, self.pool, self.registry)
        self.lifecycle = Lifecycle(config, self.pool, self.registry, self.admission,
                                   self.checkpoints, self.reconfig)
        self.monitor = Monitor(config, self.pool, self.registry, self.admission,
                               self.checkpoints)
        self.registry.on_release += [self.scaling.forget, self.checkpoints.forget]
        self.routes = routes([self, self.pool, self.registry, self.lifecycle, self.admission,
                              self.checkpoints, self.recovery, self.reconfig, self.scaling,
                              self.tracing])

    @serves(ControllerAPI.config_dict)
    def config_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    @serves(ControllerAPI.code_id)
    def code_id(self) -> str:
        return code_id()

    @serves(ControllerAPI.shutdown)
    def shutdown(self, forget: bool = True) -> None:
        self.stopped.set()
        gateway = self.pool.gateway
        gateway.call_each(self.pool.live(), ExecutorAPI.stop)
        for i in range(self.pool.size()):
            gateway.kill(i)
        if forget:
            self.registry.forget_all()
        else:  # kept on purpose: a start afresh must not delete it
            self.registry.resumable = True
            self.registry.save()


def routes(managers: list[Any]) -> dict[str, Callable[..., Any]]:
    """Each call of `ControllerAPI` -> the one manager method marked as serving it.

    Raises:
        TypeError: a call that no manager serves, or that two do (a wiring mistake).
    """
    served: dict[str, Callable[..., Any]] = {}
    for manager in managers:
        # Looked up in each class of its own (the Ray actor's methods of the same names
        # only route here).
        for function in {f for cls in type(manager).__mro__ for f in vars(cls).values()
                         if getattr(f, "serves", None) is not None}:
            name = function.serves.__name__
            if name in served:
                raise TypeError(f"controller: {name} is served twice (by "
                                f"{served[name].__qualname__} and {function.__qualname__}); "
                                "fix: mark one method per operation with @serves")
            served[name] = function.__get__(manager)
    missing = sorted(set(operation_names(ControllerAPI)) - set(served))
    if missing:
        raise TypeError(f"controller: no manager serves {missing}; fix: mark the manager's "
                        "method that does it with @serves(ControlAPI.<operation>)")
    return served
