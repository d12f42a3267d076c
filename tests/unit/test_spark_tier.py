"""The Spark tier's pure parts, without Spark or Ray: options, cutting micro-batches
into runtime messages, reader offsets and commit semantics, schemas, Arrow rows."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cameo_actors import Dataflow, avg, count, max_, sum_
from cameo_actors.operators.exceptions import ResultsNotColumnar
from cameo_actors.runtime._private.executor.egress import ResultLog
from spark_ingest.arrow import (
    CORRUPT,
    arrow_schema,
    prepare,
    results_batch,
    results_columns,
    to_events,
)
from spark_ingest.batching import bucket_ms, plan_messages
from spark_ingest.exceptions import OffsetError, OptionError
from spark_ingest.latency import stage_latencies, summarize
from spark_ingest.offsets import (
    initial_offset,
    latest_offset,
    make_offset,
    nothing_new,
    parse_offset,
    ranges,
    to_commit,
)
from spark_ingest.options import ReaderOptions, WriterOptions
from spark_ingest.reading import input_ddl, split_options
from spark_ingest.schema import (
    EVENT_COLUMN,
    META_COLUMNS,
    check_input,
    coerce,
    expression_type,
    result_columns,
    source_ddl,
)
from tests.shared.zoo import SCHEMA, flows

ADDR = {"address": "127.0.0.1:6379"}


# -- options ------------------------------------------------------------------------------
def test_options_parse_case_insensitively_with_defaults() -> None:
    w = WriterOptions.parse({"Dataflow": "d", "ADDRESS": "10.0.0.1:6379", "batch_size": "100"})
    assert (w.dataflow, w.connection.address, w.connection.pool, w.batch_size) == \
        ("d", "10.0.0.1:6379", "default", 100)
    r = ReaderOptions.parse({"dataflow": "d", "output": "errors", "max_rows_per_batch": "10", **ADDR})
    assert (r.output, r.max_rows_per_batch, r.include_metadata) == ("errors", 10, True)
    assert r.wait_ms == 500 and ReaderOptions.parse({"dataflow": "d", "wait_ms": "0",
                                                     **ADDR}).wait_ms == 0


@pytest.mark.parametrize("opts,option", [
    ({**ADDR}, "dataflow"),
    ({"dataflow": "d"}, "address"),
    ({"dataflow": "d", "address": "nohost"}, "address"),
    ({"dataflow": "d", "batch_size": "0", **ADDR}, "batch_size"),
    ({"dataflow": "d", "ray_auth": "maybe", **ADDR}, "ray_auth"),
])
def test_writer_option_errors_name_the_option(opts: dict[str, str], option: str) -> None:
    with pytest.raises(OptionError, match=f"cameo option '{option}'") as e:
        WriterOptions.parse(opts)
    assert e.value.option == option and "Fix:" in str(e.value)


@pytest.mark.parametrize("opts,option", [
    ({"dataflow": "d", "output": "both", **ADDR}, "output"),
    ({"dataflow": "d", "output": "errors", "sink": "o", **ADDR}, "sink"),
    ({"dataflow": "d", "include_metadata": "perhaps", **ADDR}, "include_metadata"),
    ({"dataflow": "d", "wait_ms": "-1", **ADDR}, "wait_ms"),
    ({"dataflow": "d", "wait_ms": "60000", **ADDR}, "wait_ms"),  # holds a runtime thread
])
def test_reader_option_errors_name_the_option(opts: dict[str, str], option: str) -> None:
    with pytest.raises(OptionError, match=f"cameo option '{option}'"):
        ReaderOptions.parse(opts)


# -- cutting micro-batches into messages -----------------------------------------------------
def test_messages_are_bounded_and_keep_order_without_windows() -> None:
    plan = plan_messages(None, 4, bucket_ms=None, n=10)
    assert plan.order is None and plan.spans == [(0, 4), (4, 8), (8, 10)]
    assert plan_messages(np.array([5.0, 1.0]), 4, bucket_ms=None).spans == [(0, 2)]
    assert plan_messages(None, 4, bucket_ms=None, n=0).spans == []


def test_messages_do_not_straddle_windows() -> None:
    times = np.array([0, 10, 99, 100, 150, 250, 260], dtype=float)
    plan = plan_messages(times, 2, bucket_ms=100)
    assert plan.order is None  # time-ordered input is not reordered
    assert plan.spans == [(0, 2), (2, 3), (3, 5), (5, 7)]


def test_rows_without_time_go_first_and_buckets_in_time_order() -> None:
    times = np.array([250, math.nan, 10, 260, 20], dtype=float)
    plan = plan_messages(times, 10, bucket_ms=100)
    assert plan.order is not None
    assert plan.order.tolist() == [1, 2, 4, 0, 3]
    assert plan.spans == [(0, 1), (1, 3), (3, 5)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.integers(-5_000, 5_000).map(float), st.just(math.nan)), max_size=60),
       st.integers(1, 7), st.sampled_from([None, 1, 50, 1000]))
def test_every_row_goes_out_once_in_bounded_single_window_messages(
        times: list[float], size: int, bucket: int | None) -> None:
    arr = np.array(times, dtype=float)
    plan = plan_messages(arr, size, bucket_ms=bucket, n=len(times))
    order = plan.order.tolist() if plan.order is not None else list(range(len(times)))
    assert sorted(order) == list(range(len(times)))
    covered = [i for s, e in plan.spans for i in range(s, e)]
    assert covered == list(range(len(times)))
    last_bucket = -math.inf
    for s, e in plan.spans:
        assert 0 < e - s <= size
        if bucket is None:
            continue
        rows = [arr[order[i]] for i in range(s, e)]
        buckets = {math.floor(t / bucket) if math.isfinite(t) else -math.inf for t in rows}
        assert len(buckets) == 1  # one window per message
        b = buckets.pop()
        assert b >= last_bucket  # windows go out in event-time order
        last_bucket = b
    if bucket is not None:  # within a window, Spark's order is kept (stable)
        for s, e in plan.spans:
            assert [order[i] for i in range(s, e)] == sorted(order[i] for i in range(s, e))


def test_bucket_is_the_finest_window_downstream_of_the_source() -> None:
    by_name = {d.name.split("-", 1)[1]: d.spec for d in flows("b", 1)}
    assert bucket_ms(by_name["filter"], "s") is None
    assert bucket_ms(by_name["tumbling"], "s") == 50
    assert bucket_ms(by_name["sliding"], "s") == 20
    assert bucket_ms(by_name["session"], "s") is None
    assert bucket_ms(by_name["join"], "l") == 40
    both = Dataflow("g", latency_target_ms=1)
    src = both.source("s", schema={"ts": "int"}, event_time="ts")
    src.window(tumbling_ms=300).aggregate(n=count()).sink("a")
    src.window(sliding_ms=1000, slide_ms=200).aggregate(n=count()).sink("b")
    assert bucket_ms(both.spec, "s") == 100  # gcd: a message stays inside both windows
    spec = Dataflow("h", latency_target_ms=1).source("s", schema={"ts": "int"}).sink("o").spec
    assert bucket_ms(spec, "s") is None  # no event time


# -- offsets and exactly-once ------------------------------------------------------------------
def test_offsets_round_trip_through_json() -> None:
    off = make_offset("d@1.5", {"d/o/1": 3, "d/o/0": 7})
    assert parse_offset(json.dumps(off)) == ("d@1.5", {"d/o/0": 7, "d/o/1": 3})
    with pytest.raises(OffsetError, match="not a cameo offset"):
        parse_offset({"index": 3})


def test_latest_offset_shares_a_row_limit_fairly() -> None:
    avail = {"a": (0, 100), "b": (0, 3), "c": (10, 10)}
    start = initial_offset("d@1", avail)
    end = latest_offset(start, "d@1", avail, max_rows=10)
    assert end["logs"] == {"a": 7, "b": 3, "c": 10}
    assert latest_offset(start, "d@1", avail)["logs"] == {"a": 100, "b": 3, "c": 10}
    new_log = latest_offset(start, "d@1", {**avail, "e": (4, 6)})
    assert new_log["logs"]["e"] == 6


@pytest.mark.parametrize("start_logs,avail,match", [
    ({"a": 5}, {"a": (0, 3)}, "only has 3 rows"),
    ({"a": 1}, {"a": (2, 3)}, "committed by another reader"),
    ({"x": 1}, {"a": (0, 3)}, "does not have"),
])
def test_unresumable_checkpoints_are_refused(start_logs: dict[str, int],
                                             avail: dict[str, tuple[int, int]], match: str) -> None:
    with pytest.raises(OffsetError, match=match):
        latest_offset(make_offset("d@1", start_logs), "d@1", avail)


def test_a_redeployed_dataflow_is_read_from_its_beginning() -> None:
    old = make_offset("d@1", {"a": 7})
    end = latest_offset(old, "d@2", {"a": (0, 3)})
    assert end == make_offset("d@2", {"a": 3})
    assert ranges(old, end) == [("a", 0, 3)]
    assert to_commit(old, {"a": (0, 3)}, "d@2") == {}  # never commit another deployment's offsets
    with pytest.raises(OffsetError, match="committed by another reader"):
        latest_offset(old, "d@2", {"a": (2, 3)})


def test_the_error_output_skips_rows_dropped_unread() -> None:
    start = make_offset("d@1", {"e": 2})
    assert latest_offset(start, "d@1", {"e": (5, 9)}, lossy=True)["logs"] == {"e": 9}
    assert ranges(make_offset("d@1", {"e": 5}), make_offset("d@1", {"e": 9})) == [("e", 5, 9)]


def test_ranges_split_and_skip_empty() -> None:
    start, end = make_offset("d", {"a": 0, "b": 4}), make_offset("d", {"a": 5, "b": 4})
    assert ranges(start, end, 2) == [("a", 0, 2), ("a", 2, 4), ("a", 4, 5)]
    assert to_commit(end, {"a": (0, 9), "b": (4, 4)}) == {"a": 5}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["run", "crash_after_offsets",
                                                              "crash_after_write", "crash_after_commit"])),
                min_size=1, max_size=12),
       st.integers(1, 4))
def test_no_result_lost_or_written_twice_across_query_restarts(
        steps: list[tuple[int, str]], max_rows: int) -> None:
    """Spark's micro-batch protocol, simulated: the offset log is written before a batch
    runs, its output is replaced if the batch is re-run, the commit log after it, and the
    source's commit() only after that. Crash at every point; restart; the output holds
    every result exactly once."""
    log = ResultLog()
    produced = 0
    offset_log: dict[int, dict[str, Any]] = {}
    commit_log: set[int] = set()
    output: dict[int, list[int]] = {}   # batch id -> rows (the file sink replaces a re-run batch)

    def avail() -> dict[str, tuple[int, int]]:
        return {"d/o/0": (log.committed_offset, log.end_offset)}

    def run_batch(batch: int, start: dict[str, Any], end: dict[str, Any]) -> None:
        rows = []
        for _log, s, e in ranges(start, end, 2):
            rows.extend(r[0]["id"] for r in log.read(s, e))
        output[batch] = rows

    def source_commit(end: dict[str, Any]) -> None:
        for _, off in to_commit(end, avail()).items():
            log.commit(off)

    def restart_and_step(crash: str | None) -> None:
        # Recover like MicroBatchExecution: re-run an uncommitted last batch with its offsets.
        last = max(offset_log) if offset_log else -1
        if last >= 0 and last not in commit_log:
            start = offset_log[last - 1] if last > 0 else initial
            run_batch(last, start, offset_log[last])
            commit_log.add(last)
        # Plan the next batch.
        start = offset_log[last] if last >= 0 else initial
        if last >= 0:
            source_commit(offset_log[last])
        end = latest_offset(start, "d@1", avail(), max_rows)
        if end == start:
            return
        batch = last + 1
        offset_log[batch] = end
        if crash == "crash_after_offsets":
            return
        run_batch(batch, start, end)
        if crash == "crash_after_write":
            return
        commit_log.add(batch)

    initial = initial_offset("d@1", avail())
    for new_rows, action in steps:
        log.append([{"id": produced + i} for i in range(new_rows)], 0.0, 0.0)
        produced += new_rows
        restart_and_step(None if action == "run" else action)
    for _ in range(produced + 2):  # drain
        restart_and_step(None)
    written = [r for b in sorted(output) for r in output[b]]
    assert sorted(written) == list(range(produced))


# -- schemas -----------------------------------------------------------------------------------
def test_result_columns_follow_the_dataflow() -> None:
    by_name = {d.name.split("-", 1)[1]: d.spec for d in flows("s", 2)}
    assert result_columns(by_name["filter"]) == [("ts", "int"), ("v", "float")]
    assert result_columns(by_name["tumbling"]) == [
        ("key", "str"), ("window_start", "int"), ("window_end", "int"), ("ts", "int"), ("n", "int"),
        ("total", "float"), ("lo", "float"), ("hi", "float"), ("mean", "float")]
    assert result_columns(by_name["flat"]) == [EVENT_COLUMN]  # a Python function's output
    join = dict(result_columns(by_name["join"]))
    assert join["key"] == "str"
    union = dict(result_columns(by_name["union"]))
    assert union["key"] == "str" and union["n"] == "int"


def test_result_columns_of_an_int_aggregate_and_several_sinks() -> None:
    d = Dataflow("m", latency_target_ms=1)
    s = d.source("s", schema={"ts": "int", "k": "int", "n": "int"}, event_time="ts")
    s.key_by("k").window(tumbling_ms=10).aggregate(c=count(), hi=max_("n"), a=avg("n"),
                                                   t=sum_("n")).sink("o1")
    s.sink("o2")
    cols = dict(result_columns(d.spec))
    assert (cols["key"], cols["hi"], cols["t"], cols["a"], cols["k"]) == ("int", "int", "int", "float", "int")
    assert cols["n"] == "int"


@pytest.mark.parametrize("text,typ", [
    ("value", "float"), ("ts + 1", "int"), ("ts / 2", "float"), ("value * 2", "float"),
    ("level == 'ERROR'", "bool"), ("not flag", "bool"), ("lower(level)", "str"),
    ("round(value)", "int"), ("round(value, 2)", "float"), ("len(text)", "int"),
    ("'a' if ts > 1 else 'b'", "str"), ("1 if ts > 1 else 2.5", "float"),
    ("coalesce(level, 'x')", "str"), ("payload.x", "any"), ("unknown", "any"),
    ("level and flag", "any"), ("max(ts, 3)", "int"), ("text + 'x'", "str"),
])
def test_expression_types(text: str, typ: str) -> None:
    fields = {"ts": "int", "value": "float", "level": "str", "flag": "bool", "text": "str",
              "payload": "any"}
    assert expression_type(text, fields) == typ


def test_coerce_values_into_their_columns() -> None:
    assert coerce(None, "int") is None
    assert (coerce(True, "int"), coerce(float("inf"), "int"), coerce("3", "float")) == (None, None, None)
    assert (coerce(1, "bool"), coerce(True, "bool"), coerce(5, "str")) == (None, True, "5")
    assert coerce([1, "a"], "any") == '[1, "a"]'


def test_source_ddl_and_input_check() -> None:
    spec = Dataflow("d", latency_target_ms=1).source("s", schema=SCHEMA, event_time="ts").sink("o").spec
    assert source_ddl(spec, "s") == ("`ts` BIGINT, `level` STRING, `key` STRING, `value` DOUBLE, "
                                     "`text` STRING, `_corrupt_record` STRING")
    ok = {"ts": "bigint", "level": "string", "key": "string", "value": "int", "text": "string", "x": "map"}
    assert check_input(spec, "s", ok) == []
    assert check_input(spec, "s", {**ok, "ts": "timestamp"}) == []
    bad = {**ok, "ts": "string"}
    del bad["key"]
    assert check_input(spec, "s", bad) == ["column 'ts' is string, the source declares int",
                                           "column 'key' (str) is missing"]


def test_connector_options_split_and_input_schema() -> None:
    d = Dataflow("d", latency_target_ms=1)
    d.source("s", schema={"ts": "int", "v": "float"}, event_time="ts",
             connector={"format": "json", "path": "/in", "cameo.event_time_type": "timestamp",
                        "cameo.batch_size": 100}).sink("o")
    step = d.spec.sources[0]
    assert step.connector is not None
    assert split_options(step.connector) == ({"path": "/in"},
                                             {"event_time_type": "timestamp", "batch_size": "100"})
    assert input_ddl(step, step.connector) == "`ts` TIMESTAMP, `v` DOUBLE, `_corrupt_record` STRING"


# -- Arrow rows ----------------------------------------------------------------------------------
def test_spark_batches_become_msgpack_ready_events() -> None:
    import datetime as dt
    from decimal import Decimal

    rb = pa.record_batch({
        "ts": pa.array([dt.datetime(2026, 1, 1, tzinfo=dt.UTC), None], pa.timestamp("us", tz="UTC")),
        "d": pa.array([dt.date(2026, 1, 2), None]),
        "m": pa.array([Decimal("1.50"), None]),
        "_corrupt_record": pa.array([None, '{"bad'])})
    events = to_events(prepare(rb, "_corrupt_record"))
    assert events == [{"ts": 1767225600000, "d": "2026-01-02", "m": 1.5},
                      {"_corrupt_record": '{"bad'}]
    clean = pa.record_batch({"a": [1], CORRUPT: pa.nulls(1, pa.string())})
    assert to_events(clean) == [{"a": 1}]


def test_result_rows_become_a_typed_arrow_batch() -> None:
    cols = [("ts", "int"), ("v", "float"), ("_log", "str"), ("_offset", "int"),
            ("_ingest_ms", "float"), ("_egress_ms", "float")]
    rows = [({"ts": 1, "v": 2}, 10.0, 12.5), ({"ts": 2.0, "x": 1}, 11.0, 13.0)]
    rb = results_batch(rows, 40, "d/o/0", cols, arrow_schema(cols), event_column=False)
    assert rb.to_pylist() == [
        {"ts": 1, "v": 2.0, "_log": "d/o/0", "_offset": 40, "_ingest_ms": 10.0, "_egress_ms": 12.5},
        {"ts": 2, "v": None, "_log": "d/o/0", "_offset": 41, "_ingest_ms": 11.0, "_egress_ms": 13.0}]
    whole = results_batch(rows[:1], 0, "l", [EVENT_COLUMN], arrow_schema([EVENT_COLUMN]),
                          event_column=True)
    assert json.loads(whole.column(0)[0].as_py()) == {"ts": 1, "v": 2}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.fixed_dictionaries({}, optional={
    "n": st.integers(-2**62, 2**62), "v": st.one_of(st.integers(-2**60, 2**60), st.floats()),
    "s": st.text(max_size=4), "b": st.booleans()}), min_size=1, max_size=6),
    st.integers(0, 1000))
def test_results_read_as_columns_make_the_batch_the_rows_make(events: list[dict[str, Any]],
                                                              first: int) -> None:
    """Where `results_columns` builds the batch without rows, it is `results_batch`'s."""
    cols = [("n", "int"), ("v", "float"), ("s", "str"), ("b", "bool"), ("gone", "int")] + META_COLUMNS
    schema = arrow_schema(cols)
    log = ResultLog()
    log.append(events, 10.0, 12.5)
    try:
        table = log.read_columns(0)
    except ResultsNotColumnar:  # ints beside floats in "v" widen; bigger ones do not fit
        return
    got = results_columns(table, first, "d/o/0", cols, schema)
    want = results_batch(log.read(0), first, "d/o/0", cols, schema, event_column=False)
    # It declines only a column whose Arrow type is not Spark's (an int into a float is cast).
    kinds = {f.name: f.type for f in table.schema if not pa.types.is_null(f.type)}
    declines = any(kinds[name] != schema.field(name).type
                   and not (kind == "float" and pa.types.is_integer(kinds[name]))
                   for name, kind in cols[:4] if name in kinds)
    assert (got is None) == declines
    if got is not None:  # repr: NaN equals itself there
        assert got.schema == want.schema and repr(got.to_pylist()) == repr(want.to_pylist())


