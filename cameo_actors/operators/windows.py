"""Event-time windows with aggregates: tumbling, sliding and session.

Windows are half-open ``[start, end)`` in event-time milliseconds, aligned to
0 (a tumbling window of 1000 ms holds ``[0, 1000)``, ``[1000, 2000)``, ...;
sliding windows start at multiples of the slide). A window fires when the
operator's input watermark reaches its end; its results come out in
window-end order, before the watermark (see `base.Operator.on_watermark`),
and its state is dropped.

An event whose windows have all fired is *late*: it goes to the error output
as kind "late" and is counted in `late_count`. An event without a usable time,
key or aggregate input goes there as kind "malformed" (`malformed_count`).

One result per window and key::

    {"key": k, "window_start": s, "window_end": e, <time_field>: e - 1, **aggregates}

(no "key" when the window is unkeyed). ``<time_field> = e - 1`` places the
result inside its own window, so a window downstream of a window groups it
in the same place.

>>> from types import SimpleNamespace as A
>>> op = WindowOperator("w", kind="tumbling", size_ms=1000, time_field="t",
...                     aggregates=[A(name="n", fn="count", field=None)])
>>> _ = op.on_batch([{"t": 5}, {"t": 999}, {"t": 1000}])
>>> op.on_watermark(1000).events
[{'window_start': 0, 'window_end': 1000, 't': 999, 'n': 2}]
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cameo_actors.operators.aggregates import (
    AggSpecLike,
    MalformedEvent,
    compile_aggregates,
    is_number,
    is_time,
)
from cameo_actors.operators.base import Event, Operator, Output

KeyFn = Callable[[Event], Any]

_INF = math.inf
WINDOW_KINDS = ("tumbling", "sliding", "session")
#: Fields every window result carries; aggregates and time fields may not reuse them.
RESULT_FIELDS = ("key", "window_start", "window_end")


# -- helpers shared with the join ----------------------------------------------------
def encode_key(key: Any) -> Any:
    """A key as msgpack-able data: tuples become lists (recursively)."""
    if isinstance(key, tuple):
        return [encode_key(k) for k in key]
    return key


def decode_key(data: Any) -> Any:
    """Undo `encode_key`: lists become tuples again (a key is never a list,
    lists are not hashable)."""
    if isinstance(data, list):
        return tuple(decode_key(d) for d in data)
    return data


def positive_number(step_id: str, name: str, value: Any) -> float:
    """Check a window parameter: a finite number > 0."""
    if not is_number(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"step {step_id!r}: {name} must be a number of ms > 0, got {value!r}")
    return value  # type: ignore[no-any-return]


def time_error(event: Any, time_field: str) -> str:
    """Why `event` has no usable event time (the slow path of the checks)."""
    if not isinstance(event, dict):
        return f"expected an event object with time field {time_field!r}, got {type(event).__name__}"
    if time_field not in event:
        return f"time field {time_field!r} is missing (expected event time in ms, int or float)"
    value = event[time_field]
    return (f"time field {time_field!r} must be a finite int or float (ms), "
            f"got {type(value).__name__} {value!r}")


def event_time(event: Any, time_field: str) -> Any:
    """The event's time, or None if it has no valid one (not on the hot path)."""
    try:
        t = event[time_field]
    except Exception:
        return None
    return t if is_time(t) else None


def unhashable_key_error(key: Any) -> str | None:
    """A message if `key` cannot key a dict, else None."""
    try:
        hash(key)
    except TypeError:
        return (f"the key function returned an unhashable {type(key).__name__} {key!r}; "
                f"return a str, number, None or a tuple of those")
    return None


