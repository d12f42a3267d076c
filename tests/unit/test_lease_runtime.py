"""Lessees without Ray, lent and given back by the controller's own reconfiguration on
in-process cores: a keyed window with lessees on other cores, fed a hot key through a transport that reorders batches, gives run_local's
results, with lessees added before or while events flow and given back while they flow."""

from __future__ import annotations

import random
from typing import Any

import pytest

from cameo_actors import Dataflow, count, max_, run_local, sum_
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.operators.bins import stable_hash
from cameo_actors.operators.state_store import BACKENDS
from cameo_actors.runtime._private.placement import even_owners
from cameo_actors.runtime.config import RuntimeConfig
from tests.shared.gateway import ControlPlane
from tests.shared.inprocess import InProcessCluster
from tests.shared.zoo import canon


def remote_key(parallelism: int, bins: int) -> int:
    """A key owned by the window's last instance (on another core than the key_by's):
    its channel backs up when it is hot, which is when lessees lend."""
    owners = even_owners(range(parallelism), bins)
    return next(k for k in range(1000) if owners[stable_hash(k) & (bins - 1)] == parallelism - 1)


def flow(name: str, parallelism: int) -> Dataflow:
    return (Dataflow(name, latency_target_ms=20, tenant="t")
            .source("s", schema={"ts": "int", "k": "int", "v": "int"}, event_time="ts")
            .key_by("k").window(tumbling_ms=50, id="w", parallelism=parallelism)
            .aggregate(n=count(), total=sum_("v"), hi=max_("v")).sink("o"))


def lessees_took(cluster: InProcessCluster, name: str) -> int:
    return sum(c.hosting.activations[a].events_in for c in cluster.cores
               if name in c.hosting.dataflows for a in c.hosting.ids(name)
               if c.hosting.activations[a].lessee)


def lend(plane: ControlPlane, name: str, lessees: int) -> None:
    """`Runtime.lease` as the controller carries it out (at once here): lessees hosted on
    the executors without an instance of the window, then lent to; or given back (ends
    sent in-band, then, once they ended, dropped)."""
    started = plane.reconfig.lease(name, "w", lessees)
    assert plane.reconfig.wait_migration(started["id"], 0)["state"] == "done"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("when", ["before", "while", "given back"])
def test_lessees_in_the_cores_give_run_locals_results(when: str, backend: str) -> None:
    lent = [run(seed, when, backend) for seed in range(12)]
    assert sum(lent) > 0, "the lessees took events"


def run(seed: int, when: str, backend: str) -> int:
    """One seeded run; returns the events the lessees took."""
    rng = random.Random(seed)
    lent = 0
    d = flow(f"l{seed}", 2)
    hot = remote_key(2, 16)
    data = [{"ts": i // 3, "k": hot if rng.random() < 0.7 else rng.randrange(1, 12),
             "v": rng.randrange(50)} for i in range(1500)]
    plane = ControlPlane(3, RuntimeConfig(credit_events=rng.choice([60, 200]), bins=16,
                                          state_backend=backend, state_cache_entries=2),
                         seed, steps_per_call=0)
    plane.lifecycle.deploy(d.spec.to_dict())
    cluster, hosts = plane.cluster, plane.registry.placements[d.name].hosts
    if when == "before":
        lend(plane, d.name, 1)
    # Bursts of five messages: the key_by has some queued, so the hot key's owner is
    # behind and the lessees take part of it.
    bursts = [data[i:i + 150] for i in range(0, len(data), 150)]
    for k, burst in enumerate(bursts):
        if k == len(bursts) // 3 and when != "before":
            lend(plane, d.name, 2)
        if k == 2 * len(bursts) // 3 and when == "given back":
            lent = lessees_took(cluster, d.name)
            lend(plane, d.name, 0)
        chunks: list[Any] = [burst[i:i + 30] for i in range(0, len(burst), 30)]
        cluster.ingest(hosts, f"{d.name}/s/0", [*chunks, burst[-1]["ts"] - 5])
        for _ in range(rng.randrange(40)):
            cluster.step()
    cluster.ingest(hosts, f"{d.name}/s/0", [END_OF_STREAM])
    cluster.run()
    if when != "given back":
        lent = lessees_took(cluster, d.name)
    expected = run_local(d, {"s": data}).sinks["o"]
    assert canon(cluster.results(d.name)) == canon(expected), (seed, when, lent)
    return lent


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", range(6))
def test_lessees_restored_after_a_crash_give_each_result_exactly_once(
        tmp_path_factory: pytest.TempPathFactory, seed: int, backend: str) -> None:
    from tests.unit.test_checkpoint import Driver

    rng = random.Random(seed)
    d = flow(f"lc{seed}", 2)
    hot = remote_key(2, 16)
    data = [{"ts": i // 3, "k": hot if rng.random() < 0.7 else rng.randrange(1, 12),
             "v": rng.randrange(50)} for i in range(1200)]
    run = Driver(d, tmp_path_factory.mktemp("lease"), n=3, seed=seed, credits=200,
                 backend=backend)
    lend(run.plane, d.name, 2)
    source = f"{d.name}/s/0"
    bursts = [data[i:i + 150] for i in range(0, len(data), 150)]
    crash_at = rng.randrange(2, len(bursts))
    for k, burst in enumerate(bursts):
        if k == 1 or k == crash_at - 1:
            run.start()
        if k == crash_at:
            run.finish()
            run.fail_one() if rng.random() < 0.5 else run.crash()
        run.push(source, [*[burst[i:i + 30] for i in range(0, len(burst), 30)],
                          burst[-1]["ts"] - 5])
    run.push(source, [END_OF_STREAM])
    assert canon(run.end()) == canon(run_local(d, {"s": data}).sinks["o"])
    assert lessees_took(run.cluster, d.name) > 0
