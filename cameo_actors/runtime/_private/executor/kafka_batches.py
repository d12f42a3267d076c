"""Kafka record batches (the v2 format every broker since Kafka 0.11 writes) as a fetch
answers them: their headers, their records section decompressed, the batches of aborted
transactions left out (read_committed), and their records' values joined into one JSON
body (`_kafka_records.join_values`, in C: no Python object per record) or, where a value
is odd, read as rows (`records_of`, in Python); a body of JSON values as the source's
columns (`json_columns`, in C where the values are plain).

A batch: base offset (int64), length (int32), leader epoch (int32), magic (int8, 2), CRC
(uint32), attributes (int16: the compression in bits 0-2, transactional bit 4, control
bit 5), last offset delta (int32), base and max timestamps (int64), producer id (int64),
producer epoch (int16), base sequence (int32), record count (int32), then the records.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_BYTES = _HEADER.size  # 61
_LOG_APPEND_TIME, _TRANSACTIONAL, _CONTROL = 0x08, 0x10, 0x20
_ABORT = 0  # a control record's type (its key: version int16, type int16)
#: The compression codecs by their attribute bits, as pyarrow names its streams.
CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


class UnsupportedBatch(Exception):
    """A batch this reader does not decode (an older message format): the source reads
    through librdkafka instead."""


@dataclass
class Batch:
    """One record batch's header, and its records section (still compressed)."""

    base_offset: int
    last_offset: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    count: int
    body: memoryview
    #: the records section decompressed, once (the values, the record fields and the
    #: rows each walk it)
    _plain: bytes | memoryview | None = field(default=None, repr=False)

    @property
    def control(self) -> bool:
        return bool(self.attributes & _CONTROL)

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL)

    def timestamp(self, delta: int) -> int:
        """A record's timestamp (ms): the producer's, or the broker's where the topic
        says LogAppendTime (the batch's max timestamp)."""
        return self.max_timestamp if self.attributes & _LOG_APPEND_TIME \
            else self.base_timestamp + delta

    def records(self) -> bytes | memoryview:
        """The records section, decompressed (once)."""
        if self._plain is None:
            self._plain = self._decompressed()
        return self._plain

    def _decompressed(self) -> bytes | memoryview:
        codec = self.attributes & 0x7
        if codec == 0:
            return self.body
        if codec == 1:
            return zlib.decompress(self.body, wbits=47)  # gzip or zlib framing
        if codec == 2:
            return _snappy(self.body)
        if codec in CODECS:
            import pyarrow as pa

            with pa.CompressedInputStream(pa.BufferReader(self.body), CODECS[codec]) as s:
                data: bytes = s.read()
                return data
        raise UnsupportedBatch(f"compression codec {codec} (attributes {self.attributes:#x})")


def batches(records: bytes | memoryview) -> Iterator[Batch]:
    """The whole batches in a fetch's records of one partition (a fetch may end in a
    batch cut short: it is left for the next fetch)."""
    view, at = memoryview(records), 0
    while at + HEADER_BYTES <= len(view):
        (base, length, _epoch, magic, _crc, attributes, last_delta, base_ts, max_ts,
         producer, _pepoch, _seq, count) = _HEADER.unpack_from(view, at)
        end = at + 12 + length
        if end > len(view):
            break
        if magic != 2:
            raise UnsupportedBatch(f"message format v{magic} at offset {base}")
        yield Batch(base, base + last_delta, attributes, base_ts, max_ts, producer, count,
                    view[at + HEADER_BYTES:end])
        at = end


@dataclass
class Committed:
    """Leaves out what a read_committed reader must not see: control batches, and the
    batches of the aborted transactions a fetch names (producer id, first offset), until
    their abort marker (as Kafka's consumer does)."""

    aborted: list[tuple[int, int]] = field(default_factory=list)  # by first offset
    open_aborts: set[int] = field(default_factory=set)

    def keep(self, b: Batch) -> bool:
        if b.control:
            if b.producer_id in self.open_aborts and _control_type(b) == _ABORT:
                self.open_aborts.discard(b.producer_id)
            return False
        if not b.transactional:
            return True
        while self.aborted and self.aborted[0][1] <= b.last_offset:
            self.open_aborts.add(self.aborted.pop(0)[0])
        return b.producer_id not in self.open_aborts


def _control_type(b: Batch) -> int:
    rec = records_of(b, b.base_offset)
    key = rec[0].key() if rec else None
    return struct.unpack(">hh", key)[1] if key is not None and len(key) >= 4 else -1


class Record:
    """One record read in Python, with the accessors of confluent-kafka's Message that
    `kafka_reader.record_event` uses."""

    __slots__ = ("_offset", "_timestamp", "_key", "_value", "_headers")

    def __init__(self, offset: int, timestamp: int, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes | None]]) -> None:
        self._offset, self._timestamp, self._key = offset, timestamp, key
        self._value, self._headers = value, headers

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return 1, self._timestamp  # (CreateTime, ms)

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[tuple[str, bytes | None]]:
        return self._headers


def _varint(view: memoryview, at: int) -> tuple[int, int]:
    raw = shift = 0
    while True:
        b = view[at]
        at += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), at
        shift += 7


def _bytes(view: memoryview, at: int) -> tuple[bytes | None, int]:
    n, at = _varint(view, at)
    return (None, at) if n < 0 else (bytes(view[at:at + n]), at + n)


