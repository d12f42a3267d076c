"""When a wait is over (`settle.py`): the reasons to go on waiting, computed from what
executor cores wired in-process (batches delivered in a random order) report of
themselves. A wait that ends must mean that nothing more comes out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors import Dataflow, count, sum_
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime._private.client.settle import executor_reasons, pool_reasons
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import DataflowEnded
from tests.shared.gateway import ControlPlane
from tests.shared.inprocess import InProcessCluster
from tests.shared.zoo import SCHEMA, canon, events


def sliding(name: str) -> Dataflow:
    return (Dataflow(name, latency_target_ms=100)
            .source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40)
            .key_by("key").window(sliding_ms=60, slide_ms=20, parallelism=2)
            .aggregate(n=count(), total=sum_("value")).sink("o"))


def reasons(cluster: InProcessCluster, name: str) -> tuple[list[str], list[str]]:
    return executor_reasons([name], {c.index: c.reports.unsettled([name]) for c in cluster.cores})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), probes=st.lists(st.integers(0, 60), min_size=1, max_size=8))
def test_nothing_comes_out_after_the_executors_say_they_are_settled(seed: int,
                                                                    probes: list[int]) -> None:
    flow = sliding("st")
    cluster = InProcessCluster(2, RuntimeConfig(credit_events=50), seed)
    hosts = cluster.deploy(flow.spec)
    data = events(600, seed=seed)
    for i in range(0, len(data), 50):
        cluster.ingest(hosts, "st/s/0", [data[i:i + 50]])
    cluster.ingest(hosts, "st/s/0", [END_OF_STREAM])
    for steps in probes:
        for _ in range(steps):
            cluster.step()
        waiting, to_checkpoint = reasons(cluster, "st")
        assert not to_checkpoint  # no checkpoints in this pool: results readable at once
        if not waiting:
            before = canon(cluster.results("st"))
            cluster.run()
            assert canon(cluster.results("st")) == before, "a result came after the wait ended"
    cluster.run()
    assert reasons(cluster, "st") == ([], [])


def test_in_flight_batches_and_queued_messages_are_reasons() -> None:
    cluster = InProcessCluster(2, RuntimeConfig(), seed=1)
    hosts = cluster.deploy(sliding("fl").spec)
    cluster.ingest(hosts, "fl/s/0", [events(200, seed=2), END_OF_STREAM])
    waiting, _ = reasons(cluster, "fl")
    assert any("messages queued" in w for w in waiting), waiting
    for _ in range(100):  # run the cores, deliver nothing: batches stay in transit
        for c in cluster.cores:
            c.run_slice()
            c.flush()
    assert cluster.in_transit
    waiting, _ = reasons(cluster, "fl")
    assert any("in flight" in w for w in waiting), waiting
    cluster.run()
    assert reasons(cluster, "fl") == ([], [])


def test_exactly_once_results_wait_for_a_checkpoint(tmp_path: Path) -> None:
    config = RuntimeConfig(checkpoint_url=str(tmp_path / "ck"), checkpoint_interval_s=2.0,
                           ingress_log_dir=str(tmp_path / "in"))
    plane = ControlPlane(2, config, seed=3)
    plane.lifecycle.deploy(sliding("eo").spec.to_dict())
    plane.push("eo", "s", [events(300, seed=4), END_OF_STREAM])
    plane.cluster.run()
    assert reasons(plane.cluster, "eo") == ([], ["eo"])  # settled, but not readable yet
    assert plane.results("eo") == []
    assert plane.checkpoints.take("eo")
    plane.cluster.run()
    assert reasons(plane.cluster, "eo") == ([], [])
    assert plane.results("eo")


def pool(**dataflow: Any) -> dict[str, Any]:
    d = {"state": "running", "cause": None, "released": False, "executors": [0, 1],
         "migration": None, **dataflow}
    return {"dataflows": {"d": d}, "restarting": [], "dead": []}


def test_the_controllers_view_gives_reasons_and_the_executors_to_ask() -> None:
    assert pool_reasons(pool(), named=True) == ([], [0, 1])
    assert pool_reasons(pool(migration="m3"), named=True)[0] == ["d: migration m3 is under way"]
    assert pool_reasons(pool(state="recovering", cause="executor 1 died"), named=False)[0] == \
        ["d is recovering (executor 1 died)"]
    restarting = {**pool(), "restarting": [1]}
    assert pool_reasons(restarting, named=True) == (["executor 1 is restarting"], [0, 1])
    assert pool_reasons({**pool(), "dead": [1]}, named=True) == ([], [0])
    with pytest.raises(DataflowEnded, match="failed: boom"):
        pool_reasons(pool(state="failed", cause="boom", released=True), named=True)
    assert pool_reasons(pool(state="finished"), named=False) == ([], [0, 1])


def test_an_executor_that_does_not_answer_is_a_reason() -> None:
    cluster = InProcessCluster(2, RuntimeConfig(), seed=5)
    cluster.deploy(sliding("na").spec)
    waiting, _ = executor_reasons(["na"], {0: cluster.cores[0].reports.unsettled(["na"]), 1: None})
    assert waiting == ["executor 1 did not answer"]
