"""State kept per key in an embedded store on the rocksdb backend (`StoredKeys`,
`StoredState`): a keyed process's states and timers, an interval join's events, session
windows' sessions; a bounded cache of hot keys over a RocksDB store
(`state_store.KeyStore`) that holds the rest.

- One store per activation (`StoreHome`), opened when first written; each map of keys in
  it has a prefix of its own (a process: its states, its keys' timers, its timers in
  firing order: `process_timers`), and so does each queue of times (`StoredState.queues`).
- A map's store key is ``prefix | bin | key`` (`BIN`, `key_bytes`), so a bin is one
  range: taking bins reads and deletes ranges, and hands their values on as the msgpack
  bytes the store holds.
- A key not cached is looked up in the store when asked for (`StoredKeys.get`), and
  cached.
- A key set or deleted is *dirty* until it is written back: after each batch a bounded
  number are (`after_batch`), and beyond `cache_entries` the oldest cached keys are
  written back and dropped. A deleted key is dirty and not cached (written as a delete).
- A checkpoint writes the dirty keys left in bounded steps, then takes the store's own
  checkpoint (its files, incremental by file: `KeyStore.checkpoint`); a restore opens
  the files, and nothing is unpacked until a key is asked for (`StoredState`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, Protocol

from cameo_actors.operators.bins import check_bins, stable_hash
from cameo_actors.operators.state_store import (
    BIN,
    KeyStore,
    StateBackend,
    key_bytes,
    key_of,
    packers,
    unpack_state,
)

_crc32 = zlib.crc32
#: Dirty keys a checkpoint's cut may find: beyond, `TRICKLE_KEYS` are written back after
#: each batch (a few µs each), so that a cut takes a few steps; below, none is, as a key
#: changed again before the cut would be written twice. Cached keys dropped per batch
#: while the cache is over its bound.
DIRTY_KEYS = 10_000
TRICKLE_KEYS = 500
EVICT_KEYS = 2_000
#: Dirty keys written per step of a checkpoint: a quarter of the step's budget (each is
#: packed and put, where the in-memory backend packs rows in C).
WRITE_SHARE = 4


def _same(v: Any) -> Any:
    return v


class StoreHome:
    """The one store of an activation's state kept per key, opened when first needed (an
    operator whose state never leaves its cache and is never checkpointed has none)."""

    __slots__ = ("backend", "_store")

    def __init__(self, backend: StateBackend) -> None:
        self.backend = backend
        self._store: KeyStore | None = None

    @property
    def store(self) -> KeyStore:
        if self._store is None:
            self._store = KeyStore(self.backend.folder)
        return self._store

    @property
    def opened(self) -> bool:
        return self._store is not None

    def disk_bytes(self) -> int:
        return self._store.size_bytes() if self._store is not None else 0

    def open(self, pieces: list[Any]) -> None:
        """Open a checkpoint's files instead (`KeyStore.restore`)."""
        self.close()
        self._store, _ = KeyStore.restore(self.backend.folder, pieces)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


