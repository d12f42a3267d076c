"""The controller's managers, driven without Ray (`tests/shared/gateway.py`): the
same code that runs in the controller actor, its executors in-process cores, its
failures on demand. A recovery and a migration run end to end and their results equal
run_local's; a second executor lost during a restore is waited for; a reconfiguration
pauses the dataflow's checkpoints; the pool's load follows placements."""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cameo_actors import Dataflow, count, sum_
from cameo_actors.errors import ReconfigConflict, ReconfigError
from cameo_actors.operators.base import END_OF_STREAM
from cameo_actors.operators.bins import stable_hash
from cameo_actors.runtime._private.checkpoint.parts import part_chains
from cameo_actors.runtime._private.checkpoint.storage import CheckpointStorage
from cameo_actors.runtime._private.controller import registry as registry_module
from cameo_actors.runtime._private.controller.checkpoints import (
    CATCH_UP_CHECKPOINTS,
    CATCH_UP_S,
    CheckpointPhase,
)
from cameo_actors.runtime._private.executor import checkpointing
from cameo_actors.runtime.boundary import CANCELLED, RUNNING
from cameo_actors.runtime.config import RuntimeConfig, storage_not_shared
from cameo_actors.testing import run_local
from tests.shared.gateway import ControlPlane
from tests.shared.zoo import SCHEMA, canon, events


def config(folder: Path) -> RuntimeConfig:
    """Checkpoints on, exactly-once delivery (results readable once checkpointed)."""
    return RuntimeConfig(checkpoint_interval_s=1.0, checkpoint_url=str(folder / "checkpoints"),
                         ingress_log_dir=str(folder / "ingress"), bins=64)


def keyed(name: str, parallelism: int) -> Dataflow:
    d = Dataflow(name, latency_target_ms=1000)
    (d.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40)
     .key_by("key").window(tumbling_ms=50, parallelism=parallelism, id="win")
     .aggregate(n=count(), total=sum_("value")).sink("o"))
    return d


def feed(plane: ControlPlane, name: str, data: list[dict[str, Any]], end: bool = False) -> None:
    for i in range(0, len(data), 50):
        plane.push(name, "s", [data[i:i + 50]])
        for _ in range(5):
            plane.cluster.step()
    if end:
        plane.push(name, "s", [END_OF_STREAM])
    plane.gateway.pump()


def stored(plane: ControlPlane, name: str) -> tuple[CheckpointStorage, str]:
    """The plane's checkpoint storage, and the deployment `name`'s checkpoints are under."""
    storage = plane.registry.storage
    assert storage is not None
    return storage, plane.registry.record(name)["deployment"]


def finished(plane: ControlPlane, flow: Dataflow, data: list[dict[str, Any]]) -> None:
    """The last checkpoint makes every result readable: exactly run_local's."""
    assert plane.checkpoints.take(flow.name)
    want = canon(run_local(flow, {"s": data}).sinks["o"])
    assert want and canon(plane.results(flow.name)) == want


def checkpointed_then_fed(tmp_path: Path, name: str, seed: int
                          ) -> tuple[ControlPlane, Dataflow, list[dict[str, Any]]]:
    """A keyed dataflow on two executors: 300 events, a checkpoint, 150 more (replayed
    from the ingress log by a restore); 150 are left to feed."""
    plane = ControlPlane(2, config(tmp_path))
    flow, data = keyed(name, 2), events(600, seed=seed)
    plane.lifecycle.deploy(flow.spec.to_dict())
    assert plane.registry.record(name)["executors"] == [0, 1]
    feed(plane, name, data[:300])
    assert plane.checkpoints.take(name)
    feed(plane, name, data[300:450])
    return plane, flow, data


def test_an_executor_restarted_is_noticed_and_its_dataflow_restored(tmp_path: Path) -> None:
    plane, flow, data = checkpointed_then_fed(tmp_path, "rc", seed=3)
    plane.cluster.restart_core(1)  # it died and the platform started it again, empty
    plane.recovery.check_executors()
    info = plane.registry.record("rc")
    assert info["state"] == RUNNING and info["recoveries"] == 1
    assert [h["state"] for h in info["history"]] == ["running", "recovering", "running"]
    assert "executor 1 died: it was restarted" in info["history"][1]["reason"]
    feed(plane, "rc", data[450:], end=True)
    finished(plane, flow, data)


