"""Trace collection: the executors' traced activities gathered every snapshot
interval and analysed (`traces.py`, `cameo_actors.tracing`): what `cameo explain`
and the critical-path metrics read."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.traces import TraceCollector, lower_thread_priority
from cameo_actors.runtime.config import RuntimeConfig

logger = logging.getLogger(__name__)


class Tracing:
    def __init__(self, config: RuntimeConfig, pool: Pool) -> None:
        self.config, self.pool = config, pool
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
        answers = self.pool.gateway.call_each(asked, "traces", timeout_s=10.0)
        return self.collector.tick(now_ms, {i: a for i, a in zip(asked, answers, strict=True)
                                            if a is not None})

    def explain(self, name: str | None, last_s: float, target_ms: float | None
                ) -> dict[str, Any]:
        return self.collector.explain(name, last_s, time.time() * 1000.0, target_ms)

    def latest(self) -> dict[str, Any]:
        return self.collector.latest(time.time() * 1000.0)
