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

Structure: the operator does what every kind shares. `_admitted` checks each
event's time and key and is the one place that decides and reports late
events; `advance_to` is the one firing routine, turning the windows a
watermark closes into results. A `windowers.Windower` per kind (aligned:
tumbling and sliding; session) puts admitted events into its windows and
closes them. A tumbling count, the hot path, has a fused loop that counts
the events it can take at first sight and hands every other one to
`_admitted`. A tumbling window's batch of columns is folded in
`window_columns`; the helpers the join shares live in `windowing`.

>>> from types import SimpleNamespace as A
>>> op = WindowOperator("w", kind="tumbling", size_ms=1000, time_field="t",
...                     aggregates=[A(name="n", fn="count", field=None)])
>>> _ = op.on_batch([{"t": 5}, {"t": 999}, {"t": 1000}])
>>> op.on_watermark(1000).events
[{'window_start': 0, 'window_end': 1000, 't': 999, 'n': 2}]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from cameo_actors.operators.aggregates import AggSpecLike, compile_aggregates, is_time
from cameo_actors.operators.base import Event, Output
from cameo_actors.operators.bins import stable_hash
from cameo_actors.operators.columns import Columns
from cameo_actors.operators.keyed_windows import KeyedWindows
from cameo_actors.operators.state_store import StateBackend, backend_folder
from cameo_actors.operators.stored_keys import StoredState
from cameo_actors.operators.stored_sessions import StoredSessions, session_rows
from cameo_actors.operators.window_columns import fold_columns
from cameo_actors.operators.windowed_operator import WindowedOperator
from cameo_actors.operators.windowers import Admitted, AlignedWindower, SessionWindower, Windower
from cameo_actors.operators.windowing import (
    RESULT_FIELDS,
    KeyFn,
    decode_key,
    event_time,
    positive_number,
    time_error,
)

__all__ = ["WINDOW_KINDS", "WindowOperator"]

_INF = math.inf
WINDOW_KINDS = ("tumbling", "sliding", "session")
#: Why an event is late, by kind; {} is the end of the last window it could join.
_LATE_REASONS = {
    "tumbling": "its window already fired (the last one ended at {})",
    "sliding": "every window containing it already fired (the last one ended at {})",
    "session": "its session would end at {} and that has passed",
}