def test_an_executor_whose_watched_process_exits_is_lost_at_once_and_its_dataflow_restored(
        tmp_path: Path) -> None:
    """The liveness round watches each executor's process on this host (here every one is
    this test's process); its exit is a loss at once, before any call fails. An exit of
    an older incarnation, of a process being removed, or after the pool stopped is not."""
    plane, flow, data = checkpointed_then_fed(tmp_path, "px", seed=4)
    plane.recovery.check_executors()
    watched = plane.recovery.processes.watching()
    assert [(i, pid) for i, _, pid in watched] == [(0, os.getpid()), (1, os.getpid())]
    incarnation = plane.pool.incarnations[1]
    plane.recovery._exited(1, "an-older-one", 4321)
    plane.pool.draining.add(1)
    plane.recovery._exited(1, incarnation, 4321)
    plane.pool.draining.discard(1)
    assert plane.registry.record("px")["recoveries"] == 0
    plane.cluster.restart_core(1)  # what the platform does after the process died
    plane.recovery._exited(1, incarnation, 4321)
    info = plane.registry.record("px")
    assert info["state"] == RUNNING and info["recoveries"] == 1, info["history"]
    assert "executor 1 died: its process (pid 4321) exited" in info["history"][1]["reason"]
    plane.stopped.set()
    plane.recovery._exited(1, plane.pool.incarnations[1], 4321)
    assert plane.registry.record("px")["recoveries"] == 1
    feed(plane, "px", data[450:], end=True)
    finished(plane, flow, data)


def test_after_a_restore_the_next_checkpoints_follow_at_the_catch_up_cadence(
        tmp_path: Path) -> None:
    """The results a restored dataflow makes while it catches up are read once a
    checkpoint after them completes: after the one taken at once, the next few follow
    `CATCH_UP_S` apart (or their duration), then the interval again."""
    plane, flow, data = checkpointed_then_fed(tmp_path, "cu", seed=5)
    plane.cluster.restart_core(1)
    plane.recovery.check_executors()
    coordinator = plane.checkpoints
    assert plane.registry.record("cu")["recoveries"] == 1
    assert coordinator.due["cu"] == 0.0 and coordinator.catching_up["cu"] == CATCH_UP_CHECKPOINTS
    counts = plane.registry.record("cu")["checkpoints"]
    for n in range(CATCH_UP_CHECKPOINTS + 1):
        coordinator.taking.add("cu")  # as its loop starts one that is due
        coordinator.due["cu"] = math.inf
        before = time.monotonic()
        coordinator._scheduled("cu")
        after = time.monotonic()
        if n < CATCH_UP_CHECKPOINTS:
            assert coordinator.due["cu"] - after <= max(CATCH_UP_S, counts["last_duration_s"])
        else:  # caught up: the interval again
            assert coordinator.due["cu"] - before >= counts["interval_s"] == 1.0
    assert "cu" not in coordinator.catching_up and counts["completed"] >= CATCH_UP_CHECKPOINTS + 2
    feed(plane, "cu", data[450:], end=True)
    finished(plane, flow, data)


def test_an_executor_never_restarted_is_retired_and_its_instances_restored_on_the_others(
        tmp_path: Path) -> None:
    plane = ControlPlane(3, replace(config(tmp_path), replace_lost_after_s=1e-9))
    flow, bystander, data = keyed("gone", 3), keyed("by", 1), events(600, seed=6)
    plane.lifecycle.deploy(flow.spec.to_dict())
    plane.lifecycle.deploy(bystander.spec.to_dict())
    assert plane.registry.record("gone")["executors"] == [0, 1, 2]
    feed(plane, "gone", data[:300])
    assert plane.checkpoints.take("gone")
    feed(plane, "gone", data[300:450])  # after the checkpoint: replayed from the ingress log
    plane.gateway.lost.add(1)  # its node died and no other has room for it
    plane.recovery.check_executors()
    info = plane.registry.record("gone")
    assert info["state"] == RUNNING and info["recoveries"] == 1, info["history"]
    assert 1 in plane.pool.dead and "restored on the executors left" in plane.pool.dead[1]
    assert plane.gateway.killed == {1} and not plane.pool.restarting
    # Executor 1's instances moved to an executor left; the others stayed.
    placed = plane.registry.placements["gone"]
    assert placed.executors() == {0, 2} and len(placed.on(0)) == 4  # source to sink, win 0
    assert all(1 not in p.executors() for p in plane.registry.placements.values())
    assert plane.registry.record("by")["state"] == RUNNING
    assert sum(plane.pool.load.values()) == sum(
        len(p.instances) for p in plane.registry.placements.values())
    feed(plane, "gone", data[450:], end=True)
    finished(plane, flow, data)


