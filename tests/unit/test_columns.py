"""Columns (`operators/columns.py`): every step with a columnar kernel gives what its rows
give, events and error records alike, on batches made to find where Arrow and Python
differ (nulls, big ints beside floats, overflow, division by zero, mixed kinds, late
events); the edge refuses a body that does not fit the schema, naming the column."""

from __future__ import annotations

from functools import partial
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors.operators.base import END_OF_STREAM, Output
from cameo_actors.operators.column_ipc import from_ipc, read_stream, to_ipc
from cameo_actors.operators.column_keys import split_by_key
from cameo_actors.operators.column_schema import arrow_schema, conform
from cameo_actors.operators.columns import is_columns, rows
from cameo_actors.operators.exceptions import ColumnsRefused
from cameo_actors.operators.stateless import (
    KeyByOperator,
    SourceOperator,
    filter_operator,
    project_operator,
)
from cameo_actors.operators.windows import WindowOperator
from cameo_actors.runtime._private.exchange.ingest import pack_columns, unpack_ingest
from cameo_actors.runtime._private.exchange.wire import (
    decode_message,
    encode_message,
    pack_link,
    unpack_link,
)
from cameo_actors.scheduling import Message


@pytest.fixture(scope="module", autouse=True)
def small_batches_as_columns() -> Any:
    """The batches here are small: every one is offered to the kernels."""
    from cameo_actors.operators import base

    kept, base.MIN_COLUMN_EVENTS = base.MIN_COLUMN_EVENTS, 0
    yield
    base.MIN_COLUMN_EVENTS = kept


SCHEMA = [("ts", "int"), ("key", "str"), ("value", "float"), ("n", "int?"), ("flag", "bool")]

PREDICATES = [
    "value > 10", "n * 2 > value", "ts / n < 3", "key in ('a', 'b') and not flag",
    "value - n >= 0 or flag", "abs(n) < 5", "-n < value", "n == 1.5", "key == 'a'",
    "0 <= value < 50", "n + 9007199254740000 > 0", "value / 0.5 > n", "key < 'b'",
    "n", "flag == True", "key not in ('c',)", "n in (1, 2)", "n * n > 100",
    "n % 3 == 1", "ts // n > 2", "ts % -7 < -3", "value % 2 > 1", "value // 3 < n",
]
PROJECTIONS = [
    {"ts": "ts", "key": "key", "value": "value"},
    {"v2": "value * 2 + ts / 3", "k": "key"},
    {"sum": "n + ts", "neg": "-value", "big": "n * 4611686018427387904"},
    {"ratio": "value / n", "n": "n", "flag": "flag"},
    {"one": "1", "lower": "lower(key)"},
    {"m": "n % 7", "d": "ts // 3", "neg": "n // -2", "big": "n % 9007199254740993"},
]

_ints = st.one_of(st.integers(-5, 5), st.integers(-2**62, 2**62), st.sampled_from([0, 2**53 + 1]))
_event = st.fixed_dictionaries({
    "ts": st.integers(0, 5_000), "key": st.sampled_from(["a", "b", "c", ""]),
    "value": st.one_of(st.floats(-100, 100), st.sampled_from([0.0, -0.0, 1e308])),
    "n": st.one_of(st.none(), _ints), "flag": st.booleans()})
_batches = st.lists(_event, min_size=0, max_size=40)


def columns_of(events: list[dict[str, Any]]) -> pa.RecordBatch:
    [batch] = conform("s", pa.Table.from_pylist(events, schema=pa.schema(
        [("ts", pa.int64()), ("key", pa.string()), ("value", pa.float64()), ("n", pa.int64()),
         ("flag", pa.bool_())])), SCHEMA)
    return batch


def same(op_rows: Any, op_columns: Any, events: list[dict[str, Any]], port: int = 0) -> None:
    batch = columns_of(events)
    want = op_rows.on_batch(batch.to_pylist(), port)  # the same events, as the runtime reads them
    got = op_columns.on_batch(batch, port)
    assert repr(rows(got.events)) == repr(want.events)  # repr: NaN equals itself there
    assert repr([e.to_dict() for e in got.errors]) == repr([e.to_dict() for e in want.errors])
    assert got.watermark == want.watermark


