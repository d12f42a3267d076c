"""The window kinds of `windows.WindowOperator`: one `Windower` per kind.

A windower owns the windows of one operator and their accumulators: it adds
admitted events to the windows that hold them (`add`), gives up the windows
a watermark completes (`close`), and snapshots its state. What is common to
every kind stays in the operator: checking event times and keys, deciding
which events are late (from the windower's `slide` and `length`), and turning
closed windows into results.

- `AlignedWindower`: tumbling and sliding windows, on the `AlignedWindows`
  grid; state in a `KeyedWindows` (end -> key -> accumulator, keys by bin).
- `SessionWindower`: per key, sessions of events less than gap apart,
  merged when an event bridges two (on the rocksdb backend
  `stored_sessions.StoredSessions`, the same sessions in the step's store).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from cameo_actors.operators.aggregates import CompiledAggregates, MalformedEvent
from cameo_actors.operators.base import Event, Output
from cameo_actors.operators.bins import KeyBins, stable_hash
from cameo_actors.operators.keyed_windows import KeyedWindows
from cameo_actors.operators.state_store import StateBackend
from cameo_actors.operators.stored_windows import aligned_state
from cameo_actors.operators.windowing import AlignedWindows, Rejects, decode_key, encode_key

#: An event let into windows: (event, time, key, start and end of the last window it
#: can join).
Admitted = tuple[Event, Any, Any, Any, Any]
#: A window a watermark completed, for one key: (start, end, key, accumulator).
Closed = tuple[Any, Any, Any, Any]


class FiredLast(Protocol):
    """key -> last event time of its latest fired session (`Windower.fired_last`)."""

    def get(self, key: Any, default: Any = None) -> Any:
        ...


class Windower(Protocol):
    """One window kind's logic and state (bytewax's `WindowerLogic`).

    Attributes:
        slide: distance between window starts; 0 when a window starts at its
            first event (sessions).
        length: window length (size, or a session's gap). The last window an
            event at t can join starts at ``t - t % slide`` (``t`` for
            sessions) and ends `length` later; once that end has passed, the
            event is late.
        fired_last: key -> last event time of its latest closed session, while
            an event could still fall within `length` of it (such an event is
            late too); always empty for aligned windows.
    """

    slide: float
    length: float

    @property
    def fired_last(self) -> FiredLast:
        ...

    def first_end(self, t: float) -> float:
        """The earliest end a window holding t can have."""
        ...

    def first_open_end(self, t: float, watermark: float) -> float | None:
        """The earliest end of a not-yet-closed window holding t, or None."""
        ...

    def add(self, admitted: Iterable[Admitted], watermark: float, out: Output) -> None:
        """Add events to their windows; errors (bad aggregate input, unhashable
        key) go to the rejects."""
        ...

    def close(self, watermark: float) -> Iterator[Closed]:
        """Remove and yield the windows complete at `watermark`, in result order."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """The windows as msgpack-able data (entries of the operator's snapshot); a long
        list of rows per key may be an iterator (`WindowedOperator.snapshot`)."""
        ...

    def restore(self, state: dict[str, Any]) -> None:
        """Replace the windows with those of a `snapshot`."""
        ...

    def use_bins(self, bins: int, backend: StateBackend) -> None:
        """Keep the state in `bins` bins in `backend` (`WindowedOperator.use_bins`); only
        while empty."""
        ...

    def state_keys(self) -> list[Any]:
        """Every key with state here (once per window it is in, at most)."""
        ...

    def bins(self) -> list[int]:
        """The bins holding state, ascending."""
        ...

    def take(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """Remove the state of `bins` (`WindowedOperator.take_bins`)."""
        ...

    def put(self, rows: list[Any], owned: bool) -> None:
        """Add `take` rows; ValueError if a key has state here already (nothing changed)."""
        ...


class AlignedWindower(AlignedWindows):
    """Tumbling or sliding windows: an event counts in every window that holds
    it and has not closed.

    Args:
        size: window length in ms.
        slide: distance between window starts in ms (tumbling: size).
        tumbling: one window per event (checked as such, not as slide == size,
            so float rounding can never give an event a second window).
        aggs: the compiled aggregates.
        rejects: where bad events go.
    """

    def __init__(self, size: float, slide: float, *, tumbling: bool, aggs: CompiledAggregates,
                 rejects: Rejects) -> None:
        super().__init__(size, slide)
        self.length = size
        self.tumbling = tumbling
        self.fired_last: dict[Any, float] = {}  # stays empty: no aligned window reopens
        self.aggs = aggs
        self.rejects = rejects
        self.state: KeyedWindows[Any] = KeyedWindows()

    def add(self, admitted: Iterable[Admitted], watermark: float, out: Output) -> None:
        size, slide, wm, tumbling = self.size, self.slide, watermark, self.tumbling
        state = self.state
        windows, index, open_window = state.windows, state.index, state.open
        mask = state.mask
        count_only, new, add = self.aggs.count_only, self.aggs.new, self.aggs.add
        rejects = self.rejects
        cur_end: Any = None
        w: Any = None  # the window ending at cur_end: key -> accumulator
        bins: Any = None  # its keys by bin
        changed: Any = None  # its keys changed since the last cut, if tracked
        for ev, t, k, start, end in admitted:
            i = 0
            # Tumbling: the one window holding t. Sliding: latest window first, down to
            # the first that no longer holds t or already fired. Only the first window
            # can raise (bad value, unhashable key): nothing is half-updated, since
            # `new`/`add` check before they write.
            try:
                while tumbling or end > t and end > wm:
                    if end != cur_end:
                        # Batches are mostly in time order: look a tumbling window up
                        # only when it changes.
                        w = windows.get(end)
                        if w is None:
                            w = open_window(end)
                        bins = index[end]
                        changed = state.changed_in(end)
                        cur_end = end
                    acc = w.get(k)
                    if acc is None:
                        w[k] = 1 if count_only else new(ev)
                        b = stable_hash(k) & mask  # new to the window: to its bin (`KeyedWindows.indexed`, inlined)
                        keys = bins.get(b)
                        if keys is None:
                            bins[b] = [k]
                        else:
                            keys.append(k)
                    elif count_only:  # ints as accumulators: no allocation per event
                        w[k] = acc + 1
                    else:
                        add(acc, ev)
                    if changed is not None:
                        changed.add(k)
                    if tumbling:
                        break
                    i += 1
                    # Multiply rather than subtract repeatedly: no float drift.
                    end = start - i * slide + size
            except MalformedEvent as exc:
                rejects.malformed(out, ev, str(exc))
            except TypeError:
                rejects.bad_key(out, ev, k)

    def close(self, watermark: float) -> Iterator[Closed]:
        size = self.size
        for end, w in self.state.pop_due(watermark):
            start = end - size
            for k, acc in w.items():
                yield start, end, k, acc

    def snapshot(self) -> dict[str, Any]:
        copy_acc = self.aggs.copy
        return {"aligned": self.state.dump(lambda acc: [copy_acc(acc)])}

    def restore(self, state: dict[str, Any]) -> None:
        copy_acc = self.aggs.copy
        self.state.load(state["aligned"], lambda fields: copy_acc(fields[0]))

    def use_bins(self, bins: int, backend: StateBackend) -> None:
        self.state = aligned_state(bins, backend)

    def state_keys(self) -> list[Any]:
        return self.state.keys()

    def bins(self) -> list[int]:
        return self.state.bins()

    def take(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """Rows ``[end, bin, entries]`` per open window (`KeyedWindows.take`)."""
        return self.state.take(bins)

    def put(self, rows: list[Any], owned: bool) -> None:
        self.state.put(rows, self.aggs.copy, owned)


class Session:
    """One open session of one key: events from `first` to `last`, each less than gap from the next."""

    __slots__ = ("key", "first", "last", "acc", "seq", "alive")

    def __init__(self, key: Any, first: float, last: float, acc: Any, seq: int) -> None:
        self.key = key
        self.first = first
        self.last = last
        self.acc = acc
        self.seq = seq  # creation order: a stable tie-break for sessions ending together
        self.alive = True


def fold(lst: list[Session], k: Any, t: float, ev: Event, gap: float, aggs: CompiledAggregates,
         open_session: Callable[[Any, float, Any], Session]) -> None:
    """Add an event at t of key k to the key's open sessions `lst` (sorted by first,
    disjoint, at least gap apart): it joins at most two neighbours, and then bridges
    them (the later one merged into the earlier, marked dead); else it opens a session
    (`open_session`). Raises MalformedEvent when an aggregate rejects the event."""
    a = b = None
    pos = len(lst)
    for i, s in enumerate(lst):
        if s.first - t >= gap:
            pos = i
            break
        if t - s.last < gap:
            if a is None:
                a = s
            else:
                b = s
                break
    count_only = aggs.count_only
    if a is None:
        acc = 1 if count_only else aggs.new(ev)
        lst.insert(pos, open_session(k, t, acc))
    elif b is None:
        if count_only:
            a.acc += 1
        else:
            aggs.add(a.acc, ev)
        if t < a.first:
            a.first = t
        elif t > a.last:
            a.last = t
    else:
        piece = 1 if count_only else aggs.new(ev)  # checks the event before any merge
        a.acc = aggs.merge(aggs.merge(a.acc, b.acc), piece)
        a.last = b.last
        b.alive = False
        lst.remove(b)


def decode_moved(rows: list[Any]) -> tuple[list[tuple[Any, Any, Any, Any]], dict[Any, Any]]:
    """`SessionWindower.take`'s rows, decoded and checked (all before any is put): the
    open sessions as (key, first, last, acc), the fired ones as key -> last.

    Raises:
        ValueError: a row of another kind, or a key with two fired sessions.
    """
    opened: list[tuple[Any, Any, Any, Any]] = []
    fired: dict[Any, Any] = {}
    for row in rows:
        if row[0] == "session":
            _, k_data, first, last, acc = row
            opened.append((decode_key(k_data), first, last, acc))
        elif row[0] == "fired":
            _, k_data, last = row
            k = decode_key(k_data)
            if k in fired:
                raise ValueError(f"key {k!r} has two fired sessions in the rows")
            fired[k] = last
        else:
            raise ValueError(f"not a session state row: {row!r}")
    return opened, fired


class SessionEnds:
    """When sessions end, whatever keeps them (`SessionWindower`, `StoredSessions`): a
    session starts at its first event and ends `gap` after its last."""

    slide: float = 0  # a session starts at its first event, on no grid
    gap: float

    def first_end(self, t: float) -> float:
        return t + self.gap

    def first_open_end(self, t: float, watermark: float) -> float | None:
        end = t + self.gap
        return end if end > watermark else None


class SessionWindower(SessionEnds):
    """Session windows: per key, events less than `gap` apart form one session
    ``[first, last + gap)``; an event within gap of two sessions merges them.

    State is per key (its open sessions, its latest fired session's last event
    time); `index` has the bins of the keys that have either, kept as keys come
    and go (a hash per key that gains or loses all its state, none per event).

    Args:
        gap: inactivity that closes a session, in ms.
        aggs: the compiled aggregates.
        rejects: where bad events go.
    """

    def __init__(self, gap: float, *, aggs: CompiledAggregates, rejects: Rejects) -> None:
        self.gap = self.length = gap
        self.aggs = aggs
        self.rejects = rejects
        # key -> open sessions sorted by first; a lazy heap of (end lower bound, seq,
        # session); the last event time of each key's latest fired session, while a
        # new event could still fall within gap of it (oldest first).
        self.sessions: dict[Any, list[Session]] = {}
        self.heap: list[tuple[float, int, Session]] = []
        self.fired_last: dict[Any, float] = {}
        self.seq = 0
        # The keys of `sessions` and `fired_last`, by bin.
        self.index = KeyBins()

    def add(self, admitted: Iterable[Admitted], watermark: float, out: Output) -> None:
        gap, sessions, rejects, fired_last = self.gap, self.sessions, self.rejects, self.fired_last
        aggs, count_only, new, open_session = self.aggs, self.aggs.count_only, self.aggs.new, self._open
        for ev, t, k, _start, _end in admitted:
            try:
                lst = sessions.get(k)
            except TypeError:
                rejects.bad_key(out, ev, k)
                continue
            try:
                if lst is None:
                    acc = 1 if count_only else new(ev)
                    sessions[k] = [open_session(k, t, acc)]
                    if k not in fired_last:  # a key with no state until now
                        self.index.add(k)
                    continue
                fold(lst, k, t, ev, gap, aggs, open_session)
            except MalformedEvent as exc:
                rejects.malformed(out, ev, str(exc))

    def _open(self, key: Any, t: float, acc: Any) -> Session:
        s = Session(key, t, t, acc, self.seq)
        self.seq += 1
        heapq.heappush(self.heap, (t + self.gap, s.seq, s))
        return s

    def close(self, watermark: float) -> Iterator[Closed]:
        heap, gap = self.heap, self.gap
        due: list[Session] = []
        while heap and heap[0][0] <= watermark:
            _, seq, s = heapq.heappop(heap)
            if not s.alive:
                continue  # merged into a neighbour
            end = s.last + gap
            if end > watermark:
                heapq.heappush(heap, (end, seq, s))  # grew since pushed: wait for its real end
            else:
                due.append(s)
        if due:
            due.sort(key=lambda s: (s.last, s.seq))
            sessions, fired_last = self.sessions, self.fired_last
            for s in due:
                s.alive = False
                lst = sessions[s.key]
                lst.remove(s)
                if not lst:
                    del sessions[s.key]
                # Re-insert so the dict stays ordered by last event time (pruning below).
                fired_last.pop(s.key, None)
                fired_last[s.key] = s.last
                yield s.first, s.last + gap, s.key, s.acc
        # A fired session matters while a new on-time event (t > watermark - gap)
        # could fall within gap of it.
        fired_last = self.fired_last
        stale = []
        for k, last in fired_last.items():
            if last + 2 * gap > watermark:
                break
            stale.append(k)
        if stale:
            sessions, discard = self.sessions, self.index.discard
            for k in stale:
                del fired_last[k]
                if k not in sessions:  # its last state
                    discard(k)

    def snapshot(self) -> dict[str, Any]:
        """Its lists of rows per key as iterators (`WindowedOperator.snapshot`)."""
        copy_acc = self.aggs.copy
        return {
            "sessions": (
                [encode_key(k), [[s.first, s.last, copy_acc(s.acc), s.seq] for s in lst]]
                for k, lst in self.sessions.items()
            ),
            "fired_last": ([encode_key(k), last] for k, last in self.fired_last.items()),
            "seq": self.seq,
        }

    def restore(self, state: dict[str, Any]) -> None:
        copy_acc = self.aggs.copy
        self.sessions, self.heap = {}, []
        for k_data, rows in state["sessions"]:
            k = decode_key(k_data)
            lst = self.sessions[k] = []
            for first, last, acc, seq in rows:
                s = Session(k, first, last, copy_acc(acc), seq)
                lst.append(s)
                self.heap.append((last + self.gap, seq, s))
        heapq.heapify(self.heap)
        self.fired_last = {decode_key(k): last for k, last in state["fired_last"]}
        self.seq = state["seq"]
        index = self.index
        index.clear()
        for k in (*self.sessions, *(k for k in self.fired_last if k not in self.sessions)):
            index.add(k)

    def use_bins(self, bins: int, backend: StateBackend) -> None:
        self.index = KeyBins(bins)  # (on the rocksdb backend: `StoredSessions` instead)

    def state_keys(self) -> list[Any]:
        return [*self.sessions, *(k for k in self.fired_last if k not in self.sessions)]

    def bins(self) -> list[int]:
        return self.index.bins()

    def take(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """Rows ``["session", key, first, last, acc]`` (the open sessions, in
        creation order), then ``["fired", key, last]`` (the last event time of
        the key's latest fired session, oldest first); and how many keys."""
        keys = self.index.take(bins)
        sessions, fired_last = self.sessions, self.fired_last
        moved: list[Session] = []
        fired: list[list[Any]] = []
        for k in keys:
            lst = sessions.pop(k, None)
            if lst is not None:
                for s in lst:
                    s.alive = False  # the heap drops it lazily
                moved += lst
            last = fired_last.pop(k, None)
            if last is not None:
                fired.append(["fired", encode_key(k), last])
        moved.sort(key=lambda s: s.seq)
        fired.sort(key=lambda row: row[2])
        # The sessions are dead here: their accumulators need no copy.
        rows = [["session", encode_key(s.key), s.first, s.last, s.acc] for s in moved]
        return rows + fired, len(keys)

    def put(self, rows: list[Any], owned: bool) -> None:
        sessions, fired_last = self.sessions, self.fired_last
        opened, fired = decode_moved(rows)
        for k in (*(o[0] for o in opened), *fired):
            if k in sessions or k in fired_last:
                raise ValueError(f"key {k!r} already has session state here")

        copy_acc, gap, heap = self.aggs.copy, self.gap, self.heap
        added: dict[Any, list[Session]] = {}
        for k, first, last, acc in opened:  # new seqs, in the rows' order
            s = Session(k, first, last, acc if owned else copy_acc(acc), self.seq)
            self.seq += 1
            heapq.heappush(heap, (last + gap, s.seq, s))
            added.setdefault(k, []).append(s)
        index = self.index
        for k, lst in added.items():
            lst.sort(key=lambda s: s.first)
            sessions[k] = lst
            index.add(k)
        for k in fired:
            if k not in added:
                index.add(k)

        if fired:
            # `close` prunes fired_last oldest first: merge the rows in by last event
            # time, moving only the entries newer than the oldest row.
            incoming = sorted(fired.items(), key=lambda kv: kv[1])
            oldest = incoming[0][1]
            newer: list[tuple[Any, float]] = []
            while fired_last:
                k, last = fired_last.popitem()  # the newest
                if last <= oldest:
                    fired_last[k] = last  # back at the end, where it was
                    break
                newer.append((k, last))
            newer.reverse()
            fired_last.update(heapq.merge(newer, incoming, key=lambda kv: kv[1]))