def test_state_on_disk_has_a_budget_of_its_own_and_over_it_the_dataflow_fails(
        tmp_path: Path) -> None:
    """With the rocksdb backend a window's state is in its store's files: the monitor
    counts them apart from memory, each against its own budget, and the dataflow over
    its disk budget fails saying so; the others go on."""
    plane = ControlPlane(2, replace(config(tmp_path), state_backend="rocksdb",
                                    store_dir=str(tmp_path / "stores"), state_cache_entries=2,
                                    state_disk_budget_bytes=1 << 30))
    big = keyed("big", 2).spec.to_dict()
    big["limits"]["state_disk_bytes"] = 1  # any file at all is over it
    plane.lifecycle.deploy(big)
    plane.lifecycle.deploy(keyed("small", 1).spec.to_dict())
    for name in ("big", "small"):
        feed(plane, name, events(300, seed=9))
        assert plane.checkpoints.take(name)  # the stores flushed their files
    plane.monitor.check_usage()
    big_info, small_info = plane.registry.record("big"), plane.registry.record("small")
    assert small_info["state"] == RUNNING and small_info["state_disk_bytes"] > 0
    assert 0 < small_info["state_bytes"] < 1 << 30
    assert big_info["state"] == "failed", big_info["history"]
    assert big_info["cause"].startswith("over its state budget on disk: ")
    assert "budget 1 bytes. Fix: " in big_info["cause"] and "limits.state_disk_bytes" in \
        big_info["cause"]


def test_a_drained_node_moves_its_dataflows_through_a_checkpoint_and_loses_nothing(
        tmp_path: Path) -> None:
    plane = ControlPlane(3, config(tmp_path))
    flow, data = keyed("dn", 3), events(600, seed=7)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "dn", data[:400])
    with pytest.raises(ReconfigError, match="one of \\['node-0', 'node-1', 'node-2'\\]"):
        plane.recovery.drain("node-9")
    unsaved = keyed("nock", 1)
    unsaved.fault_tolerance(checkpoint_interval_ms=0)
    plane.lifecycle.deploy(unsaved.spec.to_dict())
    on = plane.registry.record("nock")["executors"][0]
    with pytest.raises(ReconfigConflict, match="nock"):
        plane.recovery.drain(f"node-{on}")
    plane.lifecycle.cancel("nock")

    drained = plane.recovery.drain("node-2")
    assert drained["executors"] == [2] and drained["dataflows"] == ["dn"]
    info = plane.registry.record("dn")
    assert info["state"] == RUNNING and 2 not in info["executors"] and info["recoveries"] == 1
    assert "node node-2 drained" in plane.pool.dead[2] and plane.gateway.killed == {2}
    feed(plane, "dn", data[400:], end=True)
    finished(plane, flow, data)


def test_an_executor_lost_during_a_restore_is_waited_for_and_the_restore_tried_again(
        tmp_path: Path) -> None:
    plane = ControlPlane(2, config(tmp_path))
    flow, data = keyed("rr", 2), events(600, seed=4)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "rr", data[:300])
    assert plane.checkpoints.take("rr")
    hit: list[int] = []

    def second_loss(index: int, method: str) -> None:
        if method == "restore" and index == 0 and not hit:
            hit.append(1)
            plane.gateway.fail(1)  # down while executor 0 is being restored

    plane.gateway.before = second_loss
    plane.cluster.restart_core(0)
    plane.recovery.check_executors()
    info = plane.registry.record("rr")
    assert hit and info["state"] == RUNNING, info["history"]
    # Two restores (a generation each), one loss in a row: the second did not count.
    assert info["recoveries"] == 2 and info["recoveries_in_a_row"] == 1
    assert [h["state"] for h in info["history"]] == ["running", "recovering", "running"]
    assert not plane.pool.restarting and not plane.recovery.restoring
    feed(plane, "rr", data[300:], end=True)
    finished(plane, flow, data)


def test_a_restore_waits_for_an_executor_restarted_but_not_linked_yet(tmp_path: Path) -> None:
    """Both executors restarted and both losses seen; executor 0's restart thread links
    it first, while executor 1 answers as its new incarnation but its own thread has not
    linked it yet. The restore is left to that thread, which restores once it linked
    executor 1: restored there before, the others' messages to it were dropped as meant
    for its old incarnation, and its link made after reset the link under the restored
    dataflow (it hung, `finishing`)."""
    deferred: dict[str, tuple[Any, tuple[Any, ...]]] = {}

    def spawn(name: str, fn: Any, *args: Any) -> None:
        deferred[name] = (fn, args)  # each restart thread runs when the test says

    plane = ControlPlane(2, config(tmp_path), spawn=spawn)
    flow, data = keyed("rl", 2), events(600, seed=8)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "rl", data[:300])
    assert plane.checkpoints.take("rl")
    restored_on: list[int] = []
    plane.gateway.before = lambda index, method: restored_on.append(index) \
        if method == "restore" else None
    plane.cluster.restart_core(0)
    plane.cluster.restart_core(1)
    plane.recovery.check_executors()
    assert plane.pool.restarting == {0, 1}
    fn, args = deferred.pop("cameo-restart-0")
    fn(*args)  # links executor 0; the restore needs executor 1, not linked yet
    info = plane.registry.record("rl")
    assert not restored_on and info["state"] == "recovering" and plane.pool.restarting == {1}
    assert not plane.recovery.restoring
    fn, args = deferred.pop("cameo-restart-1")
    fn(*args)  # links executor 1, then restores
    info = plane.registry.record("rl")
    assert info["state"] == RUNNING and sorted(restored_on) == [0, 1], info["history"]
    assert info["recoveries"] == 1 and not plane.pool.restarting
    assert not plane.recovery.restoring
    feed(plane, "rl", data[300:], end=True)
    finished(plane, flow, data)


