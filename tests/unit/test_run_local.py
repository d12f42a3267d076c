"""Stateless operators and the in-process runner, against hand-computed results."""

from __future__ import annotations

import pytest

from cameo_actors import CameoError, Dataflow, SpecError, count, sum_
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.operators.stateless import SourceOperator
from cameo_actors.testing import TestingSink, TestingSource, Watermark, run_local

SCHEMA = {"ts": "int", "level": "str", "value": "float"}


def logs(*rows: tuple[int, str, float]) -> list[dict]:  # type: ignore[type-arg]
    return [{"ts": t, "level": lvl, "value": v} for t, lvl, v in rows]


def test_filter_and_projection() -> None:
    df = (Dataflow("d", latency_target_ms=50).source("logs", schema=SCHEMA, event_time="ts")
          .filter("level == 'ERROR' and value > 1").map({"ts": "ts", "v2": "value * 2"}).sink("out"))
    events = logs((1, "ERROR", 5.0), (2, "INFO", 9.0), (3, "ERROR", 0.5), (4, "ERROR", 2.0))
    sink = TestingSink()
    result = run_local(df, {"logs": events}, sinks={"out": sink})
    assert result["out"] == [{"ts": 1, "v2": 10.0}, {"ts": 4, "v2": 4.0}]
    assert sink.events == result["out"]
    assert result.errors == []


def test_schema_mismatch_goes_to_error_output_and_flow_continues() -> None:
    df = (Dataflow("d", latency_target_ms=50).source("logs", schema=SCHEMA, event_time="ts")
          .sink("out"))
    events = [{"ts": 1, "level": "E", "value": 1.0},
              {"ts": "2", "level": "E", "value": 1.0},      # wrong type
              {"ts": 3, "level": "E"},                       # missing field
              {"ts": True, "level": "E", "value": 1.0},      # bool is not an int here
              "not an object",
              {"ts": 5, "level": "E", "value": 2}]          # int is a valid float
    result = run_local(df, {"logs": events})
    assert [e["ts"] for e in result["out"]] == [1, 5]
    assert result.error_counts() == {("logs", "malformed"): 4}
    messages = [e.message for e in result.errors]
    assert "field 'ts': expected int, got str '2'" in messages[0]
    assert "field 'value' is missing" in messages[1]
    assert "expected int, got bool" in messages[2]
    assert "got str" in messages[3]


def test_user_functions_map_and_flat_map() -> None:
    df = Dataflow("w", latency_target_ms=100)
    (df.source("s", schema={"ts": "int", "text": "str"}, event_time="ts")
     .flat_map("tests.udfs:split_words").key_by("word").window(tumbling_ms=10)
     .aggregate(n=count()).sink("counts"))
    result = run_local(df, {"s": [{"ts": 1, "text": "a b a"}, {"ts": 12, "text": "b"}]})
    got = sorted((r["key"], r["window_start"], r["n"]) for r in result["counts"])
    assert got == [("a", 0, 2), ("b", 0, 1), ("b", 10, 1)]


def test_user_function_failure_is_reported_with_step_and_others_continue() -> None:
    df = (Dataflow("d", latency_target_ms=50).source("s", schema=SCHEMA, event_time="ts")
          .map(function="tests.udfs:double", id="dbl").sink("out"))
    result = run_local(df, {"s": logs((1, "A", 1.0), (2, "A", -1.0), (3, "A", 3.0))})
    assert [e["value"] for e in result["out"]] == [2.0, 6.0]
    (err,) = result.errors
    assert err.step == "dbl" and err.kind == "user_function"
    assert "ValueError: negative value" in err.message


def test_function_returning_non_dict() -> None:
    df = (Dataflow("d", latency_target_ms=50).source("s", schema=SCHEMA)
          .map(function="tests.udfs:not_a_dict", id="m").sink("out"))
    result = run_local(df, {"s": logs((1, "A", 1.0))})
    assert result["out"] == [] and "returned int" in result.errors[0].message


