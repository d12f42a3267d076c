"""A keyed dataflow spread over three Ray nodes that are hosts of their own: two worker
nodes in network namespaces of this machine (`ip netns`, a veth pair each to a bridge),
the head on the bridge. Every call between their executors crosses a network stack, as
between machines. The results equal `run_local`'s.

The driver runs in a process of its own (`python -m tests.integration.test_network
ADDRESS STORAGE`): this one may already be a driver of the session's local Ray, and a process
talks to one cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from cameo_actors import Dataflow, count, run_local, sum_
from cameo_actors.service.testing import NamespacedCluster, fresh_dir
from tests.shared.zoo import SCHEMA, canon, events

pytestmark = pytest.mark.integration

RUN_DIR = os.path.abspath(os.path.join(os.environ.get("CAMEO_RUN_DIR", ".run"), "test-network"))
NODES = 3


def spread_window() -> Dataflow:
    d = Dataflow("spread", latency_target_ms=1000)
    (d.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40, parallelism=NODES)
     .filter("value > 0").key_by("key").window(tumbling_ms=50, parallelism=NODES)
     .aggregate(n=count(), total=sum_("value")).sink("o"))
    return d


@pytest.fixture(scope="module")
def cluster() -> Iterator[NamespacedCluster]:
    c = NamespacedCluster(fresh_dir(RUN_DIR), cpus=(2, 1, 1))
    try:
        yield c.start()
    finally:
        c.stop()


def test_a_keyed_window_over_three_namespaced_nodes_equals_run_local(
        cluster: NamespacedCluster) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.integration.test_network", cluster.address,
                           os.path.join(cluster.run_dir, "shared")],
                          env={**os.environ, **cluster.env}, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    got = json.loads(done.stdout.decode().strip().splitlines()[-1])
    # One executor per node (SPREAD), each on its own host's address.
    assert sorted(got["addresses"]) == sorted(cluster.node_ip(n) for n in range(NODES))
    assert got["crossed_events"] > 0  # keys crossed between the hosts
    assert got["equal"], got


def drive(address: str, storage: str) -> dict[str, object]:
    """The driver's part: a pool of one executor per node (its checkpoints and ingress
    logs in `storage`, which every node sees), the dataflow run, its results compared."""
    import ray

    from cameo_actors.runtime import Runtime, RuntimeConfig

    config = RuntimeConfig(num_executors=NODES, checkpoint_url=os.path.join(storage, "checkpoints"),
                           ingress_log_dir=os.path.join(storage, "ingress"))
    rt = Runtime.start(config, pool="network", address=address)
    try:
        data = events(6_000, seed=11)
        d = spread_window()
        name = rt.deploy(d)
        rt.push(name, "s", data, batch_size=250)
        rt.close(name)
        rt.wait_idle(timeout_s=120, dataflows=[name])
        got = rt.results(name)
        stats = rt.executor_stats()
        return {"addresses": [e["address"] for e in stats],
                "crossed_events": sum(e.get("exchange", {}).get("events", 0) for e in stats),
                "equal": canon(got) == canon(run_local(d, {"s": data}).sinks["o"])}
    finally:
        rt.shutdown(stop_ray=False)
        ray.shutdown()


if __name__ == "__main__":
    print(json.dumps(drive(sys.argv[1], sys.argv[2])))
