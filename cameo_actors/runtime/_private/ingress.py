"""The intake of sources: a client's ingest calls applied in its order, once.

Each call of a client to a source carries a sequence number (`positions`: the
next one expected per client). A call that comes early (Ray may reorder calls)
is parked until the ones before it came; a call applied already (resent after
a failure, or replayed from the ingress log by a restore) is dropped. An
applied call becomes messages in the source's mailbox: its events in messages
(rows: of at most `max_message_events`; a columnar batch: cut without copying, by
its measured cost), its watermarks, and its refused events' error records to the
dataflow's error output (see `ingest.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cameo_actors.operators.columns import is_columns, max_of, min_of
from cameo_actors.runtime._private.ingest import error_records
from cameo_actors.scheduling import Message
from cameo_actors.tracing.records import FROM_CLIENT

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.activation import Activation
    from cameo_actors.runtime._private.egress import Egress
    from cameo_actors.runtime._private.flow import FlowControl
    from cameo_actors.runtime._private.hosting import Hosting
    from cameo_actors.runtime._private.stats import Statistics
    from cameo_actors.runtime._private.tracing import Tracer
    from cameo_actors.scheduling import Scheduler


#: The most events of one message of columns, and the events an activation must have
#: run before its cost per event is trusted.
MAX_COLUMN_MESSAGE_EVENTS = 50_000
MEASURED_EVENTS = 5_000


class Ingress:
    """Ingest calls at the sources of one executor.

    Args:
        max_message_events: the most events of one message of rows (and the fewest of
            one of columns, see `columns_cut`).
        quantum_ms: what a message of columns may cost at most, by the measured cost.
        hosting, sched, flow, egress, stats: the executor's parts an applied call feeds
            (its messages; a source's backpressure; error records; events in).
        tracer: samples the messages it makes for tracing (None: tracing is off).
        now_ms: the time now.
    """

    def __init__(self, max_message_events: int, quantum_ms: float, hosting: Hosting, sched: Scheduler,
                 flow: FlowControl, egress: Egress, stats: Statistics, tracer: Tracer | None,
                 now_ms: Callable[[], float]) -> None:
        self.max_message_events = max_message_events
        self.quantum_ms = quantum_ms
        self.hosting = hosting
        self.sched = sched
        self.flow = flow
        self.egress = egress
        self.stats = stats
        self.tracer = tracer
        self.now_ms = now_ms

    def ingest(self, client: str, seq: int, target: str, items: list[Any], ingest_ms: float,
               deser_ms: float = 0.0) -> None:
        """Events (lists), watermarks (numbers) and the error records of events refused at
        the edge ({"errors": [...]}, see `ingest.py`) from a client's call `seq` to source
        `target`: applied in the client's order, once (a call resent after a failure, or
        replayed from the ingress log, that was applied already is dropped)."""
        act = self.hosting.activations.get(target)
        if act is None:
            return  # cancelled meanwhile
        act.deser_ms += deser_ms
        nxt = act.positions.get(client, 0)
        if seq != nxt:
            if seq > nxt:  # early: Ray may reorder calls
                act.parked.setdefault(client, {})[seq] = (items, ingest_ms)
            return
        self._ingest_now(act, items, ingest_ms)
        seq += 1
        parked = act.parked.get(client)
        while parked and seq in parked:
            self._ingest_now(act, *parked.pop(seq))
            seq += 1
        if parked is not None and not parked:
            del act.parked[client]
        act.positions[client] = seq

    def columns_cut(self, dataflow: str) -> int:
        """Events per message of a columnar batch: as many as the dataflow's costliest step
        here runs within the quantum, at its measured cost per event (a kernel runs a
        message of thousands in what the rows take for a hundred, and preemption is at
        message boundaries), within [max_message_events, MAX_COLUMN_MESSAGE_EVENTS];
        max_message_events until measured. Asked when a message of columns starts to run
        (`ExecutorCore._cut`), so that calls taken in before anything was
        measured are cut by the cost measured since."""
        hosted = self.hosting.dataflows.get(dataflow)
        worst = 0.0
        for aid in hosted.ids if hosted is not None else ():
            act = self.hosting.activations.get(aid)
            if act is not None and act.events_in >= MEASURED_EVENTS:
                worst = max(worst, self.sched.profile(aid).busy_ms / act.events_in)
        if worst <= 0.0:
            return self.max_message_events
        fits = int(self.quantum_ms / worst)
        return max(self.max_message_events, min(fits, MAX_COLUMN_MESSAGE_EVENTS))

    def _ingest_now(self, act: Activation, items: list[Any], ingest_ms: float) -> None:
        target = act.id
        spec = self.hosting.dataflows[act.dataflow].spec
        counters = self.stats.dataflows[act.dataflow]
        tf = getattr(act.operator, "event_time", None)  # sources know their event-time field
        now = self.now_ms()
        cut = self.max_message_events
        tracer = self.tracer
        if tf and act.window_timing is not None:
            self._lead(act, spec, items, tf, ingest_ms, now)
        for item in items:
            if isinstance(item, dict):  # events msgpack could not carry: the error output
                self.egress.errors(act.dataflow, error_records(item), ingest_ms, now)
                continue
            columns = is_columns(item)
            if not columns and not isinstance(item, list):  # a watermark
                wm = Message.ingress(target, float(item), dataflow=spec.name, tenant=spec.tenant,
                                     ingest_ms=ingest_ms, is_watermark=True)
                if tracer is not None and tracer.sampled():
                    wm.trace = FROM_CLIENT
                self.sched.enqueue(wm, now)
                continue
            step = MAX_COLUMN_MESSAGE_EVENTS if columns else cut  # columns: cut as they run
            for i in range(0, len(item), step):
                part = item.slice(i, step) if columns else item[i:i + step]
                event_ms = _max_column(part, tf) if columns else _max_time(part, tf)
                msg = Message.ingress(target, part, dataflow=spec.name, tenant=spec.tenant,
                                      ingest_ms=ingest_ms, event_ms=event_ms, size=len(part))
                if tracer is not None and tracer.sampled():
                    msg.trace = FROM_CLIENT
                counters.events_in += len(part)
                act.events_arrived += len(part)
                self.flow.admitted(target, len(part))
                self.sched.enqueue(msg, now)

    def _lead(self, act: Activation, spec: DataflowSpec, items: list[Any], tf: str, ingest_ms: float,
              now: float) -> None:
        """A watermark ahead of the call's events: their earliest event time (less the
        allowed lateness), when it is past the watermark the calls before left. Every
        event before it was sent already, so windows that end by then fire without waiting
        for this call's events to cross the map ahead of the watermark (behind them, it
        waited for all of them); the watermark after them (the largest event time) still
        follows. Late events are the same either way: one below this watermark is below
        the one after the call too."""
        earliest, latest = math.inf, -math.inf
        for item in items:
            if is_columns(item):
                lo, hi = min_of(item, tf), max_of(item, tf)
                if lo is not None:
                    earliest, latest = min(earliest, lo), max(latest, hi)
            elif isinstance(item, list):
                lo, hi = _time_span(item, tf)
                earliest, latest = min(earliest, lo), max(latest, hi)
        lateness = getattr(act.operator, "allowed_lateness_ms", 0.0)
        lead, left = earliest - lateness, act.lead_ms
        act.lead_ms = max(left, latest - lateness)
        if not left < lead < math.inf:
            return
        wm = Message.ingress(act.id, float(lead), dataflow=spec.name, tenant=spec.tenant,
                             ingest_ms=ingest_ms, is_watermark=True)
        if self.tracer is not None and self.tracer.sampled():
            wm.trace = FROM_CLIENT
        self.sched.enqueue(wm, now)


def _max_column(batch: Any, field_name: str | None) -> float:
    got = max_of(batch, field_name)
    return -math.inf if got is None else float(got)


def _time_span(events: list[Any], field_name: str) -> tuple[float, float]:
    """The smallest and largest numeric event time of `events` (inf, -inf: none)."""
    lo, hi = math.inf, -math.inf
    for e in events:
        try:
            t = e[field_name]
        except (KeyError, TypeError):
            continue
        if isinstance(t, (int, float)) and not isinstance(t, bool):
            if t < lo:
                lo = t
            if t > hi:
                hi = t
    return float(lo), float(hi)


def _max_time(events: list[Any], field_name: str | None) -> float:
    if not field_name:
        return -math.inf
    best = -math.inf
    for e in events:
        try:
            t = e[field_name]
        except (KeyError, TypeError):
            continue
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t > best:
            best = t
    return float(best)