def test_function_resolver_allow_list() -> None:
    df = (Dataflow("d", latency_target_ms=50).source("s", schema=SCHEMA)
          .map(function="tests.udfs:double", id="m").sink("out"))
    with pytest.raises(SpecError, match="allowed module"):
        run_local(df, {"s": []}, resolver=FunctionResolver(["myjobs."]))
    assert run_local(df, {"s": logs((1, "A", 1.0))}, resolver=FunctionResolver(["tests."]))["out"]
    with pytest.raises(SpecError, match="importable module"):
        FunctionResolver(None).resolve("no_such_module_x:f", "m")
    with pytest.raises(SpecError, match="function named 'nope'"):
        FunctionResolver(None).resolve("tests.udfs:nope", "m")


def test_key_by_missing_key_is_malformed() -> None:
    df = (Dataflow("d", latency_target_ms=50).source("s", schema={"ts": "int", "k": "any"}, event_time="ts")
          .key_by("k", id="kb").window(tumbling_ms=10).aggregate(n=count()).sink("out"))
    result = run_local(df, {"s": [{"ts": 1, "k": "a"}, {"ts": 2, "k": ["unhashable"]}]})
    assert [(r["key"], r["n"]) for r in result["out"]] == [("a", 1)]
    assert result.error_counts() == {("kb", "malformed"): 1}


def test_union_watermark_is_min_over_inputs() -> None:
    df = Dataflow("u", latency_target_ms=50)
    a = df.source("a", schema={"ts": "int", "k": "str"}, event_time="ts")
    b = df.source("b", schema={"ts": "int", "k": "str"}, event_time="ts")
    a.union(b).key_by("k").window(tumbling_ms=10).aggregate(n=count()).sink("out")
    # b's watermark stays at 3 while a's runs to 100: b's event at 5 is not late.
    result = run_local(df, {"a": [{"ts": 1, "k": "x"}, {"ts": 100, "k": "x"}],
                            "b": [{"ts": 3, "k": "x"}, {"ts": 5, "k": "x"}]})
    assert sorted((r["window_start"], r["n"]) for r in result["out"]) == [(0, 3), (100, 1)]
    assert result.errors == []


def test_late_events_counted_at_the_window() -> None:
    df = (Dataflow("d", latency_target_ms=50).source("s", schema={"ts": "int", "v": "int"}, event_time="ts")
          .window(tumbling_ms=10, id="w").aggregate(total=sum_("v")).sink("out"))
    result = run_local(df, {"s": TestingSource(
        [{"ts": 1, "v": 1}, {"ts": 25, "v": 2}, {"ts": 3, "v": 100}, Watermark(40), {"ts": 41, "v": 3}],
        batch_size=1)})
    assert sorted((r["window_start"], r["total"]) for r in result["out"]) == [(0, 1), (20, 2), (40, 3)]
    assert result.error_counts() == {("w", "late"): 1}
    assert result.errors[0].event == {"ts": 3, "v": 100}


def test_allowed_lateness_keeps_slightly_late_events() -> None:
    df = (Dataflow("d", latency_target_ms=50)
          .source("s", schema={"ts": "int", "v": "int"}, event_time="ts", allowed_lateness_ms=20)
          .window(tumbling_ms=10).aggregate(total=sum_("v")).sink("out"))
    result = run_local(df, {"s": TestingSource(
        [{"ts": 1, "v": 1}, {"ts": 25, "v": 2}, {"ts": 3, "v": 100}], batch_size=1)})
    assert sorted((r["window_start"], r["total"]) for r in result["out"]) == [(0, 101), (20, 2)]


def test_source_watermark_and_snapshot() -> None:
    op = SourceOperator("s", [("ts", "int")], "ts", allowed_lateness_ms=5)
    out = op.on_batch([{"ts": 10}, {"ts": 30}, {"ts": 20}])
    assert out.watermark == 25 and len(out.events) == 3
    assert op.on_batch([{"ts": 29}]).watermark is None  # no new maximum
    state = op.snapshot()
    fresh = SourceOperator("s", [("ts", "int")], "ts", allowed_lateness_ms=5)
    fresh.restore(state)
    assert fresh.on_batch([{"ts": 31}]).watermark == 26
    assert fresh.on_watermark(END_OF_STREAM).watermark == END_OF_STREAM


def test_run_local_refuses_unknown_source() -> None:
    df = Dataflow("d", latency_target_ms=5).source("s", schema={"a": "int"}).sink("o")
    with pytest.raises(CameoError, match="inputs name no source"):
        run_local(df, {"nope": []})