def test_a_scale_up_runs_epoch_by_epoch_and_results_equal_run_local(tmp_path: Path) -> None:
    plane = ControlPlane(2, config(tmp_path))
    flow, data = keyed("mg", 1), events(900, seed=5)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "mg", data[:300])
    started = plane.reconfig.scale("mg", "win", 2, strategy="batched")  # carried out at once here
    m = plane.reconfig.wait_migration(started["id"], 0)
    assert m["state"] == "done" and m["kind"] == "scale", m
    assert m["to_parallelism"] == 2 and m["epochs_done"] == m["epochs_total"] > 1
    assert m["bins_moved"] == 32
    info = plane.registry.record("mg")
    assert next(s for s in info["spec"]["steps"] if s["id"] == "win")["parallelism"] == 2
    assert plane.checkpoints.phase("mg") is CheckpointPhase.WAITING
    assert plane.checkpoints.due["mg"] == 0.0  # the new placement's checkpoint: at once
    assert sum(plane.pool.load.values()) == len(plane.registry.placements["mg"].instances)
    feed(plane, "mg", data[300:], end=True)
    finished(plane, flow, data)


def test_a_reconfiguration_pauses_the_checkpoints_of_its_dataflow(tmp_path: Path) -> None:
    later: list[tuple[Any, tuple[Any, ...]]] = []
    plane = ControlPlane(2, config(tmp_path),
                         spawn=lambda name, fn, *args: later.append((fn, args)))
    flow, data = keyed("pz", 1), events(300, seed=6)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "pz", data)
    plane.reconfig.scale("pz", "win", 2)
    assert plane.checkpoints.phase("pz") is CheckpointPhase.PAUSED
    assert plane.checkpoints.now(["pz"]) == {"pz": False}
    with pytest.raises(ReconfigConflict):
        plane.reconfig.scale("pz", "win", 1)
    fn, args = later.pop()
    fn(*args)
    assert plane.checkpoints.phase("pz") is CheckpointPhase.WAITING
    assert plane.checkpoints.now(["pz"]) == {"pz": True}


def test_the_pools_load_follows_deploys_cancels_and_expiry(tmp_path: Path) -> None:
    plane = ControlPlane(2, config(tmp_path))
    plane.lifecycle.deploy(keyed("a", 2).spec.to_dict())
    plane.lifecycle.deploy(keyed("b", 1).spec.to_dict())
    total = sum(len(p.instances) for p in plane.registry.placements.values())
    assert sum(plane.pool.load.values()) == total
    assert plane.lifecycle.cancel("a")["state"] == CANCELLED
    assert sum(plane.pool.load.values()) == len(plane.registry.placements["b"].instances)
    plane.registry.expire(kept=0, retention_s=3600.0)
    assert sorted(plane.registry.dataflows) == ["b"]
    assert plane.lifecycle.cancel("b")["ended_before"] is False
    assert sum(plane.pool.load.values()) == 0


def test_the_monitor_finishes_a_drained_dataflow_with_a_last_checkpoint(tmp_path: Path) -> None:
    plane = ControlPlane(2, config(tmp_path))
    flow, data = keyed("fin", 2), events(300, seed=7)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "fin", data, end=True)
    assert plane.results("fin") == []  # exactly-once: nothing readable before a checkpoint
    plane.lifecycle.closing("fin")
    plane.monitor.once()
    info = plane.registry.record("fin")
    assert info["state"] == "finished" and info["checkpoints"]["completed"] == 1
    assert canon(plane.results("fin")) == canon(run_local(flow, {"s": data}).sinks["o"])


def test_an_isolated_pool_places_each_dataflow_on_executors_of_its_own(tmp_path: Path) -> None:
    cfg = RuntimeConfig(checkpoint_url=str(tmp_path / "checkpoints"), bins=64,
                        ingress_log_dir=str(tmp_path / "ingress"), isolation="isolated")
    plane = ControlPlane(2, cfg)
    plane.lifecycle.deploy(keyed("i1", 1).spec.to_dict())
    plane.lifecycle.deploy(keyed("i2", 1).spec.to_dict())
    assert {tuple(plane.registry.record(n)["executors"]) for n in ("i1", "i2")} == {(0,), (1,)}
    with pytest.raises(Exception, match="isolated mode: dataflow 'i3' needs 1 dedicated"):
        plane.lifecycle.deploy(keyed("i3", 1).spec.to_dict())
    assert "i3" not in plane.registry.dataflows  # refused: nothing changed


