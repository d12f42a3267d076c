"""Source idleness: an instance of a source that takes in nothing for its
`idle_timeout_ms` no longer holds the windows after it back, on executor cores wired
in-process (`tests/shared/inprocess.py`, on a fake clock)."""

from __future__ import annotations

from typing import Any

import pytest

from cameo_actors import Dataflow, count
from cameo_actors.errors import SpecError
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.testing import run_local
from tests.shared.inprocess import InProcessCluster
from tests.shared.zoo import canon


def windowed(name: str, idle_timeout_ms: float | None) -> Dataflow:
    return (Dataflow(name, latency_target_ms=100)
            .source("s", schema={"ts": "int", "k": "str"}, event_time="ts", parallelism=2,
                    idle_timeout_ms=idle_timeout_ms)
            .key_by("k").window(tumbling_ms=10, parallelism=2).aggregate(n=count()).sink("o"))


def feed(cluster: InProcessCluster, hosts: dict[str, int], target: str,
         events: list[dict[str, Any]]) -> None:
    cluster.ingest(hosts, target, [events])
    cluster.run()


def batch(first: int, last: int) -> list[dict[str, Any]]:
    return [{"ts": t, "k": f"k{t % 5}"} for t in range(first, last)]


@pytest.mark.parametrize("cores", [1, 2])
def test_an_idle_instance_does_not_hold_the_windows_and_results_stay_exact(cores: int) -> None:
    results = {}
    for timeout in (None, 50.0):
        d = windowed(f"idle{cores}{timeout is not None}", timeout)
        cluster = InProcessCluster(cores, RuntimeConfig(), seed=cores)
        hosts = cluster.deploy(d.spec)
        fed, quiet = f"{d.name}/s/0", f"{d.name}/s/1"
        feed(cluster, hosts, fed, batch(0, 40))
        cluster.clock.advance(60.0)  # past the timeout: instance 1 took in nothing
        cluster.run()
        feed(cluster, hosts, fed, batch(40, 45))  # the watermark moves on: 44
        results[timeout] = sorted(r["window_start"] for r in cluster.results(d.name))
        # The quiet instance comes back, after the watermark: not late, counted.
        feed(cluster, hosts, quiet, batch(45, 60))
        for t in (fed, quiet):
            cluster.ingest(hosts, t, [END_OF_STREAM])
        cluster.run()
        expected = run_local(d, {"s": batch(0, 60)}).sinks["o"]
        assert canon(cluster.results(d.name)) == canon(expected)
    assert results[None] == []  # without a timeout the quiet instance holds every window
    assert results[50.0] == sorted([0] * 5 + [10] * 5 + [20] * 5 + [30] * 5)


def test_a_source_with_calls_waiting_or_coming_is_never_idle() -> None:
    d = windowed("busy", 50.0)
    cluster = InProcessCluster(1, RuntimeConfig(), seed=0)
    hosts = cluster.deploy(d.spec)
    for t in range(0, 200, 10):  # a call every 10 ms of the clock: never 50 ms without
        cluster.ingest(hosts, "busy/s/0", [batch(t, t + 10)])
        cluster.ingest(hosts, "busy/s/1", [batch(t, t + 10)])
        cluster.run()
        cluster.clock.advance(10.0)
    acts = cluster.cores[0].hosting.activations
    assert not any(a.idle_sent or a.idle_channels for a in acts.values())


def test_idleness_passes_down_a_chain_and_a_channel_that_sends_again_counts() -> None:
    d = (Dataflow("chain", latency_target_ms=100)
         .source("s", schema={"ts": "int", "k": "str"}, event_time="ts", parallelism=2,
                 idle_timeout_ms=20)
         .filter("ts >= 0").key_by("k").window(tumbling_ms=10, parallelism=1)
         .aggregate(n=count()).sink("o"))
    cluster = InProcessCluster(1, RuntimeConfig(), seed=1)
    hosts = cluster.deploy(d.spec)
    cluster.run()  # the sources' idle time counts from here
    cluster.clock.advance(30.0)
    cluster.run()  # both instances idle: the filters and key_bys after them too
    acts = cluster.cores[0].hosting.activations
    assert all(a.idle_sent for a in acts.values())  # the window and the sink too
    window = next(a for aid, a in acts.items() if "/window" in aid)
    assert len(window.idle_channels) == 2
    feed(cluster, hosts, "chain/s/0", batch(0, 15))
    assert len(window.idle_channels) == 1 and not window.idle_sent
    assert sorted(r["window_start"] for r in cluster.results("chain")) == [0] * 5


