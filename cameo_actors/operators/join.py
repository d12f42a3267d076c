"""Inner join of two streams per event-time window and key.

Port 0 is the left stream, port 1 the right. Both are cut into the same
tumbling or sliding windows (``[start, end)``, aligned to 0), each side by its
own time field. When the watermark (the minimum over both ports) reaches a
window's end, every pair of a left and a right event of that window with equal
keys comes out, then the window's state is dropped::

    {"key": k, "window_start": s, "window_end": e, <left_time_field>: e - 1,
     "left": <left event>, "right": <right event>}

Late and malformed events go to the error output, as in `windows`. The
window grid, the per-window state, the error output and the snapshot
envelope are the windowing core's (`windowing`, `keyed_windows`,
`windowed_operator`), shared with `windows`.

>>> op = WindowJoinOperator("j", kind="tumbling", size_ms=1000,
...                         left_key_fn=lambda e: e["id"], right_key_fn=lambda e: e["id"],
...                         left_time_field="t", right_time_field="ts")
>>> _ = op.on_batch([{"t": 10, "id": 1}], port=0)
>>> _ = op.on_batch([{"ts": 20, "id": 1}, {"ts": 30, "id": 2}], port=1)
>>> _ = op.on_watermark(1000, port=0)
>>> op.on_watermark(1000, port=1).events
[{'key': 1, 'window_start': 0, 'window_end': 1000, 't': 999, 'left': {'t': 10, 'id': 1}, 'right': {'ts': 20, 'id': 1}}]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cameo_actors.operators.base import Event, Output
from cameo_actors.operators.keyed_windows import KeyedWindows
from cameo_actors.operators.state_store import StateBackend
from cameo_actors.operators.stored_windows import aligned_state
from cameo_actors.operators.windowed_operator import WindowedOperator
from cameo_actors.operators.windowing import (
    RESULT_FIELDS,
    AlignedWindows,
    KeyFn,
    event_time,
    positive_number,
    time_error,
    unhashable_key_error,
)

JOIN_KINDS = ("tumbling", "sliding")
_SIDES = ("left", "right")
#: A key's events of one window: [left events, right events].
Sides = list[list[Event]]


def check_sides(step_id: str, key_fns: tuple[Any, Any], time_fields: tuple[Any, Any], *,
                result_fields: tuple[str, ...]) -> None:
    """What every join checks of its two sides: a key function and an event-time field
    each, and a left time field (the result's) that is no other result field.

    Raises:
        ValueError: naming the step, what is wrong and the fix.
    """
    for side, fn in zip(_SIDES, key_fns, strict=True):
        if not callable(fn):
            raise ValueError(f"step {step_id!r}: a join needs a {side} key function, got {fn!r}; "
                             f"key_by both inputs")
    for side, tf in zip(_SIDES, time_fields, strict=True):
        if not isinstance(tf, str) or not tf:
            raise ValueError(f"step {step_id!r}: {side}_time_field must name the event-time "
                             f"field, got {tf!r}")
    if time_fields[0] in result_fields:
        raise ValueError(f"step {step_id!r}: left_time_field {time_fields[0]!r} clashes with a "
                         f"result field {list(result_fields)}; rename the event-time field")


def _copy_sides(sides: Sides) -> Sides:
    # Snapshot rows hold copies: the live lists grow in place.
    return [list(sides[0]), list(sides[1])]


class WindowJoinOperator(WindowedOperator):
    """Windowed inner equi-join of a left (port 0) and a right (port 1) stream.

    In a sliding join a pair that shares several windows comes out once per
    window, like a windowed aggregate counts an event once per window.

    Args:
        step_id: the spec step (named in every error record).
        kind: "tumbling" or "sliding".
        size_ms: window length in ms.
        slide_ms: distance between window starts (sliding only; <= size_ms).
        left_key_fn: left event -> key (hashable; tuples allowed).
        right_key_fn: right event -> key, compared with == to left keys.
        left_time_field: event-time field of left events (also the result's
            time field).
        right_time_field: event-time field of right events.

    Raises:
        ValueError: a bad kind, size or slide, a missing key function, or a
            left time field that clashes with a result field.
    """

    noun = "join"

    def __init__(
        self,
        step_id: str,
        *,
        kind: str,
        size_ms: float,
        slide_ms: float | None = None,
        left_key_fn: KeyFn,
        right_key_fn: KeyFn,
        left_time_field: str,
        right_time_field: str,
    ) -> None:
        super().__init__(step_id, n_inputs=2)
        if kind not in JOIN_KINDS:
            raise ValueError(f"step {step_id!r}: join kind must be one of {list(JOIN_KINDS)}, "
                             f"got {kind!r}")
        check_sides(step_id, (left_key_fn, right_key_fn), (left_time_field, right_time_field),
                    result_fields=(*RESULT_FIELDS, *_SIDES))
        self.kind = kind
        self.size_ms = positive_number(step_id, "size_ms", size_ms)
        if kind == "sliding":
            self.slide_ms = positive_number(step_id, "slide_ms", slide_ms)
            if self.slide_ms > self.size_ms:
                raise ValueError(f"step {step_id!r}: slide_ms must be <= size_ms ({size_ms}), "
                                 f"got {slide_ms}; use a smaller slide or a tumbling window")
        else:
            self.slide_ms = self.size_ms
        self._aligned = AlignedWindows(self.size_ms, self.slide_ms)
        self.key_fns = (left_key_fn, right_key_fn)
        self.time_fields = (left_time_field, right_time_field)
        self._state: KeyedWindows[Sides] = KeyedWindows()

    # -- scheduling hints --------------------------------------------------------------
    def window_id(self, event_time: float) -> float:
        """Local priority of an event: the end of the earliest window containing it."""
        return self._aligned.first_end(event_time)

    def earliest_window_end(self, events: Iterable[Event], port: int = 0) -> float | None:
        """The end of the earliest not-yet-fired window any of `events` (arriving
        on `port`) belongs to; None if every event is late or has no valid time."""
        wm, tf, first_open_end = self.watermark, self.time_fields[port], self._aligned.first_open_end
        best: float | None = None
        for ev in events:
            t = event_time(ev, tf)
            if t is not None:
                end = first_open_end(t, wm)
                if end is not None and (best is None or end < best):
                    best = end
        return best

    # -- event processing --------------------------------------------------------------
    def process(self, events: list[Event], port: int, out: Output) -> None:
        if port not in (0, 1):
            raise ValueError(f"step {self.step_id!r}: a join has ports 0 (left) and 1 (right), "
                             f"got {port!r}")
        tf, key_fn, wm, rejects = self.time_fields[port], self.key_fns[port], self.watermark, self.rejects
        state = self._state
        windows, open_window, indexed = state.windows, state.open, state.indexed
        open_ends = self._aligned.open_ends
        for ev in events:
            t = event_time(ev, tf)
            if t is None:
                rejects.malformed(out, ev, time_error(ev, tf))
                continue
            ends = open_ends(t, wm)
            if not ends:
                rejects.late(out, ev, f"{_SIDES[port]} event at {tf}={t} is behind the watermark "
                                      f"{wm}: every window containing it already fired")
                continue
            try:
                k = key_fn(ev)
            except Exception as exc:
                rejects.key_raised(out, ev, exc, f"{_SIDES[port]} key function")
                continue
            # Checked before any window is opened for it.
            message = unhashable_key_error(k)
            if message is not None:
                rejects.malformed(out, ev, message)
                continue
            for end in ends:
                w = windows.get(end)
                if w is None:
                    w = open_window(end)
                sides = w.get(k)
                if sides is None:
                    sides = w[k] = [[], []]
                    indexed(end, k)
                sides[port].append(ev)
                changed = state.changed_in(end)
                if changed is not None:
                    changed.add(k)

    # -- firing ------------------------------------------------------------------------
    def advance_to(self, watermark: float, out: Output) -> None:
        size, tf, emit = self.size_ms, self.time_fields[0], out.events.append
        for end, w in self._state.pop_due(watermark):
            start = end - size
            for k, (lefts, rights) in w.items():
                for left in lefts:
                    for right in rights:
                        emit({"key": k, "window_start": start, "window_end": end, tf: end - 1,
                              "left": left, "right": right})

    # -- state -------------------------------------------------------------------------
    def _config(self) -> list[Any]:
        return [self.kind, self.size_ms, self.slide_ms, *self.time_fields]

    def _snapshot_windows(self) -> dict[str, Any]:
        return {"aligned": self._state.dump(lambda sides: [_copy_sides(sides)])}

    def _restore_windows(self, state: dict[str, Any]) -> None:
        self._state.load(state["aligned"], lambda fields: _copy_sides(fields[0]))

    def _aligned_state(self) -> KeyedWindows[Any] | None:
        return self._state

    def _use_bins(self, bins: int, backend: StateBackend) -> None:
        self._state = aligned_state(bins, backend)

    def state_keys(self) -> list[Any]:
        return self._state.keys()

    def state_bins(self) -> list[int]:
        return self._state.bins()

    def take_bins(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """Rows ``[end, bin, entries]`` per open window and bin: each key's buffered
        left and right events ``[lefts, rights]`` (see `KeyedWindows.take`)."""
        return self._state.take(bins)

    def _put_state(self, rows: list[Any], owned: bool) -> None:
        self._state.put(rows, _copy_sides, owned)
