"""Self-scaling on a real local Ray: DS2 scales a keyed window up when the offered rate
steps up and back down when it falls, by itself, and the results equal run_local's;
lessees (Dirigo) take a hot key's overflow and are given back while events flow, the
results again equal; bad settings and conflicting operations change nothing.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from cameo_actors import Dataflow, count, max_, run_local, sum_
from cameo_actors.errors import ReconfigConflict, ReconfigError
from cameo_actors.operators.bins import stable_hash
from cameo_actors.runtime._private.placement import even_owners
from cameo_actors.runtime.boundary import FINISHED
from cameo_actors.scaling import ScalingConfigError
from tests.integration.test_lifecycle import state_of, wait_for
from tests.shared.zoo import canon

pytestmark = pytest.mark.integration

SCHEMA = {"ts": "int", "k": "int", "v": "int"}


def keyed(name: str, *, session: bool = False, target_ms: int = 3000, parallelism: int = 1
          ) -> Dataflow:
    flow = (Dataflow(name, latency_target_ms=target_ms, tenant="scaling")
            .source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=0)
            .key_by("k"))
    win = flow.window(session_gap_ms=100, id="w") if session else \
        flow.window(tumbling_ms=200, id="w", parallelism=parallelism)
    return win.aggregate(n=count(), total=sum_("v"), hi=max_("v")).sink("o")


def parallelism(rt: Any, name: str) -> int:
    hosts = rt.describe(name, refresh=True)["hosts"]
    return sum(1 for a in hosts if a.split("/")[1] == "w") - lessees(rt, name)


def lessees(rt: Any, name: str) -> int:
    steps = rt.scaling(name)["dataflows"].get(name, {}).get("steps", {})
    return int(steps.get("w", {}).get("lessees", 0))


def push_at(rt: Any, name: str, events: list[dict[str, Any]], rate: float, t0: list[int]
            ) -> None:
    """Push `events` at `rate` per second, event time advancing with the wall clock."""
    start = time.monotonic()
    for i in range(0, len(events), 50):
        batch = events[i:i + 50]
        for e in batch:
            e["ts"] = t0[0]
            t0[0] += 1
        rt.push(name, "s", batch)
        rt.watermark(name, "s", t0[0] - 1)
        ahead = start + (i + 50) / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def remote_key(rt: Any) -> int:
    """A key the window's instance 1 owns (instance 0 runs beside the key_by): hot, its
    owner's channel backs up, which is when lessees lend."""
    bins = rt.config.bins
    owners = even_owners(range(2), bins)
    return next(k for k in range(1000) if owners[stable_hash(k) & (bins - 1)] == 1)


def lent(rt: Any, name: str) -> float:
    """Events per second the lessees of `w` take now."""
    flow = rt.scaling(name)["dataflows"].get(name, {})
    return sum(i["events_in_eps"] for i in flow.get("instances", {}).get("w", []) if i["lessee"])


def finish(rt: Any, name: str) -> list[dict[str, Any]]:
    rt.close(name)
    wait_for(lambda: state_of(rt, name) == FINISHED, f"{name} finished", 90)
    return list(rt.results(name))


def test_ds2_scales_a_window_up_and_down_with_the_rate_and_results_equal_run_local(
        pools: Any) -> None:
    rt = pools["scaled2"]
    name = "sc-step"
    rt.deploy(keyed(name))
    rng = random.Random(7)
    sent: list[dict[str, Any]] = []
    clock = [0]

    def phase(rate: float, seconds: float) -> None:
        events = [{"ts": 0, "k": rng.randrange(200), "v": rng.randrange(100)}
                  for _ in range(int(rate * seconds))]
        push_at(rt, name, events, rate, clock)
        sent.extend(events)

    phase(400, 4)                      # one instance is enough (0.4 of its capacity)
    assert parallelism(rt, name) == 1
    phase(1800, 10)                    # needs ceil(1800 / (1000 * 0.8)) = 3
    wait_for(lambda: parallelism(rt, name) >= 2, "scaled up", 20)
    high = parallelism(rt, name)
    deadline = time.monotonic() + 40   # back down, after the scale-down window
    while parallelism(rt, name) >= high:
        assert time.monotonic() < deadline, rt.scaling(name)
        phase(300, 2)
    decisions = rt.scaling(name)["decisions"]
    ups = [d for d in decisions if d["to_parallelism"] > d["from_parallelism"]]
    downs = [d for d in decisions if d["to_parallelism"] < d["from_parallelism"]]
    assert ups and downs, decisions
    assert all(d["policy"] == "ds2" and d["reason"] for d in decisions), decisions
    status = rt.scaling(name)["dataflows"][name]
    split = status["instances"]["w"][0]["useful_split_ms"]
    assert split["processing"] > 0 and split["deserialization"] >= 0, split
    got = finish(rt, name)
    expected = run_local(keyed("ref"), {"s": sent}).sinks["o"]
    assert canon(got) == canon(expected)
    assert rt.stats(name)["errors"] == {}


