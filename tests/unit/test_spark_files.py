"""Files read by the writer (`spark_ingest.files`): as Spark's Parquet and JSON readers read them."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors import Dataflow
from spark_ingest.files import _json_lines, read_file, read_files, read_mode
from spark_ingest.reading import read_plan

FIELDS = [("ts", "int"), ("level", "str"), ("value", "float?"), ("ok", "bool?")]
SCHEMA = pa.schema([("ts", pa.int64()), ("level", pa.string()), ("value", pa.float64()),
                    ("ok", pa.bool_())])


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def test_a_parquet_file_is_read_as_the_sources_fields_widened_and_a_missing_one_null() -> None:
    body = _parquet(pa.table({"level": ["INFO", "ERROR"], "ts": pa.array([1, 2], pa.int32()),
                              "other": [0.5, 0.6]}))
    got = read_file("parquet", "file:/in/a.parquet", body, FIELDS, None)
    assert got.schema == SCHEMA
    assert got.to_pylist() == [{"ts": 1, "level": "INFO", "value": None, "ok": None},
                               {"ts": 2, "level": "ERROR", "value": None, "ok": None}]


def test_a_parquet_column_of_another_type_or_a_broken_file_is_an_error_naming_it() -> None:
    body = _parquet(pa.table({"ts": ["one"]}))
    with pytest.raises(ValueError, match=r"file:/in/a.parquet: column 'ts' is string.*Fix"):
        read_file("parquet", "file:/in/a.parquet", body, FIELDS, None)
    with pytest.raises(ValueError, match=r"file:/in/b.parquet is not a readable Parquet.*Fix"):
        read_file("parquet", "file:/in/b.parquet", b"not parquet", FIELDS, None)


def test_json_lines_that_do_not_fit_keep_their_text_in_the_corrupt_column_as_sparks_permissive_mode() -> None:
    lines = [{"ts": 1, "level": "INFO", "value": 2, "extra": {"a": 1}},  # extra: ignored
             {"ts": 2, "level": 7, "ok": True},       # a number in a str field: its text
             {"ts": 1.5, "level": "x"},               # a fraction in an int field
             {"ts": 2**63, "level": "x"},             # past int64
             {"ts": 3, "ok": "yes"},                  # a str in a bool field
             [1, 2]]                                  # not an object
    body = "\n".join(json.dumps(x) for x in lines) + "\n\nnot json\n"
    got = read_file("json", "file:/in/a.json", body.encode(), FIELDS, "_bad").to_pylist()
    assert got[0] == {"ts": 1, "level": "INFO", "value": 2.0, "ok": None, "_bad": None}
    assert got[1] == {"ts": 2, "level": "7", "value": None, "ok": True, "_bad": None}
    assert [r["_bad"] for r in got[2:]] == [json.dumps(x) for x in lines[2:]] + ["not json"]
    assert all(r["ts"] is None for r in got[2:])


def test_compressed_json_is_read_by_its_name_and_an_unknown_codec_is_refused() -> None:
    body = gzip.compress(b'{"ts": 5, "level": "a"}\n')
    assert read_file("json", "file:/in/a.json.gz", body, FIELDS, "_bad").column("ts").to_pylist() == [5]
    with pytest.raises(ValueError, match=r"\.bz2.*cameo.read=spark"):
        read_file("json", "file:/in/a.json.bz2", b"x", FIELDS, "_bad")


def test_a_field_named_by_a_folder_takes_its_value_as_sparks_partitions_do() -> None:
    body = b'{"ts": 5, "level": "a"}\n{"ts": 6}\n'
    got = read_file("json", "file:/in/level=ERROR/ts=9/a.json", body, FIELDS, None)
    assert got.column("level").to_pylist() == ["ERROR", "ERROR"]
    assert got.column("ts").to_pylist() == [9, 9]
    with pytest.raises(ValueError, match="folder's value of field 'ts'"):
        read_file("json", "file:/in/ts=x/a.json", body, FIELDS, None)


def test_a_batch_of_files_is_one_batch_with_each_files_own_values_beside() -> None:
    files = pa.record_batch({
        "path": ["file:/in/a.json", "file:/in/b.json", "file:/in/empty.json"],
        "content": pa.array([b'{"ts": 1}\n{"ts": 2}\n', b'{"ts": 3}\n', b""], pa.binary()),
        "landed_ms": pa.array([100, 200, 300], pa.int64())})
    got = read_files(files, "json", [("ts", "int"), ("landed_ms", "int")], "_bad")
    assert got is not None
    assert got.to_pydict() == {"ts": [1, 2, 3], "landed_ms": [100, 100, 200],
                               "_bad": [None, None, None]}
    assert read_files(files.slice(2), "json", [("ts", "int")], "_bad") is None


_ROW = st.fixed_dictionaries({}, optional={
    "ts": st.integers(-(2**63), 2**63 - 1), "level": st.text(max_size=5),
    "value": st.floats(allow_nan=False, allow_infinity=False) | st.integers(-10**6, 10**6),
    "ok": st.booleans(), "other": st.text(max_size=3)})


@settings(max_examples=200, deadline=None)
@given(st.lists(_ROW, min_size=1, max_size=8))
def test_pyarrows_reading_of_fitting_json_is_the_line_by_line_readings(rows: list[dict]) -> None:
    body = "\n".join(json.dumps(r) for r in rows).encode()
    fast = read_file("json", "file:/in/a.json", body, FIELDS, "_bad")
    slow = _json_lines(body, SCHEMA, "_bad")
    assert fast.to_pylist() == slow.to_pylist()
    assert all(r["_bad"] is None for r in fast.to_pylist())


def test_who_reads_a_file_input() -> None:
    assert read_mode("auto", "json", {"path": "in", "maxFilesPerTrigger": "2"}, FIELDS) == ("arrow", "")
    assert read_mode("spark", "json", {"path": "in"}, FIELDS)[0] == "spark"
    assert read_mode("auto", "csv", {"path": "in"}, FIELDS) == \
        ("spark", "format 'csv' (arrow reads parquet, json)")
    assert read_mode("auto", "json", {"path": "in"}, [("e", "any")]) == \
        ("spark", "field e (any) (arrow reads int, float, str, bool)")
    assert read_mode("auto", "json", {"path": "in"}, FIELDS, typed_time=True)[0] == "spark"
    with pytest.raises(ValueError, match="cameo.read: expected auto, arrow or spark, got 'fast'"):
        read_mode("fast", "json", {}, FIELDS)


def _plan(**options: str):
    spec = (Dataflow("d", latency_target_ms=100)
            .source("s", schema={"ts": "int"}, connector={"format": "json", "path": "in", **options})
            .sink("o")).spec
    step = spec.step("s")
    return read_plan([(spec, step)], step.connector)


def test_arrow_asked_where_spark_must_read_is_refused_at_planning() -> None:
    assert _plan().read == "arrow"
    assert _plan(**{"cameo.read": "spark"}).read == "spark"
    with pytest.raises(ValueError, match=r"cameo.read=arrow.*'multiLine'.*Fix"):
        _plan(**{"multiLine": "true", "cameo.read": "arrow"})
