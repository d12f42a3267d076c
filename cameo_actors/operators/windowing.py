"""The windowing core shared by the window operator (`windows`) and the windowed join (`join`).

- Checks of what arrives: `time_error`, `event_time`, `unhashable_key_error`,
  `positive_number`; keys in snapshots: `encode_key` / `decode_key`.
- `Rejects`: the error output of a windowed operator with a count per kind
  ("late", "malformed"): the one place those records are made and counted.
- `AlignedWindows`: where tumbling and sliding windows lie.
- `KeyedWindows`: the state of aligned windows (window end -> key -> state),
  fired in end order, snapshotted as rows, moved per key as rows.
- `WindowedOperator`: the base of both operators (and of the interval join
  and the keyed process, whose state is per key): their rejects, the
  snapshot envelope (configuration check, counters) and the per-key state
  moves of live migration (`state_keys`, `take_state`, `put_state`);
  `keys_by_label` groups the keys of a per-key take.

Windows are half-open ``[start, end)`` in event-time milliseconds, aligned to 0.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import chain
from typing import Any, Generic, TypeVar

import msgpack

from cameo_actors.operators.aggregates import is_number, is_time
from cameo_actors.operators.base import Event, Operator, Output

KeyFn = Callable[[Event], Any]
S = TypeVar("S")
_ABSENT: Any = object()  # a dict.pop default no state can be

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


def keys_by_label(pairs: Iterable[tuple[Any, Any]], label_of: Mapping[Any, Any]
                  ) -> dict[Any, list[Any]]:
    """The keys of (place, key) pairs grouped by label, each once, in first-seen
    order: what `take_state_at` of state kept per key (place None) takes."""
    by_label: dict[Any, dict[Any, None]] = {}
    for _, k in pairs:
        by_label.setdefault(label_of[k], {})[k] = None
    return {label: list(ks) for label, ks in by_label.items()}


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


class KeyedWindows(Generic[S]):
    """The state of aligned windows: window end -> key -> per-key state `S`
    (an aggregate's accumulator, a join's buffered events), and a heap of the
    ends so that windows fire in end order.

    Hot loops read `windows` directly and call `open` only for a window that
    is not there yet.
    """

    __slots__ = ("windows", "ends")

    def __init__(self) -> None:
        self.windows: dict[float, dict[Any, S]] = {}
        self.ends: list[float] = []

    def open(self, end: float) -> dict[Any, S]:
        """Create the (absent) window ending at `end` and schedule it to fire."""
        w: dict[Any, S] = {}
        self.windows[end] = w
        heapq.heappush(self.ends, end)
        return w

    def pop_due(self, watermark: float) -> Iterator[tuple[float, dict[Any, S]]]:
        """Remove and yield (end, key -> state) of each window with end <= watermark, in end order."""
        ends, windows = self.ends, self.windows
        while ends and ends[0] <= watermark:
            end = heapq.heappop(ends)
            yield end, windows.pop(end)

    def dump(self, row: Callable[[S], list[Any]]) -> list[Any]:
        """The state as msgpack-able rows ``[end, [[key, *row(state)], ...]]`` in
        end order; `row` must copy what is updated in place."""
        return [[end, [[encode_key(k), *row(s)] for k, s in self.windows[end].items()]]
                for end in sorted(self.windows)]

    def load(self, rows: list[Any], state: Callable[[list[Any]], S]) -> None:
        """Replace the state with `dump` rows; `state` turns a row's fields after
        the key back into a state (a copy: `rows` may be a live snapshot)."""
        self.windows = {end: {decode_key(k): state(fields) for k, *fields in entries}
                        for end, entries in rows}
        self.ends = sorted(self.windows)  # a sorted list is a heap

    def load_packed(self, rows: list[Any]) -> None:
        """Replace the state with windows packed whole (`[end, msgpack of {key: state}]`,
        str or int keys; the states come out as new objects)."""
        self.windows = {end: msgpack.unpackb(blob, raw=False, strict_map_key=False)
                        for end, blob in rows}
        self.ends = sorted(self.windows)

    def keys(self) -> list[Any]:
        """Every key with state, once per window it is in (no set: a million keys are
        listed in milliseconds, deduplicated in a quarter of a second)."""
        return list(chain.from_iterable(self.windows.values()))

    def entries(self) -> list[tuple[Any, list[Any]]]:
        """(window end, its keys) per open window."""
        return [(end, list(w)) for end, w in self.windows.items()]

    def take_at(self, pairs: Iterable[tuple[Any, Any]], label_of: Mapping[Any, Any],
                row: Callable[[S], Any]) -> dict[Any, list[Any]]:
        """Remove the state at each (window end, key) of `pairs` (absent ones skipped),
        as rows per label of the key: ``[end, [key, row(state), key, row(state), ...]]``
        per window (keys encoded), flat for cheap packing."""
        windows = self.windows
        out: dict[Any, dict[Any, list[Any]]] = {}
        for end, k in pairs:
            w = windows.get(end)
            if w is None:
                continue
            s = w.pop(k, _ABSENT)
            if s is _ABSENT:
                continue
            by_end = out.get(label_of[k])
            if by_end is None:
                by_end = out[label_of[k]] = {}
            flat = by_end.get(end)
            if flat is None:
                flat = by_end[end] = []
            flat += (encode_key(k), row(s))
        return {label: [[end, flat] for end, flat in by_end.items()] for label, by_end in out.items()}

    def put(self, rows: list[Any], state: Callable[[Any], S]) -> None:
        """Add `take_scan` rows, opening windows as needed; `state` turns a row's value
        into a state (a copy: the caller may keep `rows`).

        Raises:
            ValueError: a row's key already has state in its window here (a protocol
                bug: a key's state lives in one place); nothing is changed then.
        """
        windows = self.windows
        decoded = [(end, [decode_key(k) if k.__class__ is list else k for k in flat[::2]],
                    flat[1::2]) for end, flat in rows]
        for end, keys, _ in decoded:  # check everything first: all or nothing
            w = windows.get(end)
            if w is not None and not w.keys().isdisjoint(keys):
                k = next(k for k in keys if k in w)
                raise ValueError(f"key {k!r} already has state in the window ending at {end}")
        for end, keys, values in decoded:
            w = windows.get(end)
            if w is None:
                w = self.open(end)
            for k, v in zip(keys, values, strict=True):
                w[k] = state(v)


# -- the operators' base ---------------------------------------------------------------
class WindowedOperator(Operator):
    """Base of the windowed operators: rejects with counts, and a snapshot of
    the configuration, the counters and the subclass's window state.

    Subclasses implement `_config` (what a snapshot must match),
    `_snapshot_windows` and `_restore_windows`, and for live migration of
    keys `state_keys`, `take_state` and `_put_state`.
    """

    stateful = True
    #: What a configuration mismatch calls this operator.
    noun = "window"

    def __init__(self, step_id: str, n_inputs: int = 1) -> None:
        super().__init__(step_id, n_inputs)
        self.rejects = Rejects(self.error)

    @property
    def late_count(self) -> int:
        """Events routed to the error output as late."""
        return self.rejects.late_count

    @property
    def malformed_count(self) -> int:
        """Events routed to the error output as malformed."""
        return self.rejects.malformed_count

    def _config(self) -> list[Any]:
        raise NotImplementedError

    def _snapshot_windows(self) -> dict[str, Any]:
        raise NotImplementedError

    def _restore_windows(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- per-key state moves (live migration) ------------------------------------------
    def state_keys(self) -> list[Any]:
        """Every key that has state here (as the key function returns it: tuples
        stay tuples), in no particular order; a key in several windows may be
        listed once per window."""
        raise NotImplementedError

    def take_state(self, keys: Iterable[Any]) -> list[Any]:
        """Remove every piece of state of `keys` (as `state_keys` lists them)
        and return it as msgpack-able rows for `put_state` of an identically
        configured operator; keys without state are skipped. Watermarks and
        counters stay: they are the operator's, not the keys'."""
        wanted = set(keys)
        pairs = [(place, k) for place, ks in self.state_entries() for k in ks if k in wanted]
        return self.take_state_at(pairs, dict.fromkeys(wanted)).get(None, [])

    def state_entries(self) -> list[tuple[Any, list[Any]]]:
        """(place, keys) for every place holding state: a window's end and its keys; for
        state kept per key (sessions), (None, keys)."""
        raise NotImplementedError

    def places_of(self, event: Any, port: int) -> list[Any]:
        """The places where `event` keeps state: the ends of its windows that have not
        fired ([None] for per-key state; [] when it has no valid time)."""
        raise NotImplementedError

    def take_state_at(self, pairs: Iterable[tuple[Any, Any]], label_of: Mapping[Any, Any]
                      ) -> dict[Any, list[Any]]:
        """Remove the state at each (place, key) of `pairs` (absent ones skipped), as
        rows for `put_state`, per label of the key (`label_of`: where each key goes).
        Costs the pairs, not the whole state: live migration takes the state of moved
        keys in bounded steps this way. The row format is the subclass's."""
        raise NotImplementedError

    def put_state(self, rows: list[Any]) -> None:
        """Add state that `take_state` of an identically configured operator
        gave away (possibly after a msgpack round trip); rows are copied.

        Raises:
            ValueError: a key of `rows` already has state here (a protocol bug:
                a key's state lives in one place); nothing is changed then.
        """
        try:
            self._put_state(rows)
        except ValueError as exc:
            raise ValueError(f"step {self.step_id!r}: {exc}") from exc

    def _put_state(self, rows: list[Any]) -> None:
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        """The operator's state as msgpack-able data (lists, dicts with str keys,
        numbers, strings, None; a join's buffered events as they are). Tuple
        keys are stored as lists."""
        state = super().snapshot()
        state.update(
            config=self._config(),
            late_count=self.rejects.late_count,
            malformed_count=self.rejects.malformed_count,
        )
        state.update(self._snapshot_windows())
        return state

    def restore(self, state: dict[str, Any]) -> None:
        """Load a `snapshot` (possibly after a msgpack round trip) into this operator.

        Raises:
            ValueError: the snapshot is of a differently configured operator.
        """
        if list(state["config"]) != self._config():
            raise ValueError(f"step {self.step_id!r}: snapshot is of a {self.noun} configured as "
                             f"{state['config']}, this one is {self._config()}")
        super().restore(state)
        self.rejects.late_count = state["late_count"]
        self.rejects.malformed_count = state["malformed_count"]
        self._restore_windows(state)
