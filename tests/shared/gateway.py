"""The controller's managers on an in-process cluster: an `ExecutorGateway` whose
executors are `ExecutorCore`s called directly (no Ray, no threads, no sleeps), each
answering as an executor actor does. While a call travels the data plane goes on
(some steps of the cluster), and a call that waits for the data plane (a checkpoint's
parts, a migration's epoch, lessees ending) steps it until what it waits for holds.

What it adds to `InProcessCluster` is what the Ray actor adds to a core (checkpoint
parts written to the checkpoint storage, restores read from it, incarnations), and
failures on demand: an executor restarted (a new, empty incarnation), or one down
until somebody asks for it again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.runtime._private.checkpoint.parts import Content, Written, read_chain
from cameo_actors.runtime._private.controller.admission import Admission
from cameo_actors.runtime._private.controller.checkpoints import CheckpointCoordinator
from cameo_actors.runtime._private.controller.gateway import ExecutorGateway
from cameo_actors.runtime._private.controller.lifecycle import Lifecycle
from cameo_actors.runtime._private.controller.monitor import Monitor
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.reconfig import Reconfiguration
from cameo_actors.runtime._private.controller.recovery import Recovery
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.controller.scaling import AutoScaling
from cameo_actors.runtime._private.executor.core import ExecutorCore
from cameo_actors.runtime._private.placement import Placement
from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage, PartStore, part_store
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import RuntimeUnavailable
from tests.shared.inprocess import InProcessCluster


class StoredCluster(InProcessCluster):
    """An in-process cluster whose cores write their checkpoint parts to real storage."""

    def __init__(self, n: int, config: RuntimeConfig, seed: int) -> None:
        self.storage = CheckpointStorage(config.checkpoint_url) if config.checkpoint_url \
            else None
        #: each executor's parts, as a real executor writes and reads them (its local
        #: copies outlive its restarts: the same node)
        self.part_stores: dict[int, PartStore | None] = {}
        #: (executor, dataflow, checkpoint) -> its parts written there
        self.written: dict[tuple[int, str, int], dict[str, Written]] = {}
        super().__init__(n, config, seed)
        for c in self.cores:  # each run of a process is an incarnation of its own
            c.channels.incarnation = f"run{seed}-{c.index}"

    def parts_of(self, executor: int) -> PartStore:
        if executor not in self.part_stores:
            self.part_stores[executor] = part_store(self.config, executor)
        store = self.part_stores[executor]
        assert store is not None, "parts come only with checkpoints on"
        return store

    def _persist(self, dataflow: str, ckpt: int, aid: str, content: Content,
                 positions: dict[str, int], bases: list[str]) -> None:
        super()._persist(dataflow, ckpt, aid, content, positions, bases)
        blob = self.parts[(dataflow, ckpt)][aid][0]  # packed there
        assert self.storage is not None, "parts come only with checkpoints on"
        host = next(c.index for c in self.cores if aid in c.hosting.activations)
        deployment = self.cores[host].hosting.dataflows[dataflow].deployment
        path = self.parts_of(host).write(dataflow, deployment, ckpt, aid, blob)
        self.written.setdefault((host, dataflow, ckpt), {})[aid] = (path, positions,
                                                               content.nbytes, bases)


@dataclass
class Reply:
    value: Any = None
    error: BaseException | None = None


class InProcessGateway(ExecutorGateway):
    def __init__(self, cluster: StoredCluster, steps_per_call: int = 3) -> None:
        self.cluster = cluster
        self.steps_per_call = steps_per_call
        #: executors down: every call to one fails until it is asked for again (then it
        #: is back, restarted empty)
        self.down: set[int] = set()
        #: executors down for good (their node died, no other has room): never back
        self.lost: set[int] = set()
        self.killed: set[int] = set()
        #: called before each call: (executor, method); a test's way to fail at a moment
        self.before: Callable[[int, str], None] = lambda index, method: None
        self.calls: list[tuple[int, str]] = []

    # -- failures ---------------------------------------------------------------------------
    def fail(self, index: int) -> None:
        """Executor `index` dies: down until somebody asks for it, then restarted."""
        self.down.add(index)

    def _back(self, index: int) -> None:
        self.down.discard(index)
        self.cluster.restart_core(index)

    # -- calls ----------------------------------------------------------------------------
    def pump(self, until: Callable[[], bool] = lambda: False, limit: int = 200_000) -> None:
        """Step the cluster until `until()` holds or nothing is left to do."""
        for _ in range(limit):
            if until() or not self.cluster.step():
                return

    def send(self, index: int, method: str, *args: Any) -> Reply:
        self.before(index, method)
        self.calls.append((index, method))
        for _ in range(self.steps_per_call):
            self.cluster.step()
        if index in self.killed:
            return Reply(error=RuntimeUnavailable(f"executor {index} was removed"))
        if index in self.lost:
            return Reply(error=RuntimeUnavailable(f"executor {index}'s node is gone"))
        if index in self.down:
            if method == "ping":  # asked for again: the platform restarted it meanwhile
                self._back(index)
            return Reply(error=RuntimeUnavailable(f"a part of the pool is gone (executor "
                                                  f"{index} died)"))
        try:
            return Reply(getattr(self, f"_{method}")(self.cluster.cores[index], *args))
        except Exception as e:  # what the executor raised, for the caller
            return Reply(error=e)

    def gather(self, replies: Sequence[Reply], timeout_s: float) -> list[Any]:
        for r in replies:
            if r.error is not None:
                raise r.error
        return [r.value for r in replies]

    def gather_each(self, replies: Sequence[Reply], timeout_s: float) -> list[Any]:
        return [None if r.error is not None else r.value for r in replies]

    def poll(self, replies: Sequence[Reply], timeout_s: float) -> list[Any]:
        return [r.error if r.error is not None else r.value for r in replies]

    # -- members ----------------------------------------------------------------------------
    def start(self, indices: Sequence[int]) -> None:
        for i in indices:
            if i >= len(self.cluster.cores):
                self.cluster.cores.append(ExecutorCore(
                    i, self.cluster.config, self.cluster._send, self.cluster.clock,
                    persist=self.cluster._persist))
                self.cluster.cores[i].channels.incarnation = f"new-{i}"

    def adopt(self, index: int) -> bool:
        return index < len(self.cluster.cores)

    def forget(self, index: int) -> None:
        self.killed.add(index)

    def started(self, indices: Sequence[int], timeout_s: float) -> int:
        return len([i for i in indices if i < len(self.cluster.cores)])

    def abandon(self, indices: Sequence[int]) -> None:
        del self.cluster.cores[min(indices):]

    def kill(self, index: int) -> None:
        self.killed.add(index)
        self.cluster.restart_core(index)  # its process ended: nothing of it is left

    def request_cpus(self, cpus: float) -> None:
        pass  # one process: nothing to add

    def link(self, indices: Sequence[int], incarnations: dict[int, str]) -> None:
        for i in indices:
            core = self.cluster.cores[i]
            for peer, inc in incarnations.items():
                if peer != i and core.channels.peers.get(peer) != inc:
                    core.channels.relink(peer, inc)

    def relink(self, indices: Sequence[int], index: int, incarnation: str) -> None:
        for i in indices:
            if i not in self.down and i not in self.killed:
                self.cluster.cores[i].channels.relink(index, incarnation)

    def handles(self) -> list[Any]:
        return list(self.cluster.cores)

    # -- what an executor answers (as `executor.Executor` does) ---------------------------
    def _ping(self, core: Any) -> tuple[int, str]:
        return core.index, core.channels.incarnation

    def _deploy(self, core: Any, spec: dict[str, Any], placement: Placement,
                deployment: str = "") -> list[str]:
        return list(core.deploy(DataflowSpec.from_dict(spec), placement, deployment))

    def _cancel(self, core: Any, dataflow: str) -> int:
        if self.cluster.storage is not None:
            self.cluster.parts_of(core.index).drop(dataflow)
        return int(core.cancel(dataflow))

    def _update(self, core: Any, dataflow: str, target: float | None, weight: float | None
                ) -> None:
        core.update(dataflow, latency_target_ms=target, weight=weight)

    def _checkpoint(self, core: Any, dataflow: str, ckpt: int) -> int:
        return int(core.checkpoint(dataflow, ckpt))

    def _await_checkpoint(self, core: Any, dataflow: str, ckpt: int, ids: list[str],
                          timeout_s: float) -> dict[str, Written]:
        key = (core.index, dataflow, ckpt)
        if timeout_s > 0:  # else: what is written now
            self.pump(lambda: all(a in self.cluster.written.get(key, {}) for a in ids))
        return dict(self.cluster.written.get(key, {}))

    def _checkpointed(self, core: Any, dataflow: str, ckpt: int,
                      positions: dict[str, dict[str, int]]) -> None:
        mine = self.cluster.written.get((core.index, dataflow, ckpt), {})
        chains = {aid: [*bases, path] for aid, (path, _, _, bases) in mine.items()}
        if dataflow in core.hosting.dataflows:
            self.cluster.parts_of(core.index).completed(
                dataflow, core.hosting.dataflows[dataflow].deployment, chains.values())
        core.checkpointed(dataflow, ckpt, positions, chains)

    def _fetch(self, core: Any, dataflow: str, placement: Placement,
               parts: dict[str, list[str]]) -> tuple[int, int]:
        mine = {str(a) for a in placement.on(core.index)}
        got = [self.cluster.parts_of(core.index).read(path)
               for aid, chain in parts.items() if aid in mine for path in chain]
        return sum(len(b) for b, _ in got), sum(len(b) for b, local in got if local)

    def _restore(self, core: Any, spec: dict[str, Any], placement: Placement, deployment: str,
                 parts: dict[str, list[str]], generation: int) -> list[str]:
        mine = {str(a): parts[str(a)] for a in placement.on(core.index) if str(a) in parts}
        store = self.cluster.parts_of(core.index)
        read = {aid: read_chain([store.read(path)[0] for path in chain])
                for aid, chain in mine.items()}
        return list(core.restore(DataflowSpec.from_dict(spec), placement, deployment, read,
                                 generation, mine))

    def _resume(self, core: Any, dataflow: str) -> None:
        core.resume(dataflow)

    def _add_instances(self, core: Any, spec: dict[str, Any], placement: Placement,
                       new: list[str], generation: int = 0, deployment: str = "") -> list[str]:
        return list(core.add_instances(DataflowSpec.from_dict(spec), placement, new,
                                       generation, deployment))

    def _add_lessees(self, core: Any, spec: dict[str, Any], placement: Placement, step: str,
                     new: list[str], generation: int = 0, deployment: str = "") -> list[str]:
        return list(core.add_lessees(DataflowSpec.from_dict(spec), placement, step, new,
                                     generation, deployment))

    def _unlease(self, core: Any, dataflow: str, step: str, ids: list[str]) -> int:
        return int(core.unlease(dataflow, step, ids))

    def _lessees_ended(self, core: Any, dataflow: str, ids: list[str]) -> bool:
        self.pump(lambda: bool(core.lessees_ended(dataflow, ids)))
        return bool(core.lessees_ended(dataflow, ids))

    def _drop_lessees(self, core: Any, dataflow: str, ids: list[str]) -> list[str]:
        return list(core.drop_lessees(dataflow, ids))

    def _prepare(self, core: Any, dataflow: str, step: str, version: int,
                 moves: dict[int, tuple[int, int]]) -> None:
        core.prepare(dataflow, step, version, moves)

    def _reroute(self, core: Any, dataflow: str, step: str, version: int, owners: list[int],
                 instances: list[int]) -> int:
        return int(core.reroute(dataflow, step, version, owners, instances))

    def _retire(self, core: Any, dataflow: str, ids: list[str]) -> list[str]:
        return list(core.retire(dataflow, ids))

    def _epochs(self, core: Any, dataflow: str, step: str) -> dict[str, dict[str, int]]:
        return dict(core.epochs(dataflow, step))

    def _await_epoch(self, core: Any, dataflow: str, step: str, version: int,
                     timeout_s: float) -> dict[str, dict[str, int]]:
        self.pump(lambda: all(d["done"] >= version
                              for d in core.epochs(dataflow, step).values()))
        return dict(core.epochs(dataflow, step))

    def _dataflow_stats(self, core: Any, dataflow: str) -> Any:
        return core.dataflow_stats(dataflow)

    def _executor_stats(self, core: Any) -> Any:
        # Its node's address, as the Ray executor adds it: executor i on "node-i".
        return {**core.executor_stats(), "address": f"node-{core.index}"}

    def _ended(self, core: Any, dataflow: str) -> bool:
        return bool(core.ended(dataflow))

    def _usage(self, core: Any) -> Any:
        return core.usage()

    def _counters(self, core: Any) -> Any:
        return core.counters()

    def _traces(self, core: Any) -> Any:
        return core.tracer.drain() if core.tracer is not None else ([], 0)

    def _stop(self, core: Any) -> None:
        pass


def now(name: str, fn: Callable[..., None], *args: Any) -> None:
    """A manager's long work, run at once on the caller's thread."""
    fn(*args)


class ControlPlane:
    """The controller's managers as the controller wires them, on an in-process cluster."""

    def __init__(self, n: int, config: RuntimeConfig, seed: int = 0, steps_per_call: int = 3,
                 spawn: Callable[..., None] = now, cluster: StoredCluster | None = None) -> None:
        self.config = config
        self.cluster = cluster or StoredCluster(n, config, seed)
        self.gateway = InProcessGateway(self.cluster, steps_per_call)
        self.pool = Pool(self.gateway, threading.RLock())
        self.registry = Registry("test", self.pool, self.cluster.storage, resumable=False)
        self.admission = Admission(config, self.pool, self.registry)
        self.checkpoints = CheckpointCoordinator(config, self.pool, self.registry)
        self.recovery = Recovery(config, self.pool, self.registry, self.checkpoints,
                                 threading.Event(), spawn)
        self.reconfig = Reconfiguration(config, self.pool, self.registry, self.checkpoints,
                                        spawn)
        self.lifecycle = Lifecycle(config, self.pool, self.registry, self.admission,
                                   self.checkpoints, self.reconfig)
        self.scaling = AutoScaling(config, self.pool, self.registry, self.reconfig)
        self.monitor = Monitor(config, self.pool, self.registry, self.admission,
                               self.checkpoints)
        self.registry.on_release += [self.scaling.forget, self.checkpoints.forget]
        self.pool.link()

    def push(self, name: str, source: str, items: list[Any], client: str = "client") -> None:
        """A client's next call to `source` (its first instance), as the Runtime sends it:
        `items` are batches of events, or END_OF_STREAM."""
        placement = self.registry.placements[name]
        target = str(placement.of_step(source)[0])
        self.cluster.ingest(placement.hosts, target, items, client)

    def results(self, name: str) -> list[dict[str, Any]]:
        """Every result readable now, from the start of each sink's log."""
        return self.cluster.results(name)
