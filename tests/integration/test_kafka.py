"""Kafka in and out on a real Kafka-protocol broker (Tansu, `cameo_actors/examples/
broker.py`) and a real local Ray: a dataflow reads a topic's partitions and writes its results to
another topic in transactions; read with `read_committed`, the output topic is exactly
run_local's results, across an executor SIGKILLed mid-stream. A malformed record goes to
the error output; a broker that goes away leaves the dataflow waiting, and reading goes
on where it was once the broker is back.
"""

from __future__ import annotations

import functools
import json
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from cameo_actors import Dataflow, count, sum_
from cameo_actors.examples.broker import KafkaBroker
from cameo_actors.runtime.boundary import FINISHED
from tests.integration.test_lifecycle import state_of, wait_for
from tests.integration.test_recovery import (
    diff,
    expected,
    kill_executor,
    recovered_since,
    status,
)
from tests.shared.zoo import SCHEMA, canon, events

pytestmark = pytest.mark.integration

PARTITIONS = 4


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaBroker]:
    with KafkaBroker() as broker:
        yield broker


def kafka_window(name: str, broker: KafkaBroker, topic_in: str, topic_out: str,
                 idle_timeout_ms: int | None = None, **options: str) -> Dataflow:
    """Events from `topic_in` (a source instance per two partitions; more source
    `options`), a keyed tumbling window, its rows to `topic_out` keyed by the window's
    key."""
    d = Dataflow(name, latency_target_ms=1000, tenant="kafka")
    (d.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40, parallelism=2,
              idle_timeout_ms=idle_timeout_ms,
              connector={"format": "kafka", "kafka.bootstrap.servers": broker.bootstrap,
                         "subscribe": topic_in, **options})
     .key_by("key").window(tumbling_ms=50, parallelism=2)
     .aggregate(n=count(), total=sum_("value"))
     .sink("o", connector={"format": "kafka", "kafka.bootstrap.servers": broker.bootstrap,
                           "topic": topic_out, "key": "key"}))
    return d


def window_between_topics(broker: KafkaBroker, name: str, out_partitions: int = 1,
                          idle_timeout_ms: int | None = None, **options: str) -> Dataflow:
    """`kafka_window` from topic NAME-in (PARTITIONS partitions) to NAME-out, both made."""
    broker.create_topic(f"{name}-in", PARTITIONS)
    broker.create_topic(f"{name}-out", out_partitions)
    return kafka_window(name, broker, f"{name}-in", f"{name}-out", idle_timeout_ms, **options)


def written(broker: KafkaBroker, topic: str, n: int) -> bool:
    """At least `n` records in `topic`, repeats counted."""
    return len(broker.read_committed(topic)) >= n


def produce(broker: KafkaBroker, topic: str, rows: list[dict[str, Any]], **settings: Any
            ) -> None:
    """Each event to the partition of its key (each partition in event-time order, as a
    keyed producer writes them), its event time as the record's timestamp."""
    broker.produce(topic, [(r["key"].encode(), json.dumps(r).encode(),
                            zlib.crc32(r["key"].encode()) % PARTITIONS, int(r["ts"]))
                           for r in rows], **settings)


def read_all(rt: Any, name: str) -> dict[str, dict[str, Any]]:
    return dict(rt.stats(name)["connectors"])


def caught_up(rt: Any, name: str, produced: int) -> bool:
    """Every source instance read every partition to its end, `produced` records in all."""
    readers = [c for c in read_all(rt, name).values() if "partitions" in c]
    parts = [p for c in readers for p in c["partitions"].values()]
    return len(parts) == PARTITIONS and sum(max(p["offset"], 0) for p in parts) == produced \
        and all(p["lag"] == 0 for p in parts)


