"""Inner join of two keyed streams per event-time interval.

Port 0 is the left stream, port 1 the right. A left event at ``tl`` (its
left time field) and a right event at ``tr`` with equal keys join when::

    tl + lower_ms <= tr <= tl + upper_ms

(lower_ms <= upper_ms; either may be negative). A pair comes out as soon as
its second event arrives, not at a watermark::

    {"key": k, <left_time_field>: max(tl, tr), "left": <left event>, "right": <right event>}

An event whose time is behind the operator's watermark (the minimum over both
ports) is late: it goes to the error output as kind "late". An event without
a valid time, or whose key function raises or returns an unhashable key, is
"malformed". Both are counted (`late_count`, `malformed_count`).

State is per key: each side's events in time order. A watermark w drops the left
events with ``tl + upper_ms < w`` and the right ones with ``tr - lower_ms < w``: no
event that is not late can match them any more; a queue of each key's earliest expiry
says which keys to look at. In memory the keys are a dict, indexed by bin
(`bins.KeyBins`) for live migration, and the queue a heap. On the rocksdb backend both
live in the step's store (`stored_keys`, `process_timers`), a key's events as one
value with a cache of hot keys: a checkpoint is the store's files, a restore opens
them, a bin moves as the store's bytes. There the events are kept as msgpack carries
them, as a checkpoint keeps them in memory: a tuple in an event comes back a list.

>>> op = IntervalJoinOperator("j", lower_ms=0, upper_ms=100,
...                           left_key_fn=lambda e: e["id"], right_key_fn=lambda e: e["id"],
...                           left_time_field="t", right_time_field="ts")
>>> op.on_batch([{"t": 10, "id": 1}], port=0).events
[]
>>> op.on_batch([{"ts": 50, "id": 1}, {"ts": 200, "id": 1}], port=1).events
[{'key': 1, 't': 50, 'left': {'t': 10, 'id': 1}, 'right': {'ts': 50, 'id': 1}}]
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from typing import Any

from cameo_actors.operators.aggregates import is_time
from cameo_actors.operators.base import Event, Output, short_repr
from cameo_actors.operators.bins import KeyBins
from cameo_actors.operators.join import check_sides
from cameo_actors.operators.process_timers import StoredTimers
from cameo_actors.operators.state_store import StateBackend, backend_folder, unpack_state
from cameo_actors.operators.stored_keys import StoredKeys, StoredState, StoreHome, stored_entries
from cameo_actors.operators.windowed_operator import WindowedOperator
from cameo_actors.operators.windowing import (
    KeyFn,
    decode_key,
    encode_key,
    event_time,
    time_error,
    unhashable_key_error,
)

_SIDES = ("left", "right")
#: Fields of every result; the left time field may not be one of them.
RESULT_FIELDS = ("key", "left", "right")
#: The store's prefixes (`stored_keys`): each key's events, each key's earliest expiry.
KEYS, EXPIRY = b"j", b"x"


class _Key:
    """One key's buffered events: per side, times (sorted) and events, in step."""

    __slots__ = ("times", "events")

    def __init__(self) -> None:
        self.times: tuple[list[Any], list[Any]] = ([], [])
        self.events: tuple[list[Event], list[Event]] = ([], [])

    def __bool__(self) -> bool:
        return bool(self.times[0] or self.times[1])


def _sides(state: _Key) -> list[list[Event]]:
    """A key's value in the store: its left and right events."""
    return [state.events[0], state.events[1]]


