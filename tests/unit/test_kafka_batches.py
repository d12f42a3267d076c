"""Kafka record batches as cameo's fetch client reads them (`kafka_batches`): the values
joined in C equal the records read one by one in Python, for any records; compressed
batches read as plain ones; a batch cut short waits for the next fetch; read_committed
leaves out control batches and aborted transactions. JSON values parsed into columns in
C are pyarrow's columns, for any values, or left to pyarrow."""

from __future__ import annotations

import json
import os
import struct
import zlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors.runtime._private.executor.kafka_batches import (
    Committed,
    UnsupportedBatch,
    batches,
    join_values,
    json_columns,
    meta_columns,
    native,
    records_of,
)

# Skipped where the C part did not build (an install without a compiler), but not in CI.
pytestmark = pytest.mark.skipif(not native() and not os.environ.get("CI"),
                                reason="the C part is not built (make builds it)")

CODEC = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def varint(n: int) -> bytes:
    raw, out = (n << 1) ^ (n >> 63), bytearray()
    while True:
        if raw < 0x80:
            return bytes(out + bytes([raw]))
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7


def blob(b: bytes | None) -> bytes:
    return varint(-1) if b is None else varint(len(b)) + b


def record(delta: int, key: bytes | None, value: bytes | None,
           headers: list[tuple[bytes, bytes | None]] = ()) -> bytes:  # type: ignore[assignment]
    body = (b"\x00" + varint(delta * 3) + varint(delta) + blob(key) + blob(value)
            + varint(len(headers)) + b"".join(blob(k) + blob(v) for k, v in headers))
    return varint(len(body)) + body


def compress(codec: str, data: bytes) -> bytes:
    if codec == "none":
        return data
    if codec == "gzip":
        c = zlib.compressobj(wbits=31)
        return c.compress(data) + c.flush()
    import pyarrow as pa

    if codec == "snappy":  # one raw block: its size as a varint first
        return pa.Codec("snappy").compress(data, asbytes=True)  # type: ignore[no-any-return]
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, codec) as s:
        s.write(data)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def batch(base: int, records: list[bytes], codec: str = "none", producer: int = -1,
          transactional: bool = False, control: bool = False, deltas: int | None = None,
          log_append_time: bool = False) -> bytes:
    body = compress(codec, b"".join(records))
    attributes = CODEC[codec] | (0x10 if transactional else 0) | (0x20 if control else 0) \
        | (0x08 if log_append_time else 0)
    last = (deltas if deltas is not None else len(records)) - 1
    tail = struct.pack(">hiqqqhii", attributes, last, 1000, 1000 + last, producer, 0, 0,
                       len(records)) + body
    head = struct.pack(">qiib", base, 0, 0, 2)
    return head[:8] + struct.pack(">i", len(tail) + 9) + head[12:] + struct.pack(">I", 0) + tail


values = st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=40)


@given(values=values, keys=st.booleans(), first=st.integers(0, 45))
def test_the_values_joined_in_c_are_the_records_read_one_by_one(
        values: list[bytes | None], keys: bool, first: int) -> None:
    raw = batch(100, [record(i, b"k%d" % i if keys else None, v, [(b"h", b"x")])
                      for i, v in enumerate(values)])
    [b] = batches(raw)
    rows = records_of(b, 100 + first)
    body, n, last, odd = join_values(b, 100 + first)
    assert n == len(rows) == max(0, len(values) - first)
    assert [r.offset() for r in rows] == list(range(100 + first, 100 + len(values)))
    assert last == (rows[-1].offset() if rows else -1)
    assert [r.value() for r in rows] == values[first:]
    nulls = any(r.value() is None for r in rows)
    lines = any(b"\n" in (r.value() or b"") for r in rows)
    assert odd == (1 if nulls else 0) | (2 if lines else 0)
    if not odd:
        assert body == b"\n".join(r.value() or b"" for r in rows)
    meta = meta_columns([(b, 100 + first, 3)], ["_key", "_partition", "_offset", "_timestamp"])
    assert meta is not None and {k: v.to_pylist() for k, v in meta.items()} == {
        "_key": [None if r.key() is None else r.key().decode() for r in rows],  # type: ignore[union-attr]
        "_partition": [3] * len(rows), "_offset": [r.offset() for r in rows],
        "_timestamp": [r.timestamp()[1] for r in rows]}


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_batch_reads_as_the_plain_one(codec: str) -> None:
    recs = [record(i, b"k", b'{"i": %d}' % i) for i in range(50)]
    [plain] = batches(batch(7, recs))
    [packed] = batches(batch(7, recs, codec))
    assert join_values(packed, 7) == join_values(plain, 7)
    assert records_of(packed, 30)[0].value() == b'{"i": 23}'


def test_a_batch_cut_short_waits_for_the_next_fetch_and_an_old_format_is_refused() -> None:
    one, two = batch(0, [record(0, None, b"a")]), batch(1, [record(0, None, b"b")])
    assert [b.base_offset for b in batches(one + two[:-3])] == [0]
    old = bytearray(one)
    old[16] = 1  # magic 1
    with pytest.raises(UnsupportedBatch, match="message format v1"):
        list(batches(bytes(old)))


def test_a_corrupt_record_is_an_error_naming_the_record() -> None:
    raw = bytearray(batch(0, [record(0, None, b"abcdef"), record(1, None, b"x")]))
    raw[-3] = 0x7E  # the second record's value length, past the end
    [b] = batches(bytes(raw))
    with pytest.raises(ValueError, match="record 1 of 2"):
        join_values(b, 0)