def records_of(b: Batch, first_offset: int) -> list[Record]:
    """The records of batch `b` from `first_offset` on, each a `Record`."""
    view, at, out = memoryview(b.records()), 0, []
    for _ in range(b.count):
        length, at = _varint(view, at)
        nxt = at + length
        _ts_delta, at = _varint(view, at + 1)
        delta, at = _varint(view, at)
        key, at = _bytes(view, at)
        value, at = _bytes(view, at)
        n, at = _varint(view, at)
        headers = []
        for _ in range(n):
            name, at = _bytes(view, at)
            h, at = _bytes(view, at)
            headers.append(((name or b"").decode("utf-8", "replace"), h))
        if b.base_offset + delta >= first_offset:
            out.append(Record(b.base_offset + delta, b.timestamp(_ts_delta), key, value,
                              headers))
        at = nxt
    return out


def join_values(b: Batch, first_offset: int) -> tuple[bytes, int, int, int]:
    """Batch `b`'s values from `first_offset` on, joined by newlines: (the body, how
    many, the last offset, odd: 1 a null value, 2 a value with a newline)."""
    from cameo_actors.runtime._private.executor import _kafka_records

    return _kafka_records.join_values(b.records(), b.count, b.base_offset, first_offset)


#: The record fields a source reads as columns (the others: as rows).
META_FIELDS = ("_key", "_partition", "_offset", "_timestamp")


def meta_columns(kept: list[tuple[Batch, int, int]], fields: list[str]) -> Any:
    """The record `fields` (of META_FIELDS) of the records of `kept` (batch, first offset
    wanted, partition), in the order of `join_values`, as Arrow arrays by name; None if a
    key is not UTF-8 (the rows replace such bytes)."""
    import numpy as np
    import pyarrow as pa

    from cameo_actors.runtime._private.executor import _kafka_records

    offsets, stamps, keys, partitions = [], [], [], []
    for b, first, partition in kept:
        n, offs, ts, valid, key_offsets, data = _kafka_records.record_meta(
            b.records(), b.count, b.base_offset, first, b.base_timestamp)
        offsets.append(np.frombuffer(offs, dtype=np.int64))
        stamp = np.frombuffer(ts, dtype=np.int64)
        stamps.append(np.full(n, b.max_timestamp, dtype=np.int64)
                      if b.attributes & _LOG_APPEND_TIME else stamp)
        partitions.append(np.full(n, partition, dtype=np.int64))
        if "_key" in fields:
            keys.append(pa.Array.from_buffers(pa.binary(), n, [
                None if valid is None else pa.py_buffer(valid), pa.py_buffer(key_offsets),
                pa.py_buffer(data)]))
    out: dict[str, Any] = {}
    for name in fields:
        if name == "_key":
            try:
                out[name] = pa.concat_arrays(keys).cast(pa.string())
            except (pa.ArrowInvalid, ValueError):  # not UTF-8
                return None
        else:
            parts = {"_partition": partitions, "_offset": offsets, "_timestamp": stamps}[name]
            out[name] = pa.array(np.concatenate(parts) if parts else np.zeros(0, np.int64))
    return out


#: The schema's field types the C parser of JSON values fills (`json_columns`).
_KINDS = {"int": "i", "float": "f", "str": "s", "bool": "b"}


def json_columns(body: bytes, n: int, schema: list[tuple[str, str]]) -> Any:
    """`n` JSON objects, one a line, as an Arrow batch of the schema's columns, parsed in
    C (`_kafka_records.json_columns`); None where the C parser leaves them to pyarrow's
    JSON reader (a field outside the schema or of another type, an escape, a nested
    value, text past ASCII): it makes the batch pyarrow makes, or none."""
    import pyarrow as pa

    from cameo_actors.dataflow.spec import schema_type
    from cameo_actors.runtime._private.executor import _kafka_records

    if not schema or any(schema_type(typ)[0] not in _KINDS for _, typ in schema):
        return None  # (no field: no column to count the rows by)
    kinds = [_KINDS[schema_type(typ)[0]] for _, typ in schema]
    cols = _kafka_records.json_columns(
        body, n, tuple((name.encode(), k) for (name, _), k in zip(schema, kinds, strict=True)))
    if cols is None:
        return None
    types = {"i": pa.int64(), "f": pa.float64(), "s": pa.string(), "b": pa.bool_()}
    arrays = []
    for kind, (validity, values, offsets, nulls) in zip(kinds, cols, strict=True):
        buffers = [None if validity is None else pa.py_buffer(validity)]
        if offsets is not None:
            buffers.append(pa.py_buffer(offsets))
        buffers.append(pa.py_buffer(values))
        arrays.append(pa.Array.from_buffers(types[kind], n, buffers, null_count=nulls))
    return pa.RecordBatch.from_arrays(arrays, names=[name for name, _ in schema])


def native() -> bool:
    """Whether the C part is built (`make` builds it; without it sources read through
    librdkafka)."""
    try:
        from cameo_actors.runtime._private.executor import _kafka_records  # noqa: F401
    except ImportError:
        return False
    return True


def _snappy(body: Any) -> bytes:
    """Kafka's snappy: the Java client's framing (a magic header, then chunks of a 4-byte
    length and a raw snappy block), or one raw block."""
    import pyarrow as pa

    codec, view = pa.Codec("snappy"), memoryview(body)
    if bytes(view[:8]) != b"\x82SNAPPY\x00":
        return _snappy_block(codec, view)
    out, at = [], 16  # magic, version, compatible version
    while at + 4 <= len(view):
        (n,) = struct.unpack_from(">i", view, at)
        out.append(_snappy_block(codec, view[at + 4:at + 4 + n]))
        at += 4 + n
    return b"".join(out)


def _snappy_block(codec: Any, block: memoryview) -> bytes:
    size = shift = at = 0
    while True:  # a raw block starts with its decompressed size (an unsigned varint)
        b = block[at]
        at += 1
        size |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return codec.decompress(block, decompressed_size=size, asbytes=True)  # type: ignore[no-any-return]