class AlignedWindows:
    """Where tumbling and sliding windows lie: starts at multiples of `slide`,
    each `size` long (tumbling: slide == size).

    Attributes:
        size: window length in ms.
        slide: distance between window starts in ms (<= size).
    """

    def __init__(self, size: float, slide: float) -> None:
        self.size = size
        self.slide = slide

    def last_end(self, t: float) -> float:
        """End of the latest window containing t (the last one to fire)."""
        return t - t % self.slide + self.size

    def first_end(self, t: float) -> float:
        """End of the earliest window containing t (the first one to fire)."""
        u = t - self.size
        return u - u % self.slide + self.slide + self.size

    def open_ends(self, t: float, watermark: float) -> list[float]:
        """Ends of the windows containing t that have not fired, latest first."""
        size, slide = self.size, self.slide
        last_start = t - t % slide
        ends: list[float] = []
        i = 0
        while True:
            # Multiply rather than subtract repeatedly: no float drift.
            end = last_start - i * slide + size
            if end <= t or end <= watermark:
                return ends
            ends.append(end)
            i += 1

    def first_open_end(self, t: float, watermark: float) -> float | None:
        """End of the earliest window containing t that has not fired, or None."""
        first = self.first_end(t)
        if first > watermark:
            return first
        if self.last_end(t) <= watermark:
            return None
        u = watermark - self.size  # finite here: some window end lies above it
        return u - u % self.slide + self.slide + self.size


class _Session:
    """One open session of one key: events from `first` to `last`, each less than gap from the next."""

    __slots__ = ("key", "first", "last", "acc", "seq", "alive")

    def __init__(self, key: Any, first: float, last: float, acc: Any, seq: int) -> None:
        self.key = key
        self.first = first
        self.last = last
        self.acc = acc
        self.seq = seq  # creation order: a stable tie-break for sessions ending together
        self.alive = True


