"""Keyed state kept by bin: what moves, what a checkpoint writes, in pieces.

Keys hash into `bins` bins (a power of two; 4096 unless the pool says
otherwise). A keyed step's routing table maps bins to instances, so live
migration and scaling move bins, never single keys (Megaphone). Every stateful
operator keeps its keyed state so that one bin's state can be listed, taken
and put without a pass over the rest:

- aligned windows (window aggregates, windowed joins, lessees' partials):
  window end -> key -> state, and per window the keys of each bin, added when
  a key first comes into the window (`keyed_windows.KeyedWindows`); on the rocksdb
  backend, the same over a store keyed end, bin, key (`stored_windows.StoredWindows`);
- state kept per key (sessions, keyed processes, interval joins): the keys of
  each bin indexed as they gain and lose state (`KeyBins`), next to it; a keyed
  process on the rocksdb backend keeps its states and timers in a store keyed
  bin, key instead (`stored_keys.StoredKeys`).

A key's bin costs a hash when it comes in, never per event of a key already
there. (Checkpoints pack aligned windows in bounded steps too, each window
in its own order: `KeyedWindows.pack_some`.)

The interface every stateful operator offers the runtime (`WindowedOperator`):
`use_bins` (the pool's bin count, before any state), `state_bins`,
`take_bins` (remove bins' state as msgpack-able rows) and `put_state`.

The hash is the same in every process (Python's own `hash` of str is salted per
process): crc32 of the key's UTF-8 (a str) or of its msgpack encoding.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable
from typing import Any

import msgpack

#: Bins per keyed step unless the pool says otherwise.
DEFAULT_BINS = 4096

_crc32 = zlib.crc32


class _Packers(threading.local):
    """A msgpack packer per thread: made once, not per key (a fifth of the cost)."""

    def __init__(self) -> None:
        self.pack = msgpack.Packer(use_bin_type=True).pack


_packers = _Packers()


def stable_hash(key: Any) -> int:
    """The key's hash, the same in every process.

    A key msgpack cannot encode (a user type, in a dataflow run in-process) hashes
    with Python's `hash`: it never crosses a process, so it needs no stable hash.

    Raises:
        TypeError: the key is neither msgpack-able nor hashable.
    """
    if key.__class__ is str:
        try:
            return _crc32(key.encode())
        except UnicodeEncodeError:  # a lone surrogate: no UTF-8, so never on the wire
            return hash(key)
    try:
        return _crc32(_packers.pack(key))
    except (TypeError, ValueError, OverflowError):
        return hash(key)


def check_bins(bins: Any, owner: str = "the pool") -> int:
    """`bins` if it is a power of two >= 1, else ValueError naming `owner`."""
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1 or bins & (bins - 1):
        raise ValueError(f"{owner}: bins must be a power of two >= 1 (keys hash into bins by "
                         f"masking), got {bins!r}. Fix: use 1024, 4096 or 16384")
    return bins


class KeyBins:
    """Which keys of per-key state lie in which bin, kept as keys come and go
    (a hash per new key, none per event), so a bin's keys are at hand when it moves.

    Attributes:
        mask: bins - 1.
        keys: bin -> its keys (a dict as an ordered set: first-seen order).
    """

    __slots__ = ("mask", "keys")

    def __init__(self, bins: int = DEFAULT_BINS) -> None:
        self.mask = check_bins(bins) - 1
        self.keys: dict[int, dict[Any, None]] = {}

    def add(self, key: Any) -> None:
        """`key` has state now (no harm if it had)."""
        b = stable_hash(key) & self.mask
        keys = self.keys.get(b)
        if keys is None:
            self.keys[b] = {key: None}
        else:
            keys[key] = None

    def discard(self, key: Any) -> None:
        """`key` has no state any more."""
        b = stable_hash(key) & self.mask
        keys = self.keys.get(b)
        if keys is not None:
            keys.pop(key, None)
            if not keys:
                del self.keys[b]

    def bins(self) -> list[int]:
        """The bins with keys, ascending."""
        return sorted(self.keys)

    def take(self, bins: Iterable[int]) -> list[Any]:
        """Remove and return the keys of `bins`, bin by bin (absent bins skipped)."""
        pop = self.keys.pop
        return [k for b in bins for k in pop(b, ())]

    def clear(self) -> None:
        self.keys = {}