class WindowOperator(WindowedOperator):
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
        aggregates: specs with ``name``, ``fn`` (count, sum, min, max, avg,
            max_by, top), ``field`` (None for count, which counts events) and,
            for top, ``n`` (see `aggregates`).
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
        self._windower: Windower
        #: The windower when it is a tumbling count, which has a fast path.
        self._tumbling_counts: AlignedWindower | None = None
        if kind == "session":
            self.gap_ms = positive_number(step_id, "gap_ms", gap_ms)
            self._windower = SessionWindower(self.gap_ms, aggs=self._aggs, rejects=self.rejects)
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
            aligned = AlignedWindower(self.size_ms, self.slide_ms, tumbling=kind == "tumbling",
                                      aggs=self._aggs, rejects=self.rejects)
            self._windower = aligned
            if kind == "tumbling" and self._aggs.count_only:
                self._tumbling_counts = aligned
        self._late_reason = _LATE_REASONS[kind]

    @property
    def _windows(self) -> dict[float, dict[Any, Any]]:
        # Aligned windows' state, end -> key -> accumulator (tests reach into it).
        windower = self._windower
        return windower.state.windows if isinstance(windower, AlignedWindower) else {}

    # -- scheduling hints --------------------------------------------------------------
    def window_id(self, event_time: float) -> float:
        """Local priority of an event: the end of the earliest window containing it
        (for a session, the earliest end its session can have: t + gap)."""
        return self._windower.first_end(event_time)

    def earliest_window_end(self, events: Iterable[Event]) -> float | None:
        """The end of the earliest not-yet-fired window any of `events` belongs to.

        The runtime maps it to the physical time the window can fire (the
        frontier time of these events). Events that are late or have no valid
        time are skipped; None if no event qualifies. For sessions this is
        t + gap, the earliest the session can close (a lower bound).
        """
        wm, tf, first_open_end = self.watermark, self.time_field, self._windower.first_open_end
        best = _INF
        for ev in events:
            t = event_time(ev, tf)
            if t is not None:
                end = first_open_end(t, wm)
                if end is not None and end < best:
                    best = end
        return None if best == _INF else best

    # -- event processing --------------------------------------------------------------
    def process(self, events: list[Event], port: int, out: Output) -> None:
        if self._tumbling_counts is not None:
            self._count_tumbling(self._tumbling_counts, events, out)
        else:
            self._windower.add(self._admitted(events, out), self.watermark, out)

    def process_columns(self, batch: Columns, port: int, out: Output) -> bool:
        """A tumbling window of aggregates on columns (`window_columns.fold_columns`);
        False when the batch runs as rows."""
        return fold_columns(self._windower, batch, self.key_fn, self.time_field,
                            self.watermark)

    def _count_tumbling(self, windower: AlignedWindower, events: list[Event], out: Output) -> None:
        # The hot path (a tumbling count): `_admitted` and `AlignedWindower.add` fused
        # into one loop, without a generator hop per event. It takes the events that
        # pass at first sight (an int or finite float time, an open window); the
        # others take the general path, in order, which decides and reports them.
        tf, wm, key_fn, rejects = self.time_field, self.watermark, self.key_fn, self.rejects
        state = windower.state
        size, windows, index, open_window = windower.size, state.windows, state.index, state.open
        mask, hash_, inf, ninf = state.mask, stable_hash, _INF, -_INF
        others: list[Event] = []  # events for the general path, sent before the next one counted
        cur_end: Any = None
        w: Any = None  # the window ending at cur_end: key -> count
        bins: Any = None  # its keys by bin
        changed: Any = None  # its keys changed since the last cut, if tracked
        for ev in events:
            try:
                t = ev[tf]
            except Exception:
                others.append(ev)
                continue
            cls = t.__class__
            if cls is not int and (cls is not float or not ninf < t < inf):
                others.append(ev)
                continue
            end = t - t % size + size
            if end <= wm:
                others.append(ev)
                continue
            if others:
                windower.add(self._admitted(others, out), wm, out)
                others = []
            try:
                k = None if key_fn is None else key_fn(ev)
            except Exception as exc:
                rejects.key_raised(out, ev, exc)
                continue
            if end != cur_end:  # batches are mostly in time order: the window rarely changes
                w = windows.get(end)
                if w is None:
                    w = open_window(end)
                bins = index[end]
                changed = state.changed_in(end)
                cur_end = end
            try:
                n = w.get(k)
                if n is None:
                    w[k] = 1
                    b = hash_(k) & mask  # new to the window: to its bin (`KeyedWindows.indexed`, inlined)
                    keys = bins.get(b)
                    if keys is None:
                        bins[b] = [k]
                    else:
                        keys.append(k)
                else:
                    w[k] = n + 1
                if changed is not None:
                    changed.add(k)
            except TypeError:
                rejects.bad_key(out, ev, k)
        if others:
            windower.add(self._admitted(others, out), wm, out)

    def _admitted(self, events: list[Event], out: Output) -> Iterator[Admitted]:
        """The events with a valid time and key that are not late, as `Admitted`
        tuples; the others go to the error output here, as malformed or late."""
        tf, wm, key_fn, rejects = self.time_field, self.watermark, self.key_fn, self.rejects
        windower = self._windower
        slide, length, fired_last = windower.slide, windower.length, windower.fired_last
        inf, ninf = _INF, -_INF
        for ev in events:
            try:
                t = ev[tf]
            except Exception:
                rejects.malformed(out, ev, time_error(ev, tf))
                continue
            cls = t.__class__
            if cls is not int and (cls is not float or not ninf < t < inf) and not is_time(t):
                rejects.malformed(out, ev, time_error(ev, tf))
                continue
            # Late once the last window t could join has ended: the latest aligned
            # window holding t, or the session [t, t + gap) it would open.
            start = t - t % slide if slide else t
            end = start + length
            if end <= wm:
                reason = self._late_reason.format(end)
                rejects.late(out, ev, f"event at {tf}={t} is behind the watermark {wm}: {reason}")
                continue
            if key_fn is None:
                k = None
            else:
                try:
                    k = key_fn(ev)
                except Exception as exc:
                    rejects.key_raised(out, ev, exc)
                    continue
            if not slide:
                # Sessions: within gap of a session already emitted, it belongs to that
                # session, which cannot be reopened.
                try:
                    last = fired_last.get(k)
                except TypeError:
                    rejects.bad_key(out, ev, k)
                    continue
                if last is not None and t - last < length:
                    rejects.late(out, ev, f"event at {tf}={t} falls within gap_ms={length} of a "
                                          f"session that already fired (its last event at {last})")
                    continue
            yield ev, t, k, start, end

    # -- firing ------------------------------------------------------------------------
    def advance_to(self, watermark: float, out: Output) -> None:
        tf, fill, emit = self.time_field, self._aggs.fill, out.events.append
        keyed = self.key_fn is not None
        for start, end, k, acc in self._windower.close(watermark):
            r = ({"key": k, "window_start": start, "window_end": end, tf: end - 1} if keyed
                 else {"window_start": start, "window_end": end, tf: end - 1})
            fill(r, acc)
            emit(r)

    # -- lessees (see `lease`) ---------------------------------------------------------
    def merge_partials(self, rows: Iterable[Sequence[Any]], out: Output) -> None:
        """Fold a lessee's partial rows ``[window_end, key, acc]`` (`lease.LesseeWindow.
        take_partials`, possibly after a msgpack round trip) into this window's state.

        A row whose window already fired here is not lost: it goes to the error
        output as kind "late" (counted in `late_count`), the row as its event.

        Raises:
            ValueError: this is a session window, which cannot have lessees.
        """
        windower = self._windower
        if not isinstance(windower, AlignedWindower):
            raise ValueError(f"step {self.step_id!r}: a {self.kind} window has no lessees, "
                             f"so it takes no partials; only tumbling and sliding windows do")
        state, wm, aggs = windower.state, self.watermark, self._aggs
        windows, count_only, merge, copy = state.windows, aggs.count_only, aggs.merge, aggs.copy
        cur_end: Any = None
        w: Any = None  # the window ending at cur_end: key -> accumulator
        changed: Any = None  # its keys changed since the last cut, if tracked
        for row in rows:
            end, k, acc = row
            if end <= wm:
                self.rejects.late(out, row, f"a lessee's partial for the window ending at {end} "
                                            f"arrived after the window fired (watermark {wm})")
                continue
            if k.__class__ is list:
                k = decode_key(k)
            if end != cur_end:  # rows come grouped by window: look it up when it changes
                w = windows.get(end)
                if w is None:
                    w = state.open(end)
                changed = state.changed_in(end)
                cur_end = end
            mine = w.get(k)
            if mine is None:
                w[k] = copy(acc)
                state.indexed(end, k)
            elif count_only:
                w[k] = mine + acc
            else:
                merge(mine, acc)
            if changed is not None:
                changed.add(k)

    # -- state -------------------------------------------------------------------------
    def _config(self) -> list[Any]:
        return [self.kind, self.size_ms, self.slide_ms, self.gap_ms, self.time_field,
                list(self._aggs.names), self.key_fn is not None]

    def _snapshot_windows(self) -> dict[str, Any]:
        return self._windower.snapshot()

    def _cut_fields(self) -> dict[str, Any]:
        windower = self._windower
        return windower.cut_fields() if isinstance(windower, StoredSessions) else windower.snapshot()

    def _stored_state(self) -> StoredState | None:
        windower = self._windower
        return windower.stored if isinstance(windower, StoredSessions) else None

    def _restore_windows(self, state: dict[str, Any]) -> None:
        files = state.get("stored")
        if files and isinstance(self._windower, SessionWindower):
            # a store's checkpoint, restored in memory (the pool changed its backend)
            sessions, fired = session_rows(files, backend_folder(None))
            state = {**state, "sessions": [*state["sessions"], *sessions],
                     "fired_last": [*state["fired_last"], *fired]}
        self._windower.restore(state)

    def _aligned_state(self) -> KeyedWindows[Any] | None:
        windower = self._windower
        return windower.state if isinstance(windower, AlignedWindower) else None

    def _use_bins(self, bins: int, backend: StateBackend) -> None:
        if self.gap_ms is not None:  # sessions: a windower of the backend's kind
            if backend.stored:
                self._windower = StoredSessions(self.gap_ms, aggs=self._aggs,
                                                rejects=self.rejects, bins=bins, backend=backend)
                return
            self._windower = SessionWindower(self.gap_ms, aggs=self._aggs, rejects=self.rejects)
        self._windower.use_bins(bins, backend)

    def state_keys(self) -> list[Any]:
        return self._windower.state_keys()

    def state_bins(self) -> list[int]:
        return self._windower.bins()

    def take_bins(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """Rows (keys encoded with `encode_key`):

        - tumbling, sliding: ``[end, bin, entries]`` per open window and bin, entries
          a dict key -> acc, or flat ``[key, acc, key, acc, ...]`` when a key is
          neither str nor int (`keyed_windows.KeyedWindows.take`);
        - session: ``["session", key, first, last, acc]`` per open session, in
          creation order, then ``["fired", key, last]`` per key whose latest
          fired session an event could still fall within gap of.

        ``acc`` is the accumulator: an int for count-only aggregates, else a list
        of numbers (see `aggregates`).
        """
        return self._windower.take(bins)

    def _put_state(self, rows: list[Any], owned: bool) -> None:
        self._windower.put(rows, owned)