def test_a_shared_pool_places_a_new_dataflow_beside_the_loosest_targets(tmp_path: Path) -> None:
    def chain(name: str, target_ms: float) -> dict[str, Any]:
        return (Dataflow(name, latency_target_ms=target_ms, tenant=name)
                .source("s", schema=SCHEMA, event_time="ts").filter("value >= 0").sink("o")
                ).spec.to_dict()

    for placement, joins in (("targets_apart", "p100"), ("even", "f50")):
        plane = ControlPlane(2, replace(config(tmp_path / placement), placement=placement))
        for name, target in (("f50", 50.0), ("p100", 100.0), ("w300", 300.0)):
            plane.lifecycle.deploy(chain(name, target))
        on = {n: plane.registry.record(n)["executors"] for n in ("f50", "p100", "w300")}
        assert on["f50"] != on["p100"] and on["w300"] == on[joins], (placement, on)
    with pytest.raises(ValueError, match="RuntimeConfig.placement: expected one of"):
        RuntimeConfig(placement="random")


def test_the_scaling_loop_measures_each_running_dataflow(tmp_path: Path) -> None:
    plane = ControlPlane(2, config(tmp_path))
    plane.lifecycle.deploy(keyed("sc", 2).spec.to_dict())
    feed(plane, "sc", events(300, seed=8))
    plan = plane.scaling.once(1000.0)
    assert plan is not None and not plan.decisions  # the pool's policy is off
    status = plane.scaling.status("sc")
    assert status["executors"] == 2 and set(status["dataflows"]["sc"]["steps"]) >= {"win"}


def test_tracing_drains_every_executor_and_a_read_explains_the_dataflow(tmp_path: Path) -> None:
    cfg = RuntimeConfig(checkpoint_url=str(tmp_path / "checkpoints"), bins=64,
                        ingress_log_dir=str(tmp_path / "ingress"), trace_sample=1.0,
                        trace_snapshot_s=0.01)
    plane = ControlPlane(2, cfg)
    tracing = plane.tracing
    plane.lifecycle.deploy(keyed("tr", 2).spec.to_dict())
    feed(plane, "tr", events(300, seed=9), end=True)
    now = plane.cluster.clock.now_ms() + 100.0  # the cores' clock: past every activity
    assert tracing.collect(now) == 0  # nobody reads yet: kept, not analysed
    assert tracing.collector.collected > 0
    assert all(c.tracer is not None and not c.tracer.drain()[0] for c in plane.cluster.cores)
    why = tracing.collector.explain("tr", last_s=600.0, now_ms=now, latency_target_ms=1000.0)
    assert why["tracing"]["collected"] == tracing.collector.collected and why["activities"]


def test_a_damaged_checkpoint_is_skipped_with_its_cause_and_the_one_before_restored(
        tmp_path: Path) -> None:
    plane = ControlPlane(2, config(tmp_path))
    flow, data = keyed("dm", 2), events(600, seed=6)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "dm", data[:200])
    assert plane.checkpoints.take("dm")
    feed(plane, "dm", data[200:350])
    assert plane.checkpoints.take("dm")
    feed(plane, "dm", data[350:450])
    storage, deployment = stored(plane, "dm")
    newest, kept = storage.latest("dm", deployment), storage.checkpoints("dm", deployment)
    assert newest is not None and len(kept) == 2
    part = tmp_path / "checkpoints" / newest["parts"]["dm/win/1"]
    raw = part.read_bytes()
    part.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))  # one bit gone bad on disk
    plane.cluster.restart_core(1)
    plane.recovery.check_executors()
    info = plane.registry.record("dm")
    assert info["state"] == RUNNING, info["history"]
    reason = info["history"][-1]["reason"]
    assert reason.startswith(f"restored from checkpoint {kept[0]} (skipped: "
                             f"checkpoint {newest['checkpoint']} is damaged"), reason
    assert "crc32" in reason
    feed(plane, "dm", data[450:], end=True)
    finished(plane, flow, data)


def day_window(name: str) -> Dataflow:
    """A keyed count over one long window: its state only grows, and a few events change
    a few keys of it."""
    d = Dataflow(name, latency_target_ms=1000)
    (d.source("s", schema=SCHEMA, event_time="ts", allowed_lateness_ms=40)
     .key_by("key").window(tumbling_ms=86_400_000, parallelism=2, id="win")
     .aggregate(n=count(), total=sum_("value")).sink("o"))
    return d