def output(broker: KafkaBroker, topic: str) -> list[dict[str, Any]]:
    """The results in `topic`, one per result log offset of each sink instance: Tansu
    0.6's read_committed also hands over an aborted transaction's records (a writer
    killed in a transaction), which Kafka's does not. A repeat must be the same result."""
    rows: dict[tuple[Any, Any], dict[str, Any]] = {}
    for _, _, _, value, headers in broker.read_committed(topic):
        h = dict(headers or [])
        row = json.loads(value or b"null")
        at = (h["cameo-sink"], h["cameo-offset"])
        assert rows.setdefault(at, row) == row, f"{at}: {rows[at]} and {row}"
    return list(rows.values())


def await_output(rt: Any, name: str, broker: KafkaBroker, topic: str, want: list[str]
                 ) -> None:
    """Wait until `topic` holds as many results as `want`; then, a moment later (a repeat
    would show), they must be exactly `want`."""
    try:
        wait_for(lambda: len(output(broker, topic)) >= len(want), f"{name}: every result "
                 "written", 60)
    except AssertionError as e:
        got = output(broker, topic)
        late = [(r.message, r.event) for r in rt.errors(name) if r.kind == "late"][:3]
        raise AssertionError(f"{e}: {diff(got, want)}; {read_all(rt, name)}; errors "
                             f"{rt.stats(name)['errors']}, late e.g. {late}") from None
    time.sleep(1.0)
    got = output(broker, topic)
    assert canon(got) == want, diff(got, want)


def finish_and_check(rt: Any, name: str, broker: KafkaBroker, topic: str, want: list[str]
                     ) -> None:
    """Close dataflow `name`, wait until it finished, and check that `topic` holds
    exactly `want` (`await_output`)."""
    rt.close(name)
    wait_for(lambda: state_of(rt, name) == FINISHED, f"{name} finished", 60)
    await_output(rt, name, broker, topic, want)


def test_a_topic_through_a_window_to_a_topic_equals_run_local_across_an_executor_sigkill(
        pools: Any, kafka: KafkaBroker) -> None:
    rt = pools["phoenix2"]
    name = "kf-kill"
    flow = window_between_topics(kafka, name, out_partitions=PARTITIONS)
    data = events(12_000, seed=41)
    want = expected(flow, {"s": data})
    produce(kafka, "kf-kill-in", data[:6_000])
    rt.deploy(flow)
    try:
        wait_for(lambda: caught_up(rt, name, 6_000), "the first half read", 60)
        wait_for(lambda: len(output(kafka, "kf-kill-out")) > 0, "results in the output topic", 60)
        _, at = kill_executor(rt, 0)
        produce(kafka, "kf-kill-in", data[6_000:])  # while it is restored
        try:
            wait_for(lambda: recovered_since(rt, name, at), f"{name} restored", 90)
            wait_for(lambda: caught_up(rt, name, 12_000), "every record read", 60)
        except AssertionError as e:
            raise AssertionError(f"{e}: {status(rt, name, at)}; {read_all(rt, name)}") from None
        finish_and_check(rt, name, kafka, "kf-kill-out", want)
    finally:
        rt.cancel(name)


def test_a_malformed_record_goes_to_the_error_output_and_the_rest_is_read(
        pools: Any, kafka: KafkaBroker) -> None:
    rt = pools["phoenix2"]
    name = "kf-bad"
    flow = window_between_topics(kafka, name)
    data = events(2_000, seed=43)
    produce(kafka, "kf-bad-in", data[:1_000])
    kafka.produce("kf-bad-in", [(b"k1", b"{not json", 0, None), (b"k1", b"[1, 2]", 0, None)])
    produce(kafka, "kf-bad-in", data[1_000:])
    rt.deploy(flow)
    try:
        wait_for(lambda: caught_up(rt, name, 2_002), "every record read", 60)
        rt.close(name)
        wait_for(lambda: state_of(rt, name) == FINISHED, f"{name} finished", 60)
        assert rt.stats(name)["errors"] == {"s:malformed": 2}, rt.stats(name)["errors"]
        messages = sorted(e.message for e in rt.errors(name))
        assert sorted(m.partition(": ")[2].split(" (")[0] for m in messages) == [
            "its value is JSON list, not an object. Fix: produce each event as one JSON object",
            "its value is not JSON"], messages
        assert all(m.startswith("Kafka record kf-bad-in/0@") for m in messages), messages
        await_output(rt, name, kafka, "kf-bad-out", expected(flow, {"s": data}))
    finally:
        rt.cancel(name)


