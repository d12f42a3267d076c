"""Flow control: credits per channel, and backpressure at the sources.

A channel is (upstream activation, downstream activation). A sender with more
than `credit_events` unacknowledged events on a channel is held out of the
run queue until acks bring it back to half that: a held sender then gets a
run of work, not a trickle. A sink whose result log is full is held the same
way (reason "results"), by the egress.

At a source, `ingress_events` events taken in and not yet run make ingest
calls block (on Ray's threads, in `wait_for_room`): that is the backpressure a
writer feels. The counters of waiting events are shared with those threads, hence
the condition; everything else runs on the executor's worker thread.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cameo_actors.dataflow.spec import DataflowSpec
    from cameo_actors.runtime._private.executor.activation import Activation

#: The reason a sink is held while its result log is full.
RESULTS_FULL = "results"


class FlowControl:
    """Credits and source backpressure of one executor.

    Args:
        credit_events: events in flight per channel before the sender is held.
        ingress_events: events waiting at a source before ingest blocks.
        hold, release: take an activation out of / back into the run queue.

    >>> held = []
    >>> flow = FlowControl(4, 10, held.append, held.remove)
    >>> flow.sent("up", "down", 5); held
    ['up']
    >>> flow.acked("up", "down", 3); held
    []
    """

    def __init__(self, credit_events: int, ingress_events: int,
                 hold: Callable[[str], None], release: Callable[[str], None]) -> None:
        self.credit_events = credit_events
        self.ingress_events = ingress_events
        self._hold = hold
        self._release = release
        self.outstanding: Counter[tuple[str, str]] = Counter()
        #: held activation -> the reasons (channels over their limit, RESULTS_FULL)
        self.held: dict[str, set[str]] = {}
        #: source activation -> events enqueued there, not yet run
        self.ingress_pending: Counter[str] = Counter()
        #: source activation -> events of calls let in, not yet enqueued by the worker
        self.ingress_reserved: Counter[str] = Counter()
        self.ingress_cond = threading.Condition()
        #: ingest calls blocked now for room at their source (each holds a Ray thread)
        self.ingest_waiting = 0

    # -- credits ------------------------------------------------------------------------
    def sent(self, sender: str, target: str, n: int) -> None:
        chan = (sender, target)
        self.outstanding[chan] += n
        if self.outstanding[chan] > self.credit_events:
            self.hold(sender, target)

    def acked(self, upstream: str, downstream: str, n: int) -> None:
        chan = (upstream, downstream)
        if chan in self.outstanding:  # (an ack of a restored dataflow's last run: gone)
            self.outstanding[chan] = max(0, self.outstanding[chan] - n)
        if self.outstanding[chan] <= self.credit_events // 2:
            self.release(upstream, downstream)

    def hold(self, aid: str, reason: str) -> None:
        self.held.setdefault(aid, set()).add(reason)
        self._hold(aid)

    def release(self, aid: str, reason: str) -> None:
        reasons = self.held.get(aid)
        if reasons is None or reason not in reasons:
            return
        reasons.discard(reason)
        if not reasons:
            del self.held[aid]
            self._release(aid)

    def held_among(self, ids: Iterable[str]) -> list[str]:
        return sorted(a for a in ids if a in self.held)

    # -- source backpressure --------------------------------------------------------------
    # A source's events taken in are those enqueued there and not yet run (`ingress_pending`)
    # and those of calls let through by `wait_for_room` that the worker thread has not
    # enqueued yet (`ingress_reserved`). Counting the second at once is what keeps the
    # calls woken together from all passing before the worker counts any of them.
    def admitted(self, source: str, n: int) -> None:
        with self.ingress_cond:
            self.ingress_pending[source] += n

    def consumed(self, source: str, n: int) -> None:
        self._taken_out(self.ingress_pending, source, n)

    def arrived(self, source: str, n: int) -> None:
        """The worker thread took in (or dropped) a call of `n` events let through by
        `wait_for_room`: they are no longer reserved (`admitted` counts those enqueued)."""
        self._taken_out(self.ingress_reserved, source, n)

    def _taken_out(self, counter: Counter[str], source: str, n: int) -> None:
        with self.ingress_cond:
            if source not in counter:  # closed meanwhile
                return
            before = self._taken(source)
            counter[source] = max(0, counter[source] - n)
            # Wake blocked writers only when the source drops below its limit (no herd).
            if self._taken(source) < self.ingress_events <= before:
                self.ingress_cond.notify_all()

    def _taken(self, source: str) -> int:
        return self.ingress_pending[source] + self.ingress_reserved[source]

    def wait_for_room(self, source: str, n: int, hosted: Callable[[], bool], timeout_s: float) -> int:
        """Block (a Ray thread) while `source` has `ingress_events` taken in and is still
        hosted, then reserve room for the call's `n` events (given back by `arrived`);
        returns the events taken in there before this call."""
        with self.ingress_cond:
            if self._taken(source) >= self.ingress_events:
                self.ingest_waiting += 1
                try:
                    self.ingress_cond.wait_for(
                        lambda: self._taken(source) < self.ingress_events or not hosted(),
                        timeout=timeout_s)
                finally:
                    self.ingest_waiting -= 1
            taken = self._taken(source)
            self.ingress_reserved[source] += n
            return taken

    # -- lifecycle (DataflowScoped) -----------------------------------------------------------
    def open(self, spec: DataflowSpec, hosted: list[Activation]) -> None:
        pass  # channels get their credits on first use

    def close(self, dataflow: str, ids: Iterable[str]) -> None:
        """Drop the credits and holds of activations that are gone; wake their writers."""
        gone = set(ids)
        for aid in gone:
            self.held.pop(aid, None)
        for chan in [c for c in self.outstanding if c[0] in gone]:
            del self.outstanding[chan]
        with self.ingress_cond:
            for aid in gone:
                self.ingress_pending.pop(aid, None)
                self.ingress_reserved.pop(aid, None)
            self.ingress_cond.notify_all()
