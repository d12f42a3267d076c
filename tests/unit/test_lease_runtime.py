"""Lessees inside the executor cores, without Ray: a keyed window with lessees on other
cores, fed a hot key through a transport that reorders batches, gives run_local's
results, with lessees added before or while events flow and given back while they flow."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from cameo_actors import Dataflow, count, max_, run_local, sum_
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime._private.routing import even_owners, stable_hash
from cameo_actors.runtime.boundary import ActivationId
from cameo_actors.runtime.config import RuntimeConfig
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
               for a in c.hosting.ids(name) if c.hosting.activations[a].lessee)


def lease(cluster: InProcessCluster, name: str, lessees: dict[int, int]) -> None:
    """What the controller does for `Runtime.lease`: lessees (instance -> core) hosted,
    then lent to."""
    spec, placement = cluster.specs[name], cluster.placements[name]
    added = {ActivationId(name, "w", i): core for i, core in lessees.items()}
    placement = replace(placement, instances={**placement.instances, **added},
                        lessees=placement.lessees | set(added))
    cluster.placements[name] = placement
    for c in cluster.cores:
        c.add_lessees(spec, placement, "w", [str(a) for a in added])


def unlease(cluster: InProcessCluster, name: str) -> None:
    """Lessees given back: ends sent in-band, then, once they ended, dropped."""
    gone = [str(a) for a in cluster.placements[name].lessees]
    for c in cluster.cores:
        c.unlease(name, "w", gone)
    for _ in range(100_000):
        if all(c.lessees_ended(name, gone) for c in cluster.cores):
            break
        cluster.step()
    for c in cluster.cores:
        c.drop_lessees(name, gone)


@pytest.mark.parametrize("when", ["before", "while", "given back"])
def test_lessees_in_the_cores_give_run_locals_results(when: str) -> None:
    lent = [run(seed, when) for seed in range(12)]
    assert sum(lent) > 0, "the lessees took events"


def run(seed: int, when: str) -> int:
    """One seeded run; returns the events the lessees took."""
    rng = random.Random(seed)
    lent = 0
    d = flow(f"l{seed}", 2)
    hot = remote_key(2, 16)
    data = [{"ts": i // 3, "k": hot if rng.random() < 0.7 else rng.randrange(1, 12),
             "v": rng.randrange(50)} for i in range(1500)]
    cluster = InProcessCluster(3, RuntimeConfig(credit_events=rng.choice([60, 200])), seed)
    hosts = cluster.deploy(d.spec, bins=16)
    if when == "before":
        lease(cluster, d.name, {10: 2})
    # Bursts of five messages: the key_by has some queued, so the hot key's owner is
    # behind and the lessees take part of it.
    bursts = [data[i:i + 150] for i in range(0, len(data), 150)]
    for k, burst in enumerate(bursts):
        if k == len(bursts) // 3 and when != "before":
            lease(cluster, d.name, {10: 2, 11: 1})
        if k == 2 * len(bursts) // 3 and when == "given back":
            lent = lessees_took(cluster, d.name)
            unlease(cluster, d.name)
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


@pytest.mark.parametrize("seed", range(6))
def test_lessees_restored_after_a_crash_give_each_result_exactly_once(
        tmp_path_factory: pytest.TempPathFactory, seed: int) -> None:
    from tests.unit.test_checkpoint import Driver

    rng = random.Random(seed)
    d = flow(f"lc{seed}", 2)
    hot = remote_key(2, 16)
    data = [{"ts": i // 3, "k": hot if rng.random() < 0.7 else rng.randrange(1, 12),
             "v": rng.randrange(50)} for i in range(1200)]
    run = Driver(d, tmp_path_factory.mktemp("lease"), n=3, seed=seed, credits=200)
    lease(run.cluster, d.name, {10: 2, 11: 1})
    run.placement = run.cluster.placements[d.name]
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