@pytest.mark.parametrize("client", ["cameo", "librdkafka"])
def test_records_of_every_compression_read_alike_through_either_client(
        pools: Any, kafka: KafkaBroker, client: str) -> None:
    """cameo's fetch client decodes the batches itself (`kafka_batches`): each codec a
    producer may use, read as librdkafka reads it."""
    rt = pools["phoenix2"]
    name = f"kf-codecs-{client}"
    flow = window_between_topics(kafka, name, client=client)
    data = events(4_000, seed=53)
    for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        produce(kafka, f"{name}-in", data[i * 800:(i + 1) * 800], compression_type=codec)
    rt.deploy(flow)
    try:
        wait_for(lambda: caught_up(rt, name, 4_000), "every record read", 60)
        readers = [c for c in read_all(rt, name).values() if "partitions" in c]
        assert {c["client"] for c in readers} == {client}, readers
        finish_and_check(rt, name, kafka, f"{name}-out", expected(flow, {"s": data}))
    finally:
        rt.cancel(name)


@pytest.mark.parametrize("client", ["cameo", "librdkafka"])
def test_the_records_key_partition_offset_and_timestamp_read_alike_through_either_client(
        pools: Any, kafka: KafkaBroker, client: str) -> None:
    """cameo's client makes them columns (`meta_columns`), librdkafka's reader rows."""
    rt = pools["phoenix2"]
    name = f"kf-meta-{client}"
    kafka.create_topic(f"{name}-in", PARTITIONS)
    kafka.create_topic(f"{name}-out", 1)
    d = Dataflow(name, latency_target_ms=1000, tenant="kafka")
    (d.source("s", schema={**SCHEMA, "_key": "str?", "_partition": "int", "_offset": "int",
                           "_timestamp": "int"}, event_time="ts", allowed_lateness_ms=40,
              parallelism=2,
              connector={"format": "kafka", "kafka.bootstrap.servers": kafka.bootstrap,
                         "subscribe": f"{name}-in", "endingOffsets": "latest",
                         "client": client})
     .map(function="tests.udfs:with_record")
     .sink("o", connector={"format": "kafka", "kafka.bootstrap.servers": kafka.bootstrap,
                           "topic": f"{name}-out"}))
    data = events(3_000, seed=61)
    rows, next_offset = [], [0] * PARTITIONS
    for r in data:  # each record as it is produced (a timestamp of 0 would mean "now")
        p = zlib.crc32(r["key"].encode()) % PARTITIONS
        rows.append({**r, "_key": r["key"], "_partition": p, "_offset": next_offset[p],
                     "_timestamp": 1_000_000 + int(r["ts"])})
        next_offset[p] += 1
    kafka.produce(f"{name}-in", [(r["key"].encode(), json.dumps(data[i]).encode(),
                                  r["_partition"], r["_timestamp"])
                                 for i, r in enumerate(rows)])
    rt.deploy(d)
    try:
        wait_for(lambda: all(c["state"] == "ended" for c in read_all(rt, name).values()
                             if "partitions" in c), "the topic read to its end", 60)
        readers = [c for c in read_all(rt, name).values() if "partitions" in c]
        assert {c["client"] for c in readers} == {client}, readers
        finish_and_check(rt, name, kafka, f"{name}-out", expected(d, {"s": rows}))
    finally:
        rt.cancel(name)