def test_incremental_checkpoints_build_on_the_full_one_across_a_restore(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A window's part holds only the keys changed since the checkpoint before, on top of
    its chain (the manifest's "bases"); retiring keeps what the kept one builds on; a
    restore reads the chain and the next part builds on it, and the restored windows find
    their keys' bins in steps among the work that follows; results equal run_local's."""
    monkeypatch.setattr(checkpointing, "INDEX_KEYS", 7)  # many steps
    plane = ControlPlane(2, RuntimeConfig(
        checkpoint_interval_s=1.0, checkpoint_url=str(tmp_path / "checkpoints"),
        ingress_log_dir=str(tmp_path / "ingress"), bins=64, checkpoints_kept=1))
    flow, data = day_window("inc"), events(900, seed=5, keys=300)
    plane.lifecycle.deploy(flow.spec.to_dict())
    storage, deployment = stored(plane, "inc")
    feed(plane, "inc", data[:600])
    assert plane.checkpoints.take("inc")
    full = storage.latest("inc", deployment)
    assert full is not None and not full["bases"]
    feed(plane, "inc", data[600:620])  # a few keys change
    assert plane.checkpoints.take("inc")
    delta = storage.latest("inc", deployment)
    assert delta is not None
    wins = ["inc/win/0", "inc/win/1"]
    assert all(delta["bases"][w] == [full["parts"][w]] for w in wins)
    for w in wins:
        assert len(storage.read_part(delta["parts"][w])) < len(storage.read_part(full["parts"][w])) / 5
    assert storage.checkpoints("inc", deployment) == [full["checkpoint"], delta["checkpoint"]]
    plane.cluster.restart_core(1)
    plane.recovery.check_executors()
    info = plane.registry.record("inc")
    assert info["history"][-1]["reason"].startswith(
        f"restored from checkpoint {delta['checkpoint']}: waited ")
    phases = info["checkpoints"]["last_restore"]
    assert phases is not None and phases["checkpoint"] == delta["checkpoint"]
    # Its executors read every part's chain: for the windows, the full part and the
    # incremental one on top of it.
    assert phases["read_bytes"] == sum(len(storage.read_part(path))
                                       for chain in part_chains(delta).values() for path in chain)
    assert phases["read_s"] >= 0 and phases["restored_s"] >= 0 and phases["waited_s"] >= 0
    assert plane.checkpoints.due["inc"] == 0.0  # the next at once: results wait for it
    state = plane.cluster.cores[1].hosting.activations["inc/win/1"].operator._aligned_state()
    assert state is not None and state.to_index, "bins still to find"
    feed(plane, "inc", data[620:700])
    # The restored windows found their keys' bins in steps meanwhile, as a fresh index.
    assert state.to_index == []
    held = state.keys()  # one window's
    assert {b: sorted(keys) for b, keys in next(iter(state.index.values())).items()} == \
        {b: sorted(k for k in held if stable_hash(k) & 63 == b)
         for b in {stable_hash(k) & 63 for k in held}}
    assert plane.checkpoints.take("inc")
    after = storage.latest("inc", deployment)
    assert after is not None
    assert all(after["bases"][w] == [full["parts"][w], delta["parts"][w]] for w in wins)
    feed(plane, "inc", data[700:], end=True)
    finished(plane, flow, data)


@pytest.mark.parametrize("where", ["pool", "spec"])
def test_with_incremental_checkpoints_off_every_part_is_full(tmp_path: Path, where: str) -> None:
    plane = ControlPlane(2, RuntimeConfig(
        checkpoint_interval_s=1.0, checkpoint_url=str(tmp_path / "checkpoints"),
        ingress_log_dir=str(tmp_path / "ingress"), bins=64,
        incremental_checkpoints=where == "spec"))
    flow, data = day_window("off"), events(300, seed=2, keys=100)
    if where == "spec":
        flow.fault_tolerance(incremental=False)
    plane.lifecycle.deploy(flow.spec.to_dict())
    storage, deployment = stored(plane, "off")
    sizes = []
    for chunk in (data[:280], data[280:]):
        feed(plane, "off", chunk)
        assert plane.checkpoints.take("off")
        manifest = storage.latest("off", deployment)
        assert manifest is not None and manifest["bases"] == {}
        sizes.append(len(storage.read_part(manifest["parts"]["off/win/0"])))
    assert sizes[1] >= sizes[0]


def test_a_checkpoint_asked_for_while_one_is_under_way_follows_it_at_once(
        tmp_path: Path) -> None:
    """`soon` (a restore's) during a scheduled checkpoint is not overwritten by that
    checkpoint's end, which otherwise sets the next one an interval later."""
    plane = ControlPlane(2, config(tmp_path))
    flow = keyed("cs", 2)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "cs", events(100, seed=1))
    coordinator = plane.checkpoints
    for asked in (True, False):
        coordinator.taking.add("cs")  # as `run` starts one
        coordinator.due["cs"] = math.inf
        plane.gateway.before = lambda index, method, asked=asked: \
            coordinator.soon("cs") if asked and method == "checkpoint" else None
        coordinator._scheduled("cs")
        assert "cs" not in coordinator.taking
        assert (coordinator.due["cs"] == 0.0) is asked


def test_a_damaged_full_part_fails_the_checkpoints_built_on_it(tmp_path: Path) -> None:
    plane = ControlPlane(2, config(tmp_path))
    flow, data = day_window("db"), events(400, seed=8, keys=200)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "db", data[:300])
    assert plane.checkpoints.take("db")
    feed(plane, "db", data[300:])
    assert plane.checkpoints.take("db")
    storage, deployment = stored(plane, "db")
    newest = storage.latest("db", deployment)
    assert newest is not None
    base = newest["bases"]["db/win/0"][0]
    (tmp_path / "checkpoints" / base).write_bytes(b"")  # a file emptied by hand
    plane.cluster.restart_core(0)
    plane.recovery.check_executors()
    info = plane.registry.record("db")
    assert info["state"] == "failed", info["history"]
    assert f"checkpoint {newest['checkpoint']} is damaged" in info["cause"]
    assert base.split("/")[-2] in info["cause"]


def test_a_dataflow_whose_every_checkpoint_is_damaged_fails_with_the_causes(
        tmp_path: Path) -> None:
    plane = ControlPlane(2, config(tmp_path))
    flow, data = keyed("dd", 2), events(200, seed=7)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "dd", data)
    for manifest in (tmp_path / "checkpoints").rglob("_manifest.json"):
        manifest.write_bytes(manifest.read_bytes()[:-2])  # torn
    plane.cluster.restart_core(0)
    plane.recovery.check_executors()
    info = plane.registry.record("dd")
    assert info["state"] == "failed", info["history"]
    assert "no checkpoint of it can be restored: checkpoint 0 is damaged: its manifest does " \
           "not parse" in info["cause"]