def test_results_columns_decline_what_needs_coercion_per_value() -> None:
    cols = [("n", "int")] + META_COLUMNS
    table = pa.table({"n": [1.0, 2.5], "_ingest_ms": [1.0, 1.0], "_egress_ms": [2.0, 2.0]})
    assert results_columns(table, 0, "l", cols, arrow_schema(cols)) is None  # 2.5 is no int
    json_text = [("a", "any")] + META_COLUMNS
    table = pa.table({"a": ["x"], "_ingest_ms": [1.0], "_egress_ms": [2.0]})
    assert results_columns(table, 0, "l", json_text, arrow_schema(json_text)) is None


def test_latency_stages_from_output_columns() -> None:
    import pandas as pd

    frame = pd.DataFrame({"landed_ms": [0.0, 10.0], "_ingest_ms": [5.0, 12.0],
                          "_egress_ms": [6.0, 20.0], "written_ms": [106.0, 120.0]})
    stages = stage_latencies(frame)
    assert stages["spark_in"]["p50_ms"] == 2.0 and stages["end_to_end"]["max_ms"] == 110.0
    assert summarize([]) == {"n": 0}


def test_pure_modules_import_without_spark_or_ray() -> None:
    blocker = (
        "import importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('ray', 'pyspark'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import spark_ingest, spark_ingest.batching, spark_ingest.offsets, spark_ingest.schema, "
        "spark_ingest.options, spark_ingest.arrow, spark_ingest.latency, spark_ingest.events, "
        "spark_ingest.exceptions, spark_ingest.session, spark_ingest.tier, "
        "spark_ingest.checkpoints, spark_ingest.results, spark_ingest.storage, spark_ingest.reading, "
        "spark_ingest.shared, spark_ingest.shared_inputs\n"
        "print('clean')\n")
    run = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "clean"