def test_a_source_from_latest_reads_only_what_comes_after_it_starts(
        pools: Any, kafka: KafkaBroker) -> None:
    rt = pools["phoenix2"]
    name = "kf-latest"
    flow = window_between_topics(kafka, name, startingOffsets="latest")
    data = events(3_000, seed=59)
    produce(kafka, f"{name}-in", data[:1_000])  # before it starts: not read
    rt.deploy(flow)
    try:
        wait_for(lambda: [c["state"] for c in read_all(rt, name).values() if "partitions" in c]
                 == ["reading"] * 2, "both readers at the end of their partitions", 60)
        produce(kafka, f"{name}-in", data[1_000:])
        wait_for(lambda: caught_up(rt, name, 3_000), "the records after the start read", 60)
        finish_and_check(rt, name, kafka, f"{name}-out", expected(flow, {"s": data[1_000:]}))
    finally:
        rt.cancel(name)


def test_values_read_whole_as_text_with_the_records_key_and_timestamp(
        pools: Any, kafka: KafkaBroker) -> None:
    """A schema naming `_value` takes each record's value as it is (plain log lines, not
    JSON); `_key` and `_timestamp` come from the record, the timestamp as event time."""
    rt = pools["phoenix2"]
    name = "kf-text"
    kafka.create_topic(f"{name}-in", PARTITIONS)
    kafka.create_topic(f"{name}-out", 1)
    d = Dataflow(name, latency_target_ms=1000, tenant="kafka")
    (d.source("s", schema={"_value": "str", "_key": "str", "_timestamp": "int"},
              event_time="_timestamp", parallelism=2,
              connector={"format": "kafka", "kafka.bootstrap.servers": kafka.bootstrap,
                         "subscribe": f"{name}-in", "endingOffsets": "latest"})
     .map(function="tests.udfs:log_line")  # ('_' names are not for expressions)
     .filter("level == 'ERROR'")
     .key_by("host").window(tumbling_ms=50).aggregate(n=count())
     .sink("o", connector={"format": "kafka", "kafka.bootstrap.servers": kafka.bootstrap,
                           "topic": f"{name}-out"}))
    rows = [{"_key": f"host{i % 3}", "_timestamp": 1_000 + i,
             "_value": f"{'ERROR' if i % 4 == 0 else 'INFO'} request {i} took {i % 97} ms"}
            for i in range(2_000)]
    kafka.produce(f"{name}-in", [(r["_key"].encode(), r["_value"].encode(),
                                  zlib.crc32(r["_key"].encode()) % PARTITIONS, r["_timestamp"])
                                 for r in rows])
    rt.deploy(d)
    try:
        wait_for(lambda: all(c["state"] == "ended" for c in read_all(rt, name).values()
                             if "partitions" in c), "the topic read to its end", 60)
        finish_and_check(rt, name, kafka, f"{name}-out", expected(d, {"s": rows}))
    finally:
        rt.cancel(name)


def test_a_broker_gone_mid_stream_is_waited_for_and_reading_goes_on(
        pools: Any, kafka: KafkaBroker) -> None:
    rt = pools["phoenix2"]
    name = "kf-away"
    # Partitions quiet while the broker is away must not go idle: their records after it
    # would be late.
    flow = window_between_topics(kafka, name, idle_timeout_ms=60_000)
    data = events(4_000, seed=47)
    produce(kafka, "kf-away-in", data[:2_000])
    rt.deploy(flow)
    try:
        wait_for(lambda: caught_up(rt, name, 2_000), "the first half read", 60)
        kafka.pause()
        try:
            time.sleep(3.0)  # the broker away: the dataflow waits, it does not fail
            assert state_of(rt, name) == "running", status(rt, name)
        finally:
            kafka.resume()
        produce(kafka, "kf-away-in", data[2_000:])
        wait_for(lambda: caught_up(rt, name, 4_000), "the rest read", 60)
        finish_and_check(rt, name, kafka, "kf-away-out", expected(flow, {"s": data}))
    finally:
        rt.cancel(name)


