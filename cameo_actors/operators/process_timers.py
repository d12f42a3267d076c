"""A keyed process's timers in the order they fire, by time, then by key (`order`): in
memory a heap (`TimerHeap`); on the rocksdb backend the store itself (`StoredTimers`),
so that no timer needs the heap.

Both keep stale entries (a timer cancelled, fired or moved away): the process checks
each entry against its keys' timers as it comes due. An advance to a watermark reads
the due entries in order (`begin`, `pop_due`, `end`); a timer set during it that is due
by that watermark comes out of the same advance, in its order.

`StoredTimers` also queues when to look at a key again for the interval join (its
earliest expiry) and session windows (a session's end, a fired session's last use):
`take_due`.
"""

from __future__ import annotations

import heapq
from typing import Any

import msgpack

from cameo_actors.operators.state_store import end_bytes, packers, unpack_state
from cameo_actors.operators.stored_keys import StoreHome
from cameo_actors.operators.windowing import decode_key, encode_key


def order(key: Any) -> bytes:
    """The order of keys whose timers fire at the same time: msgpack of the key."""
    try:
        return msgpack.packb(encode_key(key), use_bin_type=True)  # type: ignore[no-any-return]
    except Exception:  # a key msgpack cannot carry: after every one it can
        return b"\xff" + repr(key).encode("utf-8", "backslashreplace")


class TimerHeap:
    """Timers in memory: (time, key order, seq, key) entries in a heap."""

    __slots__ = ("heap", "seq", "watermark")

    def __init__(self) -> None:
        self.heap: list[tuple[Any, bytes, int, Any]] = []
        self.seq = 0
        self.watermark: float = -float("inf")

    def push(self, t: Any, key: Any) -> None:
        heapq.heappush(self.heap, (t, order(key), self.seq, key))
        self.seq += 1

    def next_time(self) -> Any:
        """The earliest entry's time; None when there is none."""
        return self.heap[0][0] if self.heap else None

    def begin(self, watermark: float) -> None:
        self.watermark = watermark

    def pop_due(self) -> tuple[Any, Any] | None:
        """The next entry due by the watermark of `begin`, as (time, key); None: no more."""
        heap = self.heap
        if heap and heap[0][0] <= self.watermark:
            t, _, _, key = heapq.heappop(heap)
            return t, key
        return None

    def end(self) -> None:
        pass

    def clear(self) -> None:
        self.heap, self.seq = [], 0


class StoredTimers:
    """Timers in the store: a key ``prefix | time | key order`` per entry (`end_bytes`
    sorts times as numbers; msgpack is self-delimiting, so key orders compare as the
    heap's), the time as set for its value (an int stays an int).

    Entries pushed are written in one batch after the step's batch of events (`flush`,
    from `StoredState.after_batch`), or before anything reads the queue or a checkpoint
    takes the store: a write per push cost more than the push. An advance reads the due
    entries with one iterator (a snapshot as it starts), merged with a small heap of the
    timers set during it that are due by its watermark, and deletes what it read with
    point deletes in one batch. Every read starts at the earliest time still queued
    (`next_t`), never at the prefix: a queue's deletes lie before it until a compaction
    drops them, and a seek past them skips them at once (many small range deletes would
    instead slow every later iterator).
    """

    __slots__ = ("home", "prefix", "next_t", "watermark", "_due", "head", "fresh", "read",
                 "pending")

    def __init__(self, home: StoreHome, prefix: bytes) -> None:
        self.home, self.prefix = home, prefix
        self.next_t: Any = None  # no entry is earlier (None: none at all)
        self.watermark: float | None = None  # while advancing
        self._due: Any = None
        self.head: tuple[Any, bytes, bytes] | None = None  # (time, key order, store key)
        self.fresh: list[tuple[Any, bytes, Any]] = []
        self.read: list[bytes] = []
        self.pending: list[tuple[bytes, bytes]] = []  # pushed, not written yet

    def push(self, t: Any, key: Any) -> None:
        wm = self.watermark
        if wm is not None and t <= wm:
            heapq.heappush(self.fresh, (t, order(key), key))
            return
        self._write(t, order(key))

    def _write(self, t: Any, key_order: bytes) -> None:
        self.pending.append((self.prefix + end_bytes(t) + key_order, packers.pack(t)))
        if self.next_t is None or t < self.next_t:
            self.next_t = t

    def flush(self) -> None:
        """Write the entries pushed since the last flush."""
        if self.pending:
            self.home.store.write(self.pending)
            self.pending = []

    def next_time(self) -> Any:
        return self.next_t

    def begin(self, watermark: float) -> None:
        self.flush()
        self.watermark, self.fresh, self.read = watermark, [], []
        self._due = self.home.store.scan_from(self.prefix + end_bytes(self.next_t))
        self.head = self._next()

    def _next(self) -> tuple[Any, bytes, bytes] | None:
        item = next(self._due, None)
        if item is None or not item[0].startswith(self.prefix):
            return None
        t = unpack_state(item[1])
        if t > self.watermark:
            return None
        k = bytes(item[0])
        return t, k[len(self.prefix) + 8:], k

    def pop_due(self) -> tuple[Any, Any] | None:
        head, fresh = self.head, self.fresh
        if fresh and (head is None or fresh[0][:2] < head[:2]):
            t, _, key = heapq.heappop(fresh)
            return t, key
        if head is None:
            return None
        self.read.append(head[2])
        self.head = self._next()
        return head[0], decode_key(msgpack.unpackb(head[1], raw=False, strict_map_key=False))

    def end(self) -> None:
        """The advance is over: what it read is deleted; what it did not fire (it was cut
        short) stays queued."""
        if self.read:
            self.home.store.write((k, None) for k in self.read)
        low = self.watermark if self.head is None else self.head[0]
        fresh, self.fresh = self.fresh, []
        self.watermark, self._due, self.head, self.read = None, None, None, []
        self.reread(low)
        for t, key_order, _ in fresh:
            self._write(t, key_order)

    def take_due(self, watermark: float) -> list[Any]:
        """The keys of the entries at or before `watermark`, each once, in firing order;
        their entries deleted (a queue of one entry per key and time, as the interval
        join's and the sessions' queues of when to look at a key again)."""
        first = self.next_t
        if first is None or first > watermark:
            return []
        due: dict[Any, None] = {}
        self.begin(watermark)
        while (entry := self.pop_due()) is not None:
            due[entry[1]] = None
        self.end()
        return list(due)

    def reread(self, low: Any = None) -> None:
        """`next_t` from the store, read from `low` (no entry is earlier; None: from the
        first), after an advance, a restore or a clear."""
        self.flush()
        self.next_t = None
        if self.home.opened:
            start = self.prefix if low is None else self.prefix + end_bytes(low)
            first = next(self.home.store.scan_from(start), None)
            if first is not None and first[0].startswith(self.prefix):
                self.next_t = unpack_state(first[1])

    def clear(self) -> None:
        """The store was cleared or replaced (a restore): forget what was not written."""
        self.watermark, self._due, self.head, self.fresh, self.read = None, None, None, [], []
        self.pending = []
        self.reread()
