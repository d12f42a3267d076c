"""The controller: a named, detached Ray actor that owns the executor pool,
the registry of dataflows, and placement. It outlives the process that
started it, so a restarted service finds its dataflows still running.
"""

from __future__ import annotations

import builtins
import time
from typing import Any

import ray

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError
from cameo_actors.runtime._private.cluster import NAMESPACE, executor_name, get
from cameo_actors.runtime._private.executor import Executor
from cameo_actors.runtime._private.routing import Placement, place
from cameo_actors.runtime.boundary import DataflowInfo, DataflowSummary, ExecutorStats
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import DataflowExists, DataflowNotFound


@ray.remote(num_cpus=0, max_concurrency=16)  # type: ignore[call-overload]
class Controller:
    def __init__(self, pool: str, config: dict[str, Any]) -> None:
        self.pool = pool
        self.config = RuntimeConfig.from_dict(config)
        n = self.config.num_executors or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.executors = [
            Executor.options(  # type: ignore[attr-defined]
                name=executor_name(pool, i), namespace=NAMESPACE,
                num_cpus=self.config.executor_cpus,
                scheduling_strategy="SPREAD").remote(i, self.config.to_dict())
            for i in range(n)
        ]
        get([e.set_peers.remote(self.executors) for e in self.executors])
        self.dataflows: dict[str, DataflowInfo] = {}
        self.load: dict[int, int] = {}

    # -- deploy and cancel ------------------------------------------------------------
    def deploy(self, spec_dict: dict[str, Any]) -> dict[str, Any]:
        """Validate and start a dataflow. A spec that fails changes nothing."""
        spec = DataflowSpec.from_dict(spec_dict)  # SpecError travels back to the caller
        if spec.name in self.dataflows:
            raise DataflowExists(f"a dataflow named {spec.name!r} is running already; cancel it "
                                 "first or choose another name")
        placement = self._place(spec)
        involved = sorted(placement.executors())
        refs = [self.executors[i].deploy.remote(spec.to_dict(), placement) for i in involved]
        try:
            get(refs)
        except Exception:
            # One executor refused (e.g. a function it cannot import): undo everywhere.
            get([self.executors[i].cancel.remote(spec.name) for i in involved])
            raise
        for i in involved:
            self.load[i] = self.load.get(i, 0) + len(placement.on(i))
        self.dataflows[spec.name] = {"name": spec.name, "spec": spec.to_dict(),
                                     "hosts": placement.hosts, "executors": involved,
                                     "state": "running", "submitted_at": time.time()}
        return {"name": spec.name, "hosts": placement.hosts}

    def _place(self, spec: DataflowSpec) -> Placement:
        all_ex = list(range(len(self.executors)))
        if self.config.isolation == "shared":
            return place(spec, all_ex, dict(self.load))
        taken = {i for d in self.dataflows.values() for i in d["executors"]}
        free = [i for i in all_ex if i not in taken]
        want = self.config.executors_per_dataflow
        if len(free) < want:
            raise CameoError(f"isolated mode: dataflow {spec.name!r} needs {want} dedicated "
                             f"executor(s), {len(free)} free of {len(all_ex)}; cancel a dataflow "
                             "or start the pool with more executors")
        return place(spec, free[:want], {})

    def cancel(self, name: str) -> dict[str, Any]:
        info = self._info(name)
        dropped = sum(get([self.executors[i].cancel.remote(name) for i in info["executors"]]))
        for i in info["executors"]:
            self.load[i] = self.load.get(i, 0) - sum(1 for h in info["hosts"].values() if h == i)
        del self.dataflows[name]
        return {"name": name, "state": "cancelled", "messages_dropped": dropped}

    def update(self, name: str, latency_target_ms: float | None = None,
               weight: float | None = None) -> dict[str, Any]:
        info = self._info(name)
        if latency_target_ms is not None and not latency_target_ms > 0:
            raise ValueError(f"latency_target_ms: expected > 0, got {latency_target_ms}")
        if weight is not None and not weight > 0:
            raise ValueError(f"weight: expected > 0, got {weight}")
        get([self.executors[i].update.remote(name, latency_target_ms, weight)
                 for i in info["executors"]])
        if latency_target_ms is not None:
            info["spec"]["latency_target_ms"] = latency_target_ms
        if weight is not None:
            info["spec"]["scheduling"]["weight"] = weight
        return {"name": name, "latency_target_ms": info["spec"]["latency_target_ms"],
                "weight": info["spec"]["scheduling"]["weight"]}

    # -- lookups ----------------------------------------------------------------------------
    def _info(self, name: str) -> DataflowInfo:
        info = self.dataflows.get(name)
        if info is None:
            raise DataflowNotFound(name, sorted(self.dataflows))
        return info

    def describe(self, name: str) -> DataflowInfo:
        """Spec, placement and state: what a client needs to push to and read from it."""
        return self._info(name)

    def list(self) -> builtins.list[DataflowSummary]:
        return [{"name": n, "tenant": d["spec"]["tenant"],
                 "latency_target_ms": d["spec"]["latency_target_ms"], "state": d["state"],
                 "executors": d["executors"]} for n, d in self.dataflows.items()]

    def executor_handles(self) -> builtins.list[Any]:
        return list(self.executors)

    def config_dict(self) -> dict[str, Any]:
        return self.config.to_dict()

    def executor_stats(self) -> builtins.list[ExecutorStats]:
        return list(get([e.executor_stats.remote() for e in self.executors]))

    def shutdown(self) -> None:
        get([e.stop.remote() for e in self.executors])
        for e in self.executors:
            ray.kill(e)