def local_copies(tmp_path: Path) -> ControlPlane:
    """Local recovery on, though the storage is a local folder too (it is off by default
    then): each executor's copies in a folder of its own."""
    return ControlPlane(2, RuntimeConfig(
        checkpoint_interval_s=1.0, checkpoint_url=str(tmp_path / "checkpoints"),
        ingress_log_dir=str(tmp_path / "ingress"), bins=64, local_recovery=True,
        local_recovery_dir=str(tmp_path / "local")))


def test_a_restore_reads_the_local_copies_and_the_storage_where_a_copy_is_missing_or_damaged(
        tmp_path: Path) -> None:
    plane = local_copies(tmp_path)
    flow, data = day_window("lr"), events(600, seed=4, keys=200)
    plane.lifecycle.deploy(flow.spec.to_dict())
    storage, deployment = stored(plane, "lr")
    feed(plane, "lr", data[:300])
    assert plane.checkpoints.take("lr")
    manifest = storage.latest("lr", deployment)
    assert manifest is not None
    hosts = plane.registry.record("lr")["hosts"]
    parts = part_chains(manifest)
    # Window 1's part is gone from the storage (its executor reads its copy), window 0's
    # copy has a flipped bit (its executor reads the storage).
    (tmp_path / "checkpoints" / parts["lr/win/1"][-1]).unlink()
    copy = tmp_path / "local" / f"executor-{hosts['lr/win/0']}" / parts["lr/win/0"][-1]
    raw = copy.read_bytes()
    copy.write_bytes(raw[:-1] + bytes([raw[-1] ^ 1]))
    feed(plane, "lr", data[300:450])
    plane.cluster.restart_core(1)  # the same node: it finds its copies
    plane.recovery.check_executors()
    info = plane.registry.record("lr")
    assert info["state"] == RUNNING, info["history"]
    phases = info["checkpoints"]["last_restore"]
    assert phases is not None and phases["checkpoint"] == manifest["checkpoint"]
    size = {aid: len(storage.read_part(chain[-1])) for aid, chain in parts.items()
            if aid != "lr/win/1"}
    assert phases["read_bytes"] == sum(size.values()) + len(
        plane.cluster.parts_of(hosts["lr/win/1"]).read(parts["lr/win/1"][-1])[0])
    assert phases["read_local_bytes"] == phases["read_bytes"] - size["lr/win/0"]
    assert "MB of it from local copies" in info["history"][-1]["reason"]
    feed(plane, "lr", data[450:], end=True)
    finished(plane, flow, data)


