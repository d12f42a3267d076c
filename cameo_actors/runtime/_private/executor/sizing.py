"""How long one message may run on an executor: a message is never preempted, so one
that is long for its step's measured cost is cut in parts, the rest going back to the
front of the mailbox with the same deadline (other due work may run in between); and,
for a simulated executor of fixed speed, how long a message takes.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from cameo_actors.operators.columns import is_columns
from cameo_actors.runtime._private.executor.ingress import MEASURED_EVENTS
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.scheduling import Message, Scheduler

if TYPE_CHECKING:
    from cameo_actors.clock import Clock
    from cameo_actors.runtime._private.executor.activation import Activation
    from cameo_actors.runtime._private.executor.counters import Statistics
    from cameo_actors.runtime._private.executor.ingress import Ingress

#: A paced instance idle longer than this (ms) starts its simulated clock anew.
PACE_IDLE_MS = 5.0
#: A message of rows runs within this share of the tightest latency target hosted on its
#: executor (and within the quantum), at its step's measured cost per event: a message
#: is never preempted, so a tight tenant's message that arrives waits for the one running.
MESSAGE_TARGET_SHARE = 0.1
#: ... but a message is never cut to run shorter than this (each costs its scheduling).
MIN_MESSAGE_MS = 1.0


class MessageSizing:
    """What one message may cost on one executor, and the cutting of those that cost more.

    Args:
        config: the pool's configuration (the quantum, a simulated capacity).
        sched, ingress, stats, clock: the executor's parts.
    """

    def __init__(self, config: RuntimeConfig, sched: Scheduler, ingress: Ingress,
                 stats: Statistics, clock: Clock) -> None:
        self.quantum_ms = config.quantum_ms
        self.sched, self.ingress, self.stats, self.clock = sched, ingress, stats, clock
        #: what one message of rows may cost here, by the targets hosted (`retarget`)
        self.message_ms = config.quantum_ms
        capacity = config.service_capacity_eps
        #: ms one event takes on a simulated executor of fixed speed (0: not simulated)
        self.pace_ms = 1000.0 / capacity if capacity else 0.0

    @property
    def paced(self) -> bool:
        return self.pace_ms > 0

    def cut(self, act: Activation, msg: Message) -> None:
        """A message runs in parts that fit what a message may cost at its step's cost
        measured now: a client's columns the quantum (`Ingress.columns_cut`), rows the
        tightest target's share (`rows_cut`). The events beyond go back to the front of
        the mailbox as a message of their own, with the same deadline; other due work may
        run in between."""
        events = msg.payload
        columns = is_columns(events)
        if columns:
            if msg.upstream:
                return
            cut = self.ingress.columns_cut(act.dataflow)
        else:
            cut = self.rows_cut(act, len(events))
        if len(events) <= cut:
            return
        # (A restored in-flight message has size 0: its credits were returned before.)
        rest = replace(msg, payload=events.slice(cut) if columns else events[cut:],
                       size=max(0, msg.size - cut), ctx=replace(msg.ctx))
        msg.payload = events.slice(0, cut) if columns else events[:cut]
        msg.size = min(msg.size, cut)
        self.sched.enqueue(rest, self.clock.now_ms(), first=True)

    def rows_cut(self, act: Activation, n: int) -> int:
        """Events of `n` rows one message of `act` may have: all until its cost is measured,
        or while no target here is tight enough to ask for messages shorter than the
        quantum (so a pool without one runs as before); else parts of equal size (no short
        remainder costing a message of its own) that each fit `message_ms`."""
        budget = self.message_ms
        if budget >= self.quantum_ms or act.events_in < MEASURED_EVENTS:
            return n
        cost = n * self.sched.profile(act.id).busy_ms / act.events_in
        return -(-n // math.ceil(cost / budget)) if cost > budget else n

    def retarget(self) -> None:
        """What one message of rows may cost here from now: `MESSAGE_TARGET_SHARE` of the
        tightest latency target hosted, within [MIN_MESSAGE_MS, quantum] (on every change
        of the dataflows hosted or their targets)."""
        tightest = min((c.latency.target_ms for c in self.stats.dataflows.values()),
                       default=math.inf)
        self.message_ms = max(MIN_MESSAGE_MS, min(self.quantum_ms,
                                                  MESSAGE_TARGET_SHARE * tightest))

    def pace(self, act: Activation, events: int, began: float) -> None:
        """A simulated executor of fixed speed (`RuntimeConfig.service_capacity_eps`): a
        keyed instance's message takes `events` times one event's share, sleeping the
        rest, so that added executors add capacity as on a cluster. Its clock runs on
        from the last message's due end (unless it idled since), so a sleep that
        overran is taken off the next one and the instance's rate stays exact."""
        if began - act.paced_until > PACE_IDLE_MS:
            act.paced_until = began
        act.paced_until += events * self.pace_ms
        left = act.paced_until - self.clock.now_ms()
        if left > 0:
            time.sleep(left / 1000.0)
