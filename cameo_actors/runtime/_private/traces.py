"""The controller's side of tracing: the executors' activities, joined into one program
activity graph per snapshot interval and analysed (`cameo_actors.tracing`).

Every `trace_snapshot_s` the controller drains each executor's ring (`tracing.py`)
and hands the activities to `TraceCollector.tick`. A snapshot is analysed one interval
late, so that the activities of its window have ended and been collected (an activity
is recorded when it ends). Activities are kept for `trace_history_s`, so a result whose
latency is longer than one interval is still followed back to where it entered.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.tracing.explain import explain, snapshot
from cameo_actors.tracing.records import PROCESS, Activity


class TraceCollector:
    def __init__(self, config: RuntimeConfig) -> None:
        self.interval_ms = config.trace_snapshot_s * 1000.0
        self.history_ms = config.trace_history_s * 1000.0
        self.snapshots: deque[dict[str, Any]] = deque(maxlen=config.trace_snapshots_kept)
        #: activities in the order they were collected, and the process ones by id
        self.history: deque[Activity] = deque()
        self.index: dict[int, Activity] = {}
        #: activities that may still fall in a snapshot to come
        self.recent: list[Activity] = []
        #: activities overwritten in executors' rings before they were collected
        self.lost: dict[int, int] = {}
        self.collected = 0
        #: where the next snapshot's window starts (None until the first collection)
        self.next_ms: float | None = None
        self._lock = threading.Lock()

    def tick(self, now_ms: float, parts: dict[int, tuple[list[tuple[Any, ...]], int]]) -> int:
        """Take each executor's drained activities (executor -> (records, lost)) and
        analyse every whole interval that ended at least one interval ago. Returns
        the snapshots made."""
        for executor, (records, lost) in parts.items():
            self.lost[executor] = lost
            self.collected += len(records)
            for r in records:
                a = Activity(*r)
                self.history.append(a)
                self.recent.append(a)
                if a.kind == PROCESS:
                    self.index[a.id] = a
        if self.next_ms is None:
            self.next_ms = now_ms - self.interval_ms
        made = 0
        while self.next_ms + 2 * self.interval_ms <= now_ms:
            start, end = self.next_ms, self.next_ms + self.interval_ms
            window = [a for a in self.recent if a.end_ms > start and a.start_ms < end]
            snap = snapshot(window, start, end, self.index)
            with self._lock:
                self.snapshots.append(snap)
            self.next_ms = end
            self.recent = [a for a in self.recent if a.end_ms > end]
            made += 1
        self._forget(now_ms - self.history_ms)
        return made

    def _forget(self, before_ms: float) -> None:
        history, index = self.history, self.index
        while history and history[0].end_ms < before_ms:
            a = history.popleft()
            if a.kind == PROCESS:
                index.pop(a.id, None)

    def explain(self, dataflow: str | None, last_s: float, now_ms: float,
                latency_target_ms: float | None = None) -> dict[str, Any]:
        with self._lock:
            snaps = list(self.snapshots)
        out = explain(snaps, dataflow, last_s, now_ms, latency_target_ms)
        used = [s for s in snaps if s["end_ms"] > now_ms - last_s * 1000.0]
        acts = sum(s["activities"] for s in used)
        busy_s = sum(s["analysis_ms"] for s in used) / 1000.0
        span_s = len(used) * self.interval_ms / 1000.0
        # Whether the analysis keeps up: activities analysed per second of analysis time
        # (one thread) against activities traced per second of the pool's time.
        out["tracing"] = {"lost": sum(self.lost.values()), "collected": self.collected,
                          "analysed_per_s": acts / busy_s if busy_s else None,
                          "traced_per_s": acts / span_s if span_s else None}
        return out

    def latest(self) -> dict[str, Any]:
        """The newest snapshot's pool-wide critical participation per operator and per
        executor (the metrics' gauges); empty before the first."""
        with self._lock:
            if not self.snapshots:
                return {}
            pool = self.snapshots[-1]["pool"]
        return {"by_operator": dict(pool.get("by_operator", {})),
                "by_executor": dict(pool.get("by_executor", {}))}
