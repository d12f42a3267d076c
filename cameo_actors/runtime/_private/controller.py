"""The controller: a named, detached Ray actor that owns the executor pool,
the registry of dataflows with their lifecycle, and placement. It outlives
the process that started it, so a restarted service finds its dataflows.

A monitor thread watches the pool every `monitor_interval_s`:
- an executor that died fails the dataflows it hosted (with the cause) and
  takes no new ones; the other dataflows go on (recovery is not done here);
- a `finishing` dataflow (sources closed) becomes `finished` once every
  activation saw the end of its inputs;
- a dataflow over its state budget fails and its state is freed;
- ended dataflows are forgotten after `ended_retention_s`.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import ray

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.dataflow.validate import check_live_settings, check_pool_limits
from cameo_actors.errors import CameoError
from cameo_actors.runtime._private.cluster import NAMESPACE, executor_name, get, get_each
from cameo_actors.runtime._private.executor import Executor
from cameo_actors.runtime._private.routing import Placement, place
from cameo_actors.runtime._private.stats import dataflow_stats
from cameo_actors.runtime.boundary import (
    CANCELLED,
    FAILED,
    FINISHED,
    FINISHING,
    LIVE_STATES,
    RUNNING,
    DataflowInfo,
    DataflowSummary,
    ExecutorStats,
)
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import DataflowEnded, DataflowExists, DataflowNotFound

logger = logging.getLogger(__name__)
#: Operator failures kept with a dataflow's record when it ends.
EXCEPTIONS_KEPT = 10


def short_cause(e: BaseException) -> str:
    """The first line of an error (Ray's death notices run to many lines)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


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
        #: every dataflow, live or ended (kept for `ended_retention_s`)
        self.dataflows: dict[str, DataflowInfo] = {}
        self.load: dict[int, int] = {}
        #: executor index -> why it is out of the pool (it died)
        self.dead: dict[int, str] = {}
        #: (tenant, state) -> transitions into that state since the pool started
        self.transitions: Counter[tuple[str, str]] = Counter()
        # Changes of the registry (deploy, end, placement load), one at a time; reads take
        # a copy of the dict without it.
        self._lock = threading.RLock()
        self._stopped = threading.Event()
        threading.Thread(target=self._monitor, name="cameo-monitor", daemon=True).start()

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
            placement = self._place(spec)
            involved = sorted(placement.executors())
            refs = [self.executors[i].deploy.remote(spec.to_dict(), placement) for i in involved]
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
            now = time.time()
            self.dataflows[spec.name] = {
                "name": spec.name, "spec": spec.to_dict(), "hosts": placement.hosts,
                "executors": involved, "state": RUNNING, "submitted_at": now, "ended_at": None,
                "cause": None, "history": [], "exceptions": [], "final": None,
                "released": False, "lost": False, "state_bytes": 0}
            self._enter(self.dataflows[spec.name], RUNNING, "submitted")
        return {"name": spec.name, "hosts": placement.hosts}

    def _place(self, spec: DataflowSpec) -> Placement:
        all_ex = [i for i in range(len(self.executors)) if i not in self.dead]
        if not all_ex:
            raise CameoError("every executor of the pool died; restart the service (or the "
                             "pool) to get new ones")
        if self.config.isolation == "shared":
            return place(spec, all_ex, dict(self.load))
        taken = {i for d in self.dataflows.values() if not d["released"] for i in d["executors"]}
        free = [i for i in all_ex if i not in taken]
        want = self.config.executors_per_dataflow
        if len(free) < want:
            raise CameoError(f"isolated mode: dataflow {spec.name!r} needs {want} dedicated "
                             f"executor(s), {len(free)} free of {len(all_ex)}; cancel a dataflow "
                             "or start the pool with more executors")
        return place(spec, free[:want], {})

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

    def shutdown(self) -> None:
        self._stopped.set()
        get_each([e.stop.remote() for i, e in enumerate(self.executors) if i not in self.dead])
        for e in self.executors:
            ray.kill(e)

    # -- the monitor -----------------------------------------------------------------------
    def _monitor(self) -> None:
        while not self._stopped.wait(self.config.monitor_interval_s):
            for check in (self._check_executors, self._check_finishing, self._check_budgets,
                          self._expire):
                try:
                    check()
                except Exception:  # a bug here must not stop the other checks
                    logger.exception("controller: %s failed", check.__name__)

    def _check_executors(self) -> None:
        live = [i for i in range(len(self.executors)) if i not in self.dead]
        refs = [self.executors[i].ping.remote() for i in live]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=10.0)
        done = set(ready)
        for i, ref in zip(live, refs, strict=True):
            if ref not in done:
                continue  # slow, not dead: asked again next time
            try:
                ray.get(ref, timeout=0)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                self._executor_died(i, short_cause(e))

    def _executor_died(self, index: int, cause: str) -> None:
        with self._lock:
            self.dead[index] = f"executor {index} died: {cause}"
            logger.error("%s", self.dead[index])
            hit = [n for n, d in self.dataflows.items()
                   if not d["released"] and index in d["executors"]]
        for name in hit:
            self.fail(name, self.dead[index], lost=True)

    def _check_finishing(self) -> None:
        finishing = [d for d in list(self.dataflows.values()) if d["state"] == FINISHING]
        for info in finishing:
            live = [i for i in info["executors"] if i not in self.dead]
            answers = get_each([self.executors[i].ended.remote(info["name"]) for i in live],
                               timeout_s=10.0)
            if answers and all(answers):
                with self._lock:
                    if info["state"] == FINISHING:
                        self._enter(info, FINISHED, "every source closed and drained")

    def _check_budgets(self) -> None:
        live = [i for i in range(len(self.executors)) if i not in self.dead]
        totals: Counter[str] = Counter()
        for part in get_each([self.executors[i].footprints.remote() for i in live], timeout_s=10.0):
            totals.update(part or {})
        default = self.config.state_budget_bytes
        for name, used in totals.items():
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