@settings(max_examples=150, deadline=None)
@given(_batches, st.sampled_from(PREDICATES))
def test_a_filter_on_columns_keeps_and_refuses_what_its_rows_do(events: Any, predicate: str) -> None:
    same(filter_operator("f", predicate), filter_operator("f", predicate), events)


@settings(max_examples=100, deadline=None)
@given(_batches, st.sampled_from(PROJECTIONS))
def test_a_projection_on_columns_makes_what_its_rows_make(events: Any, fields: dict[str, str]) -> None:
    same(project_operator("m", list(fields.items())), project_operator("m", list(fields.items())),
         events)


def test_the_kernels_run_where_they_can_and_decline_where_python_differs() -> None:
    ok = columns_of([{"ts": 1, "key": "a", "value": 20.0, "n": 3, "flag": True}])
    assert is_columns(filter_operator("f", "value > 10 and n < 5").on_batch(ok).events)
    assert is_columns(project_operator("m", [("v", "value * n")]).on_batch(ok).events)
    with_null = columns_of([{"ts": 1, "key": "a", "value": 20.0, "n": None, "flag": True}])
    out = filter_operator("f", "n < 5").on_batch(with_null)
    assert not is_columns(out.events) and "'<' not supported" in out.errors[0].message
    zero = columns_of([{"ts": 1, "key": "a", "value": 20.0, "n": 0, "flag": True}])
    out = project_operator("m", [("r", "value / n")]).on_batch(zero)
    assert out.events == [] and "ZeroDivisionError" in out.errors[0].message


@settings(max_examples=100, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "ts": st.one_of(st.integers(0, 10), st.none()),
    "key": st.one_of(st.text(max_size=6), st.none()),
    "value": st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3)),
    "n": st.one_of(st.none(), st.integers(-2**63, 2**63 - 1))}), max_size=20))
def test_the_source_on_columns_passes_and_refuses_what_its_rows_do(events: Any) -> None:
    schema = [("ts", "int"), ("key", "str"), ("value", "float"), ("n", "int?")]
    table = pa.Table.from_pylist(events, schema=pa.schema(
        [("ts", pa.int64()), ("key", pa.string()), ("value", pa.float64()), ("n", pa.int64())]))
    [batch] = conform("s", table, schema)

    def source() -> SourceOperator:
        return SourceOperator("s", schema, "ts", 5, max_string_chars=4)
    want = source().on_batch(batch.to_pylist())
    got = source().on_batch(batch)
    assert repr(rows(got.events)) == repr(want.events)
    assert repr([e.to_dict() for e in got.errors]) == repr([e.to_dict() for e in want.errors])
    assert got.watermark == want.watermark


AGGREGATES = [
    [("c", "count", None)],
    [("c", "count", None), ("s", "sum", "value"), ("lo", "min", "value"), ("hi", "max", "value"),
     ("mean", "avg", "value"), ("t", "sum", "ts"), ("first", "min", "ts")],
    [("s", "sum", "n"), ("hi", "max", "n")],  # a nullable field: nulls run as rows
    [("top", "max_by", "value")],  # -0.0 among the values: which is first decides, rows
    [("best", "max_by", "ts"), ("c", "count", None), ("t3", "top", "ts", 3), ("s", "sum", "value")],
    [("t1", "top", "ts", 1), ("t9", "top", "ts", 9), ("hi", "max_by", "ts")],
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_event, max_size=30), min_size=1, max_size=6),
       st.sampled_from([10, 250.0, 1000]), st.booleans(), st.sampled_from(AGGREGATES))