class WindowOperator(Operator):
    """Aggregates events per key over tumbling, sliding or session windows.

    Args:
        step_id: the spec step (named in every error record).
        kind: "tumbling" (size_ms), "sliding" (size_ms, slide_ms <= size_ms;
            an event counts in every window that contains it) or "session"
            (gap_ms: per key, events less than gap_ms apart form one session
            ``[first, last + gap_ms)``, merged when an event bridges two).
            Parameters the kind does not use are ignored.
        size_ms: window length (tumbling, sliding).
        slide_ms: distance between window starts (sliding).
        gap_ms: inactivity that closes a session (session).
        aggregates: specs with ``name``, ``fn`` (count, sum, min, max, avg)
            and ``field`` (None for count, which counts events).
        time_field: the event field holding event time in ms (int or float).
        key_fn: event -> key (hashable; tuples allowed), or None for one
            global window. A key function that raises makes the event malformed.

    Raises:
        ValueError: a bad kind, size, slide, gap or aggregate list, or an
            aggregate named like a result field.

    Example:
        >>> from types import SimpleNamespace as A
        >>> op = WindowOperator("s", kind="session", gap_ms=100, time_field="t",
        ...                     aggregates=[A(name="total", fn="sum", field="v")],
        ...                     key_fn=lambda e: e["user"])
        >>> _ = op.on_batch([{"t": 0, "user": "a", "v": 1}, {"t": 50, "user": "a", "v": 2}])
        >>> op.on_watermark(150).events
        [{'key': 'a', 'window_start': 0, 'window_end': 150, 't': 149, 'total': 3}]
    """

    stateful = True

    def __init__(
        self,
        step_id: str,
        *,
        kind: str,
        size_ms: float | None = None,
        slide_ms: float | None = None,
        gap_ms: float | None = None,
        aggregates: Sequence[AggSpecLike],
        time_field: str,
        key_fn: KeyFn | None = None,
    ) -> None:
        super().__init__(step_id)
        if kind not in WINDOW_KINDS:
            raise ValueError(f"step {step_id!r}: window kind must be one of {list(WINDOW_KINDS)}, "
                             f"got {kind!r}")
        if not isinstance(time_field, str) or not time_field:
            raise ValueError(f"step {step_id!r}: time_field must name the event-time field, "
                             f"got {time_field!r}")
        if time_field in RESULT_FIELDS:
            raise ValueError(f"step {step_id!r}: time_field {time_field!r} clashes with a result "
                             f"field {list(RESULT_FIELDS)}; rename the event-time field")
        if key_fn is not None and not callable(key_fn):
            raise ValueError(f"step {step_id!r}: key_fn must be callable or None, got {key_fn!r}")
        try:
            self._aggs = compile_aggregates(aggregates)
        except ValueError as exc:
            raise ValueError(f"step {step_id!r}: {exc}") from exc
        for name in self._aggs.names:
            if name in RESULT_FIELDS or name == time_field:
                raise ValueError(f"step {step_id!r}: aggregate name {name!r} clashes with a "
                                 f"result field; rename the aggregate")

        self.kind = kind
        self.time_field = time_field
        self.key_fn = key_fn
        self.size_ms: float | None = None
        self.slide_ms: float | None = None
        self.gap_ms: float | None = None
        if kind == "session":
            self.gap_ms = positive_number(step_id, "gap_ms", gap_ms)
        else:
            self.size_ms = positive_number(step_id, "size_ms", size_ms)
            if kind == "sliding":
                self.slide_ms = positive_number(step_id, "slide_ms", slide_ms)
                if self.slide_ms > self.size_ms:
                    raise ValueError(f"step {step_id!r}: slide_ms must be <= size_ms "
                                     f"({size_ms}), got {slide_ms}; use a smaller slide or a "
                                     f"tumbling window")
            else:
                self.slide_ms = self.size_ms
            self._aligned = AlignedWindows(self.size_ms, self.slide_ms)
        # Non-optional copies for the hot paths (0 where the kind has no such parameter).
        self._size: float = self.size_ms or 0
        self._slide: float = self.slide_ms or 0
        self._gap: float = self.gap_ms or 0

        #: Events routed to the error output, by kind.
        self.late_count = 0
        self.malformed_count = 0
        # Tumbling/sliding: window end -> key -> accumulator, plus a heap of the ends.
        self._windows: dict[float, dict[Any, Any]] = {}
        self._ends: list[float] = []
        # Session: key -> open sessions sorted by first; a lazy heap of
        # (end lower bound, seq, session); the last event time of each key's
        # latest fired session, while a new event could still fall within gap of it.
        self._sessions: dict[Any, list[_Session]] = {}
        self._session_heap: list[tuple[float, int, _Session]] = []
        self._fired_last: dict[Any, float] = {}
        self._seq = 0

        if kind == "tumbling":
            self._process = self._process_tumbling_count if self._aggs.count_only else self._process_tumbling
        elif kind == "sliding":
            self._process = self._process_sliding
        else:
            self._process = self._process_session

    # -- scheduling hints --------------------------------------------------------------
    def window_id(self, event_time: float) -> float:
        """Local priority of an event: the end of the earliest window containing it
        (for a session, the earliest end its session can have: t + gap)."""
        if self.kind == "session":
            return event_time + self._gap
        return self._aligned.first_end(event_time)

    def earliest_window_end(self, events: Iterable[Event]) -> float | None:
        """The end of the earliest not-yet-fired window any of `events` belongs to.

        The runtime maps it to the physical time the window can fire (the
        frontier time of these events). Events that are late or have no valid
        time are skipped; None if no event qualifies. For sessions this is
        t + gap, the earliest the session can close (a lower bound).
        """
        wm = self.watermark
        tf = self.time_field
        best = _INF
        if self.kind == "session":
            gap = self._gap
            for ev in events:
                t = event_time(ev, tf)
                if t is not None and wm < t + gap < best:
                    best = t + gap
        else:
            first_open_end = self._aligned.first_open_end
            for ev in events:
                t = event_time(ev, tf)
                if t is not None:
                    end = first_open_end(t, wm)
                    if end is not None and end < best:
                        best = end
        return None if best == _INF else best

    # -- event processing --------------------------------------------------------------
    def process(self, events: list[Event], port: int, out: Output) -> None:
        self._process(events, out)

    def _process_tumbling_count(self, events: list[Event], out: Output) -> None:
        # The hot path (count-only tumbling): ints as accumulators, no allocation per event.
        tf, size, wm, key_fn = self.time_field, self._size, self.watermark, self.key_fn
        windows = self._windows
        inf, ninf = _INF, -_INF
        cur_end: Any = None
        w: Any = None  # the current window: key -> accumulator
        for ev in events:
            try:
                t = ev[tf]
            except Exception:
                self._malformed(out, ev, time_error(ev, tf))
                continue
            cls = t.__class__
            if cls is not int and (cls is not float or not ninf < t < inf) and not is_time(t):
                self._malformed(out, ev, time_error(ev, tf))
                continue
            end = t - t % size + size
            if end <= wm:
                self._late_window(out, ev, t, end)
                continue
            if key_fn is None:
                k = None
            else:
                try:
                    k = key_fn(ev)
                except Exception as exc:
                    self._key_raised(out, ev, exc)
                    continue
            if end != cur_end:
                # Batches are mostly in time order: look the window up only when it changes.
                w = windows.get(end)
                if w is None:
                    w = windows[end] = {}
                    heapq.heappush(self._ends, end)
                cur_end = end
            try:
                w[k] = w.get(k, 0) + 1
            except TypeError:
                self._bad_key(out, ev, k)

    def _process_tumbling(self, events: list[Event], out: Output) -> None:
        tf, size, wm, key_fn = self.time_field, self._size, self.watermark, self.key_fn
        windows = self._windows
        new, add = self._aggs.new, self._aggs.add
        inf, ninf = _INF, -_INF
        cur_end: Any = None
        w: Any = None  # the current window: key -> accumulator
        for ev in events:
            try:
                t = ev[tf]
            except Exception:
                self._malformed(out, ev, time_error(ev, tf))
                continue
            cls = t.__class__
            if cls is not int and (cls is not float or not ninf < t < inf) and not is_time(t):
                self._malformed(out, ev, time_error(ev, tf))
                continue
            end = t - t % size + size
            if end <= wm:
                self._late_window(out, ev, t, end)
                continue
            if key_fn is None:
                k = None
            else:
                try:
                    k = key_fn(ev)
                except Exception as exc:
                    self._key_raised(out, ev, exc)
                    continue
            if end != cur_end:
                w = windows.get(end)
                if w is None:
                    w = windows[end] = {}
                    heapq.heappush(self._ends, end)
                cur_end = end
            try:
                acc = w.get(k)
                if acc is None:
                    w[k] = new(ev)
                else:
                    add(acc, ev)
            except MalformedEvent as exc:
                self._malformed(out, ev, str(exc))
            except TypeError:
                self._bad_key(out, ev, k)

    def _process_sliding(self, events: list[Event], out: Output) -> None:
        tf, wm, key_fn = self.time_field, self.watermark, self.key_fn
        size, slide = self._size, self._slide
        windows = self._windows
        count_only, new, add = self._aggs.count_only, self._aggs.new, self._aggs.add
        inf, ninf = _INF, -_INF
        for ev in events:
            try:
                t = ev[tf]
            except Exception:
                self._malformed(out, ev, time_error(ev, tf))
                continue
            cls = t.__class__
            if cls is not int and (cls is not float or not ninf < t < inf) and not is_time(t):
                self._malformed(out, ev, time_error(ev, tf))
                continue
            last_start = t - t % slide
            if last_start + size <= wm:
                self._late_window(out, ev, t, last_start + size)
                continue
            if key_fn is None:
                k = None
            else:
                try:
                    k = key_fn(ev)
                except Exception as exc:
                    self._key_raised(out, ev, exc)
                    continue
            # Latest window first; stop at the first that no longer holds t or already fired.
            # Only the first window can raise (bad value, unhashable key): nothing is
            # half-updated, since `new`/`add` check before they write.
            i = 0
            try:
                while True:
                    end = last_start - i * slide + size
                    if end <= t or end <= wm:
                        break
                    w = windows.get(end)
                    if w is None:
                        w = windows[end] = {}
                        heapq.heappush(self._ends, end)
                    if count_only:
                        w[k] = w.get(k, 0) + 1
                    else:
                        acc = w.get(k)
                        if acc is None:
                            w[k] = new(ev)
                        else:
                            add(acc, ev)
                    i += 1
            except MalformedEvent as exc:
                self._malformed(out, ev, str(exc))
            except TypeError:
                self._bad_key(out, ev, k)

    def _process_session(self, events: list[Event], out: Output) -> None:
        tf, wm, key_fn, gap = self.time_field, self.watermark, self.key_fn, self._gap
        sessions, fired_last = self._sessions, self._fired_last
        count_only, new, add, merge = (self._aggs.count_only, self._aggs.new, self._aggs.add,
                                       self._aggs.merge)
        inf, ninf = _INF, -_INF
        for ev in events:
            try:
                t = ev[tf]
            except Exception:
                self._malformed(out, ev, time_error(ev, tf))
                continue
            cls = t.__class__
            if cls is not int and (cls is not float or not ninf < t < inf) and not is_time(t):
                self._malformed(out, ev, time_error(ev, tf))
                continue
            if t + gap <= wm:
                self._late(out, ev, f"event at {tf}={t} is behind the watermark {wm}: its session "
                                    f"would end at {t + gap} and that has passed")
                continue
            if key_fn is None:
                k = None
            else:
                try:
                    k = key_fn(ev)
                except Exception as exc:
                    self._key_raised(out, ev, exc)
                    continue
            try:
                lst = sessions.get(k)
            except TypeError:
                self._bad_key(out, ev, k)
                continue
            if fired_last:
                # Within gap of a session already emitted: it belongs to that session,
                # which cannot be reopened.
                fl = fired_last.get(k)
                if fl is not None and t - fl < gap:
                    self._late(out, ev, f"event at {tf}={t} falls within gap_ms={gap} of a session "
                                        f"that already fired (its last event at {fl})")
                    continue
            try:
                if lst is None:
                    acc = 1 if count_only else new(ev)
                    sessions[k] = [self._open_session(k, t, acc)]
                    continue
                # Sessions of a key are disjoint and >= gap apart: t joins at most two
                # neighbours, and then bridges them.
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
                if a is None:
                    acc = 1 if count_only else new(ev)
                    lst.insert(pos, self._open_session(k, t, acc))
                elif b is None:
                    if count_only:
                        a.acc += 1
                    else:
                        add(a.acc, ev)
                    if t < a.first:
                        a.first = t
                    elif t > a.last:
                        a.last = t
                else:
                    piece = 1 if count_only else new(ev)  # checks the event before any merge
                    a.acc = merge(merge(a.acc, b.acc), piece)
                    a.last = b.last
                    b.alive = False
                    lst.remove(b)
            except MalformedEvent as exc:
                self._malformed(out, ev, str(exc))

    def _open_session(self, key: Any, t: float, acc: Any) -> _Session:
        s = _Session(key, t, t, acc, self._seq)
        self._seq += 1
        heapq.heappush(self._session_heap, (t + self._gap, s.seq, s))
        return s

    # -- firing ------------------------------------------------------------------------
    def advance_to(self, watermark: float, out: Output) -> None:
        if self.kind == "session":
            self._fire_sessions(watermark, out)
        else:
            self._fire_windows(watermark, out)

    def _fire_windows(self, watermark: float, out: Output) -> None:
        ends, windows, size, tf = self._ends, self._windows, self._size, self.time_field
        fill, keyed, emit = self._aggs.fill, self.key_fn is not None, out.events.append
        while ends and ends[0] <= watermark:
            end = heapq.heappop(ends)
            start = end - size
            for k, acc in windows.pop(end).items():
                r = ({"key": k, "window_start": start, "window_end": end, tf: end - 1} if keyed
                     else {"window_start": start, "window_end": end, tf: end - 1})
                fill(r, acc)
                emit(r)

    def _fire_sessions(self, watermark: float, out: Output) -> None:
        heap, gap = self._session_heap, self._gap
        due: list[_Session] = []
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
            sessions, fired_last, tf = self._sessions, self._fired_last, self.time_field
            fill, keyed, emit = self._aggs.fill, self.key_fn is not None, out.events.append
            for s in due:
                s.alive = False
                end = s.last + gap
                r = ({"key": s.key, "window_start": s.first, "window_end": end, tf: end - 1}
                     if keyed else {"window_start": s.first, "window_end": end, tf: end - 1})
                fill(r, s.acc)
                emit(r)
                lst = sessions[s.key]
                lst.remove(s)
                if not lst:
                    del sessions[s.key]
                # Re-insert so the dict stays ordered by last event time (pruning below).
                fired_last.pop(s.key, None)
                fired_last[s.key] = s.last
        # A fired session matters while a new on-time event (t > watermark - gap)
        # could fall within gap of it.
        fired_last = self._fired_last
        stale = []
        for k, last in fired_last.items():
            if last + 2 * gap > watermark:
                break
            stale.append(k)
        for k in stale:
            del fired_last[k]

    # -- errors ------------------------------------------------------------------------
    def _malformed(self, out: Output, ev: Any, message: str) -> None:
        self.malformed_count += 1
        self.error(out, "malformed", message, ev)

    def _key_raised(self, out: Output, ev: Any, exc: Exception) -> None:
        self._malformed(out, ev, f"the key function raised {type(exc).__name__}: {exc}")

    def _bad_key(self, out: Output, ev: Any, key: Any) -> None:
        message = unhashable_key_error(key)
        if message is None:
            raise  # not the key's fault: a bug, do not hide it
        self._malformed(out, ev, message)

    def _late(self, out: Output, ev: Any, message: str) -> None:
        self.late_count += 1
        self.error(out, "late", message, ev)

    def _late_window(self, out: Output, ev: Any, t: float, last_end: float) -> None:
        which = "its window" if self.kind == "tumbling" else "every window containing it"
        self._late(out, ev, f"event at {self.time_field}={t} is behind the watermark "
                            f"{self.watermark}: {which} already fired (the last one ended at {last_end})")

    # -- state -------------------------------------------------------------------------
    def _config(self) -> list[Any]:
        return [self.kind, self.size_ms, self.slide_ms, self.gap_ms, self.time_field,
                list(self._aggs.names), self.key_fn is not None]

    def snapshot(self) -> dict[str, Any]:
        """The operator's state as msgpack-able data (lists, dicts with str keys,
        numbers, strings, None). Tuple keys are stored as lists."""
        copy_acc = _copy_acc(self._aggs.count_only)
        state = super().snapshot()
        state.update(
            config=self._config(),
            late_count=self.late_count,
            malformed_count=self.malformed_count,
        )
        if self.kind == "session":
            state["sessions"] = [
                [encode_key(k), [[s.first, s.last, copy_acc(s.acc), s.seq] for s in lst]]
                for k, lst in self._sessions.items()
            ]
            state["fired_last"] = [[encode_key(k), last] for k, last in self._fired_last.items()]
            state["seq"] = self._seq
        else:
            state["windows"] = [
                [end, [[encode_key(k), copy_acc(acc)] for k, acc in self._windows[end].items()]]
                for end in sorted(self._windows)
            ]
        return state

    def restore(self, state: dict[str, Any]) -> None:
        """Load a `snapshot` (possibly after a msgpack round trip) into this operator.

        Raises:
            ValueError: the snapshot is of a differently configured window.
        """
        if list(state["config"]) != self._config():
            raise ValueError(f"step {self.step_id!r}: snapshot is of a window configured as "
                             f"{state['config']}, this one is {self._config()}")
        super().restore(state)
        copy_acc = _copy_acc(self._aggs.count_only)
        self.late_count = state["late_count"]
        self.malformed_count = state["malformed_count"]
        self._windows, self._ends = {}, []
        self._sessions, self._session_heap, self._fired_last = {}, [], {}
        if self.kind == "session":
            gap = self._gap
            for k_data, rows in state["sessions"]:
                k = decode_key(k_data)
                lst = self._sessions[k] = []
                for first, last, acc, seq in rows:
                    s = _Session(k, first, last, copy_acc(acc), seq)
                    lst.append(s)
                    self._session_heap.append((last + gap, seq, s))
            heapq.heapify(self._session_heap)
            self._fired_last = {decode_key(k): last for k, last in state["fired_last"]}
            self._seq = state["seq"]
        else:
            for end, rows in state["windows"]:
                self._windows[end] = {decode_key(k): copy_acc(acc) for k, acc in rows}
            self._ends = sorted(self._windows)  # a sorted list is a heap


def _copy_acc(count_only: bool) -> Callable[[Any], Any]:
    # Snapshots must not alias live accumulators (lists are updated in place).
    return (lambda acc: acc) if count_only else list
