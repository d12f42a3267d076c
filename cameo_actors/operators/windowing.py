"""The windowing core shared by the window operator (`windows`) and the windowed join (`join`).

- Checks of what arrives: `time_error`, `event_time`, `unhashable_key_error`,
  `positive_number`; keys in snapshots: `encode_key` / `decode_key`.
- `Rejects`: the error output of a windowed operator with a count per kind
  ("late", "malformed"): the one place those records are made and counted.
- `AlignedWindows`: where tumbling and sliding windows lie.
- `KeyedWindows`: the state of aligned windows (window end -> key -> state,
  and the keys of each bin), fired in end order, snapshotted packed (whole, or
  in steps), moved bin by bin.
- `WindowedOperator`: the base of both operators (and of the interval join
  and the keyed process, whose state is per key): their rejects, the
  snapshot envelope (configuration check, counters) and the interface of
  state kept by bin (`use_bins`, `state_bins`, `take_bins`, `put_state`).

Windows are half-open ``[start, end)`` in event-time milliseconds, aligned to 0.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, Generic, TypeVar

import msgpack

from cameo_actors.operators.aggregates import is_number, is_time
from cameo_actors.operators.base import Event, Operator, Output
from cameo_actors.operators.bins import DEFAULT_BINS, check_bins, stable_hash

KeyFn = Callable[[Event], Any]
S = TypeVar("S")

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


def _plain_keys(states: dict[Any, Any]) -> bool:
    """Whether every key is a str or an int: msgpack packs and unpacks such a dict whole,
    in its C code (a tuple key would come back as a list, which cannot key a dict)."""
    return all(k.__class__ is str or k.__class__ is int for k in states)


def _entries(states: dict[Any, Any]) -> Any:
    """Key -> state as msgpack carries it: the dict itself when its keys are plain
    (`_plain_keys`), else flat ``[key, state, ...]`` with keys encoded (`encode_key`)."""
    if _plain_keys(states):
        return states
    return [x for k, s in states.items() for x in (encode_key(k), s)]


def _items_of(states: dict[Any, S], keys: Iterable[Any]) -> Iterator[tuple[Any, S]]:
    """(key, state) of `keys`, lazily."""
    for k in keys:
        yield k, states[k]


def _states(entries: Any) -> dict[Any, Any]:
    """Undo `_entries` (after a msgpack round trip or not)."""
    if entries.__class__ is dict:
        return entries  # type: ignore[no-any-return]
    return {decode_key(k) if k.__class__ is list else k: s
            for k, s in zip(entries[::2], entries[1::2], strict=True)}


class KeyedWindows(Generic[S]):
    """The state of aligned windows: window end -> key -> per-key state `S` (an
    aggregate's accumulator, a join's buffered events), a heap of the ends so that
    windows fire in end order, and per window the keys of each bin (`bins.py`), added
    when a key first comes into the window: an event of a key already there costs
    nothing more, and a bin's state is taken and put without a pass over the rest.

    Hot loops read `windows` and `index` directly, call `open` only for a window that
    is not there yet, add a key's bin (`stable_hash(key) & mask`) to the window's
    index when they add the key, and add every key whose state they change to the
    window's set in `changed` (if it has one). A checkpoint packs the state in steps
    (`start_packing`, `pack_some`, `packed`), while the runtime runs nothing else at
    the activation, so nothing changes it meanwhile: all of it, or only what changed
    since the previous cut (incremental), which `load` applies over the state before.
    """

    __slots__ = ("windows", "index", "ends", "mask", "to_pack", "pieces", "changed", "to_index")

    def __init__(self, bins: int = DEFAULT_BINS) -> None:
        self.windows: dict[float, dict[Any, S]] = {}
        #: window end -> bin -> its keys in that window
        self.index: dict[float, dict[int, list[Any]]] = {}
        self.ends: list[float] = []
        self.mask = check_bins(bins) - 1
        #: a checkpoint's windows still to pack (end, what is left of its items), and
        #: the pieces packed so far
        self.to_pack: list[tuple[float, Iterator[tuple[Any, S]]]] = []
        self.pieces: list[bytes] = []
        #: since the last cut (or restore): window end -> the keys whose state changed,
        #: for each window there then (a window opened since is new as a whole); None
        #: when that is not known (state moved in or out since): the next cut packs all
        self.changed: dict[float, set[Any]] | None = None
        #: after a `load`: the keys each window had then, whose bins `index_some` adds to
        #: its index in steps (keys that come in later are indexed as they come)
        self.to_index: list[tuple[float, Iterator[Any]]] = []

    def open(self, end: float) -> dict[Any, S]:
        """Create the (absent) window ending at `end` and schedule it to fire."""
        w: dict[Any, S] = {}
        self.windows[end] = w
        self.index[end] = {}
        heapq.heappush(self.ends, end)
        return w

    def indexed(self, end: float, key: Any) -> None:
        """`key` just came into the window ending at `end` (not on the hot paths)."""
        b = stable_hash(key) & self.mask
        keys = self.index[end].get(b)
        if keys is None:
            self.index[end][b] = [key]
        else:
            keys.append(key)

    def changed_in(self, end: float) -> set[Any] | None:
        """Where a loop adds the keys whose state it changes in the window ending at
        `end`; None: no need (not tracked, a window new since the cut, or one where more
        than half the keys changed: the next cut packs it whole, and the adds stop)."""
        changed = self.changed
        keys = None if changed is None else changed.get(end)
        if keys is not None and 2 * len(keys) > len(self.windows[end]):
            del changed[end]  # type: ignore[union-attr]
            return None
        return keys

    def pop_due(self, watermark: float) -> Iterator[tuple[float, dict[Any, S]]]:
        """Remove and yield (end, key -> state) of each window with end <= watermark, in end order."""
        ends, windows, index, changed = self.ends, self.windows, self.index, self.changed
        while ends and ends[0] <= watermark:
            end = heapq.heappop(ends)
            del index[end]
            if changed is not None:
                changed.pop(end, None)
            yield end, windows.pop(end)

    def keys(self) -> list[Any]:
        """Every key with state, once per window it is in."""
        return [k for w in self.windows.values() for k in w]

    def bins(self) -> list[int]:
        """The bins holding state, ascending."""
        self.index_some(None)
        return sorted({b for bins in self.index.values() for b in bins})

    # -- snapshots ----------------------------------------------------------------------
    # A snapshot holds each window's states in the window's own order (read in memory
    # order: packing a million keys in bin order instead costs three times as long),
    # and no index: after a `load`, `index_some` finds each key's bin again, in steps.
    def dump(self, row: Callable[[S], list[Any]]) -> dict[str, Any]:
        """The state as msgpack-able data: each window whose keys are all str or int
        packed whole by msgpack's C code (a copy, no live state aliased); the others as
        rows ``[key, *row(state)]`` (`row` must copy what is updated in place)."""
        packed: list[Any] = []
        rows: list[Any] = []
        for end in sorted(self.windows):
            w = self.windows[end]
            if _plain_keys(w):
                try:
                    packed.append([end, msgpack.packb(w, use_bin_type=True)])
                    continue
                except (TypeError, ValueError, OverflowError):  # a state msgpack cannot carry
                    pass
            rows.append([end, [[encode_key(k), *row(s)] for k, s in w.items()]])
        return {"packed": packed, "windows": rows}

    def load(self, data: dict[str, Any], state: Callable[[list[Any]], S]) -> None:
        """Replace the state with a `dump`, or with the pieces snapshots in steps packed
        (``{"pieces": [...]}``, each ``[end, entries]`` packed or not): a full one's, then
        the incremental ones' after it in order, with the windows open at the last
        (``"ends"``, given when it is incremental); `state` turns a row's fields after the
        key back into a state (a copy: `data` may be a live snapshot). What changes from
        then on is tracked (`changed`); the keys' bins are found in steps (`index_some`)."""
        self.windows, self.index, self.ends = {}, {}, []
        self.to_pack, self.pieces = [], []
        for end, blob in data.get("packed", ()):
            self._load(end, msgpack.unpackb(blob, raw=False, strict_map_key=False))
        for piece in data.get("pieces", ()):
            if isinstance(piece, bytes):  # as `pack_some` made it, not unpacked yet
                piece = msgpack.unpackb(piece, raw=False, strict_map_key=False)
            self._load(piece[0], _states(piece[1]))
        for end, entries in data.get("windows", ()):
            self._load(end, {decode_key(k): state(fields) for k, *fields in entries})
        if "ends" in data:  # the windows fired since the full snapshot go
            for end in set(self.windows).difference(data["ends"]):
                del self.windows[end], self.index[end]
        self.ends = sorted(self.windows)  # a sorted list is a heap
        self.changed = {end: set() for end in self.windows}
        self.to_index = [(end, iter(list(self.windows[end]))) for end in self.ends]

    def _load(self, end: float, states: dict[Any, S]) -> None:
        w = self.windows.get(end)
        if w is None:
            w, self.index[end] = {}, {}
            self.windows[end] = w
        w.update(states)

    def index_some(self, budget: int | None) -> bool:
        """Add the bins of the next `budget` keys a `load` brought (None: all of them) to
        the index; True once every one is in. Until then `take` and `bins` do it first:
        a restore costs no pass over every key's hash before the activation runs."""
        to_index, index, mask, hash_ = self.to_index, self.index, self.mask, stable_hash
        left = budget
        while to_index and (left is None or left > 0):
            end, keys = to_index[0]
            chunk = list(islice(keys, left))
            if left is None or len(chunk) < left:
                to_index.pop(0)
            if left is not None:
                left -= len(chunk)
            bins = index.get(end)
            if bins is None:  # fired since
                continue
            for k in chunk:
                b = hash_(k) & mask
                keys_of = bins.get(b)
                if keys_of is None:
                    bins[b] = [k]
                else:
                    keys_of.append(k)
        return not to_index

    # -- a checkpoint's snapshot in steps ---------------------------------------------------
    def start_packing(self, incremental: bool = False) -> bool:
        """A checkpoint's cut: `pack_some` packs the state as it is now, in steps; nothing
        may change it until the last (the runtime runs nothing else at the activation).
        `incremental`: only what changed since the previous cut, if that is known. True if
        it is incremental. From now on the changes are tracked anew."""
        changed = self.changed if incremental else None
        windows = self.windows
        self.to_pack = []
        for end in sorted(windows):
            w = windows[end]
            keys = None if changed is None else changed.get(end)
            if keys is None or 2 * len(keys) > len(w):  # all of it (in memory order: faster)
                self.to_pack.append((end, iter(w.items())))
            elif keys:
                self.to_pack.append((end, _items_of(w, keys)))
        self.pieces = []
        self.changed = {end: set() for end in windows}
        return changed is not None

    def pack_some(self, budget: int) -> bool:
        """Pack the next `budget` entries, window by window in each window's order, as
        pieces ``[end, entries]`` (one msgpack call each); True once every window is
        packed."""
        to_pack = self.to_pack
        n = 0
        while to_pack and n < budget:
            end, items = to_pack[0]
            chunk = dict(islice(items, budget - n))
            if len(chunk) < budget - n:
                to_pack.pop(0)
            if chunk:
                n += len(chunk)
                self.pieces.append(msgpack.packb([end, _entries(chunk)], use_bin_type=True))
        return not to_pack

    def packed(self) -> list[bytes]:
        """The pieces packed since `start_packing` (what `load` takes as ``pieces``)."""
        pieces, self.pieces, self.to_pack = self.pieces, [], []
        return pieces

    # -- moving bins ----------------------------------------------------------------------
    def take(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """Remove the state of `bins`: rows ``[end, bin, entries]``, entries a dict key ->
        state when its keys are all str or int (msgpack carries it as it is), else flat
        ``[key, state, key, state, ...]`` (keys encoded); and how many (window, key)
        entries they hold. The states are no longer live here."""
        self.index_some(None)
        rows: list[Any] = []
        n = 0
        windows = self.windows
        self.changed = None  # moved out: the next cut packs all
        for b in bins:
            for end, index in self.index.items():
                keys = index.pop(b, None)
                if keys:
                    w = windows[end]
                    n += len(keys)
                    rows.append([end, b, _entries({k: w.pop(k) for k in keys})])
        return rows, n

    def put(self, rows: list[Any], state: Callable[[Any], S], owned: bool = False) -> None:
        """Add `take` rows, opening windows as needed; `state` copies a state unless
        `owned` (the rows are this operator's to keep, as just unpacked).

        Raises:
            ValueError: a row's key already has state in its window here (a protocol
                bug: a key's state lives in one place); nothing is changed then.
        """
        windows = self.windows
        decoded: list[tuple[float, int, dict[Any, Any]]] = []
        for end, b, entries in rows:  # check everything first: all or nothing
            states = _states(entries)
            w = windows.get(end)
            if w and not w.keys().isdisjoint(states):
                k = next(k for k in states if k in w)
                raise ValueError(f"key {k!r} already has state in the window ending at {end}")
            decoded.append((end, b, states))
        self.changed = None  # moved in: the next cut packs all
        for end, b, states in decoded:
            w = windows.get(end)
            if w is None:
                w = self.open(end)
            w.update(states if owned else {k: state(s) for k, s in states.items()})
            self.index[end].setdefault(b, []).extend(states)


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
        #: a checkpoint's lists of rows per key still to pack (state kept per key), and
        #: the pieces packed so far
        self._rows_to_pack: list[tuple[str, Iterator[Any]]] = []
        self._row_pieces: list[bytes] = []

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

    # -- state by bin (live migration, `bins.py`) ---------------------------------------
    def use_bins(self, bins: int) -> None:
        """Keep the keyed state in `bins` bins (the pool's count, a power of two), as
        the routing table does; set before any state comes in.

        Raises:
            ValueError: `bins` is not a power of two, or state is here already.
        """
        check_bins(bins, f"step {self.step_id!r}")
        if self.state_bins():
            raise ValueError(f"step {self.step_id!r}: the bin count is set before any state "
                             f"comes in; this operator holds state already")
        self._use_bins(bins)

    def _use_bins(self, bins: int) -> None:
        raise NotImplementedError

    def state_keys(self) -> list[Any]:
        """Every key that has state here (as the key function returns it: tuples
        stay tuples), in no particular order; a key in several windows may be
        listed once per window."""
        raise NotImplementedError

    def state_bins(self) -> list[int]:
        """The bins holding state here, ascending."""
        raise NotImplementedError

    def take_bins(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """Remove every piece of state of `bins` and return it as msgpack-able rows
        for `put_state` of an identically configured operator with as many bins, and
        how many entries (a key in a window) the rows hold: what a step of moving
        bins costs. Costs the bins taken, not the whole state. Watermarks and
        counters stay: they are the operator's, not the keys'. The row format is
        the subclass's."""
        raise NotImplementedError

    def put_state(self, rows: list[Any], owned: bool = False) -> None:
        """Add state that `take_bins` of an identically configured operator gave
        away (possibly after a msgpack round trip). The rows are copied unless
        `owned` (they are this operator's to keep, as just unpacked).

        Raises:
            ValueError: a key of `rows` already has state here (a protocol bug:
                a key's state lives in one place); nothing is changed then.
        """
        try:
            self._put_state(rows, owned)
        except ValueError as exc:
            raise ValueError(f"step {self.step_id!r}: {exc}") from exc

    def _put_state(self, rows: list[Any], owned: bool) -> None:
        raise NotImplementedError

    def snapshot(self) -> dict[str, Any]:
        """The operator's state as msgpack-able data (lists, dicts with str keys,
        numbers, strings, None; a join's buffered events as they are). Tuple
        keys are stored as lists."""
        state = self._envelope()
        state.update((k, list(v) if isinstance(v, Iterator) else v)
                     for k, v in self._snapshot_windows().items())
        return state

    def _envelope(self) -> dict[str, Any]:
        """What a snapshot holds besides the keyed state: watermarks, configuration, counters."""
        state = super().snapshot()
        state.update(
            config=self._config(),
            late_count=self.rejects.late_count,
            malformed_count=self.rejects.malformed_count,
        )
        return state

    # -- a checkpoint's snapshot in steps ----------------------------------------------------
    def _aligned_state(self) -> KeyedWindows[Any] | None:
        """The aligned windows' state, which a checkpoint packs bin by bin in steps (the
        runtime runs nothing else at the activation until the last); None when the state
        is kept otherwise (packed at once)."""
        return None

    def begin_snapshot(self, incremental: bool = False) -> dict[str, Any]:
        state = self._aligned_state()
        head = self._envelope()
        if state is None:  # kept per key: its lists of rows (iterators) packed in steps
            self._rows_to_pack = []
            for k, v in self._snapshot_windows().items():
                if isinstance(v, Iterator):
                    self._rows_to_pack.append((k, v))
                    head[k] = []
                else:
                    head[k] = v
            head["listed"] = [k for k, _ in self._rows_to_pack]
            return head
        head["aligned"] = {}
        if state.start_packing(incremental):
            head["aligned"]["ends"] = sorted(state.windows)
            head["delta"] = True
        return head

    def snapshot_step(self, budget: int) -> bool:
        state = self._aligned_state()
        if state is not None:
            return state.pack_some(budget)
        to_pack = self._rows_to_pack
        while to_pack and budget > 0:
            field, rows = to_pack[0]
            chunk = list(islice(rows, budget))
            if len(chunk) < budget:
                to_pack.pop(0)
            if chunk:
                budget -= len(chunk)
                self._row_pieces.append(msgpack.packb([field, chunk], use_bin_type=True))
        return not to_pack

    def index_step(self, budget: int) -> bool:
        state = self._aligned_state()
        return state is None or state.index_some(budget)

    def end_snapshot(self, head: dict[str, Any]) -> dict[str, Any]:
        state = self._aligned_state()
        if state is not None and "aligned" in head:
            head["pieces"] = state.packed()
        elif "listed" in head:
            head["pieces"], self._row_pieces, self._rows_to_pack = self._row_pieces, [], []
        return head

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
        if "listed" in state:  # rows per key packed in steps (`end_snapshot`)
            state = {**state, **{field: [] for field in state["listed"]}}
            for piece in state["pieces"]:
                if isinstance(piece, bytes):  # as the steps packed it, not unpacked yet
                    piece = msgpack.unpackb(piece, raw=False, strict_map_key=False)
                state[piece[0]].extend(piece[1])
        elif "pieces" in state:  # aligned windows packed in steps (`end_snapshot`)
            state = {**state, "aligned": {**state["aligned"], "pieces": state["pieces"]}}
        self._restore_windows(state)
