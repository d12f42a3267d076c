"""A keyed process's timers in the order they fire, by time, then by key (`order`): in
memory a heap (`TimerHeap`); on the rocksdb backend the store itself (`StoredTimers`),
so that no timer needs the heap.

Both keep stale entries (a timer cancelled, fired or moved away): the process checks
each entry against its keys' timers as it comes due. An advance to a watermark reads
the due entries in order (`begin`, `pop_due`, `end`); a timer set during it that is due
by that watermark comes out of the same advance, in its order.
"""

from __future__ import annotations

import heapq
from typing import Any

import msgpack

from cameo_actors.operators.state_store import after, end_bytes, packers, unpack_state
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

    An advance reads the due entries with one iterator (a snapshot as it starts), merged
    with a small heap of the timers set during it that are due by its watermark, then
    deletes every entry up to the watermark with one range delete: the iterator never
    walks over the deletes of earlier fires.
    """

    __slots__ = ("home", "prefix", "next_t", "watermark", "_due", "head", "fresh", "read")

    def __init__(self, home: StoreHome, prefix: bytes) -> None:
        self.home, self.prefix = home, prefix
        self.next_t: Any = None  # no entry before it (entries are never earlier)
        self.watermark: float | None = None  # while advancing
        self._due: Any = None
        self.head: tuple[Any, bytes] | None = None
        self.fresh: list[tuple[Any, bytes, Any]] = []
        self.read = False

    def push(self, t: Any, key: Any) -> None:
        wm = self.watermark
        if wm is not None and t <= wm:
            heapq.heappush(self.fresh, (t, order(key), key))
            return
        self.home.store.write([(self.prefix + end_bytes(t) + order(key), packers.pack(t))])
        if self.next_t is None or t < self.next_t:
            self.next_t = t

    def next_time(self) -> Any:
        return self.next_t

    def begin(self, watermark: float) -> None:
        self.watermark, self.fresh, self.read = watermark, [], False
        self._due = self.home.store.scan(self.prefix)
        self.head = self._next()

    def _next(self) -> tuple[Any, bytes] | None:
        item = next(self._due, None)
        if item is None:
            return None
        t = unpack_state(item[1])
        if t > self.watermark:
            return None
        return t, bytes(item[0][len(self.prefix) + 8:])

    def pop_due(self) -> tuple[Any, Any] | None:
        head, fresh = self.head, self.fresh
        if fresh and (head is None or fresh[0][:2] < head):
            t, _, key = heapq.heappop(fresh)
            return t, key
        if head is None:
            return None
        self.head, self.read = self._next(), True
        return head[0], decode_key(msgpack.unpackb(head[1], raw=False, strict_map_key=False))

    def end(self) -> None:
        if self.read and self.watermark is not None:  # every entry up to it was read
            self.home.store.delete_range(self.prefix, self.prefix + after(end_bytes(self.watermark)))
        self.watermark, self._due, self.head, self.fresh = None, None, None, []
        self.reread()

    def reread(self) -> None:
        """`next_t` from the store (after an advance, a restore or a clear)."""
        self.next_t = None
        if self.home.opened:
            first = next(self.home.store.scan(self.prefix), None)
            if first is not None:
                self.next_t = unpack_state(first[1])

    def clear(self) -> None:
        self.watermark, self._due, self.head, self.fresh = None, None, None, []
        self.reread()
