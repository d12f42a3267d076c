"""The two-level scheduler core: pure, single-threaded, driven by one executor thread.

`Scheduler` hosts activations (mailbox + profile each) under one policy.
`enqueue` stamps a message and queues it; `run_once` pops the most urgent
activation and runs its messages through a callback until the activation is
drained, its quantum is spent, or a more urgent activation waits (preemption
only at message boundaries); then it is re-queued under its new key.

Nothing here blocks, sleeps, reads the OS clock or starts threads: time comes
from `now_ms` arguments and the `Clock` handed to `run_once`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from cameo_actors.clock import Clock

from .context import Feedback, Message, SortKey, _size_of
from .exceptions import (
    DuplicateActivationError,
    PolicyKeyError,
    UnknownActivationError,
)
from .floor import TenantFloor
from .policies import Policy, _resolve_policy, stamp
from .profile import ActivationProfile, DataflowProfile, WindowTiming
from .queues import DeadlineRunQueue, Mailbox, RunQueue

_INF = math.inf

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


class ActivationState(Enum):
    """Where an activation stands with the run queue; one state, not a set of flags.

    Being held (no credits downstream) and running can coexist: a hold that
    arrives while the activation runs takes effect at the next message
    boundary. Held and queued cannot: a held activation leaves the run queue.
    These are all the combinations there are:

    ============  =========================  =========================================
    state         in the run queue / runs    next, on
    ============  =========================  =========================================
    IDLE          no / no (mailbox empty)    enqueue: QUEUED; hold: HELD
    QUEUED        yes, under `qkey` / no     enqueue of a more urgent message: QUEUED
                                             (re-keyed); run_once: RUNNING; hold: HELD
    RUNNING       no / yes                   slice end: QUEUED if mail is left, else
                                             IDLE; hold: RUNNING_HELD
    RUNNING_HELD  no / yes, ends at the      release: RUNNING; slice end: HELD
                  next message boundary
    HELD          no / no (takes mail)       release: QUEUED if it has mail, else IDLE
    REMOVED       no / its slice ends        (final; the scheduler forgot it)
    ============  =========================  =========================================

    `remove_activation` moves any state to REMOVED; enqueue to a RUNNING,
    RUNNING_HELD or HELD activation only fills its mailbox.
    """

    IDLE = "idle"
    QUEUED = "queued"
    RUNNING = "running"
    RUNNING_HELD = "running_held"
    HELD = "held"
    REMOVED = "removed"


# Module-level aliases: an enum member lookup through the class costs ~50 ns on 3.11,
# and the hot paths (enqueue, the run_once loop) test the state per message.
_IDLE = ActivationState.IDLE
_QUEUED = ActivationState.QUEUED
_RUNNING = ActivationState.RUNNING
_RUNNING_HELD = ActivationState.RUNNING_HELD
_HELD = ActivationState.HELD
_REMOVED = ActivationState.REMOVED


class _Activation:
    __slots__ = ("id", "tenant", "mailbox", "profile", "state", "qkey")

    def __init__(self, profile: ActivationProfile) -> None:
        self.id = profile.activation_id
        self.tenant = profile.tenant
        self.mailbox = Mailbox()
        self.profile = profile
        self.state = _IDLE
        self.qkey: SortKey = None  # its key in the run queue while QUEUED


class Scheduler:
    """Deadline-aware two-level scheduler for one executor.

    Args:
        policy: a `Policy` instance or a registered name ("cameo", "fifo", ...).
        quantum_ms: how long an activation may run before yielding to others
            with equal or lower urgency (0: one message per slice).
        policy_params: parameters for `get_policy(policy, **policy_params)`.
        alpha: EWMA weight of new cost samples in the profiles.
        floor_slack_ms: turn on tenant floors (`floor.TenantFloor`): a tenant that took
            more than this much executor time above its weighted share while others
            waited runs only when no tenant within its share has work. None: off.

    Example:
        >>> from cameo_actors.clock import FakeClock
        >>> clock = FakeClock(0.0)
        >>> s = Scheduler("cameo", quantum_ms=5.0)
        >>> _ = s.add_activation("bulk", dataflow="b", tenant="t1", latency_target_ms=1000.0)
        >>> _ = s.add_activation("alert", dataflow="a", tenant="t2", latency_target_ms=50.0)
        >>> for target, df in (("bulk", "b"), ("alert", "a")):
        ...     s.enqueue(Message.ingress(target, [{}], dataflow=df, tenant="x",
        ...                               ingest_ms=clock.now_ms()), clock.now_ms())
        >>> ran = []
        >>> def execute(activation_id, msg):
        ...     ran.append(activation_id); clock.advance(1.0)
        >>> while s.run_once(execute, clock) is not None:
        ...     pass
        >>> ran  # the tight target runs first although it arrived second
        ['alert', 'bulk']
    """

    def __init__(
        self,
        policy: Policy | str = "cameo",
        *,
        quantum_ms: float = 5.0,
        policy_params: Mapping[str, Any] | None = None,
        alpha: float = 0.2,
        floor_slack_ms: float | None = None,
    ) -> None:
        if not isinstance(policy, Policy | str):
            raise TypeError(f"Scheduler: policy must be a Policy or a name, got {policy!r}")
        self.policy = _resolve_policy(policy, policy_params, "Scheduler", "policy")
        if isinstance(quantum_ms, bool) or not isinstance(quantum_ms, int | float):
            raise TypeError(f"Scheduler: quantum_ms must be a number, got {quantum_ms!r}")
        if not (0 <= quantum_ms < _INF):
            raise ValueError(f"Scheduler: quantum_ms must be finite and >= 0, got {quantum_ms!r}")
        if not (0 < alpha <= 1):
            raise ValueError(f"Scheduler: alpha must be in (0, 1], got {alpha!r}")
        self.quantum_ms = float(quantum_ms)
        self.alpha = float(alpha)
        self.stats = SchedulerStats()
        self._acts: dict[str, _Activation] = {}
        self._flows: dict[str, DataflowProfile] = {}
        self._members: dict[str, set[str]] = {}  # dataflow -> its hosted activation ids
        self._rq = self._run_queue()
        # With floors, the activations of tenants over their share wait in a second run
        # queue, served only when the first is empty.
        self._low = self._run_queue()
        self._tenants: dict[str, set[str]] = {}  # tenant -> its hosted activation ids
        self.floor = None if floor_slack_ms is None else TenantFloor(
            floor_slack_ms, on_demote=self._demote, on_promote=self._promote)
        self._seq = 0
        self._backlog = 0

    def _run_queue(self) -> RunQueue | DeadlineRunQueue:
        if self.policy.deadline_keys:
            return DeadlineRunQueue(lambda aid: self._acts[aid].profile.latency_target_ms)
        return RunQueue()

    def __repr__(self) -> str:
        return (
            f"Scheduler(policy={self.policy!r}, activations={len(self._acts)}, "
            f"backlog={self._backlog}, runnable={len(self._rq) + len(self._low)})"
        )

    # -- activations ------------------------------------------------------------
    def add_activation(
        self,
        activation_id: str,
        *,
        dataflow: str,
        tenant: str,
        latency_target_ms: float,
        weight: float = 1.0,
        window: WindowTiming | None = None,
    ) -> ActivationProfile:
        """Host a new activation; returns its profile.

        Args:
            activation_id: unique id on this scheduler (e.g. "df1/sum#2").
            dataflow: its dataflow id (activations of one dataflow share the lag estimate).
            tenant: the owning tenant.
            latency_target_ms: the dataflow's latency target L (inf: best effort).
            weight: the tenant's weight for fair_share.
            window: the window layout if the operator is windowed.

        Raises:
            DuplicateActivationError: the id is already hosted.
            TypeError, ValueError: a bad argument.
        """
        if activation_id in self._acts:
            raise DuplicateActivationError(
                f"add_activation: {activation_id!r} is already hosted. "
                "Fix: remove_activation() it first, or use a unique id."
            )
        flow = self._flows.get(dataflow)
        if flow is None and isinstance(dataflow, str):
            flow = DataflowProfile(dataflow, self.alpha)
        profile = ActivationProfile(
            activation_id,
            dataflow=dataflow,
            tenant=tenant,
            latency_target_ms=latency_target_ms,
            weight=weight,
            window=window,
            flow=flow,
            alpha=self.alpha,
        )
        self._acts[activation_id] = _Activation(profile)
        self._flows[dataflow] = profile.flow
        self._members.setdefault(dataflow, set()).add(activation_id)
        self._tenants.setdefault(tenant, set()).add(activation_id)
        if self.floor is not None and profile.weight > self.floor.weight(tenant):
            self.floor.set_weight(tenant, profile.weight)
        return profile

    def set_weight(self, dataflow: str, weight: float) -> None:
        """Change the weight of a hosted dataflow's activations (and so of its tenant)."""
        tenants = set()
        for aid in self._members.get(dataflow, ()):
            profile = self._acts[aid].profile
            profile.weight = float(weight)
            tenants.add(profile.tenant)
        for tenant in tenants:
            self._reweigh(tenant)

    def _reweigh(self, tenant: str) -> None:
        """A tenant's weight on the floor: the largest of its hosted activations'."""
        if self.floor is not None:
            self.floor.set_weight(tenant, max(self._acts[a].profile.weight
                                              for a in self._tenants[tenant]))

    def remove_activation(self, activation_id: str) -> list[Message]:
        """Stop hosting an activation (cancel); returns its pending messages.

        Frees its mailbox and run-queue entry. Safe to call from inside
        `execute`, also for the activation that is running. Downstream
        feedback it gave upstream activations is forgotten.

        Raises:
            UnknownActivationError: the id is not hosted.
        """
        act = self._acts.pop(activation_id, None)
        if act is None:
            raise UnknownActivationError(activation_id, "remove_activation")
        if act.state is _QUEUED:
            self._queue_of(act).remove(activation_id)
        act.state = _REMOVED  # a running slice ends at the next message boundary
        pending = act.mailbox.clear()
        self._backlog -= len(pending)
        self.stats.dropped += len(pending)
        tenant = act.tenant
        members_of_tenant = self._tenants[tenant]
        members_of_tenant.discard(activation_id)
        floor = self.floor
        if floor is not None:
            floor.dropped(tenant, len(pending))
            if not members_of_tenant:
                floor.forget(tenant)
            elif act.profile.weight >= floor.weight(tenant):  # it may have been the heaviest
                self._reweigh(tenant)
        if not members_of_tenant:
            del self._tenants[tenant]
        # Feedback only flows within a dataflow: only its members can hold a report.
        dataflow = act.profile.dataflow
        members = self._members[dataflow]
        members.discard(activation_id)
        for other in members:
            self._acts[other].profile.forget_downstream(activation_id)
        if not members:
            del self._members[dataflow]
            del self._flows[dataflow]
        return pending

    def __contains__(self, activation_id: object) -> bool:
        return activation_id in self._acts

    def __len__(self) -> int:
        """Number of hosted activations."""
        return len(self._acts)

    def activation_ids(self) -> Iterator[str]:
        """Ids of hosted activations."""
        return iter(list(self._acts))

    def profile(self, activation_id: str) -> ActivationProfile:
        """The profile (settings and learned costs) of a hosted activation."""
        return self._hosted(activation_id, "profile").profile

    def _hosted(self, activation_id: str, what: str) -> _Activation:
        """The hosted activation; `what` names the caller in the error for unknown ids."""
        act = self._acts.get(activation_id)
        if act is None:
            raise UnknownActivationError(activation_id, what)
        return act

    def dataflow_profile(self, dataflow: str) -> DataflowProfile | None:
        """The shared per-dataflow observations (source lag), None if none hosted."""
        return self._flows.get(dataflow)

    # -- queues -------------------------------------------------------------------
    @property
    def backlog(self) -> int:
        """Messages waiting in all mailboxes."""
        return self._backlog

    def pending(self, activation_id: str) -> int:
        """Messages waiting in one activation's mailbox."""
        return len(self._hosted(activation_id, "pending").mailbox)

    def urgent_key(self, activation_id: str) -> SortKey | None:
        """The most urgent key among one activation's pending messages (None if empty)."""
        return self._hosted(activation_id, "urgent_key").mailbox.urgent_key()

    def has_work(self) -> bool:
        """Whether `run_once` would run something now."""
        return bool(self._rq) or bool(self._low)

    def peek(self) -> tuple[str, SortKey] | None:
        """(activation_id, key) that `run_once` would run next, or None."""
        return self._rq.peek() if self._rq else self._low.peek()

    def tenant_shares(self) -> dict[str, dict[str, float | bool | int]]:
        """Per tenant with tenant floors on: weight, executor time taken, how far over (or
        under, < 0) its weighted share it stands, whether it is demoted; {} when off."""
        return {} if self.floor is None else self.floor.shares()

    # -- tenant floors ------------------------------------------------------------
    def _queue_of(self, act: _Activation) -> RunQueue | DeadlineRunQueue:
        floor = self.floor
        return self._low if floor is not None and floor.is_demoted(act.tenant) else self._rq

    def _advance(self, now_ms: float) -> None:
        self.stats.overdue += self._rq.advance(now_ms)
        if self.floor is not None:
            self.stats.overdue += self._low.advance(now_ms)

    def _demote(self, tenant: str) -> None:
        self.stats.demotions += 1
        self._move(tenant, self._rq, self._low)

    def _promote(self, tenant: str) -> None:
        self._move(tenant, self._low, self._rq)

    def _move(self, tenant: str, src: RunQueue | DeadlineRunQueue,
              dst: RunQueue | DeadlineRunQueue) -> None:
        for aid in self._tenants.get(tenant, ()):
            act = self._acts[aid]
            if act.state is _QUEUED and src.remove(aid):
                dst.push(aid, act.qkey)

    def enqueue(self, msg: Message, now_ms: float, *, first: bool = False) -> None:
        """Accept a message for its target activation at physical time `now_ms` (`first`:
        ahead of every message pending there, see `Mailbox.put`).

        Sets `msg.seq` and `msg.arrival_ms`, learns transfer delay and source
        lag, stamps `msg.ctx` (frontier, local priority, start deadline: the
        `stamp` decision), records a window's input watermark, stamps the
        key the policy's `on_arrival` returns as `msg.key`, puts the message
        in the mailbox and, if it is now the activation's most urgent
        message, re-keys the activation in the run queue. Safe to call from
        inside `execute`.

        Raises:
            UnknownActivationError: `msg.target` is not hosted.
            TypeError: `msg` is not a Message.
            PolicyKeyError: the policy produced a None or NaN key.
        """
        act = self._acts.get(msg.target) if isinstance(msg, Message) else None
        if act is None:
            if not isinstance(msg, Message):
                raise TypeError(f"enqueue: expected a Message, got {type(msg).__name__}")
            raise UnknownActivationError(msg.target, "enqueue")
        self._seq = msg.seq = self._seq + 1
        msg.arrival_ms = now_ms
        profile = act.profile
        ctx = msg.ctx
        sent = msg.sent_ms
        if sent == sent:  # not NaN: the sender told when it sent
            profile.observe_transfer(msg.upstream, now_ms - sent)
        if not msg.is_watermark and (not msg.upstream or profile.window is not None):
            ev = ctx.event_ms
            if -_INF < ev < _INF:
                profile.flow.observe_lag(ctx.ingest_ms - ev)
        ctx.frontier_ms, ctx.local_priority, ctx.deadline_ms = stamp(msg, profile)
        if msg.is_watermark:  # after the stamp: it measures from the previous watermark
            profile.observe_watermark(msg)
        key = self.policy.on_arrival(msg, profile, now_ms)
        if key is None or key != key:
            raise PolicyKeyError(
                f"policy {self.policy!r} gave message to {msg.target!r} the key {key!r}; "
                "keys must be totally ordered (no None, no NaN). Fix: return the key "
                "from key() (or on_arrival(), which returns it rather than setting msg.key)"
            )
        msg.key = key
        act.mailbox.put(msg, first)
        self._backlog += 1
        self.stats.enqueued += 1
        floor = self.floor
        if floor is not None:
            floor.queued(act.tenant)
        # Only IDLE and QUEUED activations wait in the run queue: a running one is
        # re-queued by run_once when its slice ends, a held one on release.
        state = act.state
        if state is _IDLE or (state is _QUEUED and key < act.qkey):
            if floor is None:
                self.stats.overdue += self._rq.advance(now_ms)
                self._rq.push(act.id, key)
            else:
                self._advance(now_ms)
                self._queue_of(act).push(act.id, key)
            act.state = _QUEUED
            act.qkey = key

    # -- messages between activations --------------------------------------------
    def derive(
        self,
        parent: Message,
        target: str,
        payload: Any,
        now_ms: float,
        *,
        port: int = 0,
        is_watermark: bool = False,
        size: int | None = None,
        event_ms: float | None = None,
    ) -> Message:
        """A message that the activation processing `parent` sends to `target`.

        Runs the policy's `before_send` hook to derive the context (ingest
        and event time carried forward), sets `upstream` to the sender and
        `sent_ms` to `now_ms`. Works for local and remote targets; hand the
        result to the target scheduler's `enqueue` (after shipping it).

        Args:
            parent: the message being processed.
            target: the downstream activation id.
            payload: events (list) or a watermark (float).
            now_ms: the physical time of sending.
            port: the downstream input port.
            is_watermark: whether the payload is a watermark.
            size: events in the payload; default len(payload) for data, 0 for watermarks.
            event_ms: the output's largest event time, if not the parent's (e.g. a window end).

        Raises:
            UnknownActivationError: `parent.target` (the sender) is not hosted here.
        """
        act = self._hosted(parent.target, "derive (the sender)")
        ctx = self.policy.before_send(parent, act.profile, now_ms, event_ms)
        if size is None:
            size = _size_of(payload, is_watermark)
        return Message(
            target, port, payload, is_watermark, ctx, parent.target, size, sent_ms=now_ms
        )

    def feedback_for(self, activation_id: str, upstream: str) -> Feedback:
        """The Cameo cost feedback `activation_id` should send to `upstream`
        (piggy-back it on the credit return)."""
        return self._hosted(activation_id, "feedback_for").profile.feedback_for(upstream)

    def on_feedback(self, activation_id: str, feedback: Feedback, now_ms: float) -> bool:
        """Deliver downstream feedback to `activation_id` (the upstream).

        Returns False (and does nothing) when the activation is no longer
        hosted: feedback may race with a cancel. Already stamped messages keep
        their keys; the new C_path counts from the next arrival on.
        """
        act = self._acts.get(activation_id)
        if act is None:
            return False
        if not isinstance(feedback, Feedback):
            raise TypeError(f"on_feedback: expected a Feedback, got {type(feedback).__name__}")
        act.profile.apply_feedback(feedback)
        self.policy.on_feedback(act.profile, feedback, now_ms)
        return True

    # -- running ------------------------------------------------------------------
    def run_once(
        self,
        execute: Execute,
        clock: Clock,
        *,
        poll: Callable[[], object] | None = None,
    ) -> SliceResult | None:
        """Run one slice of the most urgent activation; None if nothing is runnable.

        Messages run one at a time through `execute(activation_id, message)`,
        in mailbox order. After each one the slice ends if the mailbox is
        empty, the quantum (measured with `clock`) is spent, or the run queue
        holds an activation with a strictly smaller key than this one's most
        urgent pending message; the activation is then re-queued under that key.

        Per message: queueing delay (start - arrival) and execution cost (clock
        delta around `execute`) go to the policy's `after_execute` hook, then
        into the profile (C_OM, queueing delay); a start after the stamped
        deadline counts in `profile.late_starts`.

        `execute` may call `enqueue`, `derive`, `on_feedback`,
        `add_activation` and `remove_activation` (even for itself). If it
        raises, the message counts as consumed, the scheduler stays consistent,
        and the exception propagates.

        Args:
            execute: runs one message.
            clock: the time source (a `FakeClock` in tests).
            poll: called at every message boundary before the preemption check,
                e.g. to move messages that other threads delivered into `enqueue`.
        """
        now = clock.now_ms
        t0 = now()
        rq = self._rq
        low = self._low
        floor = self.floor
        if not rq and (floor is None or not low):
            return None
        stats = self.stats
        if floor is None:
            stats.overdue += rq.advance(t0)
            aid, _ = rq.pop()
        else:  # a tenant over its share runs only when nobody within theirs has work
            self._advance(t0)
            aid, _ = (rq if rq else low).pop()
        act = self._acts[aid]
        tenant = act.tenant
        act.state = _RUNNING
        mailbox = act.mailbox
        profile = act.profile
        policy = self.policy
        quantum = self.quantum_ms
        n = 0
        busy = 0.0
        reason = DRAINED
        uncharged = False
        try:
            while True:
                msg = mailbox.pop()
                self._backlog -= 1
                uncharged = floor is not None
                start = now()
                if start > msg.ctx.deadline_ms:
                    profile.late_starts += 1
                key = msg.key
                policy.before_execute(msg, profile, key, start)
                execute(aid, msg)
                t2 = now()
                n += 1
                cost = t2 - start
                busy += cost
                waited = start - msg.arrival_ms
                policy.after_execute(msg, profile, key, cost, waited, t2)
                profile.observe_execution(msg.upstream, msg.is_watermark, cost, waited)
                if floor is not None:
                    floor.charge(tenant, cost)
                    uncharged = False
                if poll is not None:
                    poll()
                state = act.state
                if state is not _RUNNING:  # removed, or held, during the message
                    if state is _REMOVED:
                        reason = REMOVED
                    break
                if not mailbox:
                    break
                if t2 - t0 >= quantum:
                    reason = QUANTUM
                    break
                if floor is None:
                    if rq:
                        stats.overdue += rq.advance(t2)
                        if rq.outranks(aid, mailbox.urgent_key()):
                            reason = PREEMPTED
                            break
                elif rq or low:
                    self._advance(t2)
                    urgent = mailbox.urgent_key()
                    if floor.is_demoted(tenant):  # anyone within their share goes first
                        preempt = bool(rq) or low.outranks(aid, urgent)
                    else:
                        preempt = bool(rq) and rq.outranks(aid, urgent)
                    if preempt:
                        reason = PREEMPTED
                        break
        finally:
            state = act.state
            if state is _RUNNING:
                self._requeue(act)
            elif state is _RUNNING_HELD:
                act.state = _HELD
            if floor is not None:
                if uncharged:  # `execute` raised: the message is consumed all the same
                    floor.charge(tenant, 0.0)
                if not self._backlog:
                    floor.idle()
            t3 = now()
            stats.slices += 1
            stats.executed += n
            stats.busy_ms += busy
            stats.overhead_ms += (t3 - t0) - busy
            if reason == PREEMPTED:
                stats.preempted += 1
            elif reason == QUANTUM:
                stats.quantum_expired += 1
        return SliceResult(aid, n, reason, t0, t3)

    def _requeue(self, act: _Activation) -> None:
        """Leave RUNNING or HELD: QUEUED under the most urgent pending key, or IDLE."""
        key = act.mailbox.urgent_key()
        if key is None:
            act.state = _IDLE
        else:
            act.state = _QUEUED
            act.qkey = key
            self._queue_of(act).push(act.id, key)

    def hold(self, activation_id: str) -> None:
        """Keep an activation out of the run queue (its downstream has no credits left).

        Its mailbox still takes messages; a running slice ends at the next boundary.
        """
        act = self._acts.get(activation_id)
        if act is None:
            return
        state = act.state
        if state is _QUEUED:
            self._queue_of(act).remove(activation_id)
            act.state = _HELD
        elif state is _IDLE:
            act.state = _HELD
        elif state is _RUNNING:
            act.state = _RUNNING_HELD  # run_once ends the slice at the next boundary

    def release(self, activation_id: str) -> None:
        """Let a held activation run again (credits came back)."""
        act = self._acts.get(activation_id)
        if act is None:
            return
        state = act.state
        if state is _HELD:
            self._requeue(act)
        elif state is _RUNNING_HELD:
            act.state = _RUNNING  # the slice goes on

    def is_held(self, activation_id: str) -> bool:
        """Whether a hosted activation is held (False for unknown ids)."""
        act = self._acts.get(activation_id)
        return act is not None and act.state in (_HELD, _RUNNING_HELD)

    def run_until_idle(
        self, execute: Execute, clock: Clock, *, max_slices: int | None = None
    ) -> int:
        """Call `run_once` until nothing is runnable (or `max_slices`); returns slices run.

        For tests and the in-process runner; the executor thread calls
        `run_once` itself so it can take new messages between slices.
        """
        slices = 0
        while (max_slices is None or slices < max_slices) and self.run_once(execute, clock):
            slices += 1
        return slices