def test_local_copies_follow_the_checkpoints_kept_and_go_with_the_dataflow(
        tmp_path: Path) -> None:
    plane = local_copies(tmp_path)
    flow, data = day_window("lk"), events(500, seed=6, keys=100)
    plane.lifecycle.deploy(flow.spec.to_dict())
    storage, deployment = stored(plane, "lk")
    for i in range(5):
        feed(plane, "lk", data[i * 100:(i + 1) * 100])
        assert plane.checkpoints.take("lk")
    manifests = [storage.manifest("lk", deployment, c)
                 for c in storage.checkpoints("lk", deployment)]
    wanted = {path for m in manifests if m for chain in part_chains(m).values()
              for path in chain}
    copies = {str(p.relative_to(d)) for d in (tmp_path / "local").iterdir()
              for p in d.rglob("*") if p.is_file()}
    # Every part a kept checkpoint needs has its copy; no copy of a retired part is left.
    assert copies == wanted
    plane.lifecycle.cancel("lk")
    assert not [p for p in (tmp_path / "local").rglob("*") if p.is_file()]


def test_local_recovery_is_on_by_default_only_for_storage_that_is_not_a_local_folder(
        tmp_path: Path) -> None:
    def copies(url: str, on: bool | None = None) -> str | None:
        return RuntimeConfig(checkpoint_url=url, local_recovery=on,
                             local_recovery_dir=str(tmp_path)).local_copies_dir(3)

    assert copies("s3://bucket/cameo") == str(tmp_path / "executor-3")
    assert copies(str(tmp_path / "checkpoints")) is None
    assert copies(f"file://{tmp_path}/checkpoints") is None
    assert copies(str(tmp_path / "checkpoints"), on=True) == str(tmp_path / "executor-3")
    assert copies("s3://bucket/cameo", on=False) is None


def test_a_pool_on_more_than_one_node_must_name_storage_every_node_reaches() -> None:
    named = RuntimeConfig(checkpoint_url="s3://bucket/cameo", ingress_log_dir="/mnt/shared/in")
    assert storage_not_shared(RuntimeConfig(), 1) is None  # one node: its folders are shared
    assert storage_not_shared(named, 3) is None
    why = storage_not_shared(RuntimeConfig(checkpoint_url="s3://bucket/cameo"), 3)
    assert why is not None and "cluster of 3 nodes" in why and "Fix: name them" in why
    assert "ingress_log_dir" in why and "checkpoint_url" not in why
    both = storage_not_shared(RuntimeConfig(), 2)
    assert both is not None and "checkpoint_url" in both and "ingress_log_dir" in both


def test_a_dataflows_checkpoints_and_live_changes_are_kept_in_its_saved_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each checkpoint, completed or given up, is recorded with its parts per executor
    and why it failed; a live change with what changed; the newest kept, bounded; all of
    it in the registry a restarted service reads (the console's history)."""
    monkeypatch.setattr(registry_module, "CHECKPOINTS_KEPT", 3)
    plane = ControlPlane(2, config(tmp_path))
    flow, data = day_window("kept"), events(300, seed=3, keys=50)
    plane.lifecycle.deploy(flow.spec.to_dict())
    feed(plane, "kept", data[:200])
    assert plane.checkpoints.take("kept")
    feed(plane, "kept", data[200:220])
    assert plane.checkpoints.take("kept")
    cut = plane.checkpoints.begin("kept")
    assert not plane.checkpoints.commit(cut, {})  # no part written in time
    plane.lifecycle.update("kept", latency_target_ms=500, weight=2.0)
    assert plane.checkpoints.take("kept")
    plane.monitor.once()
    saved = plane.registry.storage.load_registry()
    assert saved is not None
    info = saved["dataflows"]["kept"]
    history = info["checkpoints"]["history"]
    assert [r["ok"] for r in history] == [True, False, True]  # the first one went (3 kept)
    full_next, failed, last = history
    activations = len(plane.registry.placements["kept"].hosts)
    assert full_next["parts"] == activations and full_next["incremental_parts"] == 2  # windows
    assert sum(full_next["executors"].values()) == full_next["bytes"] > 0
    assert set(full_next["executors"]) <= {"0", "1"}
    assert failed["id"] == cut.ckpt and failed["bytes"] == 0 and failed["phases"] is None
    # each completed one says where its time went: barriers in, aligned, packed, written
    phases = full_next["phases"]
    assert phases is not None and list(phases) == ["barriers_s", "aligned_s", "packed_s",
                                                   "written_s"]
    assert 0 <= phases["barriers_s"] <= phases["aligned_s"] <= phases["written_s"]
    assert phases["packed_s"] <= phases["written_s"]
    assert failed["reason"] == f"{activations} of {activations} parts not written in time " \
                               "(executors [0, 1])"
    assert last["at"] >= failed["at"] >= full_next["at"]
    assert info["checkpoints"]["failed"] == 1 and info["checkpoints"]["completed"] == 3
    assert [c["what"] for c in info["changes"]] == [
        "latency target 1000 ms -> 500 ms, weight 1 -> 2"]
