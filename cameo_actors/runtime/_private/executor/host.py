"""The executor without Ray: `ExecutorAPI` answered over one `ExecutorCore`.

What runs where is the `Worker`'s to say: the core is owned by one thread, so a call
that reads or changes it is handed to that thread and its answer waited for
(`Worker.call`); a call that waits for the data plane (a checkpoint's parts, a
migration's epoch) watches from the caller's thread (`Worker.wait_until`); checkpoint
parts are packed and written off the worker thread, one at a time (`Worker.write`).
The Ray actor (`actor.py`) gives it a worker thread of its own; the unit tests'
in-process executors give it one that runs each call at once and steps the in-process
cluster while it waits. Both run this code.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, Protocol, TypeVar

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.runtime._private.checkpoint.part_store import PartStore
from cameo_actors.runtime._private.checkpoint.parts import ChainRead, Content, PartBytes, read_chain
from cameo_actors.runtime._private.checkpoint.shared import marks_missing
from cameo_actors.runtime._private.codebase import code_id
from cameo_actors.runtime._private.exchange.ingest import unpack_ingest
from cameo_actors.runtime._private.executor.core import ExecutorCore
from cameo_actors.runtime._private.executor.kafka import KafkaConnectors
from cameo_actors.runtime._private.executor_api import (
    EpochProgress,
    ExecutorAPI,
    ExecutorUsage,
    Fetched,
    Incarnation,
    MergedParts,
    PartChains,
    Placed,
    SourcePressure,
    StorageMarks,
    Traces,
    Unsettled,
    WrittenPart,
)
from cameo_actors.runtime._private.placement import Placement
from cameo_actors.runtime._private.process_watch import identity
from cameo_actors.runtime.boundary import (
    DataflowPart,
    ErrorLogOffsets,
    ExecutorStats,
    LogOffsets,
    ResultRow,
)
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import NotHosted

P = ParamSpec("P")
T = TypeVar("T")
logger = logging.getLogger(__name__)
#: How long the executor waits for its worker thread to answer a call.
WORKER_TIMEOUT_S = 60.0
#: How often a wait for the data plane looks again: each look takes the interpreter's
#: lock from the worker thread a moment, so a checkpoint's parts (tens of ms apart) are
#: looked for less often than a migration's epoch (which a migration's pace hangs on).
PARTS_WATCH_S = 0.005
EPOCH_WATCH_S = 0.001
#: A reader waiting for results (`await_results`) looks every 10 ms, for at most 5 s: a
#: wait holds a thread of the executor's "watch" group.
RESULTS_WATCH_S = 0.01
MAX_RESULTS_WAIT_S = 5.0


class Worker(Protocol):
    """How calls reach the thread that owns the core."""

    def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn` on the worker thread, after the work handed over before; its answer
        (what it raised, raised here)."""

    def submit(self, fn: Callable[[], None]) -> None:
        """Hand `fn` to the worker thread, without waiting for it."""

    def wait_until(self, done: Callable[[], bool], timeout_s: float, every_s: float) -> None:
        """Return once `done()` holds (read from this thread every `every_s`), or after
        `timeout_s`."""

    def write(self, fn: Callable[[], None]) -> None:
        """Run `fn` off the worker thread, after the writes handed over before it."""

    def stop(self) -> None:
        """End the worker thread."""


