"""What an executor counts of the dataflows it hosts, and its reports of them (merged
over executors by `stats.merge_parts`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cameo_actors.runtime._private.stats import LatencyStats
from cameo_actors.runtime.boundary import DataflowPart, ExecutorStats
from cameo_actors.scheduling import Scheduler

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.executor.activation import Activation

#: Failures (operator exceptions) kept per dataflow and executor for status views.
FAILURES_KEPT = 20


@dataclass
class DataflowCounters:
    """What one executor counts of one dataflow."""

    latency: LatencyStats
    events_in: int = 0
    events_out: int = 0
    failures: deque[str] = field(default_factory=lambda: deque(maxlen=FAILURES_KEPT))


class Statistics:
    """The counters of the dataflows hosted on one executor, and its reports."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.dataflows: dict[str, DataflowCounters] = {}

    def open(self, spec: DataflowSpec, hosted: list[Activation]) -> None:
        self.dataflows[spec.name] = DataflowCounters(LatencyStats(spec.latency_target_ms))

    def close(self, dataflow: str, ids: list[str]) -> None:
        self.dataflows.pop(dataflow, None)

    def part(self, dataflow: str, ids: list[str], sched: Scheduler, error_counts: dict[str, int],
             held: list[str]) -> DataflowPart:
        """This executor's part of a dataflow's statistics (merged by `merge_parts`)."""
        c = self.dataflows[dataflow]
        return {
            "executor": self.index,
            "latency": c.latency.to_dict(),
            "events_in": c.events_in,
            "events_out": c.events_out,
            "errors": error_counts,
            "failures": list(c.failures),
            "backlog": sum(sched.pending(a) for a in ids),
            "busy_ms": sum(sched.profile(a).busy_ms for a in ids),
            "held": held,
        }

    def executor(self, sched: Scheduler, activations: int, held: int,
                 faults: Iterable[str]) -> ExecutorStats:
        s = sched.stats
        return {"executor": self.index, "activations": activations, "backlog": sched.backlog,
                "executed": s.executed, "slices": s.slices, "preempted": s.preempted,
                "overdue": s.overdue, "busy_ms": s.busy_ms, "overhead_ms": s.overhead_ms,
                "overhead_us_per_message": s.overhead_us_per_message, "held": held,
                "faults": list(faults), "demotions": s.demotions,
                "tenants": sched.tenant_shares()}
