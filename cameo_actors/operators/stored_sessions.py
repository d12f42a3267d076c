"""Session windows on the rocksdb backend (`StoredSessions`): the sessions of
`windowers.SessionWindower`, kept in the step's store.

- Each key's state is one value of the store (`stored_keys.StoredKeys`): its open
  sessions (first, last, accumulator, creation order) and the last event time of its
  latest fired session while an event could still fall within gap of it.
- Two queues in the store (`process_timers.StoredTimers`) say when to look at a key
  again: at the earliest end of its open sessions (a session that grew since is looked
  at early and queued again at its real end), and when its fired session stops
  mattering (its last event plus twice the gap), so no heap of sessions is kept.
- A watermark fires every session that ended by it, in the order the in-memory
  windower fires them (last event time, then creation order).
- A checkpoint is the store's files, a restore opens them; bins move as the in-memory
  windower's rows (each key unpacked once), so either backend takes the other's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from cameo_actors.operators.aggregates import CompiledAggregates, MalformedEvent
from cameo_actors.operators.base import Output
from cameo_actors.operators.process_timers import StoredTimers
from cameo_actors.operators.state_store import StateBackend, unpack_state
from cameo_actors.operators.stored_keys import StoredKeys, StoredState, StoreHome, stored_entries
from cameo_actors.operators.windowers import (
    Admitted,
    Closed,
    Session,
    SessionEnds,
    decode_moved,
    fold,
)
from cameo_actors.operators.windowing import Rejects, decode_key, encode_key

#: The store's prefixes: each key's state, when to look at a key's open sessions, when
#: its fired session stops mattering.
KEYS, ENDS, STALE = b"k", b"e", b"f"


class _KeyState:
    """One key's open sessions (sorted by first) and its latest fired session's last
    event time (None: none that matters)."""

    __slots__ = ("sessions", "fired")

    def __init__(self, sessions: list[Session], fired: Any = None) -> None:
        self.sessions = sessions
        self.fired = fired

    def __bool__(self) -> bool:
        return bool(self.sessions) or self.fired is not None


def _encode(state: _KeyState) -> list[Any]:
    return [[[s.first, s.last, s.acc, s.seq] for s in state.sessions], state.fired]


def _decode(value: list[Any]) -> _KeyState:
    # A session's key is the store's key: not kept in it.
    return _KeyState([Session(None, f, last, acc, seq) for f, last, acc, seq in value[0]],
                     value[1])


class _FiredLast:
    """`Windower.fired_last` over the store: a key's fired last from its state."""

    __slots__ = ("keys",)

    def __init__(self, keys: StoredKeys) -> None:
        self.keys = keys

    def get(self, key: Any, default: Any = None) -> Any:
        state = self.keys.get(key)
        return default if state is None or state.fired is None else state.fired


def session_rows(pieces: list[Any], folder: str) -> tuple[list[Any], list[Any]]:
    """A `StoredSessions` checkpoint's files as the in-memory windower's snapshot rows:
    ``[key, [[first, last, acc, seq], ...]]`` per key with open sessions, ``[key,
    last]`` per key with a fired session that matters, oldest first (a pool that went
    back to memory restores from them)."""
    (entries,) = stored_entries(pieces, folder, KEYS)
    sessions, fired = [], []
    for k, blob in entries:
        rows, last = unpack_state(blob)
        if rows:
            sessions.append([encode_key(k), rows])
        if last is not None:
            fired.append([encode_key(k), last])
    fired.sort(key=lambda row: row[1])
    return sessions, fired


