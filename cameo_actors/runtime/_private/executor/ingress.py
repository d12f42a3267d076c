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

from cameo_actors.operators.columns import is_columns, span_of
from cameo_actors.runtime._private.exchange.ingest import error_records
from cameo_actors.scheduling import Message
from cameo_actors.tracing.records import FROM_CLIENT

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.executor.activation import Activation
    from cameo_actors.runtime._private.executor.counters import Statistics
    from cameo_actors.runtime._private.executor.egress import Egress
    from cameo_actors.runtime._private.executor.flow import FlowControl
    from cameo_actors.runtime._private.executor.hosting import Hosting
    from cameo_actors.runtime._private.executor.tracing import Tracer
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
               deser_ms: float = 0.0, reserved: int = 0) -> None:
        """Events (lists), watermarks (numbers) and the error records of events refused at
        the edge ({"errors": [...]}, see `ingest.py`) from a client's call `seq` to source
        `target`: applied in the client's order, once (a call resent after a failure, or
        replayed from the ingress log, that was applied already is dropped). `reserved`:
        the room `FlowControl.wait_for_room` kept for the call, given back once it is in."""
        try:
            self._in_order(client, seq, target, items, ingest_ms, deser_ms)
        finally:
            if reserved:
                self.flow.arrived(target, reserved)

    def _in_order(self, client: str, seq: int, target: str, items: list[Any], ingest_ms: float,
                  deser_ms: float) -> None:
        act = self.hosting.activations.get(target)
        if act is None:
            return  # cancelled meanwhile
        act.deser_ms += deser_ms
        act.calls_in += 1
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

    def ingest_read(self, act: Activation, items: list[Any], ingest_ms: float,
                    positions: dict[str, int], reserved: int = 0) -> None:
        """What a connector of the source's own read (`kafka.py`): applied as it comes
        (one thread reads, in order), `positions` (where it read up to) kept with it. Its
        watermarks are the connector's (per partition), so none leads the events."""
        try:
            self._ingest_now(act, items, ingest_ms, lead=False)
            act.positions.update(positions)
        finally:
            if reserved:
                self.flow.arrived(act.id, reserved)

    @staticmethod
    def events_in(items: list[Any]) -> int:
        """The events of an ingest call's items (lists and columns; not watermarks or errors).

        >>> Ingress.events_in([[{"a": 1}, {"a": 2}], 5.0, {"errors": []}])
        2
        """
        return sum(len(item) for item in items if isinstance(item, list) or is_columns(item))

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

    def _ingest_now(self, act: Activation, items: list[Any], ingest_ms: float,
                    lead: bool = True) -> None:
        target = act.id
        spec = self.hosting.dataflows[act.dataflow].spec
        counters = self.stats.dataflows[act.dataflow]
        tf = getattr(act.operator, "event_time", None)  # sources know their event-time field
        now = self.now_ms()
        tracer = self.tracer
        # Cut into messages, each with its span of event time, before anything is enqueued:
        # the watermark ahead of them (`_lead`) needs their earliest.
        planned = [_parts(item, tf, self.max_message_events) for item in items]
        act.last_input_ms = now  # a source that takes in calls is not idle
        if lead and tf and act.window_timing is not None:
            self._lead(act, spec, planned, ingest_ms, now)
        for item, parts in zip(items, planned, strict=True):
            if isinstance(item, dict):  # events msgpack could not carry: the error output
                self.egress.errors(act.dataflow, error_records(item), ingest_ms, now)
                continue
            if parts is None:  # a watermark
                wm = Message.ingress(target, float(item), dataflow=spec.name, tenant=spec.tenant,
                                     ingest_ms=ingest_ms, is_watermark=True)
                if tracer is not None and tracer.sampled():
                    wm.trace = FROM_CLIENT
                self.sched.enqueue(wm, now)
                continue
            for part, _, latest in parts:
                msg = Message.ingress(target, part, dataflow=spec.name, tenant=spec.tenant,
                                      ingest_ms=ingest_ms, event_ms=latest, size=len(part))
                if tracer is not None and tracer.sampled():
                    msg.trace = FROM_CLIENT
                counters.events_in += len(part)
                act.events_arrived += len(part)
                self.flow.admitted(target, len(part))
                self.sched.enqueue(msg, now)

    def _lead(self, act: Activation, spec: DataflowSpec, planned: list[list[Part] | None],
              ingest_ms: float, now: float) -> None:
        """A watermark ahead of the call's events: their earliest event time (less the
        allowed lateness), when it is past the watermark the calls before left. Every
        event before it was sent already, so windows that end by then fire without waiting
        for this call's events to cross the map ahead of the watermark (behind them, it
        waited for all of them); the watermark after them (the largest event time) still
        follows. Late events are the same either way: one below this watermark is below
        the one after the call too."""
        spans = [(lo, hi) for parts in planned if parts for _, lo, hi in parts]
        earliest = min((lo for lo, _ in spans), default=math.inf)
        latest = max((hi for _, hi in spans), default=-math.inf)
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


#: A message's worth of a call's events, and their earliest and latest event time
#: (inf, -inf: none).
Part = tuple[Any, float, float]


def _parts(item: Any, field_name: str | None, cut: int) -> list[Part] | None:
    """The events of an ingest call's item as messages (rows: of `cut` events; columns: of
    at most MAX_COLUMN_MESSAGE_EVENTS, cut again as they run), each with its span of event
    time; None for an item that is not events (a watermark, error records)."""
    if is_columns(item):
        parts = (item.slice(i, MAX_COLUMN_MESSAGE_EVENTS)
                 for i in range(0, len(item), MAX_COLUMN_MESSAGE_EVENTS))
        return [(part, *_column_span(part, field_name)) for part in parts]
    if not isinstance(item, list):
        return None
    return [(part, *_time_span(part, field_name))
            for part in (item[i:i + cut] for i in range(0, len(item), cut))]


def _column_span(batch: Any, field_name: str | None) -> tuple[float, float]:
    got = span_of(batch, field_name)
    return (math.inf, -math.inf) if got is None else (float(got[0]), float(got[1]))


def _time_span(events: list[Any], field_name: str | None) -> tuple[float, float]:
    """The smallest and largest numeric event time of `events` (inf, -inf: none)."""
    lo, hi = math.inf, -math.inf
    if not field_name:
        return lo, hi
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
