"""The two-level scheduler core: pure, single-threaded, driven by one executor thread.

`Scheduler` hosts activations (mailbox + profile each) under one policy.
`enqueue` stamps a message and queues it; `run_once` pops the most urgent
activation and runs its messages through a callback until the activation is
drained, its quantum is spent, or a more urgent activation waits (preemption
only at message boundaries); then it is re-queued under its new key.

`Scheduler` is an `host.ActivationHost` (what is hosted and its administration:
add, reweigh, remove, hold, release) with the per-message paths added: stamping and
queueing on arrival, the slice loop, and the messages and cost feedback between
activations. The run queues and an activation's moves with them are in
`run_queues`, the state machine in `activation`, what a slice reports in `slices`.

Nothing here blocks, sleeps, reads the OS clock or starts threads: time comes
from `now_ms` arguments and the `Clock` handed to `run_once`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from cameo_actors.clock import Clock

from .activation import _HELD, _IDLE, _QUEUED, _REMOVED, _RUNNING, _RUNNING_HELD
from .context import Feedback, Message, _size_of
from .exceptions import PolicyKeyError, UnknownActivationError
from .host import ActivationHost
from .policies import Policy, _resolve_policy, stamp
from .slices import DRAINED, PREEMPTED, QUANTUM, REMOVED, Execute, SliceResult

_INF = math.inf



class Scheduler(ActivationHost):
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
        resolved = _resolve_policy(policy, policy_params, "Scheduler", "policy")
        if isinstance(quantum_ms, bool) or not isinstance(quantum_ms, int | float):
            raise TypeError(f"Scheduler: quantum_ms must be a number, got {quantum_ms!r}")
        if not (0 <= quantum_ms < _INF):
            raise ValueError(f"Scheduler: quantum_ms must be finite and >= 0, got {quantum_ms!r}")
        if not (0 < alpha <= 1):
            raise ValueError(f"Scheduler: alpha must be in (0, 1], got {alpha!r}")
        self.quantum_ms = float(quantum_ms)
        super().__init__(resolved, float(alpha), floor_slack_ms)
        # What enqueue and run_once reach per message, one attribute away: the two run
        # queues, and the queues' moves bound once.
        self._rq = self._queues.main
        self._low = self._queues.low
        self._advance = self._queues.advance
        self._queue_of = self._queues.queue_of
        self._requeue = self._queues.requeue
        self._seq = 0

    def __repr__(self) -> str:
        return (
            f"Scheduler(policy={self.policy!r}, activations={len(self._acts)}, "
            f"backlog={self._backlog}, runnable={len(self._queues)})"
        )

    # -- arrival ----------------------------------------------------------------
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
            profile.observe_watermark(msg, now_ms)
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