class StoredSessions(SessionEnds):
    """Session windows in a store (see the module doc); the `Windower` of a session
    window on the rocksdb backend.

    Args:
        gap: inactivity that closes a session, in ms.
        aggs: the compiled aggregates.
        rejects: where bad events go.
        bins: the pool's bin count.
        backend: the pool's state backend (rocksdb).
    """

    def __init__(self, gap: float, *, aggs: CompiledAggregates, rejects: Rejects, bins: int,
                 backend: StateBackend) -> None:
        self.gap = self.length = gap
        self.aggs = aggs
        self.rejects = rejects
        self.seq = 0  # creation order of sessions, as in memory
        home = StoreHome(backend)
        self.keys = StoredKeys(bins, home, KEYS, encode=_encode, decode=_decode)
        self.ends = StoredTimers(home, ENDS)
        self.stale = StoredTimers(home, STALE)
        self.stored = StoredState(home, [self.keys], [self.ends, self.stale])
        self.fired_last = _FiredLast(self.keys)

    # -- events and watermarks ---------------------------------------------------------------
    def add(self, admitted: Iterable[Admitted], watermark: float, out: Output) -> None:
        keys, rejects, gap, aggs, open_session = (self.keys, self.rejects, self.gap, self.aggs,
                                                  self._open)
        for ev, t, k, _start, _end in admitted:
            try:
                state = keys.get(k)
            except TypeError:
                rejects.bad_key(out, ev, k)
                continue
            if state is None:
                state = _KeyState([])
            try:
                fold(state.sessions, k, t, ev, gap, aggs, open_session)
            except MalformedEvent as exc:
                rejects.malformed(out, ev, str(exc))
            if state:  # (changed, to be written back)
                keys[k] = state

    def _open(self, key: Any, t: float, acc: Any) -> Session:
        s = Session(None, t, t, acc, self.seq)
        self.seq += 1
        self.ends.push(t + self.gap, key)
        return s

    def close(self, watermark: float) -> Iterator[Closed]:
        gap, keys = self.gap, self.keys
        due: list[tuple[Any, int, Any, Any, Any]] = []  # (last, seq, first, key, acc)
        for k in self.ends.take_due(watermark):
            state = keys.get(k)
            if state is None or not state.sessions:
                continue  # moved away, or fired before
            kept = [s for s in state.sessions if s.last + gap > watermark]
            if len(kept) < len(state.sessions):
                fired = [s for s in state.sessions if s.last + gap <= watermark]
                due += [(s.last, s.seq, s.first, k, s.acc) for s in fired]
                state.sessions = kept
                state.fired = max(s.last for s in fired)
                keys[k] = state
                self.stale.push(state.fired + 2 * gap, k)
            if kept:  # grew since it was queued: its real end
                self.ends.push(min(s.last for s in kept) + gap, k)
        due.sort(key=lambda d: (d[0], d[1]))
        for last, _, first, k, acc in due:
            yield first, last + gap, k, acc
        # A fired session matters while a new on-time event (t > watermark - gap) could
        # fall within gap of it.
        for k in self.stale.take_due(watermark):
            state = keys.get(k)
            if state is None or state.fired is None or state.fired + 2 * gap > watermark:
                continue  # moved away, or fired again since
            state.fired = None
            if state:
                keys[k] = state
            else:
                del keys[k]

    # -- state -------------------------------------------------------------------------------
    def _items(self) -> Iterator[tuple[Any, _KeyState]]:
        keys = self.keys
        return ((k, keys.get(k)) for k in keys)

    def snapshot(self) -> dict[str, Any]:
        """The in-memory windower's rows (`SessionWindower.snapshot`), read from the store."""
        copy_acc, items = self.aggs.copy, list(self._items())
        return {
            "sessions": ([encode_key(k), [[s.first, s.last, copy_acc(s.acc), s.seq]
                                          for s in st.sessions]]
                         for k, st in items if st.sessions),
            "fired_last": iter(sorted(([encode_key(k), st.fired] for k, st in items
                                       if st.fired is not None), key=lambda row: row[1])),
            "seq": self.seq,
        }

    def cut_fields(self) -> dict[str, Any]:
        """A checkpoint's fields besides the store's files: no rows."""
        return {"sessions": iter(()), "fired_last": iter(()), "seq": self.seq}

    def restore(self, state: dict[str, Any]) -> None:
        """A checkpoint: the store's files (``state["stored"]``) and the rows of one made in
        memory, or a `snapshot`."""
        self.stored.restore(state.get("stored") or [])
        self.seq = state["seq"]
        states: dict[Any, _KeyState] = {}
        copy_acc = self.aggs.copy
        for k_data, rows in state["sessions"]:
            states[decode_key(k_data)] = _KeyState(
                [Session(None, f, last, copy_acc(acc), seq) for f, last, acc, seq in rows])
        for k_data, last in state["fired_last"]:
            states.setdefault(decode_key(k_data), _KeyState([])).fired = last
        self._put(states)

    def _put(self, states: dict[Any, _KeyState]) -> None:
        keys, gap = self.keys, self.gap
        for k, st in states.items():
            keys[k] = st
            if st.sessions:
                self.ends.push(min(s.last for s in st.sessions) + gap, k)
            if st.fired is not None:
                self.stale.push(st.fired + 2 * gap, k)

    def use_bins(self, bins: int, backend: StateBackend) -> None:
        # (`WindowOperator.use_bins` makes a windower of the backend's kind instead)
        raise ValueError("a stored session window's bins and backend are set when it is made")

    def state_keys(self) -> list[Any]:
        return list(self.keys)

    def bins(self) -> list[int]:
        return self.keys.bins()

    def take(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """The in-memory windower's rows (`SessionWindower.take`): the open sessions in
        creation order, then the fired ones oldest first; and how many keys."""
        taken = self.keys.take(bins)  # the queues' entries of these keys are stale now
        opened: list[tuple[int, list[Any]]] = []
        fired: list[list[Any]] = []
        for k, blob in taken:
            rows, last = unpack_state(blob)
            kd = encode_key(k)
            opened += [(seq, ["session", kd, first, lst, acc]) for first, lst, acc, seq in rows]
            if last is not None:
                fired.append(["fired", kd, last])
        opened.sort(key=lambda o: o[0])
        fired.sort(key=lambda row: row[2])
        return [row for _, row in opened] + fired, len(taken)

    def put(self, rows: list[Any], owned: bool) -> None:
        opened, fired = decode_moved(rows)
        for k in (*(o[0] for o in opened), *fired):
            if k in self.keys:
                raise ValueError(f"key {k!r} already has session state here")
        copy_acc = self.aggs.copy
        states: dict[Any, _KeyState] = {}
        for k, first, last, acc in opened:  # new creation orders, in the rows' order
            st = states.setdefault(k, _KeyState([]))
            st.sessions.append(Session(None, first, last, acc if owned else copy_acc(acc),
                                       self.seq))
            self.seq += 1
        for k, last in fired.items():
            states.setdefault(k, _KeyState([])).fired = last
        for st in states.values():
            st.sessions.sort(key=lambda s: s.first)
        self._put(states)