def test_idle_timeout_is_checked_in_the_spec() -> None:
    for bad in (0, -5, float("nan"), True, "1s"):
        with pytest.raises(SpecError, match="idle_timeout_ms"):
            Dataflow("d", latency_target_ms=10).source("s", schema={"ts": "int"},
                                                       idle_timeout_ms=bad)  # type: ignore[arg-type]
    spec = windowed("ok", 250).spec
    assert spec.steps[0].idle_timeout_ms == 250  # type: ignore[attr-defined]
    assert type(spec).from_json(spec.to_json()) == spec
    # Unset, it is left out of the wire form: an older version reads the spec as before.
    unset = windowed("old", None).spec
    assert "idle_timeout_ms" not in unset.to_dict()["steps"][0]
    assert spec.to_dict()["steps"][0]["idle_timeout_ms"] == 250
    assert type(unset).from_dict(unset.to_dict()) == unset


@pytest.mark.parametrize("strategy", ["all_at_once", "batched", "fluid"])
def test_a_window_rescaled_while_a_source_is_idle_fires_and_stays_exact(strategy: str) -> None:
    """Bins move while one source instance is idle: the epoch holds the watermarks; at its
    end the idle channel is still left out, so the windows fire before the stream closes."""
    from tests.shared.gateway import ControlPlane

    d = windowed(f"rescale{strategy[:3]}", 50.0)
    plane = ControlPlane(2, RuntimeConfig(bins=16), seed=4, steps_per_call=3)
    plane.lifecycle.deploy(d.spec.to_dict())
    hosts = plane.registry.placements[d.name].hosts
    fed, quiet = f"{d.name}/s/0", f"{d.name}/s/1"
    cluster = plane.cluster
    feed(cluster, hosts, fed, batch(0, 25))
    for _ in range(2):  # the sources' idle time counts from the worker's first look
        cluster.clock.advance(60.0)
        cluster.run()  # instance 1 is idle now
    window = next(s.id for s in d.spec.steps if s.id.startswith("window"))
    started = plane.reconfig.scale(d.name, window, 3, strategy=strategy)
    assert plane.reconfig.wait_migration(started["id"], 0)["state"] == "done"
    feed(cluster, hosts, fed, batch(25, 45))
    assert sorted({r["window_start"] for r in plane.results(d.name)}) == [0, 10, 20, 30]
    feed(cluster, hosts, quiet, batch(45, 60))
    for t in (fed, quiet):
        cluster.ingest(hosts, t, [END_OF_STREAM])
    plane.gateway.pump()
    cluster.run()
    expected = run_local(d, {"s": batch(0, 60)}).sinks["o"]
    assert canon(plane.results(d.name)) == canon(expected)


def test_when_every_input_goes_idle_the_window_takes_the_highest_watermark_they_reached(
        ) -> None:
    """Both instances go idle in one look, the fed one first: its watermark was held by
    the quiet one, and once both are idle the window takes the highest watermark its
    inputs reached (as Flink's watermark valve does), instead of holding where it was
    forever: the windows fire while the stream is open."""
    d = windowed("both", 50.0)
    cluster = InProcessCluster(1, RuntimeConfig(), seed=3)
    hosts = cluster.deploy(d.spec)
    feed(cluster, hosts, "both/s/0", batch(0, 40))  # the quiet one's time counts from here
    assert cluster.results("both") == []
    cluster.clock.advance(60.0)
    cluster.run()  # both idle at one look: the fed instance's IDLE first
    acts = cluster.cores[0].hosting.activations
    assert all(a.idle_sent for aid, a in acts.items() if "/s/" in aid)
    assert sorted(r["window_start"] for r in cluster.results("both")) == \
        sorted([0] * 5 + [10] * 5 + [20] * 5)
