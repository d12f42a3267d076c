"""Aligned windows' state in an embedded store (`StoredWindows`): the same interface and
hot loops as `KeyedWindows`, with its window dicts a bounded cache of hot entries over
a RocksDB store (`state_store.KeyStore`) that holds the rest.

- A key not in a window's cache is looked up in the store (`_Window.get`, which is
  what the operators' hot loops call), and cached.
- Entries changed since they were last written are *dirty* (the `changed` sets of
  `KeyedWindows`, kept for every window from its start). After each batch a bounded
  number of them is written back (`after_batch`), so that a checkpoint finds few; beyond
  `cache_entries`, the oldest cached entries are written back (when dirty) and dropped.
- A checkpoint writes the dirty entries left in bounded steps, then takes the store's
  own checkpoint (its files: `KeyStore.checkpoint`); incremental by file.
- A restore opens the files: nothing is unpacked until a key is asked for.
- Bins are a range of the store per window (keys are ``end | bin | key``), so taking
  bins reads those ranges, and a fired window is one range, read once and deleted.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from cameo_actors.operators.bins import DEFAULT_BINS, stable_hash
from cameo_actors.operators.keyed_windows import KeyedWindows, _entries, _states
from cameo_actors.operators.state_store import (
    BIN,
    KeyStore,
    StateBackend,
    bin_of,
    bin_prefix,
    end_bytes,
    is_store_piece,
    key_bytes,
    key_of,
    packers,
    unpack_state,
    window_key,
)

_crc32 = zlib.crc32
#: Where an entry's key starts in a `window_key` (after the end and the bin).
_KEY_AT = 12
#: Cached entries written back and dropped per batch while the cache is over its bound.
EVICT_ENTRIES = 2_000
#: Dirty entries written back after each batch (a few µs each): what the batch changed,
#: mostly, so that a checkpoint's cut finds little to write (each of its steps holds the
#: activation, and their number stretched a checkpoint at 175,000 keys to 5 s).
TRICKLE_ENTRIES = 500
#: Entries a step of warming the cache after a restore reads: an eighth of the runtime's
#: index step (each is a scan, a key decoded and a state unpacked: about 4 µs).
WARM_SHARE = 8
#: Dirty entries written per step of a checkpoint: a step packs and puts each (a few µs),
#: where the in-memory backend packs a window whole in C; a quarter of its budget.
WRITE_SHARE = 4


class _Dropped(list):  # type: ignore[type-arg]
    """Where the hot loops add a new key of a stored window to its bin: nowhere (the
    store's key order has the bins)."""

    __slots__ = ()

    def append(self, _key: Any) -> None:
        pass


_DROPPED = _Dropped()


class _Index(dict):  # type: ignore[type-arg]
    """A stored window's index of keys by bin, which the hot loops feed and nothing
    keeps (see `_Dropped`)."""

    __slots__ = ()

    def get(self, _b: Any, _default: Any = None) -> Any:
        return _DROPPED

    def __setitem__(self, _b: Any, _keys: Any) -> None:
        pass


class _Window(dict):  # type: ignore[type-arg]
    """The cached entries of one open window, key -> state; `get` of a key not cached
    looks it up in the store (when the window has anything there) and caches it."""

    __slots__ = ("owner", "prefix", "stored")

    def __init__(self, owner: StoredWindows, end: float) -> None:
        super().__init__()
        self.owner = owner
        self.prefix = end_bytes(end)
        self.stored = False  # whether the store may hold entries of this window

    def get(self, key: Any, default: Any = None) -> Any:
        v = dict.get(self, key)
        if v is None and self.stored:
            v = self.owner.fetch(self, key)
        return default if v is None else v


class StoredWindows(KeyedWindows[Any]):
    """`KeyedWindows` over a RocksDB store (see the module's doc).

    Args:
        bins: the pool's bin count.
        backend: the pool's backend (its folder and cache bound).
    """

    __slots__ = ("_store", "backend", "to_write", "checkpointing", "incremental", "warm_from")
    windows: dict[float, _Window]  # type: ignore[assignment]  # every window is a `_Window`

    def __init__(self, bins: int = DEFAULT_BINS, backend: StateBackend | None = None) -> None:
        super().__init__(bins)
        self.backend = backend or StateBackend("rocksdb")
        self._store: KeyStore | None = None  # opened when first written
        self.changed = {}
        #: a checkpoint's dirty entries still to write: (window, its keys)
        self.to_write: list[tuple[_Window, Iterator[Any]]] = []
        self.checkpointing = self.incremental = False
        #: after a restore: the store key the cache's warm-up goes on from (None: done)
        self.warm_from: bytes | None = None

    @property
    def store(self) -> KeyStore:
        """The store, opened when first needed (an operator whose state never leaves its
        cache and is never checkpointed has none)."""
        if self._store is None:
            self._store = KeyStore(self.backend.folder)
        return self._store

    def disk_bytes(self) -> int:
        """Bytes of its store's table files (0 before it was opened)."""
        return self._store.size_bytes() if self._store is not None else 0

    # -- the cache ----------------------------------------------------------------------
    def open(self, end: float) -> dict[Any, Any]:
        w = _Window(self, end)
        self.windows[end] = w
        self.index[end] = _Index()
        self.changed[end] = set()  # type: ignore[index]  # its dirty keys, from its start
        heapq.heappush(self.ends, end)
        return w

    def changed_in(self, end: float) -> set[Any] | None:
        """The window's dirty keys (never dropped: they are what is written back)."""
        return self.changed.get(end)  # type: ignore[union-attr]

    def _window(self, end: float) -> _Window:
        w = self.windows.get(end)
        return self.open(end) if w is None else w  # type: ignore[return-value]

    def indexed(self, end: float, key: Any) -> None:
        """Nothing to index: the store's key order has the bins."""

    def fetch(self, w: _Window, key: Any) -> Any:
        """`key`'s state in window `w` from the store, cached; None if it has none."""
        try:
            data = self.store.get(window_key(w.prefix, stable_hash(key) & self.mask, key))
        except (TypeError, ValueError, OverflowError):  # msgpack cannot carry it: never stored
            return None
        if data is None:
            return None
        v = unpack_state(data)
        dict.__setitem__(w, key, v)
        return v

    def cached(self) -> int:
        """Entries in memory."""
        return sum(map(len, self.windows.values()))

    def _dirty(self, end: float, w: _Window) -> Iterator[Any]:
        """The keys of `w` whose cached state may differ from the store's."""
        keys = self.changed.get(end) if self.changed is not None else None
        return iter(list(w) if keys is None else list(keys))

    def _pairs(self, w: _Window, keys: Iterable[Any]) -> Iterator[tuple[bytes, bytes]]:
        get = dict.__getitem__
        return _pairs(w.prefix, self.mask, ((k, get(w, k)) for k in keys))

    def after_batch(self) -> None:
        """Write back `TRICKLE_ENTRIES` dirty entries, and drop the oldest cached
        entries while the cache is over its bound, `EVICT_ENTRIES` at most (neither
        during a checkpoint's steps)."""
        if self.checkpointing:
            return
        if self.cached() > self.backend.cache_entries:
            self.evict(EVICT_ENTRIES)
        budget = TRICKLE_ENTRIES
        for end, keys in self.changed.items():  # type: ignore[union-attr]
            if keys:
                w = self.windows[end]
                chunk = [keys.pop() for _ in range(min(budget, len(keys)))]
                self.store.write(self._pairs(w, chunk))
                w.stored = True
                budget -= len(chunk)
                if budget <= 0:
                    return

    def evict(self, budget: int) -> int:
        """Write back (if dirty) and drop up to `budget` cached entries, oldest first in
        the window caching the most; how many."""
        end, w = max(self.windows.items(), key=lambda item: len(item[1]))
        keys = []
        for k in w:
            keys.append(k)
            if len(keys) >= budget:
                break
        changed = self.changed.get(end) if self.changed is not None else None
        dirty = keys if changed is None else [k for k in keys if k in changed]
        self.store.write(self._pairs(w, dirty))
        if dirty:
            w.stored = True
        for k in keys:
            dict.__delitem__(w, k)
            if changed is not None:
                changed.discard(k)
        return len(keys)

    def _write_back_all(self) -> None:
        """Every dirty entry to the store (a migration's step: bins handed over whole)."""
        for end, w in self.windows.items():
            if self.store.write(self._pairs(w, self._dirty(end, w))):
                w.stored = True
        self.changed = {end: set() for end in self.windows}

    # -- what KeyedWindows offers ----------------------------------------------------------
    def _entries_of(self, end: float, w: _Window) -> dict[Any, Any]:
        """Every entry of window `w`: the store's, then the cache's over them."""
        entries: dict[Any, Any] = {}
        if w.stored:
            entries = {key_of(k[_KEY_AT:]): unpack_state(v) for k, v in self.store.scan(w.prefix)}
        entries.update(w)
        return entries

    def pop_due(self, watermark: float) -> Iterator[tuple[float, dict[Any, Any]]]:
        ends, windows, changed = self.ends, self.windows, self.changed
        while ends and ends[0] <= watermark:
            end = heapq.heappop(ends)
            del self.index[end]
            if changed is not None:
                changed.pop(end, None)
            w = windows.pop(end)
            entries = self._entries_of(end, w)
            if w.stored:
                self.store.delete_prefix(w.prefix)
            yield end, entries

    def keys(self) -> list[Any]:
        return [k for end, w in self.windows.items() for k in self._entries_of(end, w)]

    def bins(self) -> list[int]:
        found: set[int] = set()
        mask = self.mask
        for w in self.windows.values():
            found.update(stable_hash(k) & mask for k in w)
            if w.stored:
                found.update(bin_of(k) for k, _ in self.store.scan(w.prefix))
        return sorted(found)

    def index_some(self, budget: int | None) -> bool:
        """After a restore, the runtime's steps among other work (`INDEX`): no bin to
        index here, so each step warms the cache instead with the next `budget //
        WARM_SHARE` entries of the store, in its order (a scan: a third of the cost of
        reading a key when an event asks), until the cache is full or every entry is in.
        An entry cached already (newer) stays. True once done."""
        if budget is None or self.warm_from is None or self._store is None:
            return True
        if self.checkpointing:
            return False
        room = self.backend.cache_entries - self.cached()
        if room <= 0:
            self.warm_from = None  # full: the rest is read as events ask
            return True
        step = min(room, max(1, budget // WARM_SHARE))
        by_prefix = {w.prefix: w for w in self.windows.values()}
        n = 0
        for k, v in self._store.scan_from(self.warm_from):
            if n >= step:
                self.warm_from = k  # the next step starts here
                return False
            w = by_prefix.get(k[:8])
            if w is not None:
                key = key_of(k[_KEY_AT:])
                if not dict.__contains__(w, key):
                    dict.__setitem__(w, key, unpack_state(v))
                    n += 1
        self.warm_from = None  # every entry is in
        return True

    def dump(self, row: Callable[[Any], list[Any]]) -> dict[str, Any]:
        plain: KeyedWindows[Any] = KeyedWindows(self.mask + 1)
        plain.windows = {end: self._in_store_order(w, self._entries_of(end, w))
                         for end, w in self.windows.items()}
        return plain.dump(row)

    def _in_store_order(self, w: _Window, entries: dict[Any, Any]) -> dict[Any, Any]:
        """`entries` in the store's key order (bin, then key): the same whatever is cached."""
        mask = self.mask
        order = sorted(entries, key=lambda k: (stable_hash(k) & mask, key_bytes(k)))
        return {k: entries[k] for k in order}

    def load(self, data: dict[str, Any], state: Callable[[list[Any]], Any]) -> None:
        """A checkpoint of this backend (its store's files) is opened; one of the
        in-memory backend (`KeyedWindows.dump` or its pieces) is written into a new store."""
        pieces = list(data.get("pieces", ()))
        stored = [p for p in pieces if is_store_piece(p)]
        if self._store is not None:
            self._store.close()
            self._store = None
        self.windows, self.index, self.ends, self.to_pack, self.pieces = {}, {}, [], [], []
        if stored:
            self._store, head = KeyStore.restore(self.backend.folder, stored)
            for end in head["ends"]:
                self.open(end).stored = True  # type: ignore[attr-defined]
            self.warm_from = b""
        rest = [p for p in pieces if not is_store_piece(p)]
        if rest or data.get("packed") or data.get("windows"):
            plain: KeyedWindows[Any] = KeyedWindows(self.mask + 1)
            plain.load({**data, "pieces": rest}, state)
            for end, entries in plain.windows.items():
                w = self._window(end)
                self.store.write(_pairs(w.prefix, self.mask, entries.items()))
                w.stored = True
        self.changed = {end: set() for end in self.windows}

    # -- a checkpoint: the dirty entries written, then the store's files ------------------
    def start_packing(self, incremental: bool = False) -> bool:
        self.to_write = [(w, self._dirty(end, w)) for end, w in sorted(self.windows.items())]
        self.changed = {end: set() for end in self.windows}
        self.incremental = incremental and self.store.shipped is not None
        self.checkpointing = True
        self.pieces = []
        return self.incremental

    def pack_some(self, budget: int) -> bool:
        """Write the next dirty entries (`budget // WRITE_SHARE`); once all are written,
        in a step of its own, take the store's checkpoint. True once that is done."""
        to_write, n = self.to_write, max(1, budget // WRITE_SHARE)
        while to_write and n > 0:
            w, keys = to_write[0]
            chunk = []
            for k in keys:
                chunk.append(k)
                if len(chunk) >= n:
                    break
            else:
                to_write.pop(0)
            if chunk and self.store.write(self._pairs(w, chunk)):
                w.stored = True
            n -= len(chunk)
        if to_write or n <= 0:
            return False
        head = {"ends": sorted(self.windows)}
        self.pieces = self.store.checkpoint(head, self.incremental)  # type: ignore[assignment]
        self.checkpointing = False
        return True

    def packed(self) -> list[bytes]:
        pieces, self.pieces, self.to_write = self.pieces, [], []
        self.checkpointing = False
        return pieces

    # -- moving bins ----------------------------------------------------------------------
    def take(self, bins: Iterable[int]) -> tuple[list[Any], int]:
        """As `KeyedWindows.take`: the bins' entries, read from the store by range (every
        dirty entry is written first), and removed."""
        bins = list(bins)
        # After this every cached entry is in the store too: a bin's range holds all of
        # the bin, and its keys say which cached entries to drop (no pass over the
        # cache, which a migration's step of one bin would make per bin).
        self._write_back_all()
        rows: list[Any] = []
        n = 0
        for end, w in self.windows.items():
            if not w.stored:
                continue  # nothing in it: a window with entries was written just now
            for b in bins:
                found = list(self.store.scan(bin_prefix(w.prefix, b)))
                if found:
                    # Point deletes, not a range: many small range tombstones make every
                    # later iterator slower until a compaction drops them (docs/runtime.md).
                    self.store.write((k, None) for k, _ in found)
                    n += len(found)
                    entries: dict[Any, Any] = {}
                    for k, v in found:
                        key = key_of(k[_KEY_AT:])
                        cached = dict.pop(w, key, None)  # the same state, unpacked
                        entries[key] = unpack_state(v) if cached is None else cached
                    rows.append([end, b, _entries(entries)])
        return rows, n

    def put(self, rows: list[Any], state: Callable[[Any], Any], owned: bool = False) -> None:
        windows = self.windows
        decoded: list[tuple[float, dict[Any, Any]]] = []
        for end, _b, entries in rows:  # check everything first: all or nothing
            states = _states(entries)
            w = windows.get(end)
            if w is not None:
                for k in states:
                    if w.get(k) is not None:
                        raise ValueError(f"key {k!r} already has state in the window ending "
                                         f"at {end}")
            decoded.append((end, states))
        for end, states in decoded:
            w = self._window(end)
            self.store.write(_pairs(w.prefix, self.mask, states.items()))
            w.stored = True


def _pairs(prefix: bytes, mask: int, items: Iterable[tuple[Any, Any]]
           ) -> Iterator[tuple[bytes, bytes]]:
    """(store key, packed state) of a window's (key, state) items."""
    pack_bin, pack = BIN.pack, packers.pack
    for k, state in items:
        try:
            if k.__class__ is str:
                kb = k.encode()
                yield prefix + pack_bin(_crc32(kb) & mask) + b"\x00" + kb, pack(state)
            else:
                yield window_key(prefix, stable_hash(k) & mask, k), pack(state)
        except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as exc:
            raise ValueError(
                f"the rocksdb state backend keeps keys and states as msgpack; key {k!r} or its "
                f"state cannot be packed ({exc}). Fix: use keys and aggregates of str, int, "
                f"float, bool, None, lists and dicts, or state_backend='memory'") from exc


def aligned_state(bins: int, backend: StateBackend) -> KeyedWindows[Any]:
    """Aligned windows' state in the pool's backend."""
    return StoredWindows(bins, backend) if backend.stored else KeyedWindows(bins)


def store_entries(pieces: list[Any], folder: str) -> list[Any]:
    """A store's checkpoint pieces as the in-memory backend loads them (``[end,
    entries]`` per window): a pool that went back to memory restores from it."""
    store, head = KeyStore.restore(folder, pieces)
    try:
        out = []
        for end in head["ends"]:
            entries = {key_of(k[_KEY_AT:]): unpack_state(v)
                       for k, v in store.scan(end_bytes(end))}
            out.append([end, entries])
        return out
    finally:
        store.close()
