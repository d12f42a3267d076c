"""The executor core without Ray: several cores wired in-process through a
transport that reorders batches (as Ray may), with tiny credits. Results must
equal run_local's for every operator kind."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors import Dataflow, count
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.testing import run_local
from tests.shared.inprocess import InProcessCluster
from tests.shared.zoo import canon, events, flows


def run_cluster(d: Dataflow, data: list[dict[str, Any]], n: int, seed: int, credits: int) -> Any:
    spec = d.spec
    cluster = InProcessCluster(n, RuntimeConfig(credit_events=credits, policy="cameo"), seed)
    hosts = cluster.deploy(spec)
    for source in spec.sources:
        targets = [f"{spec.name}/{source.id}/{i}" for i in range(source.parallelism)]
        for k, i in enumerate(range(0, len(data), 37)):
            cluster.ingest(hosts, targets[k % len(targets)], [data[i:i + 37]])
            if k % 5 == 0:
                cluster.run()  # interleave processing with input, as a live stream does
        for t in targets:
            cluster.ingest(hosts, t, [END_OF_STREAM])
    cluster.run()
    return cluster


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 3), p=st.integers(1, 3), seed=st.integers(0, 1000),
       credits=st.sampled_from([10, 100, 10_000]))
def test_cluster_results_equal_run_local(n: int, p: int, seed: int, credits: int) -> None:
    data = events(800, seed=seed)
    for d in flows(f"c{seed}", p):
        expected = run_local(d, {s.id: data for s in d.spec.sources}).sinks["o"]
        cluster = run_cluster(d, data, n, seed, credits)
        assert canon(cluster.results(d.name)) == canon(expected), (d.name, n, p, credits)
        for c in cluster.cores:
            assert not c.flow.held, "every held sender was released once its channel drained"


def test_latency_is_egress_minus_ingest_on_the_fake_clock() -> None:
    d = (Dataflow("lat", latency_target_ms=1.0).source("s", schema={"ts": "int", "k": "str"}, event_time="ts")
         .key_by("k").window(tumbling_ms=10).aggregate(n=count()).sink("o"))
    cluster = InProcessCluster(1, RuntimeConfig(), seed=0)
    hosts = cluster.deploy(d.spec)
    cluster.ingest(hosts, "lat/s/0", [[{"ts": 1, "k": "a"}, {"ts": 2, "k": "a"}]])
    cluster.run()
    closed_at = cluster.clock.now_ms()
    cluster.ingest(hosts, "lat/s/0", [[{"ts": 15, "k": "a"}]])  # closes [0, 10)
    cluster.run()
    core = cluster.cores[0]
    rows = core.egress.read_results("lat", "lat/o/0", 0, None)
    assert [r[0]["n"] for r in rows] == [2]
    _, ingest_ms, egress_ms = rows[0]
    assert ingest_ms == closed_at  # the event that closed the window made the result computable
    stats = core.stats.dataflows["lat"].latency
    assert stats.count == 1 and stats.max_ms == egress_ms - ingest_ms > 0


def test_cancel_frees_everything_and_late_batches_are_acked() -> None:
    d = (Dataflow("gone", latency_target_ms=5).source("s", schema={"ts": "int", "key": "str"},
                                                     parallelism=2)
         .key_by("key").window(tumbling_ms=10, time_field="ts", parallelism=2)
         .aggregate(n=count()).sink("o"))
    # time_field given, source without event_time: windows fire on end of stream only.
    cluster = InProcessCluster(2, RuntimeConfig(credit_events=5), seed=3)
    hosts = cluster.deploy(d.spec)
    cluster.ingest(hosts, "gone/s/0", [[{"ts": i, "key": f"k{i % 7}"} for i in range(100)]])
    for c in cluster.cores:
        c.run_slice()
        c.flush()
    for c in cluster.cores:
        c.cancel("gone")
    cluster.run()  # batches still in transit reach no activation; they are dropped and acked
    for c in cluster.cores:
        assert not c.hosting.activations and not c.hosting.dataflows and not c.hosting.hosts
        assert not c.egress.dataflows and not c.stats.dataflows
        assert not c.flow.outstanding and not c.flow.held and c.sched.backlog == 0


def test_messages_of_rows_are_cut_to_a_tenth_of_the_tightest_target_hosted() -> None:
    """A map of 0.05 ms per event (on the fake clock), fed in messages of 100 events (5 ms):
    alone (target 1 s) its messages stay whole, within the 5 ms quantum; beside a 20 ms
    tenant, once 5,000 events measured its cost, each runs in equal parts of at most 2 ms
    (the rest put back first in its mailbox); every event is processed once, in order."""
    from cameo_actors.clock import FakeClock
    from cameo_actors.runtime._private.executor.core import ExecutorCore
    from cameo_actors.runtime._private.placement import place

    def run(neighbour_ms: float | None) -> tuple[list[int], list[Any]]:
        schema = {"ts": "int", "key": "str", "value": "float"}
        bulk = (Dataflow("bulk", latency_target_ms=1000).source("s", schema=schema)
                .map({"ts": "ts", "value": "value"}).sink("o")).spec
        clock = FakeClock()
        core = ExecutorCore(0, RuntimeConfig(), lambda host, blob: None, clock=clock)
        core.deploy(bulk, place(bulk, [0], {}))
        if neighbour_ms is not None:
            tight = (Dataflow("tight", latency_target_ms=neighbour_ms)
                     .source("s", schema=schema).sink("o")).spec
            core.deploy(tight, place(tight, [0], {}))
        mapper = core.hosting.activations["bulk/map_1/0"]
        ran: list[int] = []
        on_data = mapper.on_data

        def costly(events: Any, port: int) -> Any:
            ran.append(len(events))
            clock.advance(0.05 * len(events))
            return on_data(events, port)
        mapper.on_data = costly  # type: ignore[method-assign]
        data = [{"ts": i, "key": "k", "value": float(i)} for i in range(10_000)]
        for seq in range(100):
            core.ingress.ingest("c", seq, "bulk/s/0", [data[seq * 100:(seq + 1) * 100]], clock.now_ms())
            while core.run_slice():
                core.drain_inbox()
        return ran, [r[0]["value"] for r in core.egress.read_results("bulk", "bulk/o/0", 0, None)]

    alone, out = run(None)
    assert set(alone) == {100} and out == [float(i) for i in range(10_000)]
    beside, out = run(20.0)
    assert out == [float(i) for i in range(10_000)] and sum(beside) == 10_000
    assert set(beside[:50]) == {100}  # not measured yet
    assert set(beside[60:]) == {34, 33}  # 100 events of 5 ms: three parts of at most 2 ms
