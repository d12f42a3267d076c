"""Keyed state in an embedded log-structured store (RocksDB, through `rocksdict`): the
backend a pool chooses for state larger than memory, checkpointed by the store's own
files and restored by opening them (`StateBackend`, `KeyStore`).

A store holds msgpack'd states under byte keys whose prefix orders them by what moves
together: an aligned window's entries are ``end | bin | key`` (`window_key`), so a
fired window is one range and a bin one range per window. Writes skip RocksDB's
write-ahead log: the store is never reopened after a crash, a restore opens a
checkpoint's files instead.

A checkpoint of a store (`KeyStore.checkpoint`) is RocksDB's own: hard links to its
immutable table files plus the small files that describe them. Only table files not
shipped in the parts it builds on go into a part (incremental by file, as Flink's
RocksDB backend); a table file is memory-mapped, so the writer thread, not the worker,
reads its bytes. A restore (`KeyStore.restore`) writes the files of its chain into a
fresh folder and opens the store there: no pass over its keys.
"""

from __future__ import annotations

import mmap
import os
import shutil
import struct
import tempfile
import threading
import uuid
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgpack
from rocksdict import (
    BlockBasedOptions,
    Checkpoint,
    DBCompressionType,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from cameo_actors.operators.windowing import decode_key, encode_key

#: The backends a pool may keep keyed state in (`RuntimeConfig.state_backend`).
MEMORY, ROCKSDB = "memory", "rocksdb"
BACKENDS = (MEMORY, ROCKSDB)
#: RocksDB's write buffer: a checkpoint flushes at most this much on the worker thread
#: (1 MB: 10-20 ms, where 4 MB took 30-60; RocksDB's own thread flushes each full one).
WRITE_BUFFER_BYTES = 1 << 20
#: Level-0 files (a flush of the write buffer each) that start a compaction.
L0_FILES = 20
#: A piece of a store's checkpoint that describes it (the others are its files).
STORE = "store"

_END = struct.Struct(">Q")
#: A bin in a store key: 4 bytes, big-endian (bins sort as numbers).
BIN = struct.Struct(">I")
_SIGN = 1 << 63


@dataclass(frozen=True)
class StateBackend:
    """Where a pool keeps keyed state (`RuntimeConfig.state_backend`).

    Attributes:
        kind: "memory" (Python objects on the executor's heap) or "rocksdb".
        folder: where RocksDB stores live (one subfolder each, removed with it).
        cache_entries: decoded entries kept in memory per store (hot keys); beyond, the
            oldest written back and dropped a few at a time.
    """

    kind: str = MEMORY
    folder: str = ""
    cache_entries: int = 1_000_000

    @property
    def stored(self) -> bool:
        return self.kind == ROCKSDB


#: The in-memory backend (the default).
IN_MEMORY = StateBackend()


def end_bytes(end: float) -> bytes:
    """8 bytes of a window end that sort as the numbers do (a double's bits, the sign
    flipped for positives and every bit for negatives)."""
    (bits,) = _END.unpack(struct.pack(">d", float(end)))
    return _END.pack(bits ^ 0xFFFF_FFFF_FFFF_FFFF if bits & _SIGN else bits | _SIGN)


class _Packers(threading.local):
    """A msgpack packer per thread: made once, not per entry (a packer made per call
    doubles the cost of packing a small state)."""

    def __init__(self) -> None:
        self.pack = msgpack.Packer(use_bin_type=True).pack


packers = _Packers()


def key_bytes(key: Any) -> bytes:
    """A key as bytes: a str as its UTF-8 after a 0 byte, anything else msgpack'd after a 1
    byte (tuples as lists: `encode_key`). TypeError if msgpack cannot carry it."""
    if key.__class__ is str:
        try:
            return b"\x00" + key.encode()
        except UnicodeEncodeError:  # a lone surrogate: msgpack cannot carry it either
            raise TypeError(f"key {key!r} is not valid UTF-8") from None
    packed: bytes = packers.pack(encode_key(key))
    return b"\x01" + packed


def key_of(data: bytes) -> Any:
    """Undo `key_bytes`."""
    if data[0] == 0:
        return data[1:].decode()
    return decode_key(msgpack.unpackb(data[1:], raw=False, strict_map_key=False))


def window_key(end_prefix: bytes, b: int, key: Any) -> bytes:
    """An aligned window's entry's key in the store: end, bin, key."""
    return end_prefix + BIN.pack(b) + key_bytes(key)


def bin_prefix(end_prefix: bytes, b: int) -> bytes:
    return end_prefix + BIN.pack(b)


def bin_of(store_key: bytes) -> int:
    """The bin of a `window_key`."""
    return int(BIN.unpack_from(store_key, 8)[0])


def pack_state(state: Any) -> bytes:
    packed: bytes = packers.pack(state)
    return packed


def unpack_state(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def _after(prefix: bytes) -> bytes:
    """The first key after every key starting with `prefix` (`prefix` not all 0xff)."""
    i = len(prefix) - 1
    while prefix[i] == 0xFF:
        i -= 1
    return prefix[:i] + bytes([prefix[i] + 1])


def _bin_header(n: int) -> bytes:
    """msgpack's header of a bin of `n` bytes (bin 32), so a file's bytes follow it as
    they are, in a frame of their own, never copied into one object."""
    return b"\xc6" + struct.pack(">I", n)


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_write_buffer_size(WRITE_BUFFER_BYTES)
    opts.set_max_background_jobs(1)  # two cores: one flush or compaction at a time
    # Every flush makes a level-0 file; changed keys are spread over the whole key range,
    # so a compaction into level 1 rewrites all of it, and the next part carries it all:
    # compact every 20 flushes, not every 4 (RocksDB's default).
    opts.set_level_zero_file_num_compaction_trigger(L0_FILES)
    opts.set_level_zero_slowdown_writes_trigger(2 * L0_FILES)
    opts.set_level_zero_stop_writes_trigger(3 * L0_FILES)
    opts.set_compression_type(DBCompressionType.lz4())
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)  # a miss (a new key) costs no read of a block
    opts.set_block_based_table_factory(table)
    return opts


def _remove(folder: str, db: Rdict) -> None:
    try:
        db.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class KeyStore:
    """One RocksDB store in a folder of its own under `root` (removed when the store is
    closed or collected); a checkpoint's files (`checkpoint`) and a store opened from
    them (`restore`).

    Attributes:
        shipped: the table files in the parts the next checkpoint may build on (None:
            unknown, the next one ships every file).
    """

    def __init__(self, root: str, folder: str | None = None) -> None:
        os.makedirs(root, exist_ok=True)
        if root not in _swept:
            _sweep(root)
        self.root = root
        self.folder = folder or tempfile.mkdtemp(prefix=f"store-{os.getpid()}-", dir=root)
        self.db = Rdict(self.folder, _options())
        no_log = WriteOptions()
        no_log.disable_wal = True  # type: ignore[method-assign,assignment]  # a property
        self.db.set_write_options(no_log)
        self.shipped: set[str] | None = None
        self._closer = weakref.finalize(self, _remove, self.folder, self.db)

    def close(self) -> None:
        self._closer()

    # -- reads and writes ------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        found: bytes | None = self.db.get(key)
        return found

    def write(self, pairs: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Put every (key, value) in one atomic batch, a value None as a delete; how many."""
        batch = WriteBatch(raw_mode=True)
        n = 0
        for k, v in pairs:
            if v is None:
                batch.delete(k)
            else:
                batch.put(k, v)
            n += 1
        if n:
            self.db.write(batch)
        return n

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of every key starting with `prefix`, in key order."""
        it = self.db.iter()
        it.seek(prefix)
        n = len(prefix)
        while it.valid():
            k = it.key()
            if k[:n] != prefix:
                return
            yield k, it.value()
            it.next()

    def scan_from(self, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of every key from `start` on, in key order (a new iterator: it
        sees every write made before it)."""
        it = self.db.iter()
        it.seek(start)
        while it.valid():
            yield it.key(), it.value()
            it.next()

    def delete_prefix(self, prefix: bytes) -> None:
        """Remove every key starting with `prefix` (one range tombstone)."""
        self.db.delete_range(prefix, _after(prefix))

    def is_empty(self) -> bool:
        it = self.db.iter()
        it.seek_to_first()
        return not it.valid()

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint(self, head: dict[str, Any], incremental: bool) -> list[list[Any]]:
        """The store as it is now, as a part's pieces, each a list of frames that make
        one msgpack object: first ``{"store": head + {"live": [file names]}}``, then
        ``{"file": name, "data": bytes}`` per file the part carries (every file unless
        `incremental`, then the table files not `shipped` yet, and the small files that
        describe them). The files are hard links, their bytes mapped: read as the part
        is written, off the worker thread."""
        folder = os.path.join(self.root, f"ckpt-{os.getpid()}-{uuid.uuid4().hex}")
        Checkpoint(self.db).create_checkpoint(folder)
        try:
            names = sorted(os.listdir(folder))
            shipped = self.shipped if incremental and self.shipped is not None else set()
            pieces: list[list[Any]] = [[msgpack.packb(
                {STORE: {**head, "live": names, "incremental": incremental}},
                use_bin_type=True)]]
            for name in names:
                if name.endswith(".sst") and name in shipped:
                    continue
                pieces.append(_file_piece(name, os.path.join(folder, name)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # the mapped bytes stay readable
        self.shipped = {n for n in names if n.endswith(".sst")}
        return pieces

    @classmethod
    def restore(cls, root: str, pieces: Iterable[Any]) -> tuple[KeyStore, dict[str, Any]]:
        """A store opened from a chain's pieces (`checkpoint`'s, unpacked, the full
        part's first), and the last one's head. Its files are written as they are."""
        files: dict[str, bytes] = {}
        head: dict[str, Any] | None = None
        for piece in pieces:
            if STORE in piece:
                head = piece[STORE]
            else:
                files[piece["file"]] = piece["data"]
        if head is None:
            raise ValueError("a store's checkpoint has no head piece: the part is damaged")
        os.makedirs(root, exist_ok=True)
        folder = tempfile.mkdtemp(prefix=f"store-{os.getpid()}-", dir=root)
        for name in head["live"]:
            data = files.get(name)
            if data is None:
                raise ValueError(f"a store's checkpoint lacks its file {name!r}: a part of its "
                                 f"chain is missing")
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        store = cls(root, folder)
        store.shipped = {n for n in head["live"] if n.endswith(".sst")}
        return store, head

    def size_bytes(self) -> int:
        """Bytes of its table files on disk."""
        return sum(f["size"] for f in self.db.live_files())


#: The roots whose stores of dead processes this process removed.
_swept: set[str] = set()


def _sweep(root: str) -> None:
    """Remove the stores that processes gone from this machine left in `root` (a killed
    executor never closes its stores): each folder is named after its process."""
    _swept.add(root)
    for name in os.listdir(root):
        parts = name.split("-")
        if len(parts) < 3 or parts[0] not in ("store", "ckpt") or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except PermissionError:  # alive, another user's
            pass


def _file_piece(name: str, path: str) -> list[Any]:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if not name.endswith(".sst") or size == 0:
            return [msgpack.packb({"file": name, "data": f.read()}, use_bin_type=True)]
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    head = b"\x82" + msgpack.packb("file") + msgpack.packb(name) + msgpack.packb("data")
    return [head + _bin_header(size), data]


def joined(piece: Any) -> Any:
    """A store's piece as its frames make it (`KeyStore.checkpoint`), unpacked, when it is
    still those frames (an operator's snapshot taken and restored in one process);
    any other piece as it is."""
    if isinstance(piece, list) and piece and isinstance(piece[0], (bytes, memoryview)):
        return msgpack.unpackb(b"".join(map(bytes, piece)), raw=False, strict_map_key=False)
    return piece


def is_store_piece(piece: Any) -> bool:
    """Whether an unpacked piece is a store's (`KeyStore.checkpoint`)."""
    return isinstance(piece, dict) and (STORE in piece or "file" in piece)


def backend_folder(configured: str | None) -> str:
    """Where a pool's stores live: `configured`, else a folder in the system's temp."""
    return configured or os.path.join(tempfile.gettempdir(), "cameo-state")
