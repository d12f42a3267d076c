"""The Kafka connectors' pure parts: the spec's checks, the source's watermark of its
partitions (idle ones left out), record values parsed into columns, a source whose
watermark comes with its input, and what stats, /metrics and `cameo status` show of the
connectors. The readers and writers themselves run against a real broker
(tests/integration/test_kafka.py)."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from cameo_actors import Dataflow
from cameo_actors.errors import SpecError
from cameo_actors.operators.base import Output
from cameo_actors.operators.build import build_operator
from cameo_actors.runtime._private.executor import kafka_events
from cameo_actors.runtime._private.executor.kafka_batches import native
from cameo_actors.runtime._private.executor.kafka_client import (
    WAIT_MAX_MS,
    WAIT_MIN_MS,
    Waits,
    client_config,
    kafka_options,
)
from cameo_actors.runtime._private.executor.kafka_events import (
    PartitionRead,
    column_messages,
    parse_json_values,
    record_event,
    watermark_of,
)
from cameo_actors.runtime._private.executor.kafka_reader import reads_by_fetch
from cameo_actors.runtime._private.stats import dataflow_metrics, dataflow_stats
from cameo_actors.service.metrics import render
from cameo_actors.service.view import render_status

SCHEMA = {"ts": "int", "key": "str", "value": "float"}
KAFKA = {"format": "kafka", "kafka.bootstrap.servers": "127.0.0.1:9092"}


def source(**connector: str) -> Dataflow:
    d = Dataflow("k", latency_target_ms=100)
    d.source("s", schema=SCHEMA, event_time="ts", connector=connector).sink("o")
    return d


def test_a_kafka_source_names_its_broker_and_topic_and_only_known_options() -> None:
    flow = source(**KAFKA, subscribe="events", startingOffsets="latest",
                  **{"kafka.security.protocol": "SSL"})
    assert kafka_options(flow.spec.sources[0]) == {
        "kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "events",
        "startingOffsets": "latest", "kafka.security.protocol": "SSL"}
    with pytest.raises(SpecError, match="option 'kafka.bootstrap.servers'.*Fix: add options"):
        source(format="kafka", subscribe="events")
    with pytest.raises(SpecError, match="option 'subscribe'"):
        source(**KAFKA, topic="events")  # a sink's option on a source
    with pytest.raises(SpecError, match=r"startingOffsets one of \['earliest', 'latest'\], "
                                        r"got 'newest'"):
        source(**KAFKA, subscribe="events", startingOffsets="newest")
    with pytest.raises(SpecError, match=r"kafka.<a librdkafka setting>, got 'groupId'.*Fix"):
        source(**KAFKA, subscribe="events", groupId="g")
    with pytest.raises(SpecError, match=r"client one of \['cameo', 'librdkafka'\], got 'java'"):
        source(**KAFKA, subscribe="events", client="java")
    d = Dataflow("k", latency_target_ms=100)
    d.source("s", schema=SCHEMA).sink("o", connector={**KAFKA, "subscribe": "x"})
    with pytest.raises(SpecError, match="option 'topic'"):
        d.spec  # noqa: B018 (the spec is checked as it is made)
    pushed = Dataflow("p", latency_target_ms=100)
    pushed.source("s", schema=SCHEMA).sink("o")
    assert kafka_options(pushed.spec.sources[0]) is None


def test_client_settings_are_the_kafka_options_and_a_secret_comes_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    options = {"kafka.bootstrap.servers": "b:9092", "kafka.sasl.password": "env:KAFKA_PW",
               "subscribe": "events"}
    monkeypatch.setenv("KAFKA_PW", "s3cret")
    conf = client_config(options, print)
    assert conf == {"log_level": 2, "bootstrap.servers": "b:9092", "sasl.password": "s3cret",
                    "error_cb": print}
    monkeypatch.delenv("KAFKA_PW")
    with pytest.raises(LookupError, match="'KAFKA_PW'.*Fix: set it"):
        client_config(options, print)


def test_a_connectors_waits_are_a_share_of_its_targets_within_bounds() -> None:
    tight, loose = Waits.for_target(50.0), Waits.for_target(1000.0)
    assert (tight.fetch_ms, tight.read_s, tight.write_idle_s) == (2, 0.002, 0.002)
    assert loose.fetch_ms == 40 and loose.fetch_ms > tight.fetch_ms
    assert Waits.for_target(5.0).fetch_ms == WAIT_MIN_MS  # never a busy loop
    assert Waits.for_target(60_000.0).fetch_ms == WAIT_MAX_MS  # a stop is seen soon
    for target in (1.0, 20.0, 50.0, 333.0, 1000.0, 1e6):  # each at most a 25th of it
        w = Waits.for_target(target)
        assert w.fetch_ms <= max(target / 25, WAIT_MIN_MS) + 0.5
        assert w.read_s == w.write_idle_s == w.fetch_ms / 1000


def test_the_watermark_is_the_least_partitions_and_an_idle_one_is_left_out() -> None:
    busy = PartitionRead("t", 0, next_offset=10, max_event_ms=500.0, high=20)
    ahead = PartitionRead("t", 1, next_offset=10, max_event_ms=900.0, high=10, at_end=True,
                          at_end_since=9.5)
    assert watermark_of([busy, ahead], now=10.0, idle_s=1.0, lateness=40.0) == 460.0
    # At its end for the idle timeout: left out; the other holds the watermark alone.
    quiet = PartitionRead("t", 1, next_offset=10, max_event_ms=300.0, high=10, at_end=True,
                          at_end_since=8.0)
    assert watermark_of([busy, quiet], now=10.0, idle_s=1.0, lateness=40.0) == 460.0
    # A fetch told of records beyond what was read: not idle, whatever its quiet time.
    behind = PartitionRead("t", 1, next_offset=10, max_event_ms=300.0, high=12, at_end=True,
                           at_end_since=8.0)
    assert watermark_of([busy, behind], now=10.0, idle_s=1.0, lateness=40.0) == 260.0
    # Every partition idle: the largest, so that the last windows close.
    done = PartitionRead("t", 0, next_offset=20, max_event_ms=500.0, high=20, at_end=True,
                         at_end_since=1.0)
    assert watermark_of([done, quiet], now=10.0, idle_s=1.0, lateness=40.0) == 460.0
    # A partition not read yet holds the watermark back until it is idle.
    fresh = PartitionRead("t", 2)
    assert watermark_of([busy, fresh], now=10.0, idle_s=1.0, lateness=0.0) == -math.inf
    assert watermark_of([], now=10.0, idle_s=1.0, lateness=0.0) == -math.inf


def _judged(messages: list[Any], window_ms: int) -> tuple[list[int], list[int]]:
    """The events of `messages` as a step after the source would judge them, in order:
    behind the watermark (`t < wm`: a process, an interval join), and in a tumbling
    window the watermark has ended (a window)."""
    wm, behind, ended = -math.inf, [], []
    for message in messages:
        if not isinstance(message, pa.RecordBatch):
            wm = max(wm, message)
            continue
        for t in message.column("t").to_pylist():
            behind.append(t < wm)
            ended.append(t - t % window_ms + window_ms <= wm)
    return behind, ended


@settings(max_examples=300, deadline=None)
@given(deltas=st.lists(st.integers(-6, 3), min_size=1, max_size=200),
       lateness=st.integers(0, 4), window_ms=st.integers(1, 8))
def test_blocks_of_records_join_into_messages_where_no_event_is_judged_otherwise(
        deltas: list[int], lateness: int, window_ms: int) -> None:
    # Event times that mostly rise, with falls (late events, or not, by the lateness), in
    # blocks of 4 records, at most 16 to a message: the same rule as 1,000 and 16,000.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kafka_events, "WATERMARK_EVERY", 4)
        patch.setattr(kafka_events, "JOINED_MAX", 16)
        times = [sum(deltas[:i + 1]) for i in range(len(deltas))]
        batch = pa.record_batch({"t": times})

        def advance(i: int, j: int) -> float:
            return float(max(times[:j]) - lateness)

        apart, wm_apart = column_messages(batch, advance, -math.inf, "t", join=False)
        joined, wm_joined = column_messages(batch, advance, -math.inf, "t", join=True)
    assert [len(m) for m in apart if isinstance(m, pa.RecordBatch)][:-1] == \
        [4] * ((len(times) - 1) // 4)  # apart: a message a block
    assert wm_apart == wm_joined
    assert _judged(joined, window_ms) == _judged(apart, window_ms)
    sizes = [len(m) for m in joined if isinstance(m, pa.RecordBatch)]
    assert max(sizes) <= 16
    assert pa.concat_batches([m for m in joined if isinstance(m, pa.RecordBatch)]) == batch


def test_which_client_reads_a_source_and_the_docs_examples() -> None:
    import doctest

    from cameo_actors.runtime._private.controller import source_rescale
    from cameo_actors.runtime._private.executor import kafka_client, kafka_events, kafka_reader

    plain = {**KAFKA, "subscribe": "t", "kafka.fetch.wait.max.ms": "5"}
    assert reads_by_fetch(plain, columns=True) == native()
    assert not reads_by_fetch({**plain, "client": "librdkafka"}, columns=True)
    assert not reads_by_fetch({**plain, "kafka.sasl.mechanism": "PLAIN"}, columns=True)
    assert not reads_by_fetch(plain, columns=False)  # record fields: rows, through librdkafka
    for module in (kafka_client, kafka_events, kafka_reader, source_rescale):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_record_values_parse_into_the_sources_columns_or_fall_back_to_rows() -> None:
    rows = [{"ts": 1, "key": "a", "value": 2}, {"ts": 2, "key": "b", "value": 3.5, "x": True}]
    batch = parse_json_values([json.dumps(r).encode() for r in rows], list(SCHEMA.items()), "s")
    assert batch.num_rows == 2 and str(batch.schema.field("value").type) == "double"
    assert batch.to_pylist()[0] == {"ts": 1, "key": "a", "value": 2.0, "x": None}
    schema = list(SCHEMA.items())
    for values in ([b"{not json"], [b"[1, 2]"], [None], [b'{"ts": 1,\n"key": "a"}'],
                   [b'{"ts": "late", "key": "a", "value": 1}']):
        assert parse_json_values([json.dumps(rows[0]).encode(), *values], schema, "s") is None


class Record:
    """A consumed record as confluent-kafka hands it over (its accessors only)."""

    def __init__(self, value: bytes | None, offset: int, key: bytes | None = None,
                 headers: list[tuple[str, bytes | None]] | None = None) -> None:
        self._value, self._offset, self._key, self._headers = value, offset, key, headers

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._offset)

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers


def test_a_record_is_its_values_object_with_the_record_fields_the_schema_names() -> None:
    read, errors = PartitionRead("in", 3), list[list[Any]]()
    got = record_event(Record(b'{"ts": 70, "key": "a"}', 41, b"k1", [("h", b"v"), ("n", None)]),
                       read, ["_key", "_partition", "_offset", "_timestamp", "_headers"], "ts",
                       "s", errors)
    assert got == {"ts": 70, "key": "a", "_key": "k1", "_partition": 3, "_offset": 41,
                   "_timestamp": 1_700_000_000_041, "_headers": {"h": "v", "n": None}}
    assert read.max_event_ms == 70.0 and not errors
    assert record_event(Record(b'{"ts": 50}', 42), read, [], "ts", "s", errors) == {"ts": 50}
    assert read.max_event_ms == 70.0  # the largest so far
    for bad in (b"{no", b'"text"', None):
        assert record_event(Record(bad, 43), read, [], "ts", "s", errors) is None
    assert [e[:2] for e in errors] == [["s", "malformed"]] * 3
    assert errors[0][2].startswith("Kafka record in/3@43: its value is not JSON (")
    assert "JSON str, not an object. Fix: produce each event as one JSON object" in errors[1][2]
    assert errors[0][3] == "{no" and errors[2][3] is None


def test_a_schema_naming_value_takes_each_value_whole_as_text() -> None:
    read, errors = PartitionRead("in", 0), list[list[Any]]()
    for raw, text in [(b"GET /a 200", "GET /a 200"), (b'{"not": "parsed"}', '{"not": "parsed"}'),
                      (b"bad \xff utf-8", "bad \ufffd utf-8"), (None, None)]:
        assert record_event(Record(raw, 7, b"k"), read, ["_key", "_value"], None, "s",
                            errors) == {"_value": text, "_key": "k"}
    assert not errors
    d = Dataflow("k", latency_target_ms=100)
    d.source("s", schema={"_value": "str", "_timestamp": "int"}, event_time="_timestamp",
             connector={**KAFKA, "subscribe": "logs"}).sink("o")
    assert d.spec.sources[0].id == "s"
    with pytest.raises(SpecError, match=r"only the record's fields: _key, .*got \['level'\]"):
        source_with = Dataflow("k", latency_target_ms=100)
        source_with.source("s", schema={"_value": "str", "level": "str"},
                           connector={**KAFKA, "subscribe": "logs"}).sink("o")
        source_with.spec  # noqa: B018 (the spec is checked as it is made)


def test_a_source_whose_watermark_comes_with_its_input_makes_none_of_its_events() -> None:
    d = source(**KAFKA, subscribe="events")
    op = build_operator(d.spec, d.spec.sources[0])
    out = Output()
    op.process([{"ts": 100, "key": "a", "value": 1.0}], 0, out)
    assert out.watermark is None and len(out.events) == 1
    assert op.on_watermark(60.0).watermark == 60.0
    pushed = build_operator(d.spec, Dataflow("p", latency_target_ms=100).source(
        "s", schema=SCHEMA, event_time="ts").sink("o").spec.sources[0])
    out = Output()
    pushed.process([{"ts": 100, "key": "a", "value": 1.0}], 0, out)
    assert out.watermark == 100  # no connector: from the events


CONNECTORS: dict[str, dict[str, Any]] = {
    "k/s/0": {"state": "reading", "error": "", "malformed": 1, "watermark": 10.0,
              "partitions": {"in/0": {"offset": 7, "lag": 3}, "in/2": {"offset": 4, "lag": 0}}},
    "k/o/0": {"state": "waiting for the broker", "error": "KafkaException: down",
              "failures": 2, "position": 12, "written": 12},
}


def part(executor: int, connectors: dict[str, Any]) -> dict[str, Any]:
    from cameo_actors.runtime._private.stats import LatencyStats

    return {"executor": executor, "latency": LatencyStats(100.0).to_dict(), "events_in": 0,
            "events_out": 0, "errors": {}, "failures": [], "backlog": 0, "busy_ms": 0.0,
            "held": [], "connectors": connectors}


def test_stats_metrics_and_status_show_each_connectors_state_and_lag() -> None:
    info: Any = {"name": "k", "spec": {"latency_target_ms": 100.0, "tenant": "t", "steps": [],
                                      "scheduling": {"weight": 1.0}}}
    parts: Any = [part(0, {"k/s/0": CONNECTORS["k/s/0"]}), part(1, {"k/o/0": CONNECTORS["k/o/0"]})]
    assert dataflow_stats(info, parts)["connectors"] == CONNECTORS
    metrics = dataflow_metrics(info, parts)
    text = render(lambda: {"dataflows": [metrics]}, include_executors=False).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    lag = {s.labels["partition"]: s.value for s in fams["cameo_kafka_lag_records"].samples}
    assert lag == {"in/0": 3, "in/2": 0}
    waiting = {s.labels["instance"]: s.value for s in fams["cameo_kafka_waiting"].samples}
    assert waiting == {"k/s/0": 0, "k/o/0": 1}
    written = [s.value for s in fams["cameo_kafka_written_records"].samples
               if s.name.endswith("_total")]
    assert written == [12]
    failures = {s.labels["instance"]: s.value for s in fams["cameo_kafka_failures"].samples
                if s.name.endswith("_total")}
    assert failures == {"k/s/0": 0, "k/o/0": 2}
    status = {"name": "k", "tenant": "t", "state": "running", "latency_target_ms": 100,
              "weight": 1.0, "latency": {}, "within_target": None, "results": 0,
              "events_in": 0, "events_out": 0, "backlog": 0, "errors": {}, "executors": [0, 1],
              "sources": ["s"], "throughput": {"events_in_per_s": 0.0, "events_out_per_s": 0.0,
                                               "results_per_s": 0.0, "window_s": 1.0},
              "connectors": CONNECTORS}
    text = render_status(status, now=0)
    assert "k/s/0  reading  reads 2 partition(s), lag 3 records" in text
    assert "k/o/0  waiting for the broker  wrote 12 rows, log offset 12, 2 failed and tried " \
           "again  (KafkaException: down)" in text