def test_a_lessee_takes_a_hot_keys_overflow_and_goes_back_results_equal(pools: Any) -> None:
    rt = pools["scaled2"]
    name = "sc-hot"
    rt.deploy(keyed(name, parallelism=2))
    rt.set_scaling(name, {"policy": "off"})
    started = rt.lease(name, "w", 1)
    assert rt.wait_migration(started["id"], 60)["state"] == "done"
    wait_for(lambda: lessees(rt, name) == 1, "the lessee measured", 10)
    rng = random.Random(3)
    hot = remote_key(rt)
    sent = [{"ts": 0, "k": hot if rng.random() < 0.8 else rng.randrange(1, 40),
             "v": rng.randrange(100)} for _ in range(6000)]
    clock = [0]
    push_at(rt, name, sent[:3000], 3000, clock)   # three times one instance's capacity
    assert lent(rt, name) > 0, rt.scaling(name)  # the hot key's overflow went there
    with pytest.raises(ReconfigConflict, match="lessees"):  # no bins move while it lends
        rt.scale(name, "w", 2)
    back = rt.lease(name, "w", 0)                  # given back while events flow
    push_at(rt, name, sent[3000:], 3000, clock)
    assert rt.wait_migration(back["id"], 60)["state"] == "done"
    wait_for(lambda: lessees(rt, name) == 0, "the lessee gone", 10)
    got = finish(rt, name)
    expected = run_local(keyed("ref"), {"s": sent}).sinks["o"]
    assert canon(got) == canon(expected)
    assert rt.stats(name)["errors"] == {}


def test_bad_scaling_settings_and_leases_are_refused_and_change_nothing(pools: Any) -> None:
    rt = pools["scaled2"]
    name = "sc-bad"
    rt.deploy(keyed(name, session=True))
    with pytest.raises(ScalingConfigError, match="min_parallelism"):
        rt.set_scaling(name, {"min_parallelism": 3, "max_parallelism": 2})
    with pytest.raises(ScalingConfigError, match="policy"):
        rt.set_scaling(name, {"policy": "magic"})
    with pytest.raises(ScalingConfigError, match="pin"):
        rt.set_scaling(name, pin={"o": 2})
    with pytest.raises(ReconfigError, match="session"):
        rt.lease(name, "w", 1)
    with pytest.raises(ReconfigError, match="lessees"):
        rt.lease(keyed_name := name, "w", -1)
    assert keyed_name == name
    status = rt.set_scaling(name, {"policy": "threshold"}, pin={"w": 2})
    assert status["dataflows"] == {} or status["dataflows"][name]["policy"] == "threshold"
    rt.cancel(name)


def test_executors_that_cannot_start_are_refused_and_the_pool_runs_on(pools: Any) -> None:
    import ray

    rt = pools["scaled2"]
    name = "sc-room"
    rt.deploy(keyed(name))
    before = len(rt.executor_stats())
    more = int(ray.available_resources().get("CPU", 0)) + 1  # one more than there is room for
    with pytest.raises(ReconfigError, match="no room"):
        rt.add_executors(more)
    assert len(rt.executor_stats()) == before
    sent = [{"ts": 0, "k": i % 7, "v": i} for i in range(500)]
    push_at(rt, name, sent, 5000, [0])
    assert canon(finish(rt, name)) == canon(run_local(keyed("ref"), {"s": sent}).sinks["o"])


def test_an_executor_with_a_lessee_killed_loses_and_repeats_no_result(pools: Any) -> None:
    from tests.integration.test_recovery import (
        Feeder,
        diff,
        drain_until_finished,
        kill_executor,
        recovered_since,
    )

    rt = pools["scaled2"]  # checkpoints every 2 s; paced, so that the hot key's owner lags
    name = "sc-lessee-kill"
    rng = random.Random(11)
    hot = remote_key(rt)
    sent = [{"ts": i // 5, "k": hot if rng.random() < 0.6 else rng.randrange(1, 30),
             "v": rng.randrange(100)} for i in range(8_000)]
    rt.deploy(keyed(name, parallelism=2))
    rt.set_scaling(name, {"policy": "off"})
    started = rt.lease(name, "w", 1)
    assert rt.wait_migration(started["id"], 60)["state"] == "done"
    hosts = rt.describe(name, refresh=True)["hosts"]
    lessee_host = hosts[f"{name}/w/2"]
    gate = [0.4]
    feeder = Feeder(rt, name, {"s": sent}, gate, batch=400, pause_s=0.01)
    feeder.start()
    got: list[dict[str, Any]] = []
    wait_for(lambda: feeder.progress >= 0.4, "fed 40%", 60)
    wait_for(lambda: lent(rt, name) > 0, "the lessee took events", 30)
    got.extend(rt.results(name))
    _, at = kill_executor(rt, lessee_host)
    wait_for(lambda: recovered_since(rt, name, at), "recovered", 90)
    gate[0] = 1.0
    feeder.join(120)
    assert feeder.error is None, feeder.error
    drain_until_finished(rt, name, got, 120)
    want = canon(run_local(keyed("ref"), {"s": sent}).sinks["o"])
    assert canon(got) == want, (diff(got, want), rt.stats(name)["errors"])
