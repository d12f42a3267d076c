"""The data every message carries for scheduling: `PriorityContext`, `Message`, `Feedback`.

These are plain data created once per batch, so they are slotted dataclasses
with no validation on the hot path; the scheduler checks what it must.
All physical times are float ms since the epoch (see `cameo_actors.clock`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypeAlias

#: A policy's sort key: any totally ordered value, smaller = more urgent.
#: All keys one `Scheduler` compares come from one policy, so they are
#: mutually comparable (floats for most built-ins, tuples for token_bucket).
SortKey: TypeAlias = Any

_NAN = math.nan
_INF = math.inf


@dataclass(slots=True)
class PriorityContext:
    """Who a message belongs to and how urgent it is.

    `frontier_ms` and `deadline_ms` are stamped by the receiving scheduler when
    the message enters a mailbox (`Policy.on_arrival`); a sender leaves them
    unset (NaN / inf) unless it knows better: a finite `frontier_ms` set by the
    sender is kept as is.

    Attributes:
        dataflow: id of the dataflow the message belongs to.
        tenant: the tenant that owns the dataflow.
        ingest_ms: physical time at which the message's data entered the runtime.
        event_ms: the largest event time in the batch, or -inf when unknown.
        local_priority: event-time window id for window operators, else 0.
        frontier_ms: t_MF, the physical time from which the deadline counts.
        deadline_ms: the stamped start deadline (inf until stamped).

    Example:
        >>> ctx = PriorityContext("df1", "acme", ingest_ms=1000.0, event_ms=990.0)
        >>> ctx.deadline_ms
        inf
    """

    dataflow: str
    tenant: str
    ingest_ms: float
    event_ms: float = -_INF
    local_priority: float = 0.0
    frontier_ms: float = _NAN
    deadline_ms: float = _INF

    def to_tuple(self) -> tuple[str, str, float, float, float, float, float]:
        """A compact form for the wire (msgpack); inverse of `from_tuple`."""
        return (
            self.dataflow,
            self.tenant,
            self.ingest_ms,
            self.event_ms,
            self.local_priority,
            self.frontier_ms,
            self.deadline_ms,
        )

    @classmethod
    def from_tuple(cls, t: tuple[Any, ...] | list[Any]) -> PriorityContext:
        """Rebuild a context from `to_tuple()` output (a list after msgpack)."""
        if len(t) != 7:
            raise ValueError(f"PriorityContext.from_tuple: expected 7 fields, got {len(t)}: {t!r}")
        return cls(str(t[0]), str(t[1]), *(float(x) for x in t[2:]))


@dataclass(slots=True)
class Message:
    """One batch of events (or one watermark) on its way to an activation.

    The first seven fields are what the sender decides. `key`, `seq` and
    `arrival_ms` are set by the receiving `Scheduler.enqueue` and are local to
    one scheduler (do not ship them); `sent_ms` is set by the sender
    (`Scheduler.derive`) so the receiver can learn the transfer delay.

    Attributes:
        target: id of the activation that will process the message.
        port: input port of the target operator.
        payload: a list of event dicts, or the watermark (float) when `is_watermark`.
        is_watermark: whether the payload is a watermark, or an in-band control message
            (a routing epoch, migrated state: a list) that is a barrier like one.
        ctx: the priority context.
        upstream: id of the sending activation, "" for ingress.
        size: number of events (credits and rate limits count these).
        key: the policy's sort key, stamped on arrival.
        seq: arrival sequence number on the receiving scheduler.
        arrival_ms: physical time the message entered the mailbox.
        sent_ms: physical time the sender handed it over, NaN when unknown.
        generation: the sending dataflow's generation (restores so far): a message of
            an earlier one, still in transit when the dataflow was restored, is dropped.
        trace: the traced activity that sent it (`cameo_actors.tracing.records`): 0 for
            a client's call, -1 when the message is not traced (sampled out, control).

    Example:
        >>> m = Message.ingress("df1/filter#0", [{"x": 1}], dataflow="df1", tenant="acme",
        ...                     ingest_ms=1000.0, event_ms=999.0)
        >>> (m.size, m.upstream, m.ctx.event_ms)
        (1, '', 999.0)
    """

    target: str
    port: int
    payload: Any
    is_watermark: bool
    ctx: PriorityContext
    upstream: str = ""
    size: int = 0
    key: SortKey = None
    seq: int = 0
    arrival_ms: float = _NAN
    sent_ms: float = _NAN
    generation: int = 0
    trace: int = -1

    @classmethod
    def ingress(
        cls,
        target: str,
        payload: Any,
        *,
        dataflow: str,
        tenant: str,
        ingest_ms: float,
        event_ms: float = -_INF,
        port: int = 0,
        is_watermark: bool = False,
        size: int | None = None,
    ) -> Message:
        """A message entering the runtime (no upstream activation).

        Args:
            target: the ingress activation.
            payload: events (list of dicts) or a watermark (float).
            dataflow: dataflow id.
            tenant: tenant id.
            ingest_ms: physical time the data entered the runtime.
            event_ms: largest event time in the batch (-inf when unknown).
            port: input port.
            is_watermark: whether payload is a watermark.
            size: number of events; defaults to len(payload) for data, 0 for watermarks.
        """
        if size is None:
            size = _size_of(payload, is_watermark)
        return cls(
            target,
            port,
            payload,
            is_watermark,
            PriorityContext(dataflow, tenant, ingest_ms, event_ms),
            "",
            size,
        )


def _size_of(payload: Any, is_watermark: bool) -> int:
    """Events in a payload: 0 for a watermark, else its length (1 if it has none)."""
    if is_watermark:
        return 0
    try:
        return len(payload)
    except TypeError:
        return 1


@dataclass(frozen=True, slots=True)
class Feedback:
    """What a downstream activation tells an upstream one about the road ahead.

    Attributes:
        from_activation: id of the downstream activation that sent it.
        path_cost_ms: its C_path + its cost for messages from that upstream +
            its queueing delay + the transfer delay between the two.

    Example:
        >>> Feedback("df1/sink#0", 3.5).path_cost_ms
        3.5
    """

    from_activation: str
    path_cost_ms: float