def test_a_tumbling_window_on_columns_folds_fires_and_snapshots_as_its_rows(
        batches: Any, size: float, keyed: bool, aggregates: Any) -> None:
    from types import SimpleNamespace as A

    from cameo_actors.dataflow.expressions import compile_scalar

    def window() -> WindowOperator:
        return WindowOperator("w", kind="tumbling", size_ms=size, time_field="ts",
                              key_fn=compile_scalar("key", "w") if keyed else None,
                              aggregates=[A(name=a[0], fn=a[1], field=a[2], n=a[3] if a[3:] else None)
                                          for a in aggregates])
    by_rows, by_columns = window(), window()
    for i, events in enumerate(batches):
        same(by_rows, by_columns, events)
        if i % 2:  # a watermark between batches: some windows fire, later events are late
            wm = float(min((e["ts"] for e in events), default=0))
            a, b = by_rows.on_watermark(wm), by_columns.on_watermark(wm)
            assert repr(a.events) == repr(b.events)
    assert repr(by_rows.snapshot()) == repr(by_columns.snapshot())
    assert repr(by_rows.on_watermark(END_OF_STREAM).events) == \
        repr(by_columns.on_watermark(END_OF_STREAM).events)


def test_max_by_and_top_run_on_columns_and_make_only_their_best_events_dicts() -> None:
    from types import SimpleNamespace as A

    from cameo_actors.dataflow.expressions import compile_scalar

    w = WindowOperator("w", kind="tumbling", size_ms=1000, time_field="ts",
                       key_fn=compile_scalar("key", "w"),
                       aggregates=[A(name="best", fn="max_by", field="ts", n=None),
                                   A(name="top2", fn="top", field="ts", n=2)])
    events = [{"ts": t, "key": "a", "value": 1.0, "n": 1, "flag": False} for t in (5, 9, 9, 7, 1)]
    assert w.process_columns(columns_of(events), 0, Output())
    [got] = w.on_watermark(END_OF_STREAM).events
    assert [e["ts"] for e in got["best"]] == [9, 9] and [e["ts"] for e in got["top2"]] == [9, 9]


def test_key_by_and_routing_split_columns_as_the_rows() -> None:
    events = [{"ts": i, "key": f"k{i % 7}", "value": 1.0, "n": i, "flag": False} for i in range(200)]
    batch = columns_of(events)
    assert KeyByOperator("k", "key").on_batch(batch).events is batch
    from cameo_actors.operators.bins import stable_hash
    from cameo_actors.runtime._private.exchange.routes import Route
    for instances in (3, 7):  # split by a pass per part, and by sorting
        owners = [f"t{b % instances}" for b in range(16)]
        route = Route("w", 0, tuple(dict.fromkeys(owners)))
        route.set_table(owners)
        parts = split_by_key(batch, "key", partial(route.owner_of, mask=15))
        want: dict[str, list[Any]] = {}
        for e in events:
            want.setdefault(owners[stable_hash(e["key"]) & 15], []).append(e)
        assert {t: p.to_pylist() for t, p in parts.items()} == want


def test_columns_cross_links_and_ingest_calls_as_arrow() -> None:
    batch = columns_of([{"ts": 1, "key": "a", "value": 2.5, "n": None, "flag": True}] * 3)
    assert from_ipc(to_ipc(batch)).equals(batch)
    msg = Message.ingress("df/f/0", batch, dataflow="df", tenant="t", ingest_ms=1.0)
    _, _, _, _, messages, _ = unpack_link(pack_link((0, "a", "b", 0), [encode_message(msg)], []))
    back = decode_message(messages[0])
    assert back.payload.equals(batch) and back.size == 3
    assert unpack_ingest(pack_columns(batch), "s")[0].equals(batch)