def test_a_whole_task_table_is_planned_like_a_batch() -> None:
    from spark_ingest.arrow import event_times

    table = pa.Table.from_batches([pa.record_batch({"ts": [250, 10]}),
                                   pa.record_batch({"ts": [20, None]})])
    times = event_times(table, "ts")
    assert times is not None and np.isnan(times[3]) and times[:3].tolist() == [250.0, 10.0, 20.0]
    plan = plan_messages(times, 10, bucket_ms=100)
    assert plan.order is not None
    ordered = table.take(pa.array(plan.order))
    assert to_events(ordered) == [{"ts": None}, {"ts": 10}, {"ts": 20}, {"ts": 250}]
    assert event_times(table, None) is None
    assert event_times(pa.table({"ts": ["x"]}), "ts") is None


PRIORITY_CHILD = """
import sys, threading
named = threading.Event()
def named_thread(name):
    with open("/proc/thread-self/comm", "w") as f:
        f.write(name)
    print(threading.get_native_id(), flush=True)
    named.set()
    sys.stdin.readline()
for name in ("Executor task launch worker-0", "stream execution thread for q"):
    named.clear()
    threading.Thread(target=named_thread, args=(name,)).start()
    named.wait()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_only_sparks_work_goes_below_the_executors_and_a_query_once_started() -> None:
    import os

    from spark_ingest.session import QUERY_START_S, lower_spark_threads

    child = subprocess.Popen([sys.executable, "-c", PRIORITY_CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdin is not None and child.stdout is not None

    def nice() -> dict[int, int]:
        return {t: os.getpriority(os.PRIO_PROCESS, t)
                for t in map(int, os.listdir(f"/proc/{child.pid}/task"))}

    try:
        task, query = int(child.stdout.readline()), int(child.stdout.readline())
        seen: dict[int, float] = {}
        assert lower_spark_threads(child.pid, 7, seen, now=100.0)
        # The task thread goes low at once; the query's thread keeps its priority while it
        # starts (it starts the Python processes that must connect back in time); the
        # others (the driver's) keep theirs.
        assert nice() == {t: 7 if t == task else 0 for t in nice()}
        assert seen[query] == 100.0 and seen[task] == -1.0
        assert lower_spark_threads(child.pid, 7, seen, now=100.0 + QUERY_START_S)
        assert nice() == {t: 7 if t in (task, query) else 0 for t in nice()}
        assert lower_spark_threads(child.pid, 3, {}, now=0.0)  # never raises a priority back
        assert nice()[task] == 7
    finally:
        child.stdin.close()  # the children's readline returns: it ends either way
        child.stdout.read()
    assert child.wait() == 0  # a blocking wait: no polling sleep
    assert not lower_spark_threads(child.pid, 7, {}, now=0.0)  # gone


def test_spark_niceness_is_checked() -> None:
    from spark_ingest.session import SparkConfig

    assert SparkConfig().niceness == 10
    for bad in (-1, 20):
        with pytest.raises(ValueError, match="niceness: expected 0..19"):
            SparkConfig(niceness=bad)


def test_the_demo_explains_a_missed_target_with_its_numbers() -> None:
    from spark_ingest.demo import alerts, over_target_note

    note = over_target_note({"p50_ms": 12.0, "p99_ms": 180.4}, 50, 0.8,
                            {"executors": 0.06, "spark jvm": 0.6, "driver": 0.001})
    assert note.startswith("over target: runtime p50 12 ms, p99 180 ms against 50 ms.")
    assert "(0.80 busy with other work when it started)" in note
    assert "cores used while files landed: executors 0.06, spark jvm 0.60." in note
    assert "(0.80" not in over_target_note({"p50_ms": 1.0, "p99_ms": 99.0}, 50, None)
    assert "SparkConfig.niceness" in note and "python -m cameo_actors.demo" in note
    # An input micro-batch holds at most one trigger's worth of files (no burst of backlog).
    source = alerts("/in", "/out", max_files=10).spec.steps[0].connector
    assert source is not None and ("maxFilesPerTrigger", "10") in source.options


def test_the_demo_ends_with_one_json_line_and_the_phases_of_its_micro_batches() -> None:
    import doctest
    import json

    from spark_ingest import demo

    assert doctest.testmod(demo).failed == 0
    alerts = {"within_target": 1.0, "results": 3, "stages": {}}  # nothing reached Parquet
    line = json.dumps(demo.headline(alerts))
    assert json.loads(line) == {"e2e_p50_s": None, "e2e_p99_s": None, "alerts_within_50ms": 1.0,
                                "alerts_results": 3, "goals_met": False}
    met = {"within_target": np.float64(1.0), "results": 3, "stages": {"end_to_end": {
        "n": 3, "p50_ms": np.float64(1500.0), "p99_ms": np.float64(3000.0)}}}  # as pandas gives
    assert json.loads(json.dumps(demo.headline(met)))["goals_met"] is True
    phases = demo.micro_batch_phases({"idle": [{"numInputRows": 0, "durationMs": {"addBatch": 3}}],
                                      "in": [{"numInputRows": 9, "durationMs": {
                                          "triggerExecution": 1000, "addBatch": 700,
                                          "walCommit": 4}}]})
    assert list(phases) == ["in"]  # a query with no data in its micro-batches is left out
    assert demo.micro_batches(phases).splitlines()[1] == (
        "   in: 1 batches with data; ms per batch: triggerExecution 1000, addBatch 700")


# -- `any` and nullable types ----------------------------------------------------------------
def test_any_and_nullable_fields_map_to_spark_columns() -> None:
    from spark_ingest.schema import ddl, input_spark_type

    schema = {"ts": "int", "p": "any", "q": "any?", "n": "int?", "s": "str?", "b": "bool?",
              "f": "float?"}
    d = Dataflow("d", latency_target_ms=1)
    d.source("s", schema=schema, event_time="ts",
             connector={"format": "json", "path": "/in"}).sink("o")
    step = d.spec.sources[0]
    assert step.connector is not None
    # JSON: `any` is a VARIANT (455728 stays a number, "455728" text); nullable = base type.
    assert input_ddl(step, step.connector) == (
        "`ts` BIGINT, `p` VARIANT, `q` VARIANT, `n` BIGINT, `s` STRING, `b` BOOLEAN, "
        "`f` DOUBLE, `_corrupt_record` STRING")
    assert source_ddl(d.spec, "s", None, fmt="csv") == (
        "`ts` BIGINT, `p` STRING, `q` STRING, `n` BIGINT, `s` STRING, `b` BOOLEAN, `f` DOUBLE")
    assert input_spark_type("any", "parquet") == "STRING"
    assert ddl([("n", "int?"), ("a", "any?")]) == "`n` BIGINT, `a` STRING"
    fed = {"ts": "bigint", "p": "variant", "q": "string", "n": "int", "s": "string",
           "b": "boolean", "f": "bigint"}
    assert check_input(d.spec, "s", fed) == []
    assert check_input(d.spec, "s", {**fed, "n": "string", "b": "int"}) == [
        "column 'n' is string, the source declares int?",
        "column 'b' is int, the source declares bool?"]


def test_result_columns_keep_any_values_exact_and_nullable_types() -> None:
    from cameo_actors import min_

    d = Dataflow("bids", latency_target_ms=1)
    bids = d.source("b", schema={"ts": "int", "auction": "any", "price": "any", "n": "int?",
                                 "f": "float"}, event_time="ts")
    bids.map({"ts": "ts", "euro": "round(price * 0.908, 6)", "n": "n", "n1": "n + 1",
              "c": "coalesce(n, 0)", "cn": "coalesce(n, n)", "x": "n if ts > 0 else f"}).sink("m")
    (bids.key_by("auction").window(tumbling_ms=10)
     .aggregate(k=count(), hi=max_("price"), t=sum_("price"), m=avg("price"), lo=min_("n"),
                fs=sum_("f"))
     .sink("w"))
    assert result_columns(d.spec, ["m"]) == [
        ("ts", "int"), ("euro", "any"), ("n", "int?"), ("n1", "int"), ("c", "int"),
        ("cn", "int?"), ("x", "float?")]
    # An `any` field's max and sum keep what the values are (ints stay ints): JSON text.
    assert result_columns(d.spec, ["w"]) == [
        ("key", "any"), ("window_start", "int"), ("window_end", "int"), ("ts", "int"),
        ("k", "int"), ("hi", "any"), ("t", "any"), ("m", "float"), ("lo", "int"), ("fs", "float")]


@pytest.mark.parametrize("text,typ", [
    ("n", "int?"), ("n * 2", "int"), ("-n", "int"), ("abs(n)", "int"), ("round(v)", "int"),
    ("coalesce(n, 1)", "int"), ("coalesce(n, v)", "float?"), ("coalesce(n, 2.5)", "float"),
    ("n if flag else 2.5", "float?"), ("max(n, 3)", "int"), ("len(s)", "int"), ("s", "str?"),
])
def test_expression_types_of_nullable_fields(text: str, typ: str) -> None:
    assert expression_type(text, {"n": "int?", "v": "float?", "s": "str?", "flag": "bool"}) == typ


def test_any_and_nullable_values_into_columns() -> None:
    assert coerce("455728", "any") == '"455728"' and coerce(455728, "any") == "455728"
    assert coerce([{"a": None}], "any?") == '[{"a": null}]' and coerce(None, "any") is None
    assert (coerce(3, "int?"), coerce(2.0, "float?"), coerce(None, "str?")) == (3, 2.0, None)
    assert arrow_schema([("n", "int?"), ("a", "any?")]) == pa.schema([("n", pa.int64()),
                                                                      ("a", pa.string())])


def _variant_column(values: list[Any]) -> pa.Array:
    """A column shaped as Spark hands a VARIANT to Python (values stand in for the bytes)."""
    marked = pa.field("metadata", pa.binary(), nullable=False, metadata={b"variant": b"true"})
    typ = pa.struct([pa.field("value", pa.binary(), nullable=False), marked])
    rows = [None if v is None else {"value": json.dumps(v).encode(), "metadata": b""}
            for v in values]
    return pa.array(rows, typ)


def test_variant_columns_become_the_json_values(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_ingest import arrow

    # The bytes are decoded by PySpark's VariantUtils in Spark's workers (integration tests);
    # here a stand-in decodes the JSON the test put there, through the same `plain`.
    monkeypatch.setattr(arrow, "from_variant", lambda v, m: arrow.plain(json.loads(v)))
    rb = pa.RecordBatch.from_arrays(
        [pa.array([1, 2, 3, 4, None]), _variant_column([455728, "455728", [{"a": 1.5}], None, None]),
         pa.array([None, None, None, None, "{bad"])], names=["ts", "price", "_corrupt_record"])
    assert arrow.is_variant(rb.schema.field("price")) and not arrow.is_variant(rb.schema.field("ts"))
    events = to_events(prepare(rb, "_corrupt_record"))
    # A SQL NULL is a field the row did not have: the event lacks it, as a pushed one would.
    assert events == [{"ts": 1, "price": 455728}, {"ts": 2, "price": "455728"},
                      {"ts": 3, "price": [{"a": 1.5}]}, {"ts": 4}, {"_corrupt_record": "{bad"}]
    plain_struct = pa.record_batch({"s": pa.array([{"value": b"x", "metadata": b"y"}])})
    assert to_events(plain_struct) == [{"s": {"value": b"x", "metadata": b"y"}}]  # not marked


def test_decoded_variants_read_as_json_loads_reads_the_text() -> None:
    import datetime as dt
    from decimal import Decimal

    from spark_ingest.arrow import plain

    # Spark keeps JSON numbers with a fraction as decimals: 2.50 is a float, as json.loads has it.
    assert plain({"a": [Decimal("2.50"), Decimal("7"), Decimal("18446744073709551615")]}) == \
        {"a": [2.5, 7, 18446744073709551615]}
    assert type(plain(Decimal("1.0"))) is float and type(plain(Decimal("10"))) is int
    assert plain(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) == 1767225600000
    assert plain(dt.datetime(2026, 1, 1)) == 1767225600000 and plain(dt.date(2026, 1, 2)) == "2026-01-02"


# -- results read back ------------------------------------------------------------------------
def _spark_parquet(path: str, rows: list[dict[str, Any]], types: dict[str, str]) -> None:
    """A Parquet file as Spark writes one: its schema, with field metadata, in the footer."""
    import pyarrow.parquet as pq

    from spark_ingest.results import SPARK_ROW_METADATA

    fields = [{"name": n, "type": "string", "nullable": True, "metadata": {"cameo.type": t}}
              for n, t in types.items()]
    table = pa.Table.from_pylist(rows).replace_schema_metadata(
        {SPARK_ROW_METADATA: json.dumps({"type": "struct", "fields": fields})})
    pq.write_table(table, path)


def test_results_read_back_with_json_columns_decoded(tmp_path: Any) -> None:
    from spark_ingest.results import column_types, committed_files, read_results

    out = tmp_path / "out"
    (out / "_spark_metadata").mkdir(parents=True)
    files = {}
    for name, key in (("a", '455728'), ("b", '"455728"'), ("c", '{"x": [1, null]}'), ("gone", "1")):
        files[name] = str(out / f"part-{name}.parquet")
        _spark_parquet(files[name], [{"key": key, "n": "n", "_offset": "0"}],
                       {"key": "any", "n": "str", "_offset": "int"})
    _spark_parquet(str(out / "part-uncommitted.parquet"), [{"key": "9", "n": "x", "_offset": "0"}],
                   {"key": "any", "n": "str", "_offset": "int"})

    def log(batch: str, *entries: tuple[str, str]) -> None:
        lines = ["v1"] + [json.dumps({"path": f"file://{files[f]}", "action": action})
                          for f, action in entries]
        (out / "_spark_metadata" / batch).write_text("\n".join(lines))

    log("0", ("gone", "add"))  # before the compaction: its entries are in 1.compact
    log("1.compact", ("a", "add"), ("gone", "add"))
    log("2", ("b", "add"), ("c", "add"))
    log("3", ("gone", "delete"))
    assert committed_files(str(out)) == sorted([files["a"], files["b"], files["c"]])
    rows = read_results(str(out))
    assert sorted(map(repr, rows)) == sorted(map(repr, [
        {"key": 455728, "n": "n"}, {"key": "455728", "n": "n"}, {"key": {"x": [1, None]}, "n": "n"}]))
    assert {r["_offset"] for r in read_results(str(out), metadata=True)} == {"0"}
    tagged = pa.schema([pa.field("k", pa.string(), metadata={b"cameo.type": b"any?"})])
    assert column_types(tagged) == {"k": "any?"}
    assert read_results(str(tmp_path / "nothing")) == []


# -- checkpoint markers ---------------------------------------------------------------------
def test_checkpoint_verdicts() -> None:
    from spark_ingest.checkpoints import Owner, verdict

    mine = Owner("d", "in-s", "json", {"path": "/new", "maxFilesPerTrigger": "3"})
    paced = Owner("d", "in-s", "json", {"path": "/new", "maxFilesPerTrigger": "9"})
    assert paced.fingerprint == mine.fingerprint  # pacing does not change what positions mean
    assert verdict(None, False, mine) == "new"
    assert verdict(None, True, mine) == "adopt"                      # made before markers
    assert verdict(paced.to_dict(), True, mine) == "resume"
    assert verdict({**mine.to_dict(), "adopted": True}, True, mine) == "adopt"
    for other in (Owner("d", "in-s", "json", {"path": "/old"}), Owner("e", "in-s", "json", {"path": "/new"}),
                  Owner("d", "in-t", "json", {"path": "/new"}), Owner("d", "in-s", "csv", {"path": "/new"})):
        assert verdict(other.to_dict(), True, mine) == "conflict", other


def test_checkpoint_markers_refuse_another_query_and_start_fresh_on_request(tmp_path: Any) -> None:
    from spark_ingest import checkpoints
    from spark_ingest.checkpoints import MARKER, Owner, apply, check
    from spark_ingest.exceptions import CheckpointConflict

    ck = str(tmp_path / "ck" / "d" / "in-s")
    old = Owner("d", "in-s", "json", {"path": "/data/a"})
    plan = check(ck, old, fresh=False)
    assert plan.verdict == "new" and not plan.reset
    apply(plan)
    (tmp_path / "ck" / "d" / "in-s" / "offsets").mkdir()  # Spark's state
    assert check(ck, old, fresh=False).verdict == "resume"

    new = Owner("d", "in-s", "json", {"path": "/data/b"})
    with pytest.raises(CheckpointConflict) as refused:
        check(ck, new, fresh=False)
    text = str(refused.value)
    assert f"Spark checkpoint {ck!r}" in text and "'/data/b'" in text and "'/data/a'" in text
    assert "fresh_checkpoints=True" in text and refused.value.fix

    plan = check(ck, new, fresh=True)
    assert plan.reset
    apply(plan)
    marker, state = checkpoints.read(ck)
    assert not state and marker is not None and marker["where"] == "/data/b"

    # A checkpoint without a marker is adopted (and marked so); fresh starts it anew.
    (tmp_path / "ck" / "d" / "in-s" / MARKER).unlink()
    (tmp_path / "ck" / "d" / "in-s" / "offsets").mkdir()
    plan = check(ck, new, fresh=False)
    assert plan.verdict == "adopt" and not plan.reset
    apply(plan)
    assert checkpoints.read(ck)[0]["adopted"] is True  # type: ignore[index]
    assert check(ck, new, fresh=False).verdict == "adopt"
    apply(check(ck, new, fresh=True))
    assert checkpoints.read(ck) == (new.to_dict(), False)

    (tmp_path / "ck" / "d" / "in-s" / MARKER).write_text("{not json")
    with pytest.raises(CheckpointConflict, match="an unreadable marker"):
        check(ck, new, fresh=False)


def test_a_new_checkpoint_refuses_an_old_sink_log(tmp_path: Any) -> None:
    from spark_ingest.checkpoints import Owner, apply, check
    from spark_ingest.exceptions import CheckpointConflict

    out = tmp_path / "out"
    ck = str(tmp_path / "ck")
    owner = Owner("d", "out-o", "parquet", {"path": str(out)})
    apply(check(ck, owner, fresh=False, sink_path=str(out)))  # no log yet: fine
    (out / "_spark_metadata").mkdir(parents=True)
    (out / "_spark_metadata" / "0").write_text("v1")
    assert check(ck, owner, fresh=False, sink_path=str(out)).verdict == "resume"  # its own log
    with pytest.raises(CheckpointConflict, match="skip the new query's first batches"):
        check(str(tmp_path / "other-ck"), owner, fresh=False, sink_path=str(out))


# -- a query that died --------------------------------------------------------------------------
def test_spark_messages_are_cut_to_what_failed() -> None:
    import doctest
    import pickle

    from spark_ingest import failures
    from spark_ingest.exceptions import SparkQueryFailed
    from spark_ingest.failures import MAX_MESSAGE_CHARS, failure_fix, spark_message

    assert doctest.testmod(failures).failed == 0

    plan = "\n=== Streaming Query ===\nIdentifier: cameo-in-d-s [id = 1]\nCurrent State: ACTIVE"
    assert spark_message("Wrong basePath /b for the root path: file:/a/x.json" + plan) == \
        "Wrong basePath /b for the root path: file:/a/x.json"
    worker = ("[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback "
              "(most recent call last):\n  File \"/x/datasource.py\", line 211, in write\n"
              "    raise CameoSparkError(\nspark_ingest.exceptions.CameoSparkError: dataflow 'd' "
              "was redeployed\n SQLSTATE: 38000" + plan)
    assert spark_message(worker) == (
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most "
        "recent call last): ... spark_ingest.exceptions.CameoSparkError: dataflow 'd' was "
        "redeployed")
    assert len(spark_message("x" * 10_000)) == MAX_MESSAGE_CHARS + 4
    assert "fresh_checkpoints=True" in failure_fix("Wrong basePath /b", "d", "/ck", "in", "s")
    assert "/ck/d/in-s" in failure_fix("Wrong basePath /b", "d", "/ck", "in", "s")
    assert "SparkTier.start('d')" in failure_fix("Path does not exist", "d", "/ck", "in", "s")
    too_large = failure_fix("[FAILED_READ_FILE.NO_HINT] Encountered error while reading file "
                            "file:///in/a.json.  SQLSTATE: KD001", "d", "/ck", "in", "s")
    assert "cameo.read=spark" in too_large and "max_file_bytes" in too_large

    e = SparkQueryFailed("d", "cameo-in-d-s", "input", "s", "boom", "fix it", ("cameo-out-d-o",))
    assert str(e) == ("the input query 'cameo-in-d-s' of dataflow 'd' (step 's') failed in Spark "
                      "(failed too: cameo-out-d-o): boom. Fix: fix it")
    again = pickle.loads(pickle.dumps(e))  # crosses processes intact (Ray, Spark's workers)
    assert (str(again), again.others, again.role) == (str(e), e.others, "input")


class _Query:
    """A StreamingQuery stand-in: active until stopped, or dead with `error`."""

    def __init__(self, name: str, error: str | None = None) -> None:
        self.name = name
        self.error = error
        self.isActive = error is None
        self.status = {"isTriggerActive": False}
        self.lastProgress = None
        self.calls: list[str] = []

    def processAllAvailable(self) -> None:
        self.calls.append("drain")

    def stop(self) -> None:
        self.calls.append("stop")
        self.isActive = False

    def exception(self) -> str | None:
        return self.error


class _Runtime:
    address, pool = "127.0.0.1:1", "p"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def close(self, name: str) -> None:
        self.calls.append(f"close {name}")

    def wait_idle(self, timeout_s: float = 60.0, *, dataflows: Any = None) -> None:
        self.calls.append(f"wait_idle {' '.join(dataflows or [])}".strip())

    def cancel(self, name: str) -> dict[str, Any]:
        self.calls.append(f"cancel {name}")
        return {"name": name, "state": "cancelled"}


class _Spark:
    class conf:  # noqa: N801 - SparkSession.conf
        @staticmethod
        def get(key: str, default: Any = None) -> Any:
            return "/ck"


def _tier(inputs: dict[str, _Query], outputs: dict[str, _Query]) -> Any:
    from spark_ingest.tier import DataflowQueries, SparkTier

    tier = SparkTier(_Runtime(), _Spark())  # type: ignore[arg-type]
    tier.queries["d"] = DataflowQueries(inputs=dict(inputs), outputs=dict(outputs))
    return tier


def test_drain_reports_a_dead_input_and_leaves_the_dataflow_open() -> None:
    from spark_ingest.exceptions import SparkQueryFailed

    dead = _Query("cameo-in-d-s", "Wrong basePath /b for the root path: file:/a/x.json")
    out = _Query("cameo-out-d-o")
    tier = _tier({"s": dead}, {"o": out})
    [in_state, out_state] = tier.status("d")
    assert (in_state.role, in_state.active, in_state.error) == ("input", False, dead.error)
    assert (out_state.role, out_state.active, out_state.error) == ("output", True, None)
    with pytest.raises(SparkQueryFailed) as failed:
        tier.raise_if_failed()
    assert failed.value.query == "cameo-in-d-s" and "d" in tier.queries  # only a check

    with pytest.raises(SparkQueryFailed) as failed:
        tier.drain("d", close=True)
    assert (failed.value.dataflow, failed.value.role, failed.value.step) == ("d", "input", "s")
    assert "Wrong basePath" in str(failed.value) and "fresh_checkpoints=True" in failed.value.fix
    assert tier.runtime.calls == []          # not closed on part of its input, nothing awaited
    assert out.calls == ["stop"]             # the output stopped between batches, not drained
    assert "d" not in tier.queries and tier.status("d") == []


def test_drain_and_stop_report_a_dead_output_after_stopping_the_rest() -> None:
    from spark_ingest.exceptions import SparkQueryFailed

    fine, dead = _Query("cameo-in-d-s"), _Query("cameo-out-d-o", "Path does not exist: /x")
    tier = _tier({"s": fine}, {"o": dead, "p": _Query("cameo-out-d-p", "disk full")})
    with pytest.raises(SparkQueryFailed) as failed:
        tier.drain("d", close=True)
    assert failed.value.query == "cameo-out-d-o" and failed.value.others == ("cameo-out-d-p",)
    assert fine.calls == ["drain", "stop"] and tier.runtime.calls == []

    tier = _tier({"s": _Query("cameo-in-d-s")}, {"o": _Query("cameo-out-d-o", "disk full")})
    with pytest.raises(SparkQueryFailed, match="disk full"):
        tier.stop("d")
    assert tier.queries == {}

    tier = _tier({"s": _Query("cameo-in-d-s")}, {"o": _Query("cameo-out-d-o")})
    tier.drain("d", close=True)  # all well: close, wait, then the outputs drain
    assert tier.runtime.calls == ["close d", "wait_idle d"]

    tier = _tier({"s": _Query("cameo-in-d-s", "boom")}, {})
    answer = tier.cancel("d")  # ends it anyway; the failure is in the answer
    assert answer["state"] == "cancelled" and "boom" in answer["spark_failures"][0]


def test_a_query_that_died_for_a_transient_reason_starts_again() -> None:
    from spark_ingest.exceptions import SparkQueryFailed
    from spark_ingest.failures import transient
    from spark_ingest.session import SparkConfig

    assert transient("Python worker failed to connect back.")
    assert transient("[CANNOT_OPEN_SOCKET] Can not open socket: ['... timed out'].")
    assert not transient("[PATH_NOT_FOUND] Path does not exist: /in")
    spec = (Dataflow("d", latency_target_ms=100)
            .source("s", schema={"ts": "int"}, connector={"format": "json", "path": "/in"})
            .sink("o", connector={"format": "parquet", "path": "/out"})).spec.to_dict()
    worker_late = "Python worker failed to connect back."
    tier = _tier({"s": _Query("cameo-in-d-s", worker_late)}, {"o": _Query("cameo-out-d-o")})
    tier.config = SparkConfig(restarts=2)
    tier.runtime.describe = lambda name: {"spec": spec}
    started: list[tuple[str, str]] = []

    def start_query(spec: Any, role: str, step: str, location: str | None = None) -> _Query:
        started.append((role, step))  # dies again until the second restart
        return _Query(f"cameo-in-d-{step}", worker_late if len(started) < 2 else None)

    tier._start_query = start_query
    tier.drain("d", close=True)  # restarted twice (within its budget), then drained
    assert started == [("input", "s"), ("input", "s")]
    assert tier.runtime.calls == ["close d", "wait_idle d"]

    tier = _tier({"s": _Query("cameo-in-d-s", worker_late)}, {"o": _Query("cameo-out-d-o")})
    tier.config = SparkConfig(restarts=1)
    tier.runtime.describe = lambda name: {"spec": spec}
    tier._start_query = lambda spec, role, step, location=None: _Query("x", worker_late)
    with pytest.raises(SparkQueryFailed, match="failed to connect back"):
        tier.drain("d", close=True)  # over its budget: reported, the dataflow left open
    assert tier.runtime.calls == []

    tier = _tier({"s": _Query("cameo-in-d-s", "[PATH_NOT_FOUND] /in")}, {})
    tier._start_query = lambda *a, **k: pytest.fail("a lasting failure must not restart")
    with pytest.raises(SparkQueryFailed, match="PATH_NOT_FOUND"):
        tier.raise_if_failed()


def test_a_local_master_retries_tasks() -> None:
    from spark_ingest.session import PYTHON_CONNECT_TIMEOUT_S, SparkConfig

    assert SparkConfig().settings()["spark.master"] == "local[*,4]"
    assert SparkConfig(master="local[2]", task_attempts=2).spark_master == "local[2,2]"
    assert SparkConfig(master="local[2,3]").spark_master == "local[2,3]"
    assert SparkConfig(master="spark://h:7077").spark_master == "spark://h:7077"
    assert SparkConfig().settings()["spark.python.authenticate.socketTimeout"] == \
        f"{PYTHON_CONNECT_TIMEOUT_S}s"
    with pytest.raises(ValueError, match="task_attempts >= 1"):
        SparkConfig(task_attempts=0)


def test_spark_batches_that_fit_the_schema_go_as_columns_and_the_others_as_rows() -> None:
    from spark_ingest.arrow import to_columns

    schema = (("ts", "int"), ("level", "str"), ("value", "float"))
    spark = pa.record_batch({"ts": pa.array([1, 2], pa.int32()), "level": ["a", None],
                             "value": pa.array([1, 2], pa.int64()), CORRUPT: pa.nulls(2, pa.string())})
    [cols] = to_columns(spark, "s", schema) or []
    assert cols.to_pylist() == [{"ts": 1, "level": "a", "value": 1.0},
                                {"ts": 2, "level": None, "value": 2.0}]  # a null: the source's to judge
    corrupt = spark.set_column(3, CORRUPT, pa.array([None, "{bad"]))
    assert to_columns(corrupt, "s", schema) is None  # the corrupt row is reported alone
    off_schema = spark.set_column(0, "ts", pa.array(["1", "2"]))
    assert to_columns(off_schema, "s", schema) is None  # each row reported malformed, as rows
    assert to_events(off_schema)[0]["ts"] == "1"


# -- shared inputs ------------------------------------------------------------------------
def _source(dataflow: str, step: str, schema: dict[str, str], connector: Any = None) -> Any:
    """The source step of a one-source dataflow."""
    d = Dataflow(dataflow, latency_target_ms=1)
    d.source(step, schema=schema, connector=connector).sink("o")
    return d.spec.sources[0]


def test_shared_input_connectors_merge_their_pace_and_refuse_another_input() -> None:
    import doctest

    from spark_ingest import options, shared
    from spark_ingest.shared import ShareConflict, Subscriber, merged

    assert doctest.testmod(shared).failed == 0 and doctest.testmod(options).failed == 0
    base = {"format": "json", "path": "/in", "cameo.input": "events"}

    def conn(**more: Any) -> Any:
        return _source("x", "s", {"ts": "int"}, {**base, **more}).connector

    a, b = Subscriber("a", "s"), Subscriber("b", "s")
    m = merged("events", [(a, conn(trigger_ms=500, maxFilesPerTrigger="9")),
                          (b, conn(maxFilesPerTrigger="4", **{"cameo.order": "none"}))])
    assert (m.trigger_ms, dict(m.options)["maxfilespertrigger"]) == (None, "4")  # Spark's default is the fastest
    assert "cameo.order" not in dict(m.options)  # each subscriber's own
    for other, option in ((conn(path="/elsewhere"), "'path'"), (conn(**{"cameo.batch_size": "9"}),
                                                               "'cameo.batch_size'")):
        with pytest.raises(ShareConflict, match=option) as refused:
            merged("events", [(a, conn()), (b, other)])
        assert "shared input 'events'" in str(refused.value) and "'b'" in refused.value.fix
    w = WriterOptions.parse({"subscribers": "a:s,b:t", **ADDR})
    assert (w.dataflow, w.source, w.targets) == ("a", "s", (("a", "s"), ("b", "t")))
    with pytest.raises(OptionError, match="subscribers"):
        WriterOptions.parse({"subscribers": "a,b:t", **ADDR})


def test_a_shared_input_reads_every_subscribers_fields_once() -> None:
    from spark_ingest.shared import ShareConflict

    c = _source("x", "s", {"ts": "int"}, {"format": "json", "path": "/in",
                                           "cameo.input": "events"}).connector
    steps = [_source("a", "s", {"ts": "int", "v": "float"}), _source("b", "t", {"ts": "int", "k": "str"})]
    assert input_ddl(steps, c) == "`ts` BIGINT, `v` DOUBLE, `k` STRING, `_corrupt_record` STRING"
    with pytest.raises(ShareConflict, match="field 'ts'"):
        input_ddl([*steps, _source("c", "u", {"ts": "str"})], c)


def test_a_shared_input_pushes_each_subscriber_its_own_columns() -> None:
    from spark_ingest.batching import Target, push_target

    class Pushes:
        def __init__(self) -> None:
            self.got: list[tuple[str, str, list[str], int]] = []

        def push(self, dataflow: str, source: str, batch: Any, batch_size: int) -> None:
            names = batch.schema.names if hasattr(batch, "schema") else sorted(batch[0])
            self.got.append((dataflow, source, names, batch_size))

    alerts = Target("alerts", "logs", "ts", None, "alerts@1",
                    (("ts", "int"), ("value", "float"), ("landed_ms", "int")))
    bulk = Target("bulk", "metrics", "ts", 1000, "bulk@1", (("ts", "int"), ("value", "float")))
    batch = pa.record_batch({"ts": [1500, 10, 20], "value": [1.0, 2.0, 3.0],
                             "landed_ms": [7, 7, 7], CORRUPT: pa.nulls(3, pa.string())})
    rt = Pushes()
    assert push_target(rt, alerts, batch, 2, select=True) == 2
    assert push_target(rt, bulk, batch, 2, select=True) == 2
    assert rt.got == [("alerts", "logs", ["ts", "value", "landed_ms"], 2),
                      ("alerts", "logs", ["ts", "value", "landed_ms"], 1),
                      ("bulk", "metrics", ["ts", "value"], 2),   # its window [0, 1000) first
                      ("bulk", "metrics", ["ts", "value"], 1)]


def _shared_tier(tmp_path: Any, specs: dict[str, Any]) -> Any:
    """A tier on stand-ins whose input queries record whom they feed."""
    from spark_ingest.session import SparkConfig
    from spark_ingest.tier import SparkTier

    tier = SparkTier(_Runtime(), _Spark(), SparkConfig(run_dir=str(tmp_path)))  # type: ignore[arg-type]

    def describe(name: str) -> dict[str, Any]:
        return {"spec": specs[name].spec.to_dict()}  # KeyError: not deployed

    tier.runtime.describe = describe
    tier.started = []

    def input_query(feeds: Any, c: Any, location: str, name: str) -> _Query:
        tier.started.append(sorted(spec.name for spec, _ in feeds))
        return _Query(name)

    tier.input_query = input_query
    return tier


def test_subscribers_join_and_leave_a_shared_input_between_micro_batches(tmp_path: Any) -> None:
    from spark_ingest import checkpoints
    from spark_ingest.shared import ShareConflict, Subscriber
    from spark_ingest.tier import DataflowQueries

    def flow(name: str, path: str = "/in", ts: str = "int") -> Dataflow:
        d = Dataflow(name, latency_target_ms=100)
        d.source("s", schema={"ts": ts}, connector={
            "format": "json", "path": path, "cameo.input": "events"}).sink("o")
        return d

    specs = {"a": flow("a"), "b": flow("b"), "c": flow("c", "/elsewhere"), "d": flow("d", ts="str")}
    tier = _shared_tier(tmp_path, specs)
    c = specs["a"].spec.sources[0].connector
    where = tier.input_checkpoint("events", c)
    assert where == f"{tmp_path}/spark/checkpoints/inputs/events"
    assert [plan.location for _, _, plan in tier.plan(specs["a"].spec)] == [where]
    for name in ("a", "b"):
        tier.queries[name] = DataflowQueries()
        tier.queries[name].put("input", "s", tier._start_query(specs[name].spec, "input", "s"))
    first = tier.shared.queries["events"]
    assert tier.started == [["a"], ["a", "b"]]  # b joined: started again with both
    assert tier.queries["a"].inputs["s"] is tier.queries["b"].inputs["s"] is first.query
    assert checkpoints.read_subscribers(where) == [("a", "s"), ("b", "s")]
    with pytest.raises(ShareConflict, match="'path'"):
        tier.plan(specs["c"].spec)  # refused at deploy; nothing stopped
    with pytest.raises(ShareConflict, match="field 'ts'"):
        tier.plan(specs["d"].spec)  # the fields the query reads are checked before too
    assert first.query.calls == []

    tier.drain("a", close=True)  # drained, then started again for b alone
    assert first.query.calls == ["drain", "stop"] and tier.started[-1] == ["b"]
    assert tier.queries["b"].inputs["s"] is tier.shared.queries["events"].query
    assert checkpoints.read_subscribers(where) == [("b", "s")]

    tier.queries["a"] = DataflowQueries()  # a back, then the whole tier stops
    tier.queries["a"].put("input", "s", tier._start_query(specs["a"].spec, "input", "s"))
    tier.stop_all()
    assert "events" not in tier.shared.queries and tier.started[-1] == ["a", "b"]
    assert checkpoints.read_subscribers(where) == [("a", "s"), ("b", "s")]  # kept for the restart

    again = _shared_tier(tmp_path, specs)  # a new tier: the first one back brings b along
    again.shared.subscribe("events", Subscriber("a", "s"), c, where)
    assert again.started == [["a", "b"]]
    assert again.queries["b"].inputs["s"] is again.shared.queries["events"].query  # drained, stopped too
    gone = _shared_tier(tmp_path, {"a": specs["a"]})  # b cancelled since: a alone
    gone.shared.subscribe("events", Subscriber("a", "s"), c, where)
    assert gone.started == [["a"]]


def test_the_quick_jit_is_asked_for_and_the_default_keeps_the_jvms() -> None:
    from spark_ingest.session import SparkConfig

    quick = SparkConfig(run_dir="/r", quick_jit=True).settings()
    assert quick["spark.driver.extraJavaOptions"] == "-Djava.io.tmpdir=/r/spark/tmp -XX:TieredStopAtLevel=1"
    assert "Tiered" not in SparkConfig(run_dir="/r").settings()["spark.driver.extraJavaOptions"]


def test_local_files_start_no_process_per_file_unless_hadoops_are_asked_for() -> None:
    from spark_ingest.session import PLAIN_LOCAL_FILES, SparkConfig

    plain = SparkConfig(run_dir="/r").settings()
    assert plain["spark.hadoop.fs.file.impl"] == "org.apache.hadoop.fs.RawLocalFileSystem"
    assert plain["spark.sql.streaming.checkpointFileManagerClass"].endswith(
        "FileSystemBasedCheckpointFileManager")
    hadoops = SparkConfig(run_dir="/r", hadoop_local_files=True).settings()
    assert not set(PLAIN_LOCAL_FILES) & set(hadoops)
    # A setting of the caller's own wins.
    own = SparkConfig(run_dir="/r", conf=(("spark.hadoop.fs.file.impl", "x.Fs"),)).settings()
    assert own["spark.hadoop.fs.file.impl"] == "x.Fs"



def test_a_planning_waits_for_results_only_when_nothing_is_new() -> None:
    start = {"deployment": "d@1", "logs": {"d/o/0": 3}}
    assert nothing_new(start, "d@1", {"d/o/0": (3, 3)}) == {"d/o/0": 3}  # wait from there
    assert nothing_new(start, "d@1", {"d/o/0": (3, 5)}) is None  # rows to plan now
    assert nothing_new(start, "d@1", {"d/o/0": (3, 3), "d/o/1": (0, 2)}) is None  # a new log's
    assert nothing_new(start, "d@2", {"d/o/0": (0, 0)}) is None  # another deployment: as before
