"""Channels: in-order delivery on the links between executors and from clients,
and the batching of everything one executor has for another into one call.

Ray may reorder calls, so every call carries a sequence number per link
(sender executor -> this one), and a call that arrives early is parked until
the ones before it were applied (a source does the same for each client's
ingest calls: `ExecutorCore.ingest`). A link belongs to one incarnation of
each end: after an executor restarted, batches meant for or sent by its old
incarnation are dropped, and both ends count the link from zero again.

Outgoing messages and acknowledgements are gathered per destination and sent as one
call each: a call costs the sender and the receiver far more CPU than the events in
it (Ray's submission, its threads, the receiving thread's hand-off), so a link is
sent when it is due (`flush_due`: its most urgent item may wait no longer, or it
holds `batch_events` events), or everything at once (`flush`: the worker has
nothing else to do, or a caller must see it sent).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from cameo_actors.runtime._private.exchange.wire import (
    MSG_CONTEXT,
    MSG_PAYLOAD,
    MSG_SIZE,
    MSG_UPSTREAM,
    Ack,
    encode_message,
    pack_link,
    packable,
    unpack_link,
)
from cameo_actors.scheduling import Message

#: Hands a packed batch to another executor: (executor index, bytes).
Send = Callable[[int, bytes], None]
#: Applies one batch from another executor: (encoded messages, acks).
ApplyBatch = Callable[[list[Any], list[Any]], None]
#: Told of events an operator output that cannot travel: (sending activation, events, why).
Unsendable = Callable[[str, list[Any], str], None]


class Channels:
    """The links of executor `index`.

    >>> sent = []
    >>> ch = Channels(0, lambda host, blob: sent.append(host))
    >>> ch.ack(1, ("up", "down", 5, 0.0)); ch.flush(); sent
    [1]
    """

    def __init__(self, index: int, send: Send, unsendable: Unsendable | None = None,
                 batch_events: int = 5_000) -> None:
        self.index = index
        self._send = send
        self._unsendable = unsendable
        self.batch_events = batch_events
        self._out_msgs: dict[int, list[tuple[Any, ...]]] = {}
        self._out_acks: dict[int, list[Ack]] = {}
        #: per destination: when its most urgent gathered item must leave (ms), and the
        #: events gathered
        self._due: dict[int, float] = {}
        self._events: Counter[int] = Counter()
        #: calls sent, and the messages and events in them (executor stats)
        self.sent: Counter[str] = Counter()
        self.seq_out: Counter[int] = Counter()  # batches sent per executor
        self.seq_in: Counter[int] = Counter()  # batches applied per sender
        #: (executor, dataflow) -> the last batch sent there that carried the dataflow's
        #: messages: once the receiver applied it, none of them is in flight (`in_flight`)
        self.last_with: dict[tuple[int, str], int] = {}
        self._parked: dict[int, dict[int, tuple[list[Any], list[Any]]]] = {}
        #: this executor's incarnation, and the one of each peer it links to
        self.incarnation = ""
        self.peers: dict[int, str] = {}
        self.stale = 0  # batches dropped: from or for an incarnation that is gone

    def relink(self, peer: int, incarnation: str) -> None:
        """`peer` restarted as `incarnation`: the link counts from zero both ways."""
        self.peers[peer] = incarnation
        self.seq_out[peer] = 0
        self.seq_in[peer] = 0
        for key in [k for k in self.last_with if k[0] == peer]:
            del self.last_with[key]
        self._parked.pop(peer, None)
        self._out_msgs.pop(peer, None)
        self._out_acks.pop(peer, None)
        self._due.pop(peer, None)
        self._events.pop(peer, None)

    # -- inbound -------------------------------------------------------------------------
    def from_executor(self, blob: bytes, apply: ApplyBatch) -> None:
        """Apply a batch from another executor, and any parked ones that follow it."""
        sender, sender_inc, to_inc, seq, messages, acks = unpack_link(blob)
        if to_inc != self.incarnation or sender_inc != self.peers.get(sender, sender_inc):
            self.stale += 1
            return
        parked = self._parked.setdefault(sender, {})
        parked[seq] = (messages, acks)
        while self.seq_in[sender] in parked:
            batch = parked.pop(self.seq_in[sender])
            self.seq_in[sender] += 1
            apply(*batch)

    # -- outbound ------------------------------------------------------------------------
    def message(self, host: int, msg: Message, due_ms: float = -math.inf) -> None:
        """Gather `msg` for `host`; it must leave by `due_ms` (default: the next flush)."""
        self._out_msgs.setdefault(host, []).append(encode_message(msg))
        self._events[host] += msg.size
        if due_ms < self._due.get(host, math.inf):
            self._due[host] = due_ms

    def ack(self, host: int, ack: Ack, due_ms: float = -math.inf) -> None:
        """Gather a credit return for `host`; the events it acknowledges count toward the
        link's `batch_events`, so that a sender is never held long on credits gathered here."""
        self._out_acks.setdefault(host, []).append(ack)
        self._events[host] += ack[2]
        if due_ms < self._due.get(host, math.inf):
            self._due[host] = due_ms

    def flush_due(self, now_ms: float) -> int:
        """Send the links that are due at `now_ms` or hold `batch_events` events.
        Returns how many calls."""
        due = [host for host, at in self._due.items()
               if at <= now_ms or self._events[host] >= self.batch_events]
        return self._flush(due) if due else 0

    def flush(self) -> int:
        """Send everything gathered for other executors: one call per destination.
        Returns how many calls."""
        if not self._out_msgs and not self._out_acks:
            return 0
        return self._flush(set(self._out_msgs) | set(self._out_acks))

    def _flush(self, hosts: Iterable[int]) -> int:
        sent = 0
        for host in hosts:
            self._due.pop(host, None)
            self._events.pop(host, None)
            messages, acks = self._out_msgs.pop(host, []), self._out_acks.pop(host, [])
            seq = self.seq_out[host]
            try:
                blob = pack_link(self.link(host, seq), messages, acks)
            except (TypeError, ValueError, OverflowError):
                blob = pack_link(self.link(host, seq), self._sendable(messages), acks)
            # Numbered only once packed: a batch that failed would leave a gap the
            # receiver waits on forever.
            for dataflow in {m[MSG_CONTEXT][0] for m in messages}:
                self.last_with[(host, dataflow)] = seq
            self.seq_out[host] += 1
            self._send(host, blob)
            sent += 1
            self.sent.update(calls=1, messages=len(messages), acks=len(acks), bytes=len(blob),
                             events=sum(m[MSG_SIZE] for m in messages))
        return sent

    def link(self, host: int, seq: int) -> tuple[int, str, str, int]:
        """The header of batch `seq` to `host`: (sender, its incarnation, the receiver's, seq)."""
        return self.index, self.incarnation, self.peers.get(host, ""), seq

    def _sendable(self, messages: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The messages with the events msgpack cannot carry (an operator's output of a
        Decimal, an int beyond 64 bits) taken out and reported; each message keeps its
        size, so the credits still come back."""
        out = []
        for m in messages:
            if packable(m):
                out.append(m)
                continue
            payload = m[MSG_PAYLOAD]
            events = payload if isinstance(payload, list) else [payload]
            good = [e for e in events if packable(e)]
            bad = [e for e in events if not packable(e)]
            if self._unsendable is not None:
                self._unsendable(m[MSG_UPSTREAM], bad, "an output msgpack cannot carry (an int "
                                 "beyond 64 bits, a Decimal, a datetime, nesting too deep)")
            out.append((*m[:MSG_PAYLOAD], good, *m[MSG_PAYLOAD + 1:]))
        return out

    def idle(self) -> bool:
        """Nothing collected to send and nothing parked waiting for an earlier call."""
        return not self._out_msgs and not self._out_acks and not any(self._parked.values())

    def sent_of(self, dataflow: str) -> dict[int, int]:
        """executor -> the last batch to it with messages of `dataflow` (the next one, if
        some are collected and not sent yet). Nothing of the dataflow is in flight to an
        executor once it applied more batches from here than that (its `seq_in`)."""
        out = {host: seq for (host, df), seq in self.last_with.items() if df == dataflow}
        for host, messages in self._out_msgs.items():
            if any(m[MSG_CONTEXT][0] == dataflow for m in messages):
                out[host] = self.seq_out[host]  # the next batch
        return out

    def forget(self, dataflow: str) -> None:
        """The dataflow no longer runs here: its marks go."""
        for key in [k for k in self.last_with if k[1] == dataflow]:
            del self.last_with[key]
