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
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import ray

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.runtime._private.core import ExecutorCore
from cameo_actors.runtime._private.ingest import unpack_ingest
from cameo_actors.runtime._private.routing import Placement
from cameo_actors.runtime.boundary import (
    DataflowPart,
    ErrorLogOffsets,
    ExecutorStats,
    LogOffsets,
    ResultRow,
)
from cameo_actors.runtime.config import RuntimeConfig

T = TypeVar("T")
logger = logging.getLogger(__name__)
IDLE_WAIT_S = 0.05
#: How often `await_epoch` looks whether an epoch is done.
EPOCH_WATCH_S = 0.001
CALL_TIMEOUT_S = 60.0


# Ingest calls may block (backpressure); enough threads that one tenant's blocked
# calls never keep another tenant's batches out.
@ray.remote(max_concurrency=8, concurrency_groups={"ingest": 16})  # type: ignore[call-overload]
class Executor:
    def __init__(self, index: int, config: dict[str, Any]) -> None:
        self.config = RuntimeConfig.from_dict(config)
        sys.setswitchinterval(self.config.switch_interval_s)
        self.index = index
        self.peers: list[Any] = []
        self.core = ExecutorCore(index, self.config, self._send_to)
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
        """Events from a client (driver, Spark writer). Blocks while the target source
        has `ingress_events` waiting: that is the backpressure a writer feels.
        Returns the events waiting at the target after this batch."""
        core = self.core
        # Stamped on arrival: time spent blocked by backpressure counts as latency.
        ingest_ms = core.clock.now_ms()
        waiting = core.flow.wait_for_room(target, lambda: target in core.hosting.activations,
                                          CALL_TIMEOUT_S)
        act = core.hosting.activations.get(target)
        # Never raises: a call that failed here would leave a gap in the client's order.
        items = unpack_ingest(blob, act.step.id if act is not None else target)
        self._submit(lambda: core.ingest(client, seq, target, items, ingest_ms))
        return waiting

    # -- control -------------------------------------------------------------------
    def set_peers(self, peers: list[Any]) -> int:
        self.peers = peers
        return self.index

    def deploy(self, spec: dict[str, Any], placement: Placement) -> list[str]:
        return self._call(self.core.deploy, DataflowSpec.from_dict(spec), placement)

    def cancel(self, dataflow: str) -> int:
        return self._call(self.core.cancel, dataflow)

    def update(self, dataflow: str, latency_target_ms: float | None, weight: float | None) -> None:
        self._call(self.core.update, dataflow, latency_target_ms=latency_target_ms, weight=weight)

    # -- changes of the physical plan (migration.py) -----------------------------------
    def add_instances(self, spec: dict[str, Any], placement: Placement, new: list[str]) -> list[str]:
        return self._call(self.core.add_instances, DataflowSpec.from_dict(spec), placement, new)

    def prepare(self, dataflow: str, step: str, version: int,
                moves: dict[int, tuple[int, int]]) -> None:
        self._call(self.core.prepare, dataflow, step, version, moves)

    def reroute(self, dataflow: str, step: str, version: int, owners: list[int],
                instances: list[int]) -> int:
        return self._call(self.core.reroute, dataflow, step, version, owners, instances)

    def retire(self, dataflow: str, ids: list[str]) -> list[str]:
        return self._call(self.core.retire, dataflow, ids)

    def end_migration(self, dataflow: str, step: str) -> None:
        self._call(self.core.end_migration, dataflow, step)

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
        stats["pid"] = os.getpid()
        stats["alive"] = True
        return stats

    def pressure(self, dataflow: str) -> tuple[dict[str, int], list[str]]:
        """(events waiting at each of the dataflow's sources here, its sinks here whose
        result log is full). Answered by Ray's threads from counters, so that a client can
        decide to refuse a push before sending it, however busy the worker thread is."""
        core = self.core
        ids = core.hosting.dataflows[dataflow].ids if dataflow in core.hosting.dataflows else []
        with core.flow.ingress_cond:
            waiting = {a: core.flow.ingress_pending[a] for a in ids if a in core.flow.ingress_pending}
        return waiting, core.egress.held_full(dataflow)

    def ping(self) -> int:
        """Liveness, answered by Ray's threads (not the worker thread, which may be busy)."""
        return self.index

    def ended(self, dataflow: str) -> bool:
        return self._call(self.core.ended, dataflow)

    def footprints(self) -> dict[str, int]:
        return self._call(self.core.footprints)

    def idle(self) -> tuple[bool, dict[int, int], dict[int, int]]:
        return self._call(self.core.idle)

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)
