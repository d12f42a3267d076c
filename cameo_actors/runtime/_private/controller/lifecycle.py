"""Deploying and ending dataflows, and their live settings: the lifecycle operations
that the registry records (`registry.py`), admission and placement decide
(`admission.py`), and the executors carry out."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from cameo_actors.dataflow.validate import check_live_settings, check_pool_limits
from cameo_actors.runtime._private.checkpoint.parts import interval_s
from cameo_actors.runtime._private.controller.admission import Admission
from cameo_actors.runtime._private.controller.checkpoints import CheckpointCoordinator
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.reconfig import Reconfiguration
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.controller_api import (
    ControllerAPI,
    DataflowSettling,
    PoolSettling,
)
from cameo_actors.runtime._private.executor_api import ExecutorAPI, Placed
from cameo_actors.runtime.boundary import LIVE_STATES, Cancelled, Prediction, Updated
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import DataflowExists
from cameo_actors.runtime.interface import ControlAPI, Deployable, serves, spec_of
from cameo_actors.runtime.lifecycle import LifecycleEvent


class Lifecycle:
    def __init__(self, config: RuntimeConfig, pool: Pool, registry: Registry,
                 admission: Admission, checkpoints: CheckpointCoordinator,
                 reconfig: Reconfiguration) -> None:
        self.config, self.pool, self.registry = config, pool, registry
        self.admission, self.checkpoints, self.reconfig = admission, checkpoints, reconfig

    @serves(ControlAPI.deploy)
    def deploy(self, dataflow: Deployable) -> str:
        """Validate and start a dataflow. A spec that fails changes nothing."""
        spec = spec_of(dataflow)  # SpecError travels back to the caller
        check_pool_limits(spec, max_windows_per_event=self.config.max_windows_per_event,
                          max_state_bytes=self.config.max_state_bytes,
                          max_state_disk_bytes=self.config.max_state_disk_bytes)
        gateway, registry = self.pool.gateway, self.registry
        with self.pool.lock:
            old = registry.dataflows.get(spec.name)
            if old is not None and old["state"] in LIVE_STATES:
                raise DataflowExists(f"a dataflow named {spec.name!r} is running already; "
                                     "cancel it first or choose another name")
            admission = self.admission.admit(spec)
            placement = self.admission.place(spec)
            involved = sorted(placement.executors())
            deployment = uuid.uuid4().hex[:12]
            every_s = interval_s(spec, self.config)
            if registry.storage is not None and every_s > 0:
                # Checkpoint 0: nothing yet, the placement to restore to before the first.
                registry.storage.commit(spec.name, deployment, 0, {
                    "parts": {}, "positions": {}, "placement": placement.to_dict(),
                    "spec": spec.to_dict(), "bytes": 0})
            try:
                gateway.call(involved, ExecutorAPI.deploy, Placed(spec.to_dict(), placement, deployment))
            except Exception:
                # One executor refused (e.g. a function it cannot import): undo everywhere.
                gateway.call_each(involved, ExecutorAPI.cancel, spec.name)
                raise
            registry.add(spec.name, spec.to_dict(), placement, deployment, every_s, admission)
            self.checkpoints.schedule(spec.name, every_s)
        registry.save()
        return spec.name

    @serves(ControlAPI.predict)
    def predict(self, dataflow: Deployable | None = None) -> Prediction:
        """Whether every running dataflow (and `dataflow`, if given, as if it were
        admitted) is predicted to meet its target, from the measured rates and costs."""
        if dataflow is None:
            return self.admission.overload  # made by the monitor, at most a second ago
        spec = spec_of(dataflow)
        check_pool_limits(spec, max_windows_per_event=self.config.max_windows_per_event,
                          max_state_bytes=self.config.max_state_bytes,
                          max_state_disk_bytes=self.config.max_state_disk_bytes)
        return self.admission.predict(spec).to_dict()

    @serves(ControlAPI.cancel)
    def cancel(self, name: str) -> Cancelled:
        """Stop a dataflow and free its parts. Cancelling an ended one frees what it kept
        (a finished one's results) and changes nothing else."""
        with self.pool.lock:
            info = self.registry.record(name)
            was_live = info["state"] in LIVE_STATES
            # An ended one stays as it is (the table): only what it kept is freed.
            dropped = self.registry.end(info, LifecycleEvent.CANCELLED, "cancelled by a client")
        return {"name": name, "state": info["state"], "messages_dropped": dropped,
                "ended_before": not was_live}

    @serves(ControllerAPI.closing)
    def closing(self, name: str) -> None:
        """A client closed the dataflow's sources: it drains, then it is finished."""
        with self.pool.lock:
            self.registry.closing(self.registry.live(name))

    @serves(ControlAPI.update)
    def update(self, name: str, *, latency_target_ms: float | None = None,
               weight: float | None = None) -> Updated:
        info = self.registry.live(name)
        # The spec's own rules (SpecError, a ValueError): `> 0` alone would let NaN or
        # Infinity in, and a target no submit could set.
        check_live_settings(latency_target_ms, weight)
        self.pool.gateway.call(info["executors"], ExecutorAPI.update, name, latency_target_ms,
                               weight)
        self.registry.retarget(info, latency_target_ms, weight)
        return {"name": name, "latency_target_ms": info["spec"]["latency_target_ms"],
                "weight": info["spec"]["scheduling"]["weight"]}

    @serves(ControllerAPI.settling)
    def settling(self, names: Sequence[str] | None = None) -> PoolSettling:
        """What a client waiting for `names` (None: every live or finished dataflow whose
        results are kept) must know of the pool: each one's state, cause, executors and
        the migration under way, and the executors restarting or gone."""
        registry = self.registry
        with self.pool.lock:
            if names is None:
                names = [n for n, d in registry.dataflows.items()
                         if d["state"] in LIVE_STATES or not d["released"]]
            dataflows: dict[str, DataflowSettling] = {}
            for name in names:
                info = registry.record(name)
                dataflows[name] = {"state": info["state"], "cause": info["cause"],
                                   "released": info["released"],
                                   "executors": list(info["executors"]),
                                   "migration": self.reconfig.migrating.get(name)}
            return {"dataflows": dataflows, "restarting": sorted(self.pool.restarting),
                    "dead": sorted(self.pool.dead)}
