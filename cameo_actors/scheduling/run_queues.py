"""The run queues of one scheduler, and the moves of an activation's state with them.

Activations wait in the main run queue under the key of their most urgent message.
With tenant floors on, those of a tenant over its share wait in a second one, served
only when the first is empty; the `TenantFloor` moves a tenant's activations between
the two as it demotes and promotes it. An activation enters a queue when it gets
mail or its slice ends with mail left (`requeue`), and leaves it when it is held,
runs, or is removed (see `ActivationState`).
"""

from __future__ import annotations

from collections.abc import Mapping

from .activation import (
    _HELD,
    _IDLE,
    _QUEUED,
    _REMOVED,
    _RUNNING,
    _RUNNING_HELD,
    Activation,
)
from .context import SortKey
from .floor import TenantFloor
from .policies import Policy
from .queues import DeadlineRunQueue, RunQueue
from .slices import SchedulerStats


class RunQueues:
    """The main run queue, the low one and the tenant floor that picks between them.

    Attributes:
        main: where activations wait (all of them with tenant floors off).
        low: with tenant floors on, where the activations of demoted tenants wait.
        floor: the `TenantFloor`, None when tenant floors are off.
    """

    __slots__ = ("main", "low", "floor", "_acts", "_tenants", "_stats")

    def __init__(self, policy: Policy, acts: Mapping[str, Activation],
                 tenants: Mapping[str, set[str]], stats: SchedulerStats,
                 floor_slack_ms: float | None) -> None:
        """`acts` and `tenants` are the host's (activation id -> activation, tenant -> its
        activation ids), read as they change; `stats` counts demotions and overdue starts."""
        self._acts = acts
        self._tenants = tenants
        self._stats = stats
        self.main = self._run_queue(policy)
        self.low = self._run_queue(policy)
        self.floor = None if floor_slack_ms is None else TenantFloor(
            floor_slack_ms, on_demote=self._demote, on_promote=self._promote)

    def _run_queue(self, policy: Policy) -> RunQueue | DeadlineRunQueue:
        if policy.deadline_keys:
            acts = self._acts
            return DeadlineRunQueue(lambda aid: acts[aid].profile.latency_target_ms,
                                    policy.late_slack_floor)
        return RunQueue()

    def __len__(self) -> int:
        """Activations waiting in either queue."""
        return len(self.main) + len(self.low)

    def has_work(self) -> bool:
        """Whether an activation waits in either queue."""
        return bool(self.main) or bool(self.low)

    def peek(self) -> tuple[str, SortKey] | None:
        """(activation_id, key) of the activation that would run next, or None."""
        return self.main.peek() if self.main else self.low.peek()

    def queue_of(self, act: Activation) -> RunQueue | DeadlineRunQueue:
        """The queue `act` waits in (or would): the low one if its tenant is demoted."""
        floor = self.floor
        return self.low if floor is not None and floor.is_demoted(act.tenant) else self.main

    def advance(self, now_ms: float) -> None:
        """Let both queues see the time (deadline queues count who became overdue)."""
        self._stats.overdue += self.main.advance(now_ms)
        if self.floor is not None:
            self._stats.overdue += self.low.advance(now_ms)

    # -- an activation's moves -------------------------------------------------------
    def requeue(self, act: Activation) -> None:
        """Leave RUNNING or HELD: QUEUED under the most urgent pending key, or IDLE."""
        key = act.mailbox.urgent_key()
        if key is None:
            act.state = _IDLE
        else:
            act.state = _QUEUED
            act.qkey = key
            self.queue_of(act).push(act.id, key)

    def withdraw(self, act: Activation) -> None:
        """`act` is no longer hosted: out of its queue, REMOVED (a running slice ends at
        the next message boundary)."""
        if act.state is _QUEUED:
            self.queue_of(act).remove(act.id)
        act.state = _REMOVED

    def hold(self, act: Activation) -> None:
        """Keep `act` out of the run queue; a running slice ends at the next boundary."""
        state = act.state
        if state is _QUEUED:
            self.queue_of(act).remove(act.id)
            act.state = _HELD
        elif state is _IDLE:
            act.state = _HELD
        elif state is _RUNNING:
            act.state = _RUNNING_HELD  # run_once ends the slice at the next boundary

    def release(self, act: Activation) -> None:
        """Let a held `act` run again."""
        state = act.state
        if state is _HELD:
            self.requeue(act)
        elif state is _RUNNING_HELD:
            act.state = _RUNNING  # the slice goes on

    # -- tenant floors ------------------------------------------------------------------
    def _demote(self, tenant: str) -> None:
        self._stats.demotions += 1
        self._move(tenant, self.main, self.low)

    def _promote(self, tenant: str) -> None:
        self._move(tenant, self.low, self.main)

    def _move(self, tenant: str, src: RunQueue | DeadlineRunQueue,
              dst: RunQueue | DeadlineRunQueue) -> None:
        for aid in self._tenants.get(tenant, ()):
            act = self._acts[aid]
            if act.state is _QUEUED and src.remove(aid):
                dst.push(aid, act.qkey)