class IntervalJoinOperator(WindowedOperator):
    """Interval inner equi-join of a left (port 0) and a right (port 1) stream.

    Args:
        step_id: the spec step (named in every error record).
        lower_ms: the earliest right time, relative to the left time, that joins.
        upper_ms: the latest one (>= lower_ms).
        left_key_fn: left event -> key (hashable; tuples allowed).
        right_key_fn: right event -> key, compared with == to left keys.
        left_time_field: event-time field of left events (also the result's
            time field).
        right_time_field: event-time field of right events.

    Raises:
        ValueError: bounds that are not finite numbers or lower_ms > upper_ms, a
            missing key function, or a left time field that clashes with a result field.
    """

    noun = "join"

    def __init__(
        self,
        step_id: str,
        *,
        lower_ms: float,
        upper_ms: float,
        left_key_fn: KeyFn,
        right_key_fn: KeyFn,
        left_time_field: str,
        right_time_field: str,
    ) -> None:
        super().__init__(step_id, n_inputs=2)
        for name, value in (("lower_ms", lower_ms), ("upper_ms", upper_ms)):
            if not is_time(value):
                raise ValueError(f"step {step_id!r}: {name} must be a finite number of ms, "
                                 f"got {value!r}")
        if lower_ms > upper_ms:
            raise ValueError(f"step {step_id!r}: lower_ms ({lower_ms}) must be <= upper_ms "
                             f"({upper_ms}); swap the bounds")
        check_sides(step_id, (left_key_fn, right_key_fn), (left_time_field, right_time_field),
                    result_fields=RESULT_FIELDS)
        self.lower_ms = lower_ms
        self.upper_ms = upper_ms
        self.key_fns = (left_key_fn, right_key_fn)
        self.time_fields = (left_time_field, right_time_field)
        # key -> its events; on the rocksdb backend in its store (`_stored`, None in
        # memory), where a changed key is set again to be written.
        self._keys: dict[Any, _Key] | StoredKeys = {}
        self._stored: StoredState | None = None
        self._index = KeyBins()  # in memory, the keys of `_keys` by bin
        # (time at which the key's earliest event may expire, seq, key): each key with
        # events has an entry at or before its earliest expiry; entries of keys gone or
        # already pruned are stale and skipped. On the rocksdb backend the store's
        # queue (`_queue`) instead, the heap unused.
        self._expiry: list[tuple[Any, int, Any]] = []
        self._seq = 0
        self._queue: StoredTimers | None = None

    def _expires(self, port: int, t: Any) -> Any:
        """When an event at t on `port` stops mattering: dropped once this is < the watermark."""
        return t + self.upper_ms if port == 0 else t - self.lower_ms

    # -- event processing --------------------------------------------------------------
    def process(self, events: list[Event], port: int, out: Output) -> None:
        if port not in (0, 1):
            raise ValueError(f"step {self.step_id!r}: a join has ports 0 (left) and 1 (right), "
                             f"got {port!r}")
        tf, key_fn, wm, rejects = self.time_fields[port], self.key_fns[port], self.watermark, self.rejects
        other = 1 - port
        lower, upper, keys = self.lower_ms, self.upper_ms, self._keys
        result_tf, emit = self.time_fields[0], out.events.append
        in_memory = self._stored is None
        for ev in events:
            t = event_time(ev, tf)
            if t is None:
                rejects.malformed(out, ev, time_error(ev, tf))
                continue
            if t < wm:
                rejects.late(out, ev, f"{_SIDES[port]} event at {tf}={t} is behind the watermark "
                                      f"{wm}")
                continue
            try:
                k = key_fn(ev)
            except Exception as exc:
                rejects.key_raised(out, ev, exc, f"{_SIDES[port]} key function")
                continue
            message = unhashable_key_error(k)
            if message is not None:
                rejects.malformed(out, ev, message)
                continue
            state = keys.get(k)
            if state is None:
                state = _Key()
                if in_memory:  # kept by reference from now on; a store's copy is set below
                    keys[k] = state
                    self._index.add(k)
            # The other side's events that join this one, in time order.
            times, partners = state.times[other], state.events[other]
            if times:
                if port == 0:  # rights with t + lower <= tr <= t + upper
                    lo = bisect_left(times, t + lower)
                    hi = bisect_right(times, t + upper, lo=lo)
                else:  # lefts with tl + lower <= t <= tl + upper, as written (floats)
                    lo = bisect_left(times, True, key=lambda tl: tl + upper >= t)
                    hi = bisect_left(times, True, lo=lo, key=lambda tl: tl + lower > t)
                for i in range(lo, hi):
                    p = partners[i]
                    left, right = (ev, p) if port == 0 else (p, ev)
                    tp = times[i]
                    emit({"key": k, result_tf: t if t >= tp else tp, "left": left, "right": right})
            self._insert(state, k, port, t, ev)
            if not in_memory:
                keys[k] = state  # changed: to be written back

    def _insert(self, state: _Key, k: Any, port: int, t: Any, ev: Event) -> None:
        times = state.times[port]
        i = bisect_right(times, t)  # after equal times: arrival order among ties
        times.insert(i, t)
        state.events[port].insert(i, ev)
        if i == 0:  # possibly the key's earliest expiry now
            self._push(self._expires(port, t), k)

    def _push(self, at: Any, k: Any) -> None:
        if self._queue is not None:
            self._queue.push(at, k)
            return
        heapq.heappush(self._expiry, (at, self._seq, k))
        self._seq += 1

    def _due(self, watermark: float) -> Iterable[Any]:
        """The keys whose earliest expiry is before `watermark`, taken off the queue (the
        store's takes those at it as well: pruning finds nothing there and queues them
        again)."""
        if self._queue is not None:
            return self._queue.take_due(watermark)
        heap = self._expiry
        due: dict[Any, None] = {}
        while heap and heap[0][0] < watermark:
            due[heapq.heappop(heap)[2]] = None
        return due

    # -- retention ---------------------------------------------------------------------
    def advance_to(self, watermark: float, out: Output) -> None:
        """Nothing fires: drop the events that can no longer join."""
        keys = self._keys
        upper, lower = self.upper_ms, self.lower_ms
        for k in self._due(watermark):
            state = keys.get(k)
            if state is None:
                continue  # moved away, or pruned to nothing before
            lt, rt = state.times
            n = bisect_left(lt, True, key=lambda tl: tl + upper >= watermark)
            if n:
                del lt[:n], state.events[0][:n]
            m = bisect_left(rt, True, key=lambda tr: tr - lower >= watermark)
            if m:
                del rt[:m], state.events[1][:m]
            if not state:
                del keys[k]
                if self._stored is None:
                    self._index.discard(k)
                continue
            if n or m:
                keys[k] = state
            self._push_earliest(k, state)

    def _push_earliest(self, k: Any, state: _Key) -> None:
        lt, rt = state.times
        ends = ([lt[0] + self.upper_ms] if lt else []) + ([rt[0] - self.lower_ms] if rt else [])
        self._push(min(ends), k)

    # -- state -------------------------------------------------------------------------
    def _config(self) -> list[Any]:
        return ["interval", self.lower_ms, self.upper_ms, *self.time_fields]

    def _row(self, k: Any, state: _Key) -> list[Any]:
        # Copies of the lists (the live ones change in place); the events as they are.
        return [encode_key(k), list(state.events[0]), list(state.events[1])]

    def _snapshot_windows(self) -> dict[str, Any]:
        keys = self._keys
        items = keys.items() if isinstance(keys, dict) else ((k, keys.get(k)) for k in keys)
        return {"keys": (self._row(k, s) for k, s in items)}

    def _cut_fields(self) -> dict[str, Any]:
        """A checkpoint's rows: none with a store (its files are the part)."""
        return self._snapshot_windows() if self._stored is None else {"keys": iter(())}

    def _stored_state(self) -> StoredState | None:
        return self._stored

    def _restore_windows(self, state: dict[str, Any]) -> None:
        files = state.get("stored") or []
        self._expiry, self._seq = [], 0
        if self._stored is not None:
            self._stored.restore(files)
        else:
            self._keys = {}
            self._index.clear()
            if files:  # a store's checkpoint, restored in memory (the pool changed backend)
                (entries,) = stored_entries(files, backend_folder(None), KEYS)
                self._load([[encode_key(k), blob] for k, blob in entries], True)
        self._load(state["keys"], False)

    def _from_sides(self, sides: list[Any]) -> _Key:
        """A key's state from its events per side (each in time order): the lists kept."""
        state = _Key()
        lefts, rights = sides
        ltf, rtf = self.time_fields
        state.events = (lefts, rights)
        state.times = ([e[ltf] for e in lefts], [e[rtf] for e in rights])
        return state

    def _load(self, rows: list[Any], owned: bool) -> None:
        """Add rows ``[key, lefts, rights]`` (each side in time order; their lists kept
        if `owned`, else copied) or ``[key, msgpack bytes of [lefts, rights]]`` (a
        store's value: kept as it is in a store)."""
        keys, stored = self._keys, self._stored is not None
        packed: list[tuple[Any, bytes]] = []  # the store's bytes as they are, in one batch
        for row in rows:
            blob = row[1] if len(row) == 2 else None
            if blob is not None:
                lefts, rights = unpack_state(blob)
            else:
                lefts, rights = row[1], row[2]
                if not (owned and lefts.__class__ is list and rights.__class__ is list):
                    lefts, rights = list(lefts), list(rights)
            if not lefts and not rights:
                continue
            k = decode_key(row[0])
            state = self._from_sides([lefts, rights])
            if stored and blob is not None:
                packed.append((k, blob))
            else:
                keys[k] = state
            self._push_earliest(k, state)
            if not stored:
                self._index.add(k)
        if packed and isinstance(keys, StoredKeys):
            keys.put_packed(packed)

    def state_keys(self) -> list[Any]:
        return list(self._keys)

    def _use_bins(self, bins: int, backend: StateBackend) -> None:
        self._index = KeyBins(bins)
        if not backend.stored:
            self._stored, self._queue, self._keys = None, None, {}
            return
        home = StoreHome(backend)
        self._keys = StoredKeys(bins, home, KEYS, encode=_sides, decode=self._from_sides)
        self._queue = queue = StoredTimers(home, EXPIRY)
        self._stored = StoredState(home, [self._keys], [queue])

    def state_bins(self) -> list[int]:
        keys = self._keys
        return keys.bins() if isinstance(keys, StoredKeys) else self._index.bins()

    def take_bins(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """Rows per key with state, the key encoded with `encode_key`: ``[key, lefts,
        rights]`` in memory (each side's buffered events in time order), ``[key, msgpack
        bytes of [lefts, rights]]`` from a store (its bytes as they are); and how many
        keys."""
        keys = self._keys
        if isinstance(keys, StoredKeys):  # the queue's entries of these keys are stale now
            rows = [[encode_key(k), blob] for k, blob in keys.take(bins)]
            return rows, len(rows)
        # The popped lists are no longer live here: no copy needed.
        rows = [[encode_key(k), s.events[0], s.events[1]]
                for k in self._index.take(bins) if (s := keys.pop(k, None)) is not None]
        return rows, len(rows)

    def _put_state(self, rows: list[Any], owned: bool) -> None:
        seen: set[Any] = set()
        for row in rows:  # check everything first: all or nothing
            if not (isinstance(row, list) and (len(row) == 3 or (
                    len(row) == 2 and isinstance(row[1], bytes)))):
                raise ValueError(f"not an interval join state row: {short_repr(row)}")
            k = decode_key(row[0])
            if k in self._keys or k in seen:
                raise ValueError(f"key {k!r} already has state here")
            seen.add(k)
        self._load(rows, owned)
