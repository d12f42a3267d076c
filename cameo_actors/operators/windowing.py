"""The windowing core shared by the window operator (`windows`), the windowed join
(`join`), the interval join and the keyed process.

- Checks of what arrives: `time_error`, `event_time`, `unhashable_key_error`,
  `positive_number`; keys in snapshots: `encode_key` / `decode_key`.
- `Rejects`: the error output of a windowed operator with a count per kind
  ("late", "malformed"): the one place those records are made and counted.
- `AlignedWindows`: where tumbling and sliding windows lie.

Beside it: `keyed_windows` holds the state of aligned windows by key and bin, and
`windowed_operator` the base of the operators (rejects, snapshot envelope, state by
bin).

Windows are half-open ``[start, end)`` in event-time milliseconds, aligned to 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from cameo_actors.operators.aggregates import is_number, is_time
from cameo_actors.operators.base import Event, Output

KeyFn = Callable[[Event], Any]

#: Fields every window result carries; aggregates and time fields may not reuse them.
RESULT_FIELDS = ("key", "window_start", "window_end")


# -- checks and keys -------------------------------------------------------------------
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


# -- the error output ------------------------------------------------------------------
class Rejects:
    """Events a windowed operator cannot use: error records, counted by kind.

    Attributes:
        late_count: events sent as kind "late" (behind the watermark).
        malformed_count: events sent as kind "malformed" (no valid time, key
            or aggregate input).
    """

    __slots__ = ("_error", "late_count", "malformed_count")

    def __init__(self, error: Callable[[Output, str, str, Any], None]) -> None:
        self._error = error  # the operator's `error`: it names the step
        self.late_count = 0
        self.malformed_count = 0

    def late(self, out: Output, ev: Any, message: str) -> None:
        self.late_count += 1
        self._error(out, "late", message, ev)

    def malformed(self, out: Output, ev: Any, message: str) -> None:
        self.malformed_count += 1
        self._error(out, "malformed", message, ev)

    def key_raised(self, out: Output, ev: Any, exc: Exception, fn: str = "key function") -> None:
        """The key function `fn` raised `exc` on `ev`."""
        self.malformed(out, ev, f"the {fn} raised {type(exc).__name__}: {exc}")

    def bad_key(self, out: Output, ev: Any, key: Any) -> None:
        """Call in an ``except TypeError`` around a dict access by `key`: a
        malformed event if the key is unhashable, else the TypeError again."""
        message = unhashable_key_error(key)
        if message is None:
            raise  # not the key's fault: a bug, do not hide it
        self.malformed(out, ev, message)


# -- aligned windows -------------------------------------------------------------------
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
