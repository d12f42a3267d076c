"""What a scheduler slice reports: the callback that runs one message, why a slice
ended, the slice's result (`SliceResult`) and the scheduler's counters
(`SchedulerStats`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .context import Message

#: `execute(activation_id, message)`: run one message (the return value is ignored).
Execute = Callable[[str, Message], object]

#: Why a slice ended.
DRAINED = "drained"  # the mailbox is empty
QUANTUM = "quantum"  # the quantum was spent
PREEMPTED = "preempted"  # a more urgent activation was waiting
REMOVED = "removed"  # the activation was removed while it ran


@dataclass(slots=True)  # not frozen: frozen init costs ~0.5 µs per slice
class SliceResult:
    """What one `run_once` did.

    Attributes:
        activation_id: the activation that ran.
        messages: how many messages it executed.
        reason: why it stopped: "drained", "quantum", "preempted" or "removed".
        start_ms: clock time the slice began.
        end_ms: clock time the slice ended.
    """

    activation_id: str
    messages: int
    reason: str
    start_ms: float
    end_ms: float


@dataclass(slots=True)
class SchedulerStats:
    """Counters for metrics. Times are measured with the clock given to `run_once`.

    Attributes:
        enqueued: messages accepted by `enqueue`.
        executed: messages run.
        slices: `run_once` calls that ran an activation.
        preempted: slices ended because a more urgent activation waited.
        quantum_expired: slices ended because the quantum was spent.
        busy_ms: total time inside `execute`.
        overhead_ms: time inside `run_once` outside `execute` (hooks, queues, re-keying).
        dropped: messages discarded by `remove_activation`.
        overdue: times a waiting activation's start deadline passed, so it became due
            one latency target from then (deadline policies only; `DeadlineRunQueue`).
        demotions: times a tenant went over its share and was demoted (tenant floors on).
    """

    enqueued: int = 0
    executed: int = 0
    slices: int = 0
    preempted: int = 0
    quantum_expired: int = 0
    busy_ms: float = 0.0
    overhead_ms: float = 0.0
    dropped: int = 0
    overdue: int = 0
    demotions: int = 0

    @property
    def overhead_us_per_message(self) -> float:
        """Dispatch overhead per executed message in µs (0 before any message)."""
        return 1000.0 * self.overhead_ms / self.executed if self.executed else 0.0
