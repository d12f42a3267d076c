"""Tracing in the executor cores (no Ray): what each traced message's activity records,
how a message's story links across executors, sampling, and the controller's collector."""

from __future__ import annotations

import math
from typing import Any

from cameo_actors import Dataflow, count
from cameo_actors.clock import FakeClock
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime._private.controller.tracing import TraceCollector
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.tracing.records import (
    DESERIALIZE,
    FROM_CLIENT,
    PROCESS,
    SERIALIZE,
    Activity,
    executor_of,
)
from tests.shared.inprocess import InProcessCluster
from tests.shared.zoo import events


def keyed(name: str) -> Dataflow:
    """A keyed window with two instances: its messages cross executors."""
    return (Dataflow(name, latency_target_ms=100.0)
            .source("s", schema={"ts": "int", "key": "str", "value": "float"}, event_time="ts")
            .filter("value >= 0")
            .key_by("key").window(tumbling_ms=100, parallelism=2).aggregate(n=count())
            .sink("o"))


class TickingClock(FakeClock):
    """A fake clock that moves 10 µs at every reading: activities take time."""

    def now_ms(self) -> float:
        self.advance(0.01)
        return super().now_ms()


def run(sample: float, seed: int = 3) -> tuple[InProcessCluster, list[Activity]]:
    cluster = InProcessCluster(2, RuntimeConfig(trace_sample=sample), seed)
    cluster.clock = TickingClock(cluster.clock.now_ms())
    for core in cluster.cores:
        core.clock = cluster.clock
    d = keyed(f"t{seed}")
    hosts = cluster.deploy(d.spec)
    data = [{"ts": e["ts"], "key": e["key"], "value": float(e["value"])}
            for e in events(400, seed=seed)]
    for i in range(0, len(data), 20):
        cluster.clock.advance(1.0)
        cluster.ingest(hosts, f"{d.name}/s/0", [data[i:i + 20]])
        cluster.run()
    cluster.ingest(hosts, f"{d.name}/s/0", [END_OF_STREAM])
    cluster.run()
    traced: list[Activity] = []
    for core in cluster.cores:
        if core.tracer is not None:
            records, lost = core.tracer.drain()
            assert lost == 0
            traced.extend(Activity(*r) for r in records)
    return cluster, traced


def test_every_traced_message_links_to_the_activity_that_sent_it() -> None:
    cluster, traced = run(1.0)
    process = {a.id: a for a in traced if a.kind == PROCESS}
    assert len(process) == sum(1 for a in traced if a.kind == PROCESS)  # ids are unique
    crossed = 0
    for a in process.values():
        assert a.start_ms <= a.end_ms and a.arrival_ms <= a.start_ms
        assert a.ingest_ms <= a.arrival_ms
        if a.parent == FROM_CLIENT:
            assert a.step == "s" and a.sent_ms != a.sent_ms  # NaN: no sender
            continue
        parent = process[a.parent]  # every message of a traced story is traced
        assert executor_of(a.parent) == parent.executor
        # Sent while the parent ran (its outputs are routed before it ends).
        assert parent.start_ms <= a.sent_ms <= min(parent.end_ms, a.arrival_ms)
        assert parent.ingest_ms <= a.ingest_ms
        crossed += parent.executor != a.executor
    assert crossed > 0
    kinds = {a.kind for a in traced}
    assert {SERIALIZE, DESERIALIZE} <= kinds
    # The results the sinks' activities say they wrote are the results there are.
    written = sum(a.results for a in process.values())
    assert written == len(cluster.results("t3")) > 0


def test_sampling_traces_that_share_of_client_messages_and_all_they_cause() -> None:
    _, everything = run(1.0)
    _, quarter = run(0.25)
    def from_clients(acts: list[Activity]) -> int:
        return sum(1 for a in acts if a.kind == PROCESS and a.parent == FROM_CLIENT)
    assert from_clients(quarter) == from_clients(everything) // 4
    ids = {a.id for a in quarter if a.kind == PROCESS}
    assert all(a.parent in ids or a.parent == FROM_CLIENT
               for a in quarter if a.kind == PROCESS)


def test_tracing_off_records_nothing_and_results_stay_the_same() -> None:
    off, traced = run(0.0)
    on, _ = run(1.0)
    assert traced == [] and all(c.tracer is None for c in off.cores)
    assert sorted(map(repr, off.results("t3"))) == sorted(map(repr, on.results("t3")))


def test_the_collector_analyses_whole_intervals_while_someone_reads() -> None:
    cluster, traced = run(1.0)
    first = min(a.start_ms for a in traced)
    last = max(a.end_ms for a in traced)
    collector = TraceCollector(RuntimeConfig(trace_snapshot_s=0.01, trace_history_s=60.0,
                                             trace_watch_s=0.5))

    def parts(lo: float, hi: float) -> dict[int, tuple[list[tuple[Any, ...]], int]]:
        """What the executors' rings held for activities that ended in (lo, hi]."""
        out: dict[int, tuple[list[tuple[Any, ...]], int]] = {0: ([], 0), 1: ([], 0)}
        for a in traced:
            if lo < a.end_ms <= hi:
                out[a.executor][0].append(tuple(a))
        return out

    # Nobody reads: activities are kept, nothing is analysed.
    middle = first + (last - first) / 2
    assert collector.tick(middle, parts(-math.inf, middle)) == 0 and not collector.snapshots
    # The first read analyses the history at once: whole 10 ms intervals, one late.
    why = collector.explain("t3", last_s=60.0, now_ms=middle, latency_target_ms=100.0)
    caught_up = len(collector.snapshots)
    assert caught_up >= 1 and collector.next_ms is not None
    assert collector.next_ms <= middle - collector.interval_ms
    assert why["results"] == sum(a.results for a in traced if a.end_ms <= collector.next_ms
                                 and a.end_ms > collector.snapshots[0]["start_ms"])
    # Read recently: each tick analyses what has ended since.
    end = last + 30.0
    made = collector.tick(end, parts(middle, end))
    assert made >= 1 and len(collector.snapshots) == caught_up + made
    why = collector.explain("t3", last_s=60.0, now_ms=end, latency_target_ms=100.0)
    assert why["results"] == sum(a.results for a in traced if a.end_ms <= collector.next_ms)
    assert why["tracing"]["collected"] == len(traced) and why["tracing"]["analysed_per_s"]
    assert any(s["pool"]["by_operator"] for s in collector.snapshots)
    assert collector.latest(end)["by_operator"] == \
        collector.snapshots[-1]["pool"]["by_operator"]
    # Not read for longer than trace_watch_s: ticks analyse nothing more.
    assert collector.tick(end + 1000.0, parts(end, end + 1000.0)) == 0


def test_the_collector_keeps_at_most_its_bound_of_activities() -> None:
    _, traced = run(1.0)
    collector = TraceCollector(RuntimeConfig(trace_history_activities=50, trace_snapshot_s=0.005))
    now = max(a.end_ms for a in traced)
    collector.tick(now, {0: ([tuple(a) for a in traced], 0)})
    assert len(traced) > 50 and len(collector.history) == 50 and len(collector.recent) <= 50
    assert collector.collected == len(traced)
    # The newest are kept: a read analyses them.
    assert collector.explain(None, last_s=60.0, now_ms=now + 20.0)["activities"] > 0
