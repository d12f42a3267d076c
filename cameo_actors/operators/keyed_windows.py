"""The state of aligned (tumbling and sliding) windows: window end -> key -> state,
with the keys of each bin; fired in end order, snapshotted packed (whole, or in
steps, or only what changed since the last cut), moved bin by bin (`KeyedWindows`)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, Generic, TypeVar

import msgpack

from cameo_actors.operators.bins import DEFAULT_BINS, check_bins, stable_hash
from cameo_actors.operators.windowing import decode_key, encode_key

S = TypeVar("S")


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
        return entries
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
