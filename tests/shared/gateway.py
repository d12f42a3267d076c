"""The controller's control plane on an in-process cluster: an `ExecutorGateway` whose
executors are `ExecutorHost`s (the executor's own code without Ray) called directly,
with no Ray and no sleeps. While a call travels the data plane goes on (some steps of
the cluster), and a call that waits for the data plane (a checkpoint's parts, a
migration's epoch, lessees ending) steps it until what it waits for holds.

What it adds to `InProcessCluster` is what the executor adds to a core (checkpoint
parts written to the checkpoint storage, restores read from it, incarnations), and
failures on demand: an executor restarted (a new, empty incarnation), or one down
until somebody asks for it again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cameo_actors.runtime._private.checkpoint.part_store import PartStore, part_store
from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage
from cameo_actors.runtime._private.controller.gateway import Call, ExecutorGateway
from cameo_actors.runtime._private.controller.plane import ControlPlane as Plane
from cameo_actors.runtime._private.executor.core import ExecutorCore
from cameo_actors.runtime._private.executor.host import ExecutorHost
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import RuntimeUnavailable
from tests.shared.inprocess import InProcessCluster


class InlineWorker:
    """An executor's worker on the in-process cluster: a call runs at once (the cluster is
    stepped by one thread), and a wait steps the cluster until what it waits for holds."""

    def __init__(self, cluster: StoredCluster) -> None:
        self.cluster = cluster

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def submit(self, fn: Callable[[], None]) -> None:
        fn()

    def wait_until(self, done: Callable[[], bool], timeout_s: float, every_s: float) -> None:
        if timeout_s > 0:  # else: what holds now
            self.cluster.pump(done)

    def write(self, fn: Callable[[], None]) -> None:
        fn()

    def stop(self) -> None:
        pass


class StoredCluster(InProcessCluster):
    """An in-process cluster of executors as the controller reaches them
    (`ExecutorHost`, the executor's own code without Ray), whose checkpoint parts go to
    real storage and whose local copies outlive their restarts (the same node)."""

    def __init__(self, n: int, config: RuntimeConfig, seed: int) -> None:
        self.storage = CheckpointStorage(config.checkpoint_url) if config.checkpoint_url \
            else None
        #: each executor's parts, as a real executor writes and reads them
        self.part_stores: dict[int, PartStore | None] = {}
        self.hosts: list[ExecutorHost] = []
        super().__init__(n, config, seed)
        for c in self.cores:  # each run of a process is an incarnation of its own
            self._host(c, f"run{seed}-{c.index}")

    def _host(self, core: ExecutorCore, incarnation: str) -> ExecutorHost:
        """The executor around `core` (executor `core.index` on node "node-<index>")."""
        if core.index not in self.part_stores:
            self.part_stores[core.index] = part_store(self.config, core.index)
        host = ExecutorHost(core, self.config, InlineWorker(self), incarnation=incarnation,
                            address=f"node-{core.index}", parts=self.part_stores[core.index])
        written = core.checkpointing.persist

        def persist(dataflow: str, ckpt: int, aid: str, content: Any, *rest: Any) -> None:
            """Recorded as the cluster records parts, then written by the executor."""
            frames = content.frames()  # packed once (packing lets go of the content)
            content.frames = lambda: frames
            self._persist(dataflow, ckpt, aid, content, *rest)
            written(dataflow, ckpt, aid, content, *rest)

        core.checkpointing.persist = persist
        while len(self.hosts) <= core.index:
            self.hosts.append(host)
        self.hosts[core.index] = host
        return host

    def parts_of(self, executor: int) -> PartStore:
        store = self.part_stores.get(executor)
        assert store is not None, "parts come only with checkpoints on"
        return store

    def add(self, index: int) -> None:
        """A new executor, started by the platform."""
        core = ExecutorCore(index, self.config, self._send, self.clock, persist=self._persist)
        self.cores.append(core)
        self._host(core, f"new-{index}")

    def restart_core(self, i: int) -> None:
        super().restart_core(i)
        self._host(self.cores[i], self.cores[i].channels.incarnation)

    def pump(self, until: Callable[[], bool] = lambda: False, limit: int = 200_000) -> None:
        """Step the cluster until `until()` holds or nothing is left to do."""
        for _ in range(limit):
            if until() or not self.step():
                return


@dataclass
class InlineCall(Call[Any]):
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
        #: called before each call: (executor, method name); a test's way to fail at a moment
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
        self.cluster.pump(until, limit)

    def send(self, index: int, method: Callable[..., Any], *args: Any,
             **kwargs: Any) -> InlineCall:
        name = method.__name__
        self.before(index, name)
        self.calls.append((index, name))
        for _ in range(self.steps_per_call):
            self.cluster.step()
        if index in self.killed:
            return InlineCall(error=RuntimeUnavailable(f"executor {index} was removed"))
        if index in self.lost:
            return InlineCall(error=RuntimeUnavailable(f"executor {index}'s node is gone"))
        if index in self.down:
            if method is ExecutorAPI.ping:  # asked for again: the platform restarted it meanwhile
                self._back(index)
            return InlineCall(error=RuntimeUnavailable(f"a part of the pool is gone (executor "
                                                       f"{index} died)"))
        try:  # the executor's own method of that name (ExecutorAPI's are declarations)
            return InlineCall(getattr(self.cluster.hosts[index], name)(*args, **kwargs))
        except Exception as e:  # what the executor raised, for the caller
            return InlineCall(error=e)

    def gather(self, calls: Sequence[Any], timeout_s: float) -> list[Any]:
        for c in calls:
            if c.error is not None:
                raise c.error
        return [c.value for c in calls]

    def gather_each(self, calls: Sequence[Any], timeout_s: float) -> list[Any]:
        return [None if c.error is not None else c.value for c in calls]

    def poll(self, calls: Sequence[Any], timeout_s: float) -> list[Any]:
        return [c.error if c.error is not None else c.value for c in calls]

    # -- members ----------------------------------------------------------------------------
    def start(self, indices: Sequence[int]) -> None:
        for i in indices:
            if i >= len(self.cluster.cores):
                self.cluster.add(i)

    def adopt(self, index: int) -> bool:
        return index < len(self.cluster.cores)

    def forget(self, index: int) -> None:
        self.killed.add(index)

    def started(self, indices: Sequence[int], timeout_s: float) -> int:
        return len([i for i in indices if i < len(self.cluster.cores)])

    def abandon(self, indices: Sequence[int]) -> None:
        del self.cluster.cores[min(indices):]
        del self.cluster.hosts[min(indices):]

    def kill(self, index: int) -> None:
        self.killed.add(index)
        self.cluster.restart_core(index)  # its process ended: nothing of it is left

    def request_cpus(self, cpus: float) -> None:
        pass  # one process: nothing to add

    def handles(self) -> list[Any]:
        return list(self.cluster.hosts)


def now(name: str, fn: Callable[..., None], *args: Any) -> None:
    """A manager's long work, run at once on the caller's thread."""
    fn(*args)


class ControlPlane(Plane):
    """The controller's control plane (its managers, wired and routed as the controller
    has them) over an in-process cluster."""

    def __init__(self, n: int, config: RuntimeConfig, seed: int = 0, steps_per_call: int = 3,
                 spawn: Callable[..., None] = now, cluster: StoredCluster | None = None) -> None:
        self.cluster = cluster or StoredCluster(n, config, seed)
        gateway = InProcessGateway(self.cluster, steps_per_call)
        super().__init__("test", config, gateway, self.cluster.storage, spawn=spawn)
        self.gateway: InProcessGateway = gateway
        self.pool.link()
        self.pool.keep_spares(config.standby_executors)  # of the n cores, the last ones

    def push(self, name: str, source: str, items: list[Any], client: str = "client") -> None:
        """A client's next call to `source` (its first instance), as the Runtime sends it:
        `items` are batches of events, or END_OF_STREAM."""
        placement = self.registry.placements[name]
        target = str(placement.of_step(source)[0])
        self.cluster.ingest(placement.hosts, target, items, client)

    def results(self, name: str) -> list[dict[str, Any]]:
        """Every result readable now, from the start of each sink's log."""
        return self.cluster.results(name)
