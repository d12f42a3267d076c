"""The write-ahead log of one source activation: every ingest call it accepted.

The executor appends each call before acknowledging it, so once its process dies the
source is restored from a checkpoint and the calls after it are replayed. A record is a
4-byte big-endian length, then msgpack ``[client, seq, blob]``, flushed to the OS
(fsynced too if asked). Each process opens a new segment, so it never appends after a tail
that a killed one may have left half-written; a reader ends a segment at its first bad
record. Calls come in any order and twice at times: the reader dedupes. A completed
checkpoint's positions (client -> next seq) retire the closed segments they cover.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import struct
import threading
from collections.abc import Iterator
from typing import IO, Any

import msgpack

_LEN = struct.Struct(">I")


def _bin_head(n: int) -> bytes:
    """msgpack's head of a bin of `n` bytes.

    >>> _bin_head(3) + b"abc" == msgpack.packb(b"abc")
    True
    """
    if n < 1 << 8:
        return b"\xc4" + n.to_bytes(1, "big")
    if n < 1 << 16:
        return b"\xc5" + n.to_bytes(2, "big")
    return b"\xc6" + n.to_bytes(4, "big")
_SEGMENT = re.compile(r"seg-([0-9]+)\.log")


def _name(n: int) -> str:
    return f"seg-{n:010d}.log"


class IngressLog:
    """The ingress write-ahead log kept in `folder`, one segment file per run of appends.

    Example:
        >>> import tempfile
        >>> log = IngressLog(tempfile.mkdtemp())
        >>> log.append("client-a", 0, b"batch")
        >>> list(log.records())
        [('client-a', 0, b'batch')]
        >>> log.drop()
    """

    def __init__(self, folder: str, *, fsync: bool = False) -> None:
        self.folder = folder
        self.fsync = fsync
        self.records_written = 0
        self.bytes_written = 0
        os.makedirs(folder, exist_ok=True)
        self._lock = threading.Lock()  # appends, roll and close
        self._retiring = threading.Lock()  # one retire at a time
        # Closed segment -> client -> highest seq in it; None: an earlier process's, not
        # scanned yet. Only these may be retired: a segment that appears later may be
        # another live instance's open one.
        self._closed: dict[int, dict[str, int] | None] = {n: None for n in self.segments()}
        self._highest: dict[str, int] = {}  # of the open segment
        self._file: IO[bytes] | None = None
        self._segment = 0
        self._broken = ""  # why the log closed itself, if it did
        self._open(max(self._closed, default=0) + 1)

    def _open(self, n: int) -> None:
        while True:
            try:
                # Exclusive and unbuffered: a segment is never shared, and a write is a
                # syscall, with no buffer left half-flushed by a failure.
                self._file = open(  # noqa: SIM115 (kept open until roll or close)
                    os.path.join(self.folder, _name(n)), "xb", buffering=0)
                break
            except FileExistsError:  # another instance on this folder took it
                n += 1
        self._segment = n
        self._highest = {}
        if self.fsync:
            _fsync_dir(self.folder)  # the new file's name must survive a machine crash too

    # == writing ==================================================================
    def append(self, client: str, seq: int, blob: bytes) -> None:
        """Write one ingest call and flush it to the OS (and to disk if `fsync`).

        Raises:
            TypeError: an argument of the wrong type (it would read back as a corrupt
                record and end its segment, losing the calls after it).
            ValueError: the log is closed.
        """
        if not isinstance(client, str) or type(seq) is not int or \
                not isinstance(blob, (bytes, bytearray, memoryview)):
            raise TypeError(f"ingress log {self.folder}: append(client: str, seq: int, "
                            f"blob: bytes) got ({type(client).__name__}, "
                            f"{type(seq).__name__}, {type(blob).__name__})")
        # msgpack's [client, seq, blob], its head packed and the blob written as it is: a
        # copy of the blob would hold the interpreter lock from the worker thread.
        head = b"\x93" + msgpack.packb(client) + msgpack.packb(seq) + _bin_head(len(blob))
        with self._lock:
            f = self._file
            if f is None:
                raise ValueError(f"ingress log {self.folder} is closed{self._broken}")
            try:
                for part in (_LEN.pack(len(head) + len(blob)) + head, blob):
                    view = memoryview(part)
                    while view:  # a raw write may be partial
                        view = view[f.write(view):]
                if self.fsync:
                    os.fsync(f.fileno())
            except BaseException:
                # Part of the record may be on disk, and a reader stops there: what
                # follows goes to a new segment. The caller was not acknowledged.
                self._abandon()
                raise
            if seq > self._highest.get(client, -1):
                self._highest[client] = seq
            self.records_written += 1
            self.bytes_written += _LEN.size + len(head) + len(blob)

    def _abandon(self) -> None:
        try:
            self._roll()
        except OSError as e:  # no new segment (disk full?): the log stays closed
            self._file = None
            self._broken = f" (a write failed, and so did opening a new segment: {e})"

    def roll(self) -> int:
        """Close the open segment and open the next; returns the new segment's number."""
        with self._lock:
            if self._file is None:
                raise ValueError(f"ingress log {self.folder} is closed{self._broken}")
            self._roll()
            return self._segment

    def _roll(self) -> None:
        self._close()
        self._open(self._segment + 1)

    def _close(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            self._closed[self._segment] = self._highest
            f.close()

    def close(self) -> None:
        """Close the open segment (its records stay; a new instance appends after them)."""
        with self._lock:
            self._close()

    def drop(self) -> None:
        """Close the log and delete its folder (the dataflow was cancelled)."""
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    # == reading ==================================================================
    def segments(self) -> list[int]:
        """The numbers of the segments on disk, ascending."""
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        return sorted(int(m[1]) for m in map(_SEGMENT.fullmatch, names) if m)

    def records(self) -> Iterator[tuple[str, int, bytes]]:
        """Every (client, seq, blob) on disk: segments in order, records in file order.

        A segment ends at its first incomplete or corrupt record (a crash mid-write);
        the next segment is read after it. Appends may go on meanwhile: what was
        flushed before the reader reached it is read.
        """
        for n in self.segments():
            yield from self._read(n)

    def _read(self, n: int) -> Iterator[tuple[str, int, bytes]]:
        try:
            f = open(os.path.join(self.folder, _name(n)), "rb")  # noqa: SIM115
        except FileNotFoundError:  # retired meanwhile
            return
        with f:
            size = os.fstat(f.fileno()).st_size
            at = 0
            while True:
                head = f.read(_LEN.size)
                if len(head) < _LEN.size:
                    return
                (length,) = _LEN.unpack(head)
                end = at + _LEN.size + length
                if end > size:  # grown since (the open segment)?
                    size = os.fstat(f.fileno()).st_size
                    if end > size:  # no: cut short (or a garbage length; not read whole)
                        return
                record = _unpack(f.read(length))
                if record is None:
                    return
                yield record
                at = end

    # == retiring =================================================================
    def retire(self, positions: dict[str, int]) -> list[int]:
        """Delete the closed segments all of whose records have seq < positions[client]
        (a client not in `positions` has position 0); returns their numbers.

        `positions` are a completed checkpoint's: client -> the next seq it expects.
        The open segment is never deleted.
        """
        with self._retiring:
            with self._lock:
                closed = dict(self._closed)
            gone = []
            for n, highest in sorted(closed.items()):
                if highest is None:  # left by an earlier process: scan it once
                    highest = {}
                    for client, seq, _ in self._read(n):
                        highest[client] = max(seq, highest.get(client, -1))
                    with self._lock:
                        self._closed[n] = highest
                if all(seq < positions.get(client, 0) for client, seq in highest.items()):
                    with contextlib.suppress(FileNotFoundError):  # dropped meanwhile
                        os.unlink(os.path.join(self.folder, _name(n)))
                    with self._lock:
                        del self._closed[n]
                    gone.append(n)
            return gone


def _unpack(body: bytes) -> tuple[str, int, bytes] | None:
    """A record's body, or None if it is not a whole [str, int, bytes]."""
    try:
        record: Any = msgpack.unpackb(body, raw=False)
    except Exception:  # msgpack raises several kinds; any means a corrupt record
        return None
    if isinstance(record, list) and len(record) == 3 and isinstance(record[0], str) \
            and type(record[1]) is int and isinstance(record[2], bytes):
        return record[0], record[1], record[2]
    return None


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # not openable as a file here (Windows): nothing to sync
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