def test_record_fields_as_columns_take_the_brokers_time_and_leave_keys_not_utf8_to_rows(
        ) -> None:
    [b] = batches(batch(0, [record(0, b"k", b"{}"), record(1, b"\xff", b"{}")]))
    assert meta_columns([(b, 0, 0)], ["_key"]) is None  # the rows replace the bytes
    [b] = batches(batch(5, [record(i, b"k", b"{}") for i in range(3)], log_append_time=True))
    meta = meta_columns([(b, 6, 1)], ["_offset", "_timestamp", "_partition"])
    assert meta is not None and {k: v.to_pylist() for k, v in meta.items()} == {
        "_offset": [6, 7], "_timestamp": [1002, 1002], "_partition": [1, 1]}
    assert [r.timestamp()[1] for r in records_of(b, 6)] == [1002, 1002]


def test_read_committed_leaves_out_control_batches_and_aborted_transactions() -> None:
    def marker(producer: int, kind: int, at: int) -> bytes:
        return batch(at, [record(0, struct.pack(">hh", 0, kind), b"")], producer=producer,
                     transactional=True, control=True)

    raw = (batch(0, [record(0, None, b"plain")])
           + batch(1, [record(0, None, b"aborted")], producer=7, transactional=True)
           + batch(2, [record(0, None, b"committed")], producer=8, transactional=True)
           + marker(7, 0, 3) + marker(8, 1, 4)
           + batch(5, [record(0, None, b"after")], producer=7, transactional=True))
    keep = Committed([(7, 1)])
    kept: list[Any] = [records_of(b, 0)[0].value() for b in batches(raw) if keep.keep(b)]
    assert kept == [b"plain", b"committed", b"after"]


SCHEMA = [("i", "int"), ("f", "float"), ("s", "str"), ("b", "bool"), ("n", "int?")]
NUMBERS = ["1e5", "1E-5", "-0.0", "0", "12.50", "1e22", "1e23", "9007199254740993", "0.1",
           "1.7976931348623157e308", "5e-324", "2.2250738585072014e-308", "1e400", "-12",
           "01", "1.", ".5", "+1", "123456789012345678901234567890"]
ints = st.one_of(st.integers(-10**6, 10**6), st.integers(-2**70, 2**70)).map(str)
floats = st.floats(allow_nan=False, allow_infinity=False).map(json.dumps)
#: Each field's values: mostly its own type, written in every way; now and then another.
VALUES = {
    "int": st.one_of(ints, ints, st.sampled_from(NUMBERS)),
    "float": st.one_of(floats, floats, ints, st.sampled_from(NUMBERS)),
    "str": st.one_of(st.text(st.characters(max_codepoint=0x7F), max_size=6),
                     st.text(max_size=4)).map(json.dumps),
    "bool": st.booleans().map(json.dumps)}
others = st.one_of(st.just("null"), st.just("[1, 2]"), st.just('{"a": 1}'), ints, floats,
                   st.just('"7"'), st.just("true"))


@st.composite
def json_line(draw: Any) -> str:
    """One value as a producer may write it: the schema's fields (some missing, some null
    or of another type), now and then a field outside it, numbers written in every way."""
    parts = []
    for name, typ in SCHEMA:
        if draw(st.integers(0, 7)) == 0:
            continue  # missing
        raw = draw(others if draw(st.integers(0, 9)) == 0 else VALUES[typ.rstrip("?")])
        parts.append(f'"{name}"{draw(st.sampled_from(["", " "]))}:{raw}')
    if draw(st.integers(0, 19)) == 0:
        parts.append('"extra": 1')
    return "{" + ", ".join(draw(st.permutations(parts))) + "}"


def exact(batch: Any) -> list[Any]:
    """Rows with each float as its bits (0.0 and -0.0 apart, every rounding seen)."""
    return [{k: v.hex() if isinstance(v, float) else v for k, v in row.items()}
            for row in batch.to_pylist()]


@settings(max_examples=300)
@given(lines=st.lists(json_line(), min_size=1, max_size=4))
def test_json_values_parsed_in_c_are_pyarrows_columns_or_left_to_pyarrow(lines: list[str]
                                                                        ) -> None:
    import pyarrow as pa
    import pyarrow.json as pj

    from cameo_actors.operators.column_schema import arrow_schema

    body = "\n".join(lines).encode()
    got = json_columns(body, len(lines), SCHEMA)
    if got is None:
        return
    want = pj.read_json(pa.BufferReader(body), read_options=pj.ReadOptions(
        use_threads=False, block_size=len(body) + 1), parse_options=pj.ParseOptions(
        explicit_schema=arrow_schema(SCHEMA)))  # raises if C took what pyarrow refuses
    assert exact(got) == exact(want.combine_chunks().to_batches()[0])


def test_the_common_values_are_parsed_in_c() -> None:
    rows = [{"i": 1, "f": 2.5, "s": "a b", "b": True, "n": None}, {"f": -1e-7, "s": ""},
            {"i": -7, "f": 3, "s": "x", "b": False, "n": 4}]
    got = json_columns("\n".join(json.dumps(r) for r in rows).encode(), 3, SCHEMA)
    assert got is not None and got.to_pylist() == [
        {"i": 1, "f": 2.5, "s": "a b", "b": True, "n": None},
        {"i": None, "f": -1e-7, "s": "", "b": None, "n": None},
        {"i": -7, "f": 3.0, "s": "x", "b": False, "n": 4}]
    assert json_columns(b'{"s": "caf\\u00e9"}', 1, SCHEMA) is None  # an escape: pyarrow's
    assert json_columns(b'{"i": 1}', 1, [("i", "any")]) is None  # a type C does not fill
