"""Tracing on the controller's side: the executors' traced activities gathered every
snapshot interval (`Tracing`), joined into one program activity graph per interval and
analysed (`TraceCollector`, `cameo_actors.tracing`): what `cameo explain` and the
critical-path metrics read.

Every `trace_snapshot_s` the controller drains each executor's ring
(`executor/tracing.py`) and hands the activities to `TraceCollector.tick`. A snapshot is
analysed one interval late, so that the activities of its window have ended and been
collected (an activity is recorded when it ends). Activities are kept for
`trace_history_s`, so a result whose latency is longer than one interval is still
followed back to where it entered.

Analysing is most of tracing's cost, and nobody may be reading it: snapshots are
analysed as they come only while someone reads the analysis (`explain`, the web page,
a metrics scrape) and for `trace_watch_s` after; unread, the activities of the last
`trace_history_s` wait, and the first read analyses them at once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from collections import deque
from typing import Any

from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.controller_api import ControllerAPI
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime.boundary import Explanation
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.interface import ControlAPI, serves
from cameo_actors.tracing.explain import explain, snapshot
from cameo_actors.tracing.records import PROCESS, Activity

logger = logging.getLogger(__name__)


def lower_thread_priority(niceness: int) -> None:
    """Run the calling thread `niceness` steps below its process (Linux keeps a nice
    value per thread; elsewhere, or without the right, nothing changes)."""
    if niceness <= 0 or not hasattr(os, "setpriority"):
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(),
                       os.getpriority(os.PRIO_PROCESS, 0) + niceness)


class TraceCollector:
    def __init__(self, config: RuntimeConfig) -> None:
        self.interval_ms = config.trace_snapshot_s * 1000.0
        self.history_ms = config.trace_history_s * 1000.0
        self.history_max = config.trace_history_activities
        self.watch_ms = config.trace_watch_s * 1000.0
        self.snapshots: deque[dict[str, Any]] = deque(maxlen=config.trace_snapshots_kept)
        #: activities in the order they were collected, and the process ones by id
        self.history: deque[Activity] = deque()
        self.index: dict[int, Activity] = {}
        #: activities that may still fall in a snapshot to come (about in end order)
        self.recent: deque[Activity] = deque()
        #: activities overwritten in executors' rings before they were collected
        self.lost: dict[int, int] = {}
        self.collected = 0
        #: CPU time spent taking in and analysing activities; activities analysed, and
        #: the CPU time that took
        self.cpu_s = 0.0
        self.analysed = 0
        self.analysis_cpu_s = 0.0
        #: where the next snapshot's window starts (None until the first analysis)
        self.next_ms: float | None = None
        #: snapshots are analysed as they come until then (someone reads them)
        self.watched_until_ms = -math.inf
        # One analysis at a time: the collecting thread's, or a reader's catch-up.
        self._lock = threading.RLock()

    def tick(self, now_ms: float, parts: dict[int, tuple[list[tuple[Any, ...]], int]]) -> int:
        """Take each executor's drained activities (executor -> (records, lost)); while
        someone reads the analysis (`watch`), analyse every whole interval that ended at
        least one interval ago. Returns the snapshots made."""
        with self._lock:
            cpu0 = time.thread_time()
            try:
                self._take(parts)
                made = self._analyse(now_ms) if now_ms < self.watched_until_ms else 0
                self._forget(now_ms - self.history_ms)
                return made
            finally:
                self.cpu_s += time.thread_time() - cpu0

    def watch(self, now_ms: float) -> None:
        """Someone reads the analysis: analyse what history still holds now, and each
        interval as it comes for `trace_watch_s` more. Unread, tracing costs the pool only
        its executors' records (analysing is most of its cost)."""
        with self._lock:
            self.watched_until_ms = now_ms + self.watch_ms
            cpu0 = time.thread_time()
            self._analyse(now_ms)
            self.cpu_s += time.thread_time() - cpu0

    def _take(self, parts: dict[int, tuple[list[tuple[Any, ...]], int]]) -> None:
        for executor, (records, lost) in parts.items():
            self.lost[executor] = lost
            self.collected += len(records)
            for r in records:
                a = Activity(*r)
                self.history.append(a)
                self.recent.append(a)
                if a.kind == PROCESS:
                    self.index[a.id] = a

    def _analyse(self, now_ms: float) -> int:
        # Not analysed for a while (or ever): start where the kept history begins.
        floor = now_ms - self.history_ms
        if self.next_ms is None or self.next_ms < floor:
            first = max(floor, min((a.start_ms for a in self.history), default=floor))
            self.next_ms = min(first, now_ms - 2 * self.interval_ms)
        made = 0
        while self.next_ms + 2 * self.interval_ms <= now_ms:
            start, end = self.next_ms, self.next_ms + self.interval_ms
            window = [a for a in self.recent if a.end_ms > start and a.start_ms < end]
            snap = snapshot(window, start, end, self.index)
            self.snapshots.append(snap)
            self.analysed += snap["activities"]
            self.analysis_cpu_s += snap["analysis_ms"] / 1000.0
            self.next_ms = end
            made += 1
        return made

    def _forget(self, before_ms: float) -> None:
        history, index, recent = self.history, self.index, self.recent
        while history and (history[0].end_ms < before_ms or len(history) > self.history_max):
            a = history.popleft()
            if a.kind == PROCESS:
                index.pop(a.id, None)
        done = max(before_ms, self.next_ms or -math.inf)
        while recent and (recent[0].end_ms <= done or len(recent) > self.history_max):
            recent.popleft()

    def explain(self, dataflow: str | None, last_s: float, now_ms: float,
                latency_target_ms: float | None = None) -> dict[str, Any]:
        with self._lock:
            self.watch(now_ms)
            snaps = list(self.snapshots)
        out = explain(snaps, dataflow, last_s, now_ms, latency_target_ms)
        used = [s for s in snaps if s["end_ms"] > now_ms - last_s * 1000.0]
        span_s = len(used) * self.interval_ms / 1000.0
        # Whether the analysis keeps up: activities analysed per second of CPU time (one
        # core), against activities traced per second.
        out["tracing"] = {"lost": sum(self.lost.values()), "collected": self.collected,
                          "cpu_s": self.cpu_s,
                          "analysed_per_s": self.analysed / self.analysis_cpu_s
                          if self.analysis_cpu_s else None,
                          "traced_per_s": sum(s["activities"] for s in used) / span_s
                          if span_s else None}
        return out

    def latest(self, now_ms: float) -> dict[str, Any]:
        """The newest snapshot's pool-wide critical participation per operator and per
        executor (the metrics' gauges); empty before the first."""
        with self._lock:
            self.watch(now_ms)
            if not self.snapshots:
                return {}
            pool = self.snapshots[-1]["pool"]
        return {"by_operator": dict(pool.get("by_operator", {})),
                "by_executor": dict(pool.get("by_executor", {}))}


