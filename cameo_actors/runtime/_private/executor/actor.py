"""The executor on Ray: an actor hosting many activations, with its own worker thread.

Ray's threads only hand work to the worker thread (an inbox of closures); the worker
thread alone runs the scheduler, so the runtime, not the OS or Ray's call order,
decides what runs next (the Orleans-silo model). A short interpreter switch interval
lets Ray's threads get incoming batches in promptly while the worker computes. The
calls themselves are `ExecutorHost`'s (`host.py`), which the unit tests run in-process.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

import ray

from cameo_actors.runtime._private.checkpoint.part_store import part_store
from cameo_actors.runtime._private.cluster import node_ip
from cameo_actors.runtime._private.codebase import versioned
from cameo_actors.runtime._private.collector import Pauses
from cameo_actors.runtime._private.executor.core import ExecutorCore
from cameo_actors.runtime._private.executor.host import WORKER_TIMEOUT_S, ExecutorHost
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime._private.remote import Actor
from cameo_actors.runtime.boundary import ExecutorStats, LogOffsets
from cameo_actors.runtime.config import RuntimeConfig

P = ParamSpec("P")
T = TypeVar("T")
logger = logging.getLogger(__name__)
IDLE_WAIT_S = 0.05


class WorkerThread:
    """The executor's worker thread: it alone runs the core (its inbox, the scheduling
    loop, the flush of outgoing batches); the parts' writer is a thread of its own."""

    def __init__(self, core: ExecutorCore) -> None:
        self.core = core
        self._wake = threading.Event()
        self._stopped = False
        # Checkpoint parts are written here, off the worker thread, one at a time.
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"cameo-ckpt-{core.index}")
        self.thread = threading.Thread(target=self._loop, name=f"cameo-executor-{core.index}",
                                       daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        core = self.core
        while not self._stopped:
            try:
                core.drain_inbox()
                ran = core.run_slice()
                core.idle_sources()
                core.flush_after_slice(ran)
            except Exception:  # a runtime bug: report it, keep serving the other dataflows
                core.faults.append(traceback.format_exc(limit=8))
                logger.exception("executor %d: fault in the worker loop", core.index)
                continue
            if not ran and not core.inbox:
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()

    def submit(self, fn: Callable[[], None]) -> None:
        self.core.inbox.append(fn)
        self._wake.set()

    def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        answer: Future[T] = Future()

        def run() -> None:
            try:
                answer.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed back to the Ray caller
                answer.set_exception(e)

        self.submit(run)
        return answer.result(WORKER_TIMEOUT_S)

    def wait_until(self, done: Callable[[], bool], timeout_s: float, every_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:
            time.sleep(every_s)

    def write(self, fn: Callable[[], None]) -> None:
        self._writer.submit(fn)

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        self.thread.join(timeout=5)


# Ingest calls may block (backpressure), each holding a thread of the "ingest" group
# until there is room. A handle keeps one call in flight to an executor whose sources
# are pressed (eight before it knows; `client.push.MAX_IN_FLIGHT`), so the threads full
# sources hold are about one per writer, and 32 leave room for other tenants' batches.
# (With 16 threads and eight calls per writer, two bulk writers took them all, and a
# 20 ms tenant's calls waited 1.5 s for a thread.) A blocked thread costs only its stack.
# Readers waiting for results (`await_results`, bounded) each hold a thread of "watch".
@ray.remote(max_concurrency=8,  # type: ignore[call-overload]
            concurrency_groups={"ingest": 32, "watch": 16})
@versioned
class Executor(ExecutorHost):
    def __init__(self, index: int, config: dict[str, Any]) -> None:
        cfg = RuntimeConfig.from_dict(config)
        sys.setswitchinterval(cfg.switch_interval_s)
        core = ExecutorCore(index, cfg, self._send_to)
        self._thread = WorkerThread(core)
        # Its base named, not `super()`: a process that loads this class by value (another
        # node's executor) runs its methods with the class it rebuilt, which `super()`'s
        # cell does not name. Ray restarts a dead executor by running this again: a new
        # incarnation.
        ExecutorHost.__init__(self, core, cfg, self._thread,
                              incarnation=uuid.uuid4().hex[:12], address=node_ip(),
                              parts=part_store(cfg, index))
        self.gc_pauses = Pauses(freeze=cfg.gc_freeze)
        # pyarrow imports pandas, when it is installed (Spark's Python needs it), the first
        # time it converts Python objects (`pa.array`): 0.5 s on a quiet machine here, 1.8 s
        # beside Spark. On the worker thread that was the first columnar message's step, 36
        # quanta: the demo's 50 ms tenant, sharing the executor, missed its target for it.
        # Done on a thread of its own as the executor starts, it overlaps Ray's start and
        # the controller's first calls. Then what the start brought in (Ray's, pyarrow's
        # and pandas's objects: 120,000 here) is long-lived: frozen out of the cycle
        # collector's passes. Else the first full pass during a run walked it all, 60-110
        # ms on the worker thread: the 50 ms tenants' late results in the issue's mix.
        # Frozen without a pass first: a pass here held the interpreter as long, while
        # the first dataflows ran; a cycle that was garbage at the start stays. (Names
        # from builtins only, not of this module: an old process loads this class by
        # value and looks those up in its old modules.)
        freeze = cfg.gc_freeze

        def warm() -> None:
            __import__("pyarrow").array([0])
            if freeze:
                __import__("gc").freeze()
        threading.Thread(target=warm, name="cameo-warm-pyarrow", daemon=True).start()

    def _send_to(self, host: int, blob: bytes) -> None:
        Actor[ExecutorAPI](self.peers[host]).send(ExecutorAPI.deliver, blob)

    @ray.method(concurrency_group="ingest")
    def ingest(  # type: ignore[override]  # Ray's stubs type it as a remote method
            self, client: str, seq: int, target: str, blob: bytes) -> int:
        return ExecutorHost.ingest(self, client, seq, target, blob)

    @ray.method(concurrency_group="watch")
    def await_results(  # type: ignore[override]  # Ray's stubs type it as a remote method
            self, dataflow: str, after: dict[str, int], timeout_s: float
    ) -> dict[str, LogOffsets]:
        return ExecutorHost.await_results(self, dataflow, after, timeout_s)

    def executor_stats(self) -> ExecutorStats:
        stats = ExecutorHost.executor_stats(self)
        stats["node"] = ray.get_runtime_context().get_node_id()
        stats["pid"] = os.getpid()
        stats["worker_tid"] = self._thread.thread.native_id or 0
        stats["gc"] = self.gc_pauses.stats()
        stats["cpu_s"] = time.process_time()
        # Resident memory, from /proc (inline, not a function of this module: an old
        # process loads this class by value and looks such names up in its old modules).
        try:
            with open("/proc/self/statm", encoding="ascii") as f:
                stats["rss_bytes"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            stats["rss_bytes"] = 0
        return stats
