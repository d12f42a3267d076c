"""The executor: a Ray actor hosting many activations, with its own worker thread.

Ray's threads only hand work to the worker thread (an inbox of closures);
the worker thread alone runs the scheduler, so the runtime, not the OS or
Ray's call order, decides what runs next (the Orleans-silo model). A short
interpreter switch interval lets Ray's threads get incoming batches in
promptly while the worker computes.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import ray

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.runtime._private.checkpoint.parts import (
    ChainRead,
    Content,
    PartBytes,
    Written,
    read_chain,
)
from cameo_actors.runtime._private.checkpoint.shared import marks_missing
from cameo_actors.runtime._private.checkpoint.storage import part_store
from cameo_actors.runtime._private.codebase import code_id, versioned
from cameo_actors.runtime._private.collector import Pauses
from cameo_actors.runtime._private.exchange.ingest import unpack_ingest
from cameo_actors.runtime._private.executor.core import ExecutorCore, Unsettled
from cameo_actors.runtime._private.placement import Placement
from cameo_actors.runtime.boundary import (
    DataflowPart,
    ErrorLogOffsets,
    ExecutorStats,
    LogOffsets,
    ResultRow,
)
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import NotHosted

T = TypeVar("T")
logger = logging.getLogger(__name__)
IDLE_WAIT_S = 0.05
#: How often `await_epoch` looks whether an epoch is done.
EPOCH_WATCH_S = 0.001
CALL_TIMEOUT_S = 60.0


# Ingest calls may block (backpressure), each holding a thread of the "ingest" group
# until there is room. A handle keeps one call in flight to an executor whose sources
# are pressed (eight before it knows; `api.MAX_IN_FLIGHT`), so the threads full sources
# hold are about one per writer, and 32 leave room for other tenants' batches. (With 16
# threads and eight calls per writer, two bulk writers took them all, and a 20 ms
# tenant's calls waited 1.5 s for a thread.) A blocked thread costs only its stack.
@ray.remote(max_concurrency=8, concurrency_groups={"ingest": 32})  # type: ignore[call-overload]
@versioned
class Executor:
    def __init__(self, index: int, config: dict[str, Any]) -> None:
        self.config = RuntimeConfig.from_dict(config)
        sys.setswitchinterval(self.config.switch_interval_s)
        self.index = index
        #: names this run of the process: Ray restarts a dead executor by running this again
        self.incarnation = uuid.uuid4().hex[:12]
        self.address = ray.util.get_node_ip_address()  # what an operator knows a machine by
        self.peers: list[Any] = []
        self.core = ExecutorCore(index, self.config, self._send_to, persist=self._persist)
        self.core.channels.incarnation = self.incarnation
        self.gc_pauses = Pauses(freeze=self.config.gc_freeze)
        #: the checkpoint parts written and read here (and their local copies)
        self.parts = part_store(self.config, index)
        # Checkpoint parts are written here, off the worker thread, one at a time.
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"cameo-ckpt-{index}")
        #: (dataflow, checkpoint) -> activation -> its part written
        self.written: dict[tuple[str, int], dict[str, Written]] = {}
        self.write_failures = 0
        #: dataflow -> (the parts of a checkpoint `fetch` read here, them unpacked), for
        #: the `restore` that follows
        self.fetched: dict[str, tuple[dict[str, list[str]], dict[str, ChainRead]]] = {}
        #: dataflow -> times it was restored or cancelled here (a checkpoint under way
        #: before that will not complete: its waiters stop)
        self.resets: Counter[str] = Counter()
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=f"cameo-executor-{index}", daemon=True)
        self._thread.start()

    # -- the worker thread ----------------------------------------------------------
    def _loop(self) -> None:
        core = self.core
        while not self._stopped:
            try:
                core.drain_inbox()
                ran = core.run_slice()
                core.flush()
            except Exception:  # a runtime bug: report it, keep serving the other dataflows
                core.faults.append(traceback.format_exc(limit=8))
                logger.exception("executor %d: fault in the worker loop", self.index)
                continue
            if not ran and not core.inbox:
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()

    def _send_to(self, host: int, blob: bytes) -> None:
        self.peers[host].deliver.remote(blob)

    def _submit(self, fn: Callable[[], None]) -> None:
        self.core.inbox.append(fn)
        self._wake.set()

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run fn on the worker thread and return its result (exceptions re-raised here)."""
        fut: Future[T] = Future()

        def run() -> None:
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed back to the Ray caller
                fut.set_exception(e)

        self._submit(run)
        return fut.result(CALL_TIMEOUT_S)

    # -- data ----------------------------------------------------------------------
    def deliver(self, blob: bytes) -> None:
        """A batch from another executor."""
        self._submit(lambda: self.core.receive(blob))

    @ray.method(concurrency_group="ingest")
    def ingest(self, client: str, seq: int, target: str, blob: bytes) -> int:
        """Events from a client (driver, Spark writer): call `seq` of `client` to source
        `target`. Blocks while the source has `ingress_events` waiting: that is the
        backpressure a writer feels. Written to the source's ingress log before it
        returns, so an accepted call survives this process. Returns the events waiting
        at the target after this batch.

        Raises:
            NotHosted: the source is not here (now): being restored, or ended. The
                client sends the call again once the dataflow runs (a call applied
                already is dropped by its number).
        """
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
                                          CALL_TIMEOUT_S)
        log = core.ingress_logs.get(target)
        if log is not None:
            try:
                log.append(client, seq, blob)
            except ValueError:  # closed: the dataflow was cancelled or is being restored
                core.flow.arrived(target, n)
                raise NotHosted(f"executor {self.index}: {target!r} is being restored") from None
        self._submit(lambda: core.ingest(client, seq, target, items, ingest_ms, deser_ms,
                                         reserved=n))
        return waiting

    # -- control -------------------------------------------------------------------
    def set_peers(self, peers: list[Any], incarnations: dict[int, str]) -> str:
        """The pool's executors and their incarnations; returns this one's."""
        self.peers = list(peers)
        self._call(self._set_incarnations, incarnations)
        return self.incarnation

    def _set_incarnations(self, incarnations: dict[int, str]) -> None:
        for peer, inc in incarnations.items():
            if self.core.channels.peers.get(peer) != inc:
                self.core.channels.relink(peer, inc)

    def relink(self, peer: int, handle: Any, incarnation: str) -> None:
        """Executor `peer` was restarted (as `incarnation`): its link starts again."""
        while len(self.peers) <= peer:
            self.peers.append(handle)
        self.peers[peer] = handle
        self._call(self.core.channels.relink, peer, incarnation)

    def deploy(self, spec: dict[str, Any], placement: Placement, deployment: str = "") -> list[str]:
        return self._call(self.core.deploy, DataflowSpec.from_dict(spec), placement, deployment)

    # -- checkpoints and recovery (checkpoint.py) ----------------------------------------
    def checkpoint(self, dataflow: str, ckpt: int) -> int:
        return self._call(self.core.checkpoint, dataflow, ckpt)

    def _persist(self, dataflow: str, ckpt: int, aid: str, content: Content,
                 positions: dict[str, int], bases: list[str]) -> None:
        """A complete part (on the worker thread): packed and written by the writer thread."""
        deployment = self.core.hosting.dataflows[dataflow].deployment
        self._writer.submit(self._write, dataflow, deployment, ckpt, aid, content, positions,
                            bases)

    def _write(self, dataflow: str, deployment: str, ckpt: int, aid: str, content: Content,
               positions: dict[str, int], bases: list[str]) -> None:
        if self.parts is None:
            return
        try:
            blob = content.frames()
            path = self.parts.write(dataflow, deployment, ckpt, aid, blob)
        except Exception:  # counted; the checkpoint will not complete, the previous one stays
            self.write_failures += 1
            logger.exception("executor %d: checkpoint %d of %s: part %s not written",
                             self.index, ckpt, dataflow, aid)
            return
        self.written.setdefault((dataflow, ckpt), {})[aid] = (path, positions, content.nbytes,
                                                               bases)

    def await_checkpoint(self, dataflow: str, ckpt: int, ids: list[str], timeout_s: float
                         ) -> dict[str, Written]:
        """The parts of checkpoint `ckpt` written here once all of `ids` are (or after
        `timeout_s`). Watched from Ray's thread."""
        deadline = time.monotonic() + timeout_s
        resets = self.resets[dataflow]
        while True:
            got = self.written.get((dataflow, ckpt), {})
            if all(a in got for a in ids) or time.monotonic() > deadline \
                    or self.resets[dataflow] != resets:
                return dict(got)
            time.sleep(EPOCH_WATCH_S * 5)

    def checkpointed(self, dataflow: str, ckpt: int, positions: dict[str, dict[str, int]]) -> None:
        """Checkpoint `ckpt` completed (its manifest is in storage): its parts written here
        are what the activations' next parts may build on."""
        mine = self.written.get((dataflow, ckpt), {})
        chains = {aid: [*bases, path] for aid, (path, _, _, bases) in mine.items()}
        for key in [k for k in self.written if k[0] == dataflow and k[1] <= ckpt]:
            del self.written[key]
        hosted = self.core.hosting.dataflows.get(dataflow)
        if self.parts is not None and hosted is not None:
            self.parts.completed(dataflow, hosted.deployment, chains.values())
        self._call(self.core.checkpointed, dataflow, ckpt, positions, chains)

    def fetch(self, dataflow: str, placement: Placement, parts: dict[str, list[str]]
              ) -> tuple[int, int]:
        """Read and check this executor's parts of a checkpoint (`parts`: activation ->
        paths in storage of its part, after those it builds on), in parallel, from their
        local copies where it finds them, and unpack them, on Ray's threads, for the
        `restore` that follows. Returns the bytes read, and how many of them were local.

        Raises:
            CheckpointDamaged: a part is missing or does not match its checksum; nothing
                is kept then (the controller falls back to an earlier checkpoint).
        """
        mine = {str(a) for a in placement.on(self.index)}
        wanted = {aid: paths for aid, paths in parts.items() if aid in mine}
        self.fetched.pop(dataflow, None)
        paths = [path for chain in wanted.values() for path in chain]
        if self.parts is None or not paths:
            return 0, 0
        with ThreadPoolExecutor(min(4, len(paths)), thread_name_prefix="cameo-fetch") as pool:
            got = list(pool.map(self.parts.read, paths))
        read = iter(blob for blob, _ in got)
        blobs: dict[str, list[PartBytes]] = {
            aid: [next(read) for _ in chain] for aid, chain in wanted.items()}
        # Unpacked here, not on the worker thread: other tenants' work runs between pieces.
        self.fetched[dataflow] = (wanted, {aid: read_chain(chain) for aid, chain in blobs.items()})
        return sum(len(b) for b, _ in got), sum(len(b) for b, local in got if local)

    def restore(self, spec: dict[str, Any], placement: Placement, deployment: str,
                parts: dict[str, list[str]], generation: int) -> list[str]:
        """Deploy a dataflow again from a checkpoint (`parts`: activation -> paths in
        storage of its part, after those it builds on), held until `resume`: with the
        parts `fetch` read, else read here."""
        self.resets[spec["name"]] += 1
        mine = {str(a) for a in placement.on(self.index)}
        wanted = {aid: chain for aid, chain in parts.items() if aid in mine}
        fetched, read = self.fetched.pop(spec["name"], ({}, {}))
        if fetched != wanted:
            self.fetch(spec["name"], placement, parts)
            _, read = self.fetched.pop(spec["name"], ({}, {}))
        for key in [k for k in self.written if k[0] == spec["name"]]:
            del self.written[key]
        return self._call(self.core.restore, DataflowSpec.from_dict(spec), placement,
                          deployment, read, generation, wanted)

    def resume(self, dataflow: str) -> None:
        self._call(self.core.resume, dataflow)

    def cancel(self, dataflow: str) -> int:
        self.resets[dataflow] += 1
        if self.parts is not None:
            self.parts.drop(dataflow)
        return self._call(self.core.cancel, dataflow)

    def update(self, dataflow: str, latency_target_ms: float | None, weight: float | None) -> None:
        self._call(self.core.update, dataflow, latency_target_ms=latency_target_ms, weight=weight)

    # -- changes of the physical plan (migration.py) -----------------------------------
    def add_instances(self, spec: dict[str, Any], placement: Placement, new: list[str],
                      generation: int = 0, deployment: str = "") -> list[str]:
        return self._call(self.core.add_instances, DataflowSpec.from_dict(spec), placement, new,
                          generation, deployment)

    def add_lessees(self, spec: dict[str, Any], placement: Placement, step: str, new: list[str],
                    generation: int = 0, deployment: str = "") -> list[str]:
        return self._call(self.core.add_lessees, DataflowSpec.from_dict(spec), placement, step,
                          new, generation, deployment)

    def unlease(self, dataflow: str, step: str, ids: list[str]) -> int:
        return self._call(self.core.unlease, dataflow, step, ids)

    def lessees_ended(self, dataflow: str, ids: list[str]) -> bool:
        return self._call(self.core.lessees_ended, dataflow, ids)

    def drop_lessees(self, dataflow: str, ids: list[str]) -> list[str]:
        return self._call(self.core.drop_lessees, dataflow, ids)

    def prepare(self, dataflow: str, step: str, version: int,
                moves: dict[int, tuple[int, int]]) -> None:
        self._call(self.core.prepare, dataflow, step, version, moves)

    def reroute(self, dataflow: str, step: str, version: int, owners: list[int],
                instances: list[int]) -> int:
        return self._call(self.core.reroute, dataflow, step, version, owners, instances)

    def retire(self, dataflow: str, ids: list[str]) -> list[str]:
        return self._call(self.core.retire, dataflow, ids)

    def epochs(self, dataflow: str, step: str) -> dict[str, dict[str, int]]:
        return self._call(self.core.epochs, dataflow, step)

    def await_epoch(self, dataflow: str, step: str, version: int, timeout_s: float
                    ) -> dict[str, dict[str, int]]:
        """`epochs` once every instance of `step` here finished `version` (or after
        `timeout_s`). Watched from Ray's thread, so a migration's wait costs the worker
        thread one call per epoch, not a poll every few ms."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                acts = self.core.hosting.activations
                done = all(a.done_version >= version for a in list(acts.values())
                           if a.dataflow == dataflow and a.step.id == step)
            except RuntimeError:  # changed while looked at: look again
                done = False
            if done:
                break
            time.sleep(EPOCH_WATCH_S)
        return self._call(self.core.epochs, dataflow, step)

    # -- outputs (egress) and input positions ---------------------------------------
    def read_results(self, dataflow: str, sink_activation: str, start: int, end: int | None = None
                     ) -> list[ResultRow]:
        return self._call(self.core.egress.read_results, dataflow, sink_activation, start, end)

    def read_result_columns(self, dataflow: str, sink_activation: str, start: int,
                            end: int | None = None) -> Any:
        return self._call(self.core.egress.read_result_columns, dataflow, sink_activation,
                          start, end)

    def commit_results(self, dataflow: str, sink_activation: str, offset: int) -> None:
        self._call(self.core.egress.commit_results, dataflow, sink_activation, offset)

    def result_offsets(self, dataflow: str) -> dict[str, LogOffsets]:
        return self._call(self.core.egress.result_offsets, dataflow)

    def read_errors(self, dataflow: str, start: int, end: int | None = None
                    ) -> tuple[int, list[ResultRow]]:
        return self._call(self.core.egress.read_errors, dataflow, start, end)

    def commit_errors(self, dataflow: str, offset: int) -> None:
        self._call(self.core.egress.commit_errors, dataflow, offset)

    def error_offsets(self, dataflow: str) -> ErrorLogOffsets:
        return self._call(self.core.egress.error_offsets, dataflow)

    def error_records(self, dataflow: str, limit: int = 100) -> list[dict[str, Any]]:
        return self._call(self.core.egress.error_records, dataflow, limit)

    def mark_input_batch(self, dataflow: str, key: str, batch_id: int) -> None:
        self._call(self.core.hosting.mark_input_batch, dataflow, key, batch_id)

    def input_batches(self, dataflow: str) -> dict[str, int]:
        return self._call(self.core.hosting.input_batches, dataflow)

    # -- statistics -------------------------------------------------------------------
    def dataflow_stats(self, dataflow: str) -> DataflowPart:
        return self._call(self.core.dataflow_stats, dataflow)

    def executor_stats(self) -> ExecutorStats:
        stats = self._call(self.core.executor_stats)
        stats["node"] = ray.get_runtime_context().get_node_id()
        stats["address"] = self.address
        stats["pid"] = os.getpid()
        stats["worker_tid"] = self._thread.native_id or 0
        stats["alive"] = True
        stats["gc"] = self.gc_pauses.stats()
        stats["ingest_waiting"] = self.core.flow.ingest_waiting
        # The code this process runs (versions are mixed during a rolling upgrade); read
        # here, as the package imports this module before it sets its version.
        stats["version"] = sys.modules["cameo_actors"].__version__
        stats["code"] = code_id()
        return stats

    def marks_missing(self, token: str) -> tuple[str, list[str]]:
        """(this node's address, the pool's storage in which it does not find the marks
        `token`: `storage.leave_marks`)."""
        return self.address, marks_missing(self.config, token)

    def pressure(self, dataflow: str) -> tuple[dict[str, int], int, dict[str, int]]:
        """(events waiting at each of the dataflow's sources here, events queued at its
        other steps here before their sinks, the events each of its sinks here can still
        take: `Egress.room`). Answered by Ray's threads from counters, so that a client
        can decide to refuse a push before sending it, however busy the worker thread is."""
        core = self.core
        ids = core.hosting.dataflows[dataflow].ids if dataflow in core.hosting.dataflows else []
        with core.flow.ingress_cond:
            waiting = {a: core.flow.ingress_pending[a] for a in ids if a in core.flow.ingress_pending}
        acts = core.hosting.activations
        queued = {a: max(0, acts[a].events_arrived - acts[a].events_in) for a in ids if a in acts}
        sinks = {a: n for a, n in queued.items() if acts[a].is_sink}
        inside = sum(n for a, n in queued.items() if a not in sinks and a not in waiting)
        return waiting, inside, core.egress.room(dataflow, sinks)

    def traces(self) -> tuple[list[tuple[Any, ...]], int]:
        """The activities traced since the last call, and how many were lost before
        anyone collected them (`tracing.py`); the controller calls this every snapshot."""
        tracer = self.core.tracer
        return self._call(tracer.drain) if tracer is not None else ([], 0)

    def ping(self) -> tuple[int, str]:
        """Liveness and incarnation, answered by Ray's threads (not the worker thread,
        which may be busy)."""
        return self.index, self.incarnation

    def ended(self, dataflow: str) -> bool:
        return self._call(self.core.ended, dataflow)

    def counters(self) -> dict[str, dict[str, list[float]]]:
        return self._call(self.core.counters)

    def usage(self) -> dict[str, dict[str, float]]:
        return self._call(self.core.usage)

    def unsettled(self, names: list[str] | None = None) -> Unsettled:
        return self._call(self.core.unsettled, names)

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)
