"""The two queue levels: a `Mailbox` per activation and one global `RunQueue`
(a `DeadlineRunQueue` for deadline policies).

Both are binary heaps with lazy deletion: every operation is O(log n)
amortized, and dead entries are compacted away once they outnumber live ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from typing import Any

from .context import Message, SortKey

_INF = math.inf


class Mailbox:
    """One activation's pending messages, in the order the operator must see them.

    Order: local priority (window id), then arrival; but a watermark is a
    barrier. Each mailbox keeps an epoch; data is keyed `(epoch, local_priority,
    seq)`, a watermark `(epoch, +inf, seq)` after which the epoch advances. So
    data never overtakes an earlier watermark and a watermark never overtakes
    earlier data, while data between two watermarks is ordered by window.

    The mailbox also knows the most urgent *policy* key (`msg.key`, smaller =
    more urgent) among its pending messages: the activation's key in the run
    queue. `put` needs `msg.key` set (the scheduler stamps it on arrival).

    Example:
        >>> from cameo_actors.scheduling import Message, PriorityContext
        >>> mb = Mailbox()
        >>> def msg(lp, key, wm=False):
        ...     m = Message("a", 0, 5.0 if wm else [], wm, PriorityContext("d", "t", 0.0))
        ...     m.ctx.local_priority, m.key = lp, key
        ...     return m
        >>> for m in (msg(2, 30.0), msg(1, 20.0), msg(0, 50.0, wm=True), msg(0, 10.0)):
        ...     mb.put(m)
        >>> mb.urgent_key()
        10.0
        >>> [(m.ctx.local_priority, m.is_watermark) for m in (mb.pop(), mb.pop(), mb.pop())]
        [(1, False), (2, False), (0, True)]
        >>> len(mb)
        1
    """

    __slots__ = ("_order", "_urgent", "_pending", "_epoch", "_seq")

    def __init__(self) -> None:
        self._order: list[tuple[int, float, int, Message]] = []
        self._urgent: list[tuple[SortKey, int]] = []
        self._pending: dict[int, Message] = {}
        self._epoch = 0
        self._seq = 0

    def __len__(self) -> int:
        return len(self._pending)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def __repr__(self) -> str:
        return f"Mailbox(pending={len(self._pending)}, epoch={self._epoch})"

    def put(self, msg: Message, first: bool = False) -> None:
        """Add a message (its `key` must be set); `first`: ahead of every pending one (a
        step of work nothing here may overtake, as a checkpoint's snapshot in steps)."""
        self._seq = seq = self._seq + 1
        if first:
            head = self._order[0][0] if self._order else self._epoch
            heappush(self._order, (head - 1, -_INF, seq, msg))
        elif msg.is_watermark:
            heappush(self._order, (self._epoch, _INF, seq, msg))
            self._epoch += 1
        else:
            lp = msg.ctx.local_priority
            if lp != lp:  # NaN would break the heap order
                raise ValueError(
                    f"message to {msg.target!r}: local_priority is NaN; expected a window id or 0"
                )
            heappush(self._order, (self._epoch, lp, seq, msg))
        heappush(self._urgent, (msg.key, seq))
        self._pending[seq] = msg

    def pop(self) -> Message:
        """Remove and return the next message in operator order.

        Raises:
            IndexError: the mailbox is empty.
        """
        if not self._order:
            raise IndexError("pop from an empty Mailbox")
        _, _, seq, msg = heappop(self._order)
        pending = self._pending
        del pending[seq]
        if not pending:
            self._urgent.clear()
        elif len(self._urgent) > 2 * len(pending) + 32:
            self._compact()
        return msg

    def peek(self) -> Message | None:
        """The message `pop` would return, or None."""
        return self._order[0][3] if self._order else None

    def urgent_key(self) -> SortKey | None:
        """The most urgent policy key among pending messages, or None when empty."""
        urgent = self._urgent
        pending = self._pending
        while urgent:
            key, seq = urgent[0]
            if seq in pending:
                return key
            heappop(urgent)
        return None

    def messages(self) -> list[Message]:
        """What is pending, in operator order (a copy: the mailbox is unchanged)."""
        return [e[3] for e in sorted(self._order, key=lambda e: e[:3])]

    def clear(self) -> list[Message]:
        """Empty the mailbox; return what was pending, in operator order."""
        out = self.messages()
        self._order.clear()
        self._urgent.clear()
        self._pending.clear()
        return out

    def _compact(self) -> None:
        self._urgent = [(m.key, s) for s, m in self._pending.items()]
        heapify(self._urgent)


class RunQueue:
    """Activations ordered by their key; equal keys in the order they were (re)queued.

    `push` inserts or re-keys (up or down) an activation. Replaced and removed
    entries stay in the heap, marked dead, until they reach the top or a
    compaction, so every operation is O(log n) amortized.

    Example:
        >>> rq = RunQueue()
        >>> rq.push("a", 30.0); rq.push("b", 20.0); rq.push("a", 10.0)
        >>> rq.peek()
        ('a', 10.0)
        >>> rq.remove("a")
        True
        >>> rq.pop(), len(rq)
        (('b', 20.0), 0)
    """

    __slots__ = ("_heap", "_entries", "_seq")

    def __init__(self) -> None:
        # Entries are [key, seq, activation_id]; activation_id None marks a dead entry.
        # seq is unique, so comparison never reaches the id.
        self._heap: list[list[Any]] = []
        self._entries: dict[str, list[Any]] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __contains__(self, activation_id: object) -> bool:
        return activation_id in self._entries

    def __repr__(self) -> str:
        return f"RunQueue(live={len(self._entries)}, heap={len(self._heap)})"

    def push(self, activation_id: str, key: SortKey) -> None:
        """Queue `activation_id` under `key`, replacing its previous key if queued."""
        entries = self._entries
        old = entries.get(activation_id)
        if old is not None:
            if old[0] == key:
                return
            old[2] = None
        self._seq = seq = self._seq + 1
        entry = [key, seq, activation_id]
        entries[activation_id] = entry
        heappush(self._heap, entry)
        if len(self._heap) > 2 * len(entries) + 64:
            self._compact()

    def key_of(self, activation_id: str) -> SortKey | None:
        """The key `activation_id` is queued under, or None if not queued."""
        e = self._entries.get(activation_id)
        return None if e is None else e[0]

    def remove(self, activation_id: str) -> bool:
        """Dequeue `activation_id`; False if it was not queued."""
        e = self._entries.pop(activation_id, None)
        if e is None:
            return False
        e[2] = None
        if not self._entries:
            self._heap.clear()
        return True

    def pop(self) -> tuple[str, SortKey]:
        """Remove and return (activation_id, key) of the most urgent activation.

        Raises:
            IndexError: the run queue is empty.
        """
        heap = self._heap
        while heap:
            key, _, aid = heappop(heap)
            if aid is not None:
                del self._entries[aid]
                return aid, key
        raise IndexError("pop from an empty RunQueue")

    def peek(self) -> tuple[str, SortKey] | None:
        """(activation_id, key) of the most urgent activation, or None."""
        heap = self._heap
        while heap:
            top = heap[0]
            if top[2] is not None:
                return top[2], top[0]
            heappop(heap)
        return None

    def peek_key(self) -> SortKey | None:
        """The most urgent key, or None when empty."""
        heap = self._heap
        while heap:
            top = heap[0]
            if top[2] is not None:
                return top[0]
            heappop(heap)
        return None

    def advance(self, now: float) -> int:
        """The time, for queues that care (`DeadlineRunQueue`); this one does not."""
        return 0

    def outranks(self, activation_id: str, key: SortKey) -> bool:
        """Whether the head should run before `activation_id`, whose most urgent key is `key`."""
        head = self.peek_key()
        return head is not None and head < key

    def _compact(self) -> None:
        self._heap = [e for e in self._heap if e[2] is not None]
        heapify(self._heap)



#: Late work's slack shrinks as it ages, down to this share of its latency target
#: (`DeadlineRunQueue`; the deadline policies' `late_slack_floor`).
LATE_SLACK_FLOOR = 0.1


class DeadlineRunQueue:
    """A run queue for start-deadline keys that keeps late work from starving the rest,
    and the rest from starving late work.

    Keys are start deadlines (physical ms). An activation whose deadline has passed
    (`key < now`) will miss its target whatever runs next. Plain earliest deadline
    first would run it first, so one overloaded tenant's backlog would make every
    other tenant miss too (EDF's domino effect). So late work gets a slack of its own:
    its latency target less how late it already is, never less than `LATE_SLACK_FLOOR`
    of its target. It is due at `deadline + target` while that is further off, then
    at `now + floor * target`. Work that can still be on time within that slack runs
    first: a late alert (target 50 ms) runs before late bulk work (1 s), and on-time
    alerts before bulk work however late (due 100 ms from now at the soonest). But bulk work
    late by most of its target runs before fresher bulk work not yet due, so a tenant
    with a looser target waits longer, yet its backlog is not starved by tenants with
    tighter ones (a slack of one target from `now`, what a `floor` of 1 gives, kept it
    behind their newest work for good, even below capacity).

    Late entries wait in two heaps: `aging` (due at deadline + target, which does not
    move with `now`), and `floored` (due `now + floor * target`: among them the order is
    fixed, by target then deadline); `_leaving` has the aging ones by when they reach
    their floor. Callers set the time with `advance(now)` before they push, pop or
    compare.

    Example:
        >>> target = {"bulk": 1000.0, "alerts": 50.0, "map": 1000.0, "old": 4000.0}
        >>> rq = DeadlineRunQueue(target.__getitem__)
        >>> rq.advance(100.0)
        0
        >>> rq.push("bulk", 150.0); rq.push("alerts", 180.0); rq.push("map", 2000.0)
        >>> rq.advance(160.0)  # bulk is late: now due at 150 + 1000
        1
        >>> [rq.pop()[0] for _ in range(3)]
        ['alerts', 'bulk', 'map']
        >>> rq.push("old", 100.0); rq.push("alerts", 4300.0); rq.push("map", 4700.0)
        >>> rq.advance(4200.0)  # old is late by 4.1 s: due at 4200 + 400, before map
        0
        >>> [rq.pop()[0] for _ in range(3)]
        ['alerts', 'old', 'map']
    """

    __slots__ = ("on_time", "aging", "floored", "_leaving", "now", "floor", "_target")

    def __init__(self, target: Callable[[str], float], floor: float = LATE_SLACK_FLOOR) -> None:
        self.on_time = RunQueue()  # key: the deadline
        self.aging = RunQueue()  # key: (deadline + target, deadline)
        self.floored = RunQueue()  # key: (floor * target, deadline)
        self._leaving = RunQueue()  # the aging ones, key: when they reach their floor
        self.now = -_INF
        self.floor = floor
        self._target = target

    def __len__(self) -> int:
        return len(self.on_time) + len(self.aging) + len(self.floored)

    def __bool__(self) -> bool:
        return bool(self.on_time) or bool(self.aging) or bool(self.floored)

    def __contains__(self, activation_id: object) -> bool:
        return activation_id in self.on_time or activation_id in self.aging \
            or activation_id in self.floored

    def __repr__(self) -> str:
        return (f"DeadlineRunQueue(on_time={len(self.on_time)}, aging={len(self.aging)}, "
                f"floored={len(self.floored)})")

    @property
    def overdue(self) -> int:
        """Activations whose deadline has passed."""
        return len(self.aging) + len(self.floored)

    def advance(self, now: float) -> int:
        """Set the time; move activations whose deadline passed to the late heaps, and late
        ones whose slack reached its floor to theirs. Returns how many became late."""
        self.now = now
        on_time = self.on_time
        moved = 0
        while True:
            top = on_time.peek()
            if top is None or not top[1] < now:
                break
            on_time.pop()
            self._late(*top)
            moved += 1
        leaving = self._leaving
        while True:
            top = leaving.peek()
            if top is None or top[1] > now:
                return moved
            leaving.pop()
            aid = top[0]
            _, deadline = self.aging.key_of(aid)  # type: ignore[misc] # (it is there)
            self.aging.remove(aid)
            self.floored.push(aid, (self.floor * self._target(aid), deadline))

    def _late(self, aid: str, deadline: float) -> None:
        """Queue `aid`, late with `deadline`: aging, or floored if its slack is spent."""
        target, floor = self._target(aid), self.floor
        if deadline + (1.0 - floor) * target <= self.now:
            self.floored.push(aid, (floor * target, deadline))
        else:
            self.aging.push(aid, (deadline + target, deadline))
            self._leaving.push(aid, deadline + (1.0 - floor) * target)

    def push(self, activation_id: str, key: SortKey) -> None:
        """Queue or re-key `activation_id` under its deadline `key`."""
        self.remove(activation_id)
        if key < self.now:
            self._late(activation_id, key)
        else:
            self.on_time.push(activation_id, key)

    def remove(self, activation_id: str) -> bool:
        if self.on_time.remove(activation_id) or self.floored.remove(activation_id):
            return True
        self._leaving.remove(activation_id)
        return self.aging.remove(activation_id)

    def _first(self) -> RunQueue | None:
        """The heap whose head is due first (on time before late, aging before floored,
        on a tie), or None when all are empty."""
        if not self.aging and not self.floored:  # nothing late: the common case
            return self.on_time if self.on_time else None
        best: RunQueue | None = None
        due = _INF
        for heap, head_due in ((self.on_time, self._due_on_time()), (self.aging, self._due_aging()),
                               (self.floored, self._due_floored())):
            if head_due is not None and (best is None or head_due < due):
                best, due = heap, head_due
        return best

    def _due_on_time(self) -> float | None:
        return self.on_time.peek_key()

    def _due_aging(self) -> float | None:
        head = self.aging.peek_key()
        return None if head is None else head[0]

    def _due_floored(self) -> float | None:
        head = self.floored.peek_key()
        return None if head is None else self.now + head[0]

    def pop(self) -> tuple[str, SortKey]:
        """The activation due first; returns its deadline."""
        heap = self._first()
        if heap is None:
            raise IndexError("pop from an empty DeadlineRunQueue")
        aid, key = heap.pop()
        if heap is self.on_time:
            return aid, key
        if heap is self.aging:
            self._leaving.remove(aid)
        return aid, key[1]

    def peek(self) -> tuple[str, SortKey] | None:
        heap = self._first()
        if heap is None:
            return None
        aid, key = heap.peek()  # type: ignore[misc]
        return (aid, key) if heap is self.on_time else (aid, key[1])

    def outranks(self, activation_id: str, key: SortKey) -> bool:
        """Whether the head is due before `activation_id`, whose most urgent deadline is `key`."""
        now = self.now
        if key >= now:
            due = key
        else:
            target = self._target(activation_id)
            due = max(key + target, now + self.floor * target)
        head = self.on_time.peek_key()
        if head is not None and head < due:
            return True
        if not self.aging and not self.floored:
            return False
        aging, floored = self._due_aging(), self._due_floored()
        return (aging is not None and aging < due) or (floored is not None and floored < due)
