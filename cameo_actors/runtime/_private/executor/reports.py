"""What an executor reports of the work it hosts, read on its worker thread.

- statistics of its part of a dataflow, and of the executor (`stats.py` makes them);
- `usage`: what each dataflow uses here (state and unread outputs, events, time,
  CPU), for costs and placement, and the CPU of the executor and its host;
- `counters`: DS2's counters per activation, for the scaling controller
  (`autoscale.py`);
- `unsettled` and `ended`: what is still to do, for a client waiting until its
  results are readable (`settle.py`) or a dataflow is over.

Reading only: nothing here changes the executor's state.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cameo_actors.runtime._private.executor.cpu import CpuAccount, host_cpu
from cameo_actors.runtime._private.executor.footprint import approx_bytes
from cameo_actors.runtime._private.executor_api import DataflowWork, ExecutorUsage, Unsettled

if TYPE_CHECKING:
    from cameo_actors.runtime._private.exchange.channels import Channels
    from cameo_actors.runtime._private.executor.counters import Statistics
    from cameo_actors.runtime._private.executor.egress import Egress
    from cameo_actors.runtime._private.executor.flow import FlowControl
    from cameo_actors.runtime._private.executor.hosting import Hosting
    from cameo_actors.runtime.boundary import DataflowPart, ExecutorStats
    from cameo_actors.scheduling import Scheduler


class Reports:
    """The reports of one executor, read from its parts.

    Args:
        hosting, sched, flow, egress, stats, channels: the executor's parts.
        faults: tracebacks of faults in the runtime itself (the executor's, kept).
    """

    def __init__(self, hosting: Hosting, sched: Scheduler, flow: FlowControl, egress: Egress,
                 stats: Statistics, channels: Channels, faults: Iterable[str]) -> None:
        self.hosting = hosting
        self.sched = sched
        self.flow = flow
        self.egress = egress
        self.stats = stats
        self.channels = channels
        self.faults = faults
        self.cpu = CpuAccount()  # the executor's CPU charged to its dataflows, by `usage`

    def dataflow_stats(self, dataflow: str) -> DataflowPart:
        ids = self.hosting.ids(dataflow)
        return self.stats.part(dataflow, ids, self.sched, self.egress.error_counts(dataflow),
                               self.flow.held_among(ids))

    def executor_stats(self) -> ExecutorStats:
        stats = self.stats.executor(self.sched, len(self.hosting.activations),
                                    len(self.flow.held), self.faults)
        stats["exchange"] = dict(self.channels.sent)
        return stats

    def ended(self, dataflow: str) -> bool:
        """Every activation of `dataflow` here has seen the end of every input (its
        sources were closed) and run all that came before it: nothing more will come out."""
        for aid in self.hosting.ids(dataflow):
            act = self.hosting.activations[aid]
            if self.sched.pending(aid) or not act.saw_end():
                return False
        return True

    def usage(self) -> ExecutorUsage:
        """dataflow -> what it uses here: estimated bytes of its operator state and unread
        outputs, and its counters since it came here (events in, executor ms, CPU ms
        charged to it and the part for its calls (`CpuAccount`), results, results within
        target); and the CPU of this executor and its host. Read on the worker thread:
        `time.thread_time` is that thread's CPU."""
        out: dict[str, dict[str, float]] = {}
        busy: dict[str, float] = {}
        calls: dict[str, int] = {}
        for dataflow in self.hosting.dataflows:
            ids = self.hosting.ids(dataflow)
            acts = [self.hosting.activations[aid] for aid in ids]
            counters = self.stats.dataflows.get(dataflow)
            busy[dataflow] = sum(self.sched.profile(a).busy_ms for a in ids)
            calls[dataflow] = sum(a.calls_in for a in acts)
            out[dataflow] = {
                "bytes": sum(approx_bytes(a.operator) for a in acts)
                + self.egress.footprint(dataflow),
                "disk_bytes": sum(a.operator.disk_bytes() for a in acts),
                "events_in": counters.events_in if counters else 0,
                "busy_ms": busy[dataflow],
                "results": counters.latency.count if counters else 0,
                "within": counters.latency.within_target if counters else 0}
        cpu = host_cpu(time.thread_time() * 1000.0)
        for dataflow, (spent, on_calls) in self.cpu.charge(cpu["process_ms"], cpu["worker_ms"],
                                                           busy, calls).items():
            out[dataflow].update(cpu_ms=spent, calls_cpu_ms=on_calls)
        return {"dataflows": out, "cpu": cpu}

    def counters(self) -> dict[str, dict[str, list[float]]]:
        """dataflow -> activation -> DS2's counters since it came here: [events in, events
        out, processing ms, deserialization ms, serialization ms, recent queueing delay ms,
        events waiting, events arrived (a source's: from clients), results a sink wrote and
        those within target, when they were read (wall clock, s)]. The scaling controller
        takes rates from their differences."""
        out: dict[str, dict[str, list[float]]] = {}
        sched = self.sched
        at = time.time()  # taken here: the call may wait behind a message
        for dataflow in self.hosting.dataflows:
            acts = out[dataflow] = {}
            for aid in self.hosting.ids(dataflow):
                act, prof = self.hosting.activations[aid], sched.profile(aid)
                acts[aid] = [act.events_in, act.events_out, prof.busy_ms, act.deser_ms,
                             act.ser_ms, prof.queue_delay_ms,
                             max(0, act.events_arrived - act.events_in),
                             act.events_arrived, act.results, act.within, at]
        return out

    def unsettled(self, names: list[str] | None = None) -> Unsettled:
        """What this executor still has to do for each dataflow of `names` hosted here
        (None: every one), so that a client can wait until every result of the events it
        pushed is readable (`Runtime.wait_idle`). Runs on the worker thread, after the
        work handed over before it (ingest calls, batches from other executors)."""
        work: dict[str, DataflowWork] = {}
        for name in self.hosting.dataflows if names is None else names:
            if name not in self.hosting.dataflows:
                continue
            acts = [self.hosting.activations[a] for a in self.hosting.ids(name)]
            work[name] = {
                "queued": sum(self.sched.pending(a.id) for a in acts),
                "parked": sum(len(calls) for a in acts for calls in a.parked.values()),
                "moving": sum(1 for a in acts if a.epoch is not None),
                "held": self.flow.held_among(a.id for a in acts),
                "sent": self.channels.sent_of(name),
                "awaiting_checkpoint": self.egress.awaiting_checkpoint(name)}
        return {"dataflows": work, "applied": dict(self.channels.seq_in)}