class StoredKeys:
    """key -> value over a store (see the module's doc): `get`, ``[key] = value`` (the
    value changed: written back later), ``del [key]``, ``in``, `pop`, iteration over
    every key.

    Args:
        bins: the pool's bin count.
        home: the store.
        prefix: this map's first byte(s) in the store.
        encode, decode: a value as msgpack carries it, and back (a set as a list).
    """

    __slots__ = ("home", "prefix", "mask", "cache", "dirty", "stored", "encode", "decode",
                 "frozen")

    def __init__(self, bins: int, home: StoreHome, prefix: bytes,
                 encode: Callable[[Any], Any] = _same, decode: Callable[[Any], Any] = _same
                 ) -> None:
        self.mask = check_bins(bins) - 1
        self.home, self.prefix = home, prefix
        self.encode, self.decode = encode, decode
        self.cache: dict[Any, Any] = {}
        #: keys set or deleted since they were last written (deleted ones are not cached)
        self.dirty: set[Any] = set()
        self.stored = False  # whether the store may hold keys of this map
        self.frozen = False  # a checkpoint's cut is being written: nothing else is

    # -- the mapping ------------------------------------------------------------------------
    def get(self, key: Any, default: Any = None) -> Any:
        v = self.cache.get(key)
        if v is None and self.stored and key not in self.dirty:
            v = self._fetch(key)
        return default if v is None else v

    def _fetch(self, key: Any) -> Any:
        try:
            data = self.home.store.get(self._key(key))
        except (TypeError, ValueError, OverflowError):  # msgpack cannot carry it: never stored
            return None
        if data is None:
            return None
        v = self.cache[key] = self.decode(unpack_state(data))
        return v

    def __setitem__(self, key: Any, value: Any) -> None:
        self.cache[key] = value
        self.dirty.add(key)

    def __delitem__(self, key: Any) -> None:
        self.cache.pop(key, None)
        if self.stored:
            self.dirty.add(key)  # a delete to write
        else:
            self.dirty.discard(key)

    def pop(self, key: Any, default: Any = None) -> Any:
        v = self.get(key)
        if v is None:
            return default
        del self[key]
        return v

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None

    def __iter__(self) -> Iterator[Any]:
        """Every key, in the store's order (every dirty key written first)."""
        self.write_back(list(self.dirty))
        if not self.stored:
            return iter(list(self.cache))
        at = len(self.prefix) + BIN.size
        return iter([key_of(k[at:]) for k, _ in self.home.store.scan(self.prefix)])

    def cached(self) -> int:
        return len(self.cache)

    # -- writing back -----------------------------------------------------------------------
    def _key(self, k: Any) -> bytes:
        if k.__class__ is str:
            kb = k.encode()
            return self.prefix + BIN.pack(_crc32(kb) & self.mask) + b"\x00" + kb
        return self.prefix + BIN.pack(stable_hash(k) & self.mask) + key_bytes(k)

    def _pairs(self, keys: Iterable[Any]) -> Iterator[tuple[bytes, bytes | None]]:
        """(store key, packed value, or None for a delete) of `keys`."""
        cache, pack, encode = self.cache, packers.pack, self.encode
        for k in keys:
            try:
                v = cache.get(k)
                yield self._key(k), None if v is None else pack(encode(v))
            except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as exc:
                raise ValueError(
                    f"the rocksdb state backend keeps keys and states as msgpack; key {k!r} or "
                    f"its state cannot be packed ({exc}). Fix: keep str, int, float, bool, "
                    f"None, lists and dicts in the state, or use state_backend='memory'") from exc

    def write_back(self, keys: list[Any]) -> None:
        if keys and self.home.store.write(self._pairs(keys)):
            self.stored = True
        self.dirty.difference_update(keys)

    def after_batch(self) -> None:
        """Drop the oldest cached keys while the cache is over its bound (`EVICT_KEYS` at
        most, written back first when dirty), then write back `TRICKLE_KEYS` dirty keys
        while there are over `DIRTY_KEYS` (neither while a checkpoint's cut is written)."""
        if self.frozen:
            return
        cache, dirty = self.cache, self.dirty
        if len(cache) > self.home.backend.cache_entries:
            old = list(islice(cache, EVICT_KEYS))
            self.write_back([k for k in old if k in dirty])
            for k in old:
                del cache[k]
        if len(dirty) > DIRTY_KEYS:
            self.write_back([dirty.pop() for _ in range(min(TRICKLE_KEYS, len(dirty) - DIRTY_KEYS))])

    def reset(self, stored: bool) -> None:
        """Forget the cache: the store holds this map's keys (`stored`) or none."""
        self.cache, self.dirty, self.stored, self.frozen = {}, set(), stored, False

    # -- bins -------------------------------------------------------------------------------
    def bins(self) -> list[int]:
        """The bins with keys, ascending (one seek per bin)."""
        self.write_back(list(self.dirty))
        if not self.stored:
            return sorted({stable_hash(k) & self.mask for k in self.cache})
        found: list[int] = []
        scan, at = self.home.store.scan, len(self.prefix)
        first = next(scan(self.prefix), None)
        while first is not None:
            found.append(BIN.unpack_from(first[0], at)[0])
            if found[-1] >= self.mask:
                break
            first = next(self.home.store.scan_from(self.prefix + BIN.pack(found[-1] + 1)), None)
            if first is not None and not first[0].startswith(self.prefix):
                break
        return found

    def take(self, bins: Iterable[int]) -> list[tuple[Any, bytes]]:
        """Remove the keys of `bins`: (key, its value as the msgpack bytes the store
        holds), bin by bin (every dirty key written first)."""
        self.write_back(list(self.dirty))
        if not self.stored:
            return []
        out: list[tuple[Any, bytes]] = []
        store, cache, at = self.home.store, self.cache, len(self.prefix) + BIN.size
        for b in bins:
            prefix = self.prefix + BIN.pack(b)
            found = list(store.scan(prefix))
            if found:
                store.write((k, None) for k, _ in found)  # point deletes: as stored_windows
                for k, v in found:
                    key = key_of(k[at:])
                    cache.pop(key, None)
                    out.append((key, bytes(v)))
        return out

    def put_packed(self, items: Iterable[tuple[Any, bytes]]) -> None:
        """Add keys with their values as msgpack bytes (another map's `take`), as they are."""
        if self.home.store.write((self._key(k), blob) for k, blob in items):
            self.stored = True