def test_a_broker_absent_at_deploy_is_shown_and_tried_again_until_it_comes(
        pools: Any) -> None:
    rt = pools["phoenix2"]
    name = "kf-late"
    late = KafkaBroker()  # its port chosen, nothing listening there yet
    flow = kafka_window(name, late, "kf-late-in", "kf-late-out")
    data = events(2_000, seed=53)
    rt.deploy(flow)
    try:
        def waiting() -> bool:
            states = {c["state"] for c in read_all(rt, name).values()}
            return states == {"waiting for the broker"}

        wait_for(waiting, "every reader and writer waiting for the broker", 30)
        assert state_of(rt, name) == "running"
        assert all(c["failures"] >= 1 for c in read_all(rt, name).values())  # tried again
        with late:
            late.create_topic("kf-late-in", PARTITIONS)
            late.create_topic("kf-late-out", 1)
            produce(late, "kf-late-in", data)
            wait_for(lambda: caught_up(rt, name, 2_000), "every record read", 60)
            rt.close(name)
            wait_for(lambda: state_of(rt, name) == FINISHED, f"{name} finished", 60)
            await_output(rt, name, late, "kf-late-out", expected(flow, {"s": data}))
    finally:
        rt.cancel(name)


def test_nexmark_q5_from_a_topic_equals_the_duckdb_reference(pools: Any, kafka: KafkaBroker
                                                              ) -> None:
    """The Nexmark stream (with its late events) produced to a topic in delivery order,
    Q5 reading it with the Kafka source; the results (kept in the pool) equal DuckDB's,
    and the late events are the error output's "late" records, as through the API."""
    from cameo_actors.nexmark.queries import QUERIES, SINK
    from tests.shared.nexmark import assert_matches, stream

    rt = pools["phoenix2"]
    kafka.create_topic("kf-nexmark", 1)
    kafka.produce("kf-nexmark", [(None, json.dumps(e).encode(), 0, None)
                                 for e in stream().events])
    spec = QUERIES["q5"](name="kf-q5", parallelism=2).spec.to_dict()
    source = next(s for s in spec["steps"] if s["op"] == "source")
    source["connector"] = {"format": "kafka", "options": {
        "kafka.bootstrap.servers": kafka.bootstrap, "subscribe": "kf-nexmark",
        "endingOffsets": "latest"}}
    rt.deploy(spec)
    try:
        wait_for(lambda: all(c["state"] == "ended" for c in read_all(rt, "kf-q5").values()),
                 "the topic read to its end", 60)
        rt.close("kf-q5")
        wait_for(lambda: state_of(rt, "kf-q5") == FINISHED, "kf-q5 finished", 60)
        assert_matches("q5", rt.results("kf-q5", SINK))
        kinds = {key.rpartition(":")[2] for key in rt.stats("kf-q5")["errors"]}
        assert kinds == {"late"}, rt.stats("kf-q5")["errors"]
    finally:
        rt.cancel("kf-q5")


def test_idle_partitions_do_not_hold_the_windows_back(pools: Any, kafka: KafkaBroker) -> None:
    """Events in two partitions of four: the two empty ones are idle after the source's
    idle timeout, so the windows fire (and their results reach the output topic) while
    the dataflow runs, not only when it is closed."""
    rt = pools["phoenix2"]
    name = "kf-idle"
    flow = window_between_topics(kafka, name)
    source = next(s for s in flow.spec.sources)
    assert source.idle_timeout_ms is None  # the default for partitions: 1 s
    data = events(3_000, seed=59)
    kafka.produce("kf-idle-in", [(r["key"].encode(), json.dumps(r).encode(), i % 2, None)
                                 for i, r in enumerate(data)])
    rt.deploy(flow)
    try:
        wait_for(lambda: len(output(kafka, "kf-idle-out")) > 0,
                 "results before the dataflow is closed", 60)
        readers = [c for c in read_all(rt, name).values() if "partitions" in c]
        assert sorted(p for c in readers for p in c["partitions"]) == [
            f"kf-idle-in/{p}" for p in range(PARTITIONS)]
    finally:
        rt.cancel(name)


