"""Live migration on the in-process cluster (no Ray): keyed steps scaled and their bins
moved at random points while events, watermarks and acks are reordered; results
must equal run_local's exactly, for every operator kind."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime._private.rescale import (
    STRATEGIES,
    Migration,
    balanced_owners,
    epochs_of,
    plan,
    scale_plan,
)
from cameo_actors.runtime._private.routing import RoutingTable, even_owners, is_keyed_step
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.testing import run_local
from tests.shared.inprocess import InProcessCluster
from tests.shared.zoo import canon, events, flows


def random_plan(rng: random.Random, cluster: InProcessCluster, spec: DataflowSpec, step: str,
                strategy: str, mid: str) -> Migration:
    """Either scale the step to 1..4 instances, or move random bins to a random instance."""
    placement = cluster.placements[spec.name]
    n = len(cluster.cores)
    if rng.random() < 0.6:
        return scale_plan(mid, placement, spec.name, step, rng.randint(1, 4), list(range(n)), {},
                          strategy, rng.choice([None, 1, 3]))
    owners = list(placement.tables[step].owners)
    instances = [a.instance for a in placement.of_step(step)]
    to = rng.choice(instances)
    for b in rng.sample(range(len(owners)), rng.randint(1, len(owners))):
        owners[b] = to
    return plan(mid, "migrate", placement, spec.name, step, owners, {}, [], strategy, 2)


def run_with_migrations(spec: DataflowSpec, data: list[dict[str, Any]], n: int, seed: int,
                        credits: int, bins: int, strategy: str, migrations: int
                        ) -> tuple[InProcessCluster, list[Migration]]:
    rng = random.Random(seed)
    cluster = InProcessCluster(n, RuntimeConfig(credit_events=credits, policy="cameo"), seed)
    hosts = cluster.deploy(spec, bins)
    keyed = [s.id for s in spec.steps if is_keyed_step(spec, s)]
    chunks = [data[i:i + 37] for i in range(0, len(data), 37)]
    starts = sorted(rng.sample(range(len(chunks) + 1), migrations))
    current: Migration | None = None
    done: list[Migration] = []

    def maybe_start(k: int) -> None:
        nonlocal current
        if current is None and len(done) < len(starts) and k >= starts[len(done)]:
            current = random_plan(rng, cluster, spec, rng.choice(keyed), strategy, f"m{len(done)}")
            done.append(current)
            cluster.start(spec, current)

    for source in spec.sources:
        targets = [f"{spec.name}/{source.id}/{i}" for i in range(source.parallelism)]
        for k, chunk in enumerate(chunks):
            maybe_start(k)
            cluster.ingest(hosts, targets[k % len(targets)], [chunk])
            for _ in range(rng.randrange(60)):  # a little processing between inputs
                cluster.step()
            if current is not None and cluster.advance(current):
                current = None
        for t in targets:
            cluster.ingest(hosts, t, [END_OF_STREAM])
    while True:
        cluster.run()
        if current is not None and not cluster.advance(current):
            continue
        current = None
        if len(done) < len(starts):
            maybe_start(len(chunks))
            continue
        cluster.run()
        return cluster, done


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 3), p=st.integers(1, 3), seed=st.integers(0, 1000),
       credits=st.sampled_from([10, 10_000]), bins=st.sampled_from([4, 16, 64]),
       strategy=st.sampled_from(STRATEGIES), migrations=st.integers(1, 2))
def test_migrations_keep_results_equal_run_local(n: int, p: int, seed: int, credits: int,
                                                 bins: int, strategy: str, migrations: int) -> None:
    data = events(600, seed=seed)
    for d in flows(f"m{seed}", p):
        spec = d.spec
        if not any(is_keyed_step(spec, s) for s in spec.steps):
            continue
        expected = run_local(d, {s.id: data for s in spec.sources}).sinks["o"]
        cluster, done = run_with_migrations(spec, data, n, seed, credits, bins, strategy,
                                            migrations)
        assert canon(cluster.results(d.name)) == canon(expected), (d.name, n, p, bins, strategy)
        assert [m.state for m in done] == ["done"] * migrations
        assert [m.epochs_done for m in done] == [len(m.epochs) for m in done]
        for c in cluster.cores:
            assert not c.flow.held, "every held sender was released"
            for aid in c.hosting.ids(d.name):
                act = c.hosting.activations[aid]
                assert act.epoch is None and not act.plans, f"{aid} finished every epoch"


# -- plans -------------------------------------------------------------------------------
def test_balanced_owners_moves_only_what_it_must() -> None:
    owners = tuple(even_owners([0, 1], 16))
    grown = balanced_owners(owners, [0, 1, 2])
    assert sorted(grown.count(i) for i in (0, 1, 2)) == [5, 5, 6]
    moved = RoutingTable(0, owners).moves_to(grown)
    assert all(new == 2 for _, new in moved.values()) and len(moved) == grown.count(2)
    shrunk = balanced_owners(tuple(grown), [0, 1])
    assert sorted(shrunk.count(i) for i in (0, 1)) == [8, 8]
    assert all(old == 2 for old, _ in RoutingTable(0, tuple(grown)).moves_to(shrunk).values())


@pytest.mark.parametrize(("strategy", "batch", "epochs"),
                         [("all_at_once", None, 1), ("batched", 3, 4), ("batched", None, 5),
                          ("fluid", None, 10)])
def test_epochs_of_each_strategy(strategy: str, batch: int | None, epochs: int) -> None:
    moves = {b: (0, 1) for b in range(10)}
    cut = epochs_of(moves, strategy, batch)
    assert len(cut) == min(epochs, 10) and sum(len(e) for e in cut) == 10
    assert {b for e in cut for b in e} == set(moves)