class Queue(Protocol):
    """A queue in the same store whose writes wait for a batch's end
    (`process_timers.StoredTimers`)."""

    def flush(self) -> None:
        """Write what waits."""

    def clear(self) -> None:
        """The store was cleared or replaced: forget what waits, read the queue again."""


class StoredState:
    """The maps and queues of one activation's store, checkpointed together: a cut writes
    every map's dirty keys in bounded steps, then takes the store's checkpoint once.

    Args:
        home: the store.
        maps: its maps of keys.
        queues: its queues (flushed after each batch and at a cut, cleared at a restore).
    """

    __slots__ = ("home", "maps", "queues", "to_write", "incremental", "pieces")

    def __init__(self, home: StoreHome, maps: list[StoredKeys], queues: Sequence[Queue] = ()
                 ) -> None:
        self.home, self.maps, self.queues = home, maps, queues
        self.to_write: list[tuple[StoredKeys, Iterator[Any]]] = []
        self.incremental = False
        self.pieces: list[Any] = []

    def disk_bytes(self) -> int:
        return self.home.disk_bytes()

    def after_batch(self) -> None:
        for q in self.queues:
            q.flush()
        for m in self.maps:
            m.after_batch()

    def start_packing(self, incremental: bool) -> bool:
        """A checkpoint's cut: the dirty keys are to be written, then the store's files
        taken (`pack_some`); whether the part may build on the last (only new files)."""
        for q in self.queues:
            q.flush()
        self.to_write = [(m, iter(list(m.dirty))) for m in self.maps]
        for m in self.maps:
            m.frozen = True
        self.incremental = incremental and self.home.store.shipped is not None
        self.pieces = []
        return self.incremental

    def pack_some(self, budget: int) -> bool:
        """Write the next `budget // WRITE_SHARE` dirty keys of the cut; once all are
        written, in a step of its own, take the store's checkpoint. True once done."""
        n = max(1, budget // WRITE_SHARE)
        while self.to_write:
            m, keys = self.to_write[0]
            chunk = list(islice(keys, n))
            if chunk:
                m.write_back(chunk)
                return False
            self.to_write.pop(0)
        self.pieces = self.home.store.checkpoint({"keys": True}, self.incremental)
        for m in self.maps:
            m.frozen = False
        return True

    def packed(self) -> list[Any]:
        pieces, self.pieces, self.to_write = self.pieces, [], []
        for m in self.maps:
            m.frozen = False
        return pieces

    def load(self, pieces: list[Any]) -> None:
        """Open a checkpoint's store files (`pack_some`'s pieces, unpacked, the chain's full
        part first): nothing is unpacked until asked for."""
        self.clear()
        self.home.open(pieces)
        for m in self.maps:
            m.reset(True)
        for q in self.queues:
            q.clear()

    def restore(self, pieces: list[Any]) -> None:
        """A checkpoint's store files (`load`), or none: empty (`clear`)."""
        if pieces:
            self.load(pieces)
        else:
            self.clear()

    def clear(self) -> None:
        self.home.close()
        for m in self.maps:
            m.reset(False)
        self.to_write, self.pieces = [], []
        for q in self.queues:
            q.clear()


def stored_entries(pieces: list[Any], folder: str, *prefixes: bytes
                   ) -> list[list[tuple[Any, bytes]]]:
    """A `StoredState` checkpoint's (key, value as msgpack bytes) of each map, its files
    opened once: a pool that went back to memory restores from it."""
    home = StoreHome(StateBackend("rocksdb", folder))
    home.open(pieces)
    try:
        return [[(key_of(k[len(p) + BIN.size:]), bytes(v)) for k, v in home.store.scan(p)]
                for p in prefixes]
    finally:
        home.close()