def test_an_instance_without_a_partition_does_not_hold_the_windows_back(
        pools: Any, kafka: KafkaBroker) -> None:
    """A source of two instances on a topic of one partition: the instance with none
    says it is idle, so the windows fire while the dataflow runs, not only when it is
    closed; the instance with the partition reads it all."""
    rt = pools["phoenix2"]
    name = "kf-fewer"
    kafka.create_topic(f"{name}-in", 1)
    kafka.create_topic(f"{name}-out", 1)
    flow = kafka_window(name, kafka, f"{name}-in", f"{name}-out")
    kafka.produce(f"{name}-in", [(r["key"].encode(), json.dumps(r).encode(), 0, int(r["ts"]))
                                 for r in events(2_000, seed=61)])
    rt.deploy(flow)
    try:
        wait_for(lambda: len(output(kafka, f"{name}-out")) > 0,
                 "results before the dataflow is closed", 60)
        readers = sorted((c for c in read_all(rt, name).values() if "partitions" in c),
                         key=lambda c: len(c["partitions"]))
        assert [list(c["partitions"]) for c in readers] == [[], [f"{name}-in/0"]]
    finally:
        rt.cancel(name)


def test_a_source_rescaled_reads_its_partitions_on_from_the_checkpoint_each_once(
        pools: Any, kafka: KafkaBroker) -> None:
    """A source of two instances over four partitions scaled to three, then to one,
    mid-stream: its partitions go to the new instances, each read on from the offsets
    the checkpoint holds, and the output topic, read with read_committed, is
    run_local's results, each once (no event late for a partition that moved)."""
    rt = pools["phoenix2"]
    name = "kf-rescale"
    flow = window_between_topics(kafka, name)
    data = events(6_000, seed=67)
    produce(kafka, f"{name}-in", data[:2_000])
    rt.deploy(flow)
    try:
        wait_for(lambda: caught_up(rt, name, 2_000), "the first third read", 60)
        for parallelism, upto, shares in ((3, 4_000, [1, 1, 2]), (1, 6_000, [4])):
            info = rt.scale(name, "s", parallelism)
            assert (info["state"], info["to_parallelism"]) == ("done", parallelism), info
            produce(kafka, f"{name}-in", data[upto - 2_000:upto])
            wait_for(lambda n=upto: caught_up(rt, name, n), f"{upto} records read", 60)
            readers = [c for c in read_all(rt, name).values() if "partitions" in c]
            assert sorted(len(c["partitions"]) for c in readers) == shares
        assert rt.describe(name)["spec"]["steps"][0]["parallelism"] == 1
        finish_and_check(rt, name, kafka, f"{name}-out", expected(flow, {"s": data}))
    finally:
        rt.cancel(name)


def test_a_dataflow_deployed_again_under_its_name_writes_its_results_again(
        pools: Any, kafka: KafkaBroker) -> None:
    """The writer's place in the output is the deployment's: a dataflow cancelled and
    deployed again under its name (another deployment, reading its topic from the start)
    writes every result again, not from where the first deployment's writer was."""
    rt = pools["phoenix2"]
    name = "kf-again"
    flow = window_between_topics(kafka, name)
    data = events(1_000, seed=61)
    produce(kafka, f"{name}-in", data)
    want = expected(flow, {"s": data})
    for run in (1, 2):
        rt.deploy(flow)
        try:
            wait_for(lambda: caught_up(rt, name, 1_000), "every record read", 60)
            rt.close(name)
            wait_for(lambda: state_of(rt, name) == FINISHED, f"{name} finished", 60)
            wait_for(functools.partial(written, kafka, f"{name}-out", run * len(want)),
                     f"run {run}'s results written", 60)
        finally:
            rt.cancel(name)
    rows = [json.loads(value or b"null") for *_, value, _ in kafka.read_committed(f"{name}-out")]
    assert sorted(canon(rows)) == sorted(want + want)