class ExecutorHost(ExecutorAPI):
    """One executor's calls (`ExecutorAPI`), answered through its core and the checkpoint
    parts it writes and reads.

    Args:
        core: the executor's logic.
        config: the pool's configuration.
        worker: how calls reach the core's thread.
        incarnation: names this run of the executor (a restart gets another).
        address: the address of its machine.
        parts: where its checkpoint parts go (None: checkpoints off).
    """

    def __init__(self, core: ExecutorCore, config: RuntimeConfig, worker: Worker, *,
                 incarnation: str, address: str, parts: PartStore | None) -> None:
        self.core, self.config, self.worker = core, config, worker
        self.index = core.index
        self.incarnation = incarnation
        self.process = identity()
        core.channels.incarnation = incarnation
        core.checkpointing.persist = self._persist
        self.address = address
        self.parts = parts
        #: the pool's executors as `set_peers` gave them (their handles, by index)
        self.peers: list[Any] = []
        #: (dataflow, checkpoint) -> activation -> its part written
        self.written: dict[tuple[str, int], dict[str, WrittenPart]] = {}
        self.write_failures = 0
        #: dataflow -> (the parts `fetch` read here, them unpacked), for the next `restore`
        self.fetched: dict[str, tuple[PartChains, dict[str, ChainRead]]] = {}
        #: dataflow -> times it was restored or cancelled here (a checkpoint under way
        #: before that will not complete: its waiters stop)
        self.resets: Counter[str] = Counter()
        #: the Kafka readers and writers of the instances hosted here
        self.kafka = KafkaConnectors(core, worker.submit, worker.call)

    # -- the pool ----------------------------------------------------------------------------
    def ping(self) -> Incarnation:
        return Incarnation(self.index, self.incarnation, self.process)

    def set_peers(self, peers: list[Any], incarnations: dict[int, str]) -> str:
        self.peers = list(peers)
        self.worker.call(self._relink_all, incarnations)
        return self.incarnation

    def _relink_all(self, incarnations: dict[int, str]) -> None:
        channels = self.core.channels
        for peer, inc in incarnations.items():
            if peer != self.index and channels.peers.get(peer) != inc:
                channels.relink(peer, inc)

    def relink(self, peer: int, handle: Any, incarnation: str) -> None:
        while len(self.peers) <= peer:
            self.peers.append(handle)
        self.peers[peer] = handle
        self.worker.call(self.core.channels.relink, peer, incarnation)

    def marks_missing(self, token: str) -> StorageMarks:
        return StorageMarks(self.address, marks_missing(self.config, token))

    def stop(self) -> None:
        self.kafka.stop_all()
        self.worker.stop()

    # -- data ----------------------------------------------------------------------------
    def deliver(self, blob: bytes) -> None:
        self.worker.submit(lambda: self.core.receive(blob))

    def ingest(self, client: str, seq: int, target: str, blob: bytes) -> int:
        core = self.core
        act = core.hosting.activations.get(target)
        if act is None:
            raise NotHosted(f"executor {self.index} does not host {target!r} now")
        # Stamped on arrival: time spent blocked by backpressure counts as latency.
        ingest_ms = core.clock.now_ms()
        began = time.perf_counter()
        items = unpack_ingest(blob, act.step.id)
        deser_ms = (time.perf_counter() - began) * 1000.0
        n = core.ingress.events_in(items)  # reserved at the source while the worker takes it in
        waiting = core.flow.wait_for_room(target, n, lambda: target in core.hosting.activations,
                                          WORKER_TIMEOUT_S)
        log = core.ingress_logs.get(target)
        if log is not None:
            try:
                log.append(client, seq, blob)
            except ValueError:  # closed: the dataflow was cancelled or is being restored
                core.flow.arrived(target, n)
                raise NotHosted(f"executor {self.index}: {target!r} is being restored") from None
        self.worker.submit(lambda: core.ingress.ingest(client, seq, target, items, ingest_ms,
                                                       deser_ms, reserved=n))
        return waiting

    def pressure(self, dataflow: str) -> SourcePressure:
        core = self.core
        ids = core.hosting.dataflows[dataflow].ids if dataflow in core.hosting.dataflows else []
        with core.flow.ingress_cond:
            waiting = {a: core.flow.ingress_pending[a] for a in ids if a in core.flow.ingress_pending}
        acts = core.hosting.activations
        queued = {a: max(0, acts[a].events_arrived - acts[a].events_in) for a in ids if a in acts}
        sinks = {a: n for a, n in queued.items() if acts[a].is_sink}
        inside = sum(n for a, n in queued.items() if a not in sinks and a not in waiting)
        return SourcePressure(waiting, inside, core.egress.room(dataflow, sinks))

    # -- a dataflow's life ---------------------------------------------------------------
    def deploy(self, placed: Placed) -> list[str]:
        spec = DataflowSpec.from_dict(placed.spec)
        ids = self.worker.call(self.core.deploy, spec, placed.placement, placed.deployment)
        self.kafka.start(spec, placed.placement)
        return ids

    def cancel(self, dataflow: str) -> int:
        self.resets[dataflow] += 1
        self.kafka.stop(dataflow)
        if self.parts is not None:
            self.parts.drop(dataflow)
        return self.worker.call(self.core.cancel, dataflow)

    def update(self, dataflow: str, latency_target_ms: float | None,
               weight: float | None) -> None:
        self.worker.call(self.core.update, dataflow, latency_target_ms=latency_target_ms,
                         weight=weight)

    def ended(self, dataflow: str) -> bool:
        return self.worker.call(self.core.reports.ended, dataflow)

    # -- checkpoints and recovery ---------------------------------------------------------
    def checkpoint(self, dataflow: str, ckpt: int) -> int:
        return self.worker.call(self.core.checkpointing.checkpoint, dataflow, ckpt)

    def _persist(self, dataflow: str, ckpt: int, aid: str, content: Content,
                 positions: dict[str, int], bases: list[str]) -> None:
        """A complete part (on the worker thread): packed and written off it."""
        deployment = self.core.hosting.dataflows[dataflow].deployment
        self.worker.write(lambda: self._write(dataflow, deployment, ckpt, aid, content,
                                              positions, bases))

    def _write(self, dataflow: str, deployment: str, ckpt: int, aid: str, content: Content,
               positions: dict[str, int], bases: list[str]) -> None:
        if self.parts is None:
            return
        try:
            path = self.parts.write(dataflow, deployment, ckpt, aid, content.frames())
        except Exception:  # counted; the checkpoint will not complete, the previous one stays
            self.write_failures += 1
            logger.exception("executor %d: checkpoint %d of %s: part %s not written",
                             self.index, ckpt, dataflow, aid)
            return
        self.written.setdefault((dataflow, ckpt), {})[aid] = WrittenPart(
            path, positions, content.nbytes, bases,
            {**content.times, "written": self.core.clock.now_ms()})

    def await_checkpoint(self, dataflow: str, ckpt: int, ids: list[str], timeout_s: float
                         ) -> dict[str, WrittenPart]:
        resets = self.resets[dataflow]
        self.worker.wait_until(lambda: self.resets[dataflow] != resets or all(
            a in self.written.get((dataflow, ckpt), {}) for a in ids), timeout_s, PARTS_WATCH_S)
        return dict(self.written.get((dataflow, ckpt), {}))

    def checkpointed(self, dataflow: str, ckpt: int, positions: dict[str, dict[str, int]]) -> None:
        mine = self.written.get((dataflow, ckpt), {})
        chains = {aid: [*part.bases, part.path] for aid, part in mine.items()}
        for key in [k for k in self.written if k[0] == dataflow and k[1] <= ckpt]:
            del self.written[key]
        hosted = self.core.hosting.dataflows.get(dataflow)
        if self.parts is not None and hosted is not None:
            self.parts.completed(dataflow, hosted.deployment, chains.values())
        self.worker.call(self.core.checkpointing.checkpointed, dataflow, ckpt, positions, chains)

    def fetch(self, dataflow: str, placement: Placement, parts: PartChains,
              merged: MergedParts | None = None) -> Fetched:
        mine = _with_merged({str(a) for a in placement.on(self.index)}, merged)
        wanted = {aid: paths for aid, paths in parts.items() if aid in mine}
        self.fetched.pop(dataflow, None)
        paths = [path for chain in wanted.values() for path in chain]
        if self.parts is None or not paths:
            return Fetched(0, 0)
        store = self.parts
        with ThreadPoolExecutor(min(4, len(paths)), thread_name_prefix="cameo-fetch") as pool:
            got = list(pool.map(store.read, paths))
        read = iter(blob for blob, _ in got)
        blobs: dict[str, list[PartBytes]] = {
            aid: [next(read) for _ in chain] for aid, chain in wanted.items()}
        # Unpacked here, not on the worker thread: other tenants' work runs between pieces.
        self.fetched[dataflow] = (wanted, {aid: read_chain(chain) for aid, chain in blobs.items()})
        return Fetched(sum(len(b) for b, _ in got), sum(len(b) for b, local in got if local))

    def restore(self, placed: Placed, parts: PartChains) -> list[str]:
        name = placed.name
        self.resets[name] += 1
        mine = _with_merged({str(a) for a in placed.placement.on(self.index)}, placed.merged)
        wanted = {aid: chain for aid, chain in parts.items() if aid in mine}
        fetched, read = self.fetched.pop(name, ({}, {}))
        if fetched != wanted:
            self.fetch(name, placed.placement, parts, placed.merged)
            _, read = self.fetched.pop(name, ({}, {}))
        for key in [k for k in self.written if k[0] == name]:
            del self.written[key]
        self.kafka.stop(name)
        spec = DataflowSpec.from_dict(placed.spec)
        ids = self.worker.call(self.core.restore, spec, placed.placement, placed.deployment,
                               read, placed.generation, wanted, placed.merged)
        self.kafka.start(spec, placed.placement)  # from the offsets restored
        return ids

    def resume(self, dataflow: str) -> None:
        self.worker.call(self.core.checkpointing.resume, dataflow)

    # -- changes of the physical plan -----------------------------------------------------
    def add_instances(self, placed: Placed, new: list[str]) -> list[str]:
        spec = DataflowSpec.from_dict(placed.spec)
        ids = self.worker.call(self.core.plan_changes.add_instances, spec, placed.placement, new,
                               placed.generation, placed.deployment)
        self.kafka.start(spec, placed.placement)
        return ids

    def add_lessees(self, placed: Placed, step: str, new: list[str]) -> list[str]:
        return self.worker.call(self.core.plan_changes.add_lessees, DataflowSpec.from_dict(placed.spec),
                                placed.placement, step, new, placed.generation,
                                placed.deployment)

    def unlease(self, dataflow: str, step: str, ids: list[str]) -> int:
        return self.worker.call(self.core.plan_changes.unlease, dataflow, step, ids)

    def lessees_ended(self, dataflow: str, ids: list[str], timeout_s: float) -> bool:
        changes = self.core.plan_changes
        self.worker.wait_until(lambda: self._quiet(changes.lessees_ended, dataflow, ids),
                               timeout_s, PARTS_WATCH_S)
        return self.worker.call(changes.lessees_ended, dataflow, ids)

    def drop_lessees(self, dataflow: str, ids: list[str]) -> list[str]:
        return self.worker.call(self.core.plan_changes.drop_lessees, dataflow, ids)

    def prepare(self, dataflow: str, step: str, version: int,
                moves: dict[int, tuple[int, int]]) -> None:
        self.worker.call(self.core.plan_changes.prepare, dataflow, step, version, moves)

    def reroute(self, dataflow: str, step: str, version: int, owners: list[int],
                instances: list[int]) -> int:
        return self.worker.call(self.core.plan_changes.reroute, dataflow, step, version,
                                owners, instances)

    def retire(self, dataflow: str, ids: list[str]) -> list[str]:
        self.kafka.stop(dataflow, ids)
        return self.worker.call(self.core.plan_changes.retire, dataflow, ids)

    def epochs(self, dataflow: str, step: str) -> dict[str, EpochProgress]:
        return self.worker.call(self.core.plan_changes.epochs, dataflow, step)

    def await_epoch(self, dataflow: str, step: str, version: int, timeout_s: float
                    ) -> dict[str, EpochProgress]:
        """Watched from the caller's thread, so that a migration's wait costs the worker
        thread one call per epoch, not a poll every few ms."""
        acts = self.core.hosting.activations
        self.worker.wait_until(lambda: self._quiet(lambda: all(
            a.done_version >= version for a in list(acts.values())
            if a.dataflow == dataflow and a.step.id == step)), timeout_s, EPOCH_WATCH_S)
        return self.epochs(dataflow, step)

    @staticmethod
    def _quiet(check: Callable[..., bool], *args: Any) -> bool:
        """`check(*args)` read from another thread than the worker's: False if what it
        reads changed while it was read (asked again)."""
        try:
            return check(*args)
        except RuntimeError:  # a dict changed size while read
            return False

    # -- outputs and input positions ------------------------------------------------------
    def read_results(self, dataflow: str, sink_activation: str, start: int,
                     end: int | None = None) -> list[ResultRow]:
        return self.worker.call(self.core.egress.read_results, dataflow, sink_activation,
                                start, end)

    def read_result_columns(self, dataflow: str, sink_activation: str, start: int,
                            end: int | None = None) -> Any:
        return self.worker.call(self.core.egress.read_result_columns, dataflow,
                                sink_activation, start, end)

    def commit_results(self, dataflow: str, sink_activation: str, offset: int) -> None:
        self.worker.call(self.core.egress.commit_results, dataflow, sink_activation, offset)

    def result_offsets(self, dataflow: str) -> dict[str, LogOffsets]:
        return self.worker.call(self.core.egress.result_offsets, dataflow)

    def await_results(self, dataflow: str, after: dict[str, int],
                      timeout_s: float) -> dict[str, LogOffsets]:
        egress = self.core.egress
        self.worker.wait_until(lambda: self._quiet(egress.readable_past, dataflow, after),
                               min(timeout_s, MAX_RESULTS_WAIT_S), RESULTS_WATCH_S)
        return self.result_offsets(dataflow)

    def read_errors(self, dataflow: str, start: int, end: int | None = None
                    ) -> tuple[int, list[ResultRow]]:
        return self.worker.call(self.core.egress.read_errors, dataflow, start, end)

    def commit_errors(self, dataflow: str, offset: int) -> None:
        self.worker.call(self.core.egress.commit_errors, dataflow, offset)

    def error_offsets(self, dataflow: str) -> ErrorLogOffsets:
        return self.worker.call(self.core.egress.error_offsets, dataflow)

    def error_records(self, dataflow: str, limit: int = 100) -> list[dict[str, Any]]:
        return self.worker.call(self.core.egress.error_records, dataflow, limit)

    def mark_input_batch(self, dataflow: str, key: str, batch_id: int) -> None:
        self.worker.call(self.core.hosting.mark_input_batch, dataflow, key, batch_id)

    def input_batches(self, dataflow: str) -> dict[str, int]:
        return self.worker.call(self.core.hosting.input_batches, dataflow)

    # -- reports ---------------------------------------------------------------------------
    def dataflow_stats(self, dataflow: str) -> DataflowPart:
        part = self.worker.call(self.core.reports.dataflow_stats, dataflow)
        part["connectors"] = self.kafka.report(dataflow)
        return part

    def executor_stats(self) -> ExecutorStats:
        stats = self.worker.call(self.core.reports.executor_stats)
        stats["address"] = self.address
        stats["alive"] = True
        stats["ingest_waiting"] = self.core.flow.ingest_waiting
        # The code this process runs (versions are mixed during a rolling upgrade); read
        # here, as the package imports this module before it sets its version.
        stats["version"] = sys.modules["cameo_actors"].__version__
        stats["code"] = code_id()
        return stats

    def usage(self) -> ExecutorUsage:
        return self.worker.call(self.core.reports.usage)

    def counters(self) -> dict[str, dict[str, list[float]]]:
        return self.worker.call(self.core.reports.counters)

    def unsettled(self, names: list[str] | None = None) -> Unsettled:
        return self.worker.call(self.core.reports.unsettled, names)

    def traces(self) -> Traces:
        tracer = self.core.tracer
        if tracer is None:
            return Traces([], 0)
        activities, lost = self.worker.call(tracer.drain)
        return Traces(activities, lost)


def _with_merged(mine: set[str], merged: MergedParts | None) -> set[str]:
    """The activations placed here, and the old instances whose parts they merge."""
    return mine | {old for aid in mine for old, _ in (merged or {}).get(aid, ())}
