"""Live migration without Ray: the controller's reconfiguration (`control/reconfig.py`,
`control/migrations.py`) on in-process cores; keyed steps scaled and their bins moved
at random points while events, watermarks and acks are reordered; results must equal
run_local's exactly, for every operator kind."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.operators.state_store import BACKENDS, MEMORY
from cameo_actors.runtime._private.controller.plans import STRATEGIES, balanced_owners, epochs_of
from cameo_actors.runtime._private.placement import RoutingTable, even_owners, is_keyed_step
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.testing import run_local
from tests.shared.gateway import ControlPlane
from tests.shared.zoo import canon, events, flows


def random_change(rng: random.Random, plane: ControlPlane, spec: DataflowSpec, step: str,
                  strategy: str) -> dict[str, Any]:
    """Either scale the step to 1..4 instances, or move random bins to a random instance;
    carried out by the controller's own reconfiguration (at once, on this thread)."""
    if rng.random() < 0.6:
        return plane.reconfig.scale(spec.name, step, rng.randint(1, 4), strategy=strategy,
                                    batch_bins=rng.choice([None, 1, 3]))
    placement = plane.registry.placements[spec.name]
    to = rng.choice([a.instance for a in placement.of_step(step)])
    bins = rng.sample(range(placement.bins), rng.randint(1, placement.bins))
    return plane.reconfig.migrate(spec.name, step, bins=bins, to_instance=to,
                                  strategy=strategy, batch_bins=2)


def run_with_migrations(spec: DataflowSpec, data: list[dict[str, Any]], n: int, seed: int,
                        credits: int, bins: int, strategy: str, migrations: int,
                        backend: str = MEMORY) -> tuple[ControlPlane, list[dict[str, Any]]]:
    """Feed `data` while `migrations` random reconfigurations run. The client's calls go
    on during each one: some are made while the controller's calls to the executors
    travel, so bins move under a stream of events, watermarks and acks in random order."""
    rng = random.Random(seed)
    plane = ControlPlane(n, RuntimeConfig(credit_events=credits, policy="cameo", bins=bins,
                                          state_backend=backend, state_cache_entries=2),
                         seed, steps_per_call=rng.randrange(1, 8))
    plane.lifecycle.deploy(spec.to_dict())
    hosts = plane.registry.placements[spec.name].hosts
    keyed = [s.id for s in spec.steps if is_keyed_step(spec, s)]
    chunks = [data[i:i + 37] for i in range(0, len(data), 37)]
    calls = []
    for source in spec.sources:
        targets = [f"{spec.name}/{source.id}/{i}" for i in range(source.parallelism)]
        calls += [(targets[k % len(targets)], [chunk]) for k, chunk in enumerate(chunks)]
        calls += [(t, [END_OF_STREAM]) for t in targets]
    starts = sorted(rng.sample(range(len(calls) + 1), migrations))
    fed = [0]

    def feed_one() -> None:
        if fed[0] < len(calls):
            target, items = calls[fed[0]]
            fed[0] += 1
            plane.cluster.ingest(hosts, target, items)
            for _ in range(rng.randrange(60)):  # a little processing between inputs
                plane.cluster.step()

    plane.gateway.before = lambda index, method: feed_one() if rng.random() < 0.3 else None
    done: list[dict[str, Any]] = []
    while fed[0] < len(calls) or len(done) < migrations:
        if len(done) < migrations and fed[0] >= starts[len(done)]:
            started = random_change(rng, plane, spec, rng.choice(keyed), strategy)
            done.append(plane.reconfig.wait_migration(started["id"], 0))
        else:
            feed_one()
    plane.gateway.pump()
    return plane, done


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 3), p=st.integers(1, 3), seed=st.integers(0, 1000),
       credits=st.sampled_from([10, 10_000]), bins=st.sampled_from([4, 16, 64]),
       strategy=st.sampled_from(STRATEGIES), migrations=st.integers(1, 2),
       backend=st.sampled_from(BACKENDS))
def test_migrations_keep_results_equal_run_local(n: int, p: int, seed: int, credits: int,
                                                 bins: int, strategy: str, migrations: int,
                                                 backend: str) -> None:
    data = events(600, seed=seed)
    for d in flows(f"m{seed}", p):
        spec = d.spec
        if not any(is_keyed_step(spec, s) for s in spec.steps):
            continue
        expected = run_local(d, {s.id: data for s in spec.sources}).sinks["o"]
        plane, done = run_with_migrations(spec, data, n, seed, credits, bins, strategy,
                                          migrations, backend)
        assert canon(plane.results(d.name)) == canon(expected), \
            (d.name, n, p, bins, strategy, backend)
        assert [m["state"] for m in done] == ["done"] * migrations
        assert [m["epochs_done"] for m in done] == [m["epochs_total"] for m in done]
        for c in plane.cluster.cores:
            assert not c.flow.held, "every held sender was released"
            for aid in c.hosting.ids(d.name) if d.name in c.hosting.dataflows else []:
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