class Tracing:
    """The trace collection of one controller."""

    def __init__(self, config: RuntimeConfig, pool: Pool, registry: Registry) -> None:
        self.config, self.pool, self.registry = config, pool, registry
        self.collector = TraceCollector(config)

    def run(self, stopped: threading.Event) -> None:
        """Collect and analyse each snapshot interval; a thread of its own, so that
        analysing never delays the monitor's liveness checks, and at a lower OS priority
        (`trace_niceness`), so that it takes the CPU the executors leave."""
        lower_thread_priority(self.config.trace_niceness)
        while not stopped.wait(self.config.trace_snapshot_s):
            try:
                self.collect(time.time() * 1000.0)
            except Exception:  # a bug here must not stop tracing for good
                logger.exception("controller: analysing traces failed")

    def collect(self, now_ms: float) -> int:
        """Drain every answering executor's traced activities into the collector (analysed
        while someone reads); returns the snapshots made."""
        asked = [i for i in self.pool.live() if i not in self.pool.restarting]
        gateway = self.pool.gateway
        answers = gateway.gather_each(gateway.send_all(asked, ExecutorAPI.traces), timeout_s=10.0)
        return self.collector.tick(now_ms, {i: (a.activities, a.lost) for i, a in
                                            zip(asked, answers, strict=True) if a is not None})

    @serves(ControlAPI.explain)
    def explain(self, name: str | None = None, *, last_s: float = 60.0) -> Explanation:
        """What the critical paths of `name`'s results (None: of the whole pool) were made
        of over the last `last_s` seconds, against its target."""
        target = None
        if name is not None:
            target = float(self.registry.record(name)["spec"]["latency_target_ms"])
        return self.collector.explain(name, last_s, time.time() * 1000.0, target)

    @serves(ControllerAPI.critical_path)
    def latest(self) -> Explanation:
        return self.collector.latest(time.time() * 1000.0)