def test_a_clients_columns_are_cut_as_they_run_by_the_cost_measured_since() -> None:
    """Calls taken in before anything ran are one message each; each is cut when it runs:
    500 events while nothing is measured, then what fits the quantum at the measured cost."""
    from cameo_actors import Dataflow, count
    from cameo_actors.runtime._private.executor.core import ExecutorCore
    from cameo_actors.runtime._private.executor.ingress import MAX_COLUMN_MESSAGE_EVENTS
    from cameo_actors.runtime._private.placement import place
    from cameo_actors.runtime.config import RuntimeConfig

    spec = (Dataflow("d", latency_target_ms=1000).source("s", schema=dict(SCHEMA), event_time="ts")
            .key_by("key").window(tumbling_ms=100).aggregate(n=count()).sink("o")).spec
    core = ExecutorCore(0, RuntimeConfig(), lambda host, blob: None)
    core.deploy(spec, place(spec, [0], {}))
    source = core.hosting.activations["d/s/0"]
    ran: list[int] = []
    on_data = source.on_data
    source.on_data = lambda events, port: (ran.append(len(events)), on_data(events, port))[1]  # type: ignore[method-assign]
    events = [{"ts": i, "key": "abc"[i % 3], "value": 1.0, "n": i, "flag": True} for i in range(60_000)]
    for seq in range(3):  # taken in at once, as Ray's threads do while the worker is busy
        core.ingress.ingest("c", seq, "d/s/0", [columns_of(events[seq * 20_000:(seq + 1) * 20_000])], 0.0)
    while core.run_slice():
        pass
    assert sum(ran) == 60_000 and ran[0] == RuntimeConfig().max_message_events
    assert max(ran) > 5 * ran[0] and max(ran) <= MAX_COLUMN_MESSAGE_EVENTS
    assert len(ran) < 60_000 // ran[0] // 4  # not 500 each: the cost measured cut the rest


def test_tables_of_dicts_built_with_the_sources_schema_keep_fields_the_first_event_lacks() -> None:
    events = [{"ts": 1, "key": "a", "value": 1.0, "flag": True},
              {"ts": 2, "key": "b", "value": 2.0, "flag": False, "n": 7}]
    guessed = pa.Table.from_pylist(events)  # pyarrow infers the columns from the first event
    assert "n" not in guessed.schema.names
    [batch] = conform("s", pa.Table.from_pylist(events, schema=arrow_schema(SCHEMA)), SCHEMA)
    assert batch.column("n").to_pylist() == [None, 7]


def test_the_edge_conforms_types_and_refuses_what_cannot_hold_a_field() -> None:
    table = pa.table({"ts": pa.array([1, 2], pa.int32()), "key": pa.array(["a", "b"]).dictionary_encode(),
                      "value": pa.array([1, 2], pa.int8()), "flag": [True, False], "extra": [1.5, 2.5]})
    [batch] = conform("s", table, SCHEMA)
    assert batch.to_pylist()[0] == {"ts": 1, "key": "a", "value": 1.0, "flag": True, "extra": 1.5,
                                    "n": None}
    assert batch.schema.field("value").type == pa.float64()
    cases = [
        (table.drop_columns(["ts"]), "column 'ts': expected a column for field 'ts' (int)"),
        (table.set_column(0, "ts", pa.array(["x", "y"])),
         "column 'ts': expected an integer column (int8 .. int64, uint8 .. uint64), got string"),
        (table.append_column("when", pa.array([0, 1], pa.timestamp("ms"))),
         "column 'when': expected a column of JSON-like values"),
    ]
    for bad, message in cases:
        with pytest.raises(ColumnsRefused, match="^source 's': " + message.replace("(", r"\(")
                           .replace(")", r"\)").replace(".", r"\.")):
            conform("s", bad, SCHEMA)
    twice = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["ts", "ts"])
    with pytest.raises(ColumnsRefused, match="column 'ts': expected each column once"):
        conform("s", twice, SCHEMA)
    with pytest.raises(ColumnsRefused, match="expected an Arrow IPC stream"):
        read_stream("s", b"not arrow at all")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    assert read_stream("s", sink.getvalue().to_pybytes()).equals(table)


def test_the_modules_examples() -> None:
    import doctest

    from cameo_actors.operators import column_results as columns

    assert doctest.testmod(columns).failed == 0
