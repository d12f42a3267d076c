"""Live reconfiguration: scale a keyed step, move bins or an instance, lend a window
lessees, rebalance, add and remove executors. Each operation is planned
(`rescale.py`) and checked before anything changes, then carried out in a thread
of its own while the dataflow runs (`migrations.py`); a dataflow has one at a time,
and its checkpoints pause meanwhile."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.dataflow.validate import MAX_PARALLELISM
from cameo_actors.errors import CameoError, ReconfigConflict, ReconfigError
from cameo_actors.operators.lease import can_lease
from cameo_actors.runtime._private.checkpoint.parts import interval_s
from cameo_actors.runtime._private.checkpoint.shared import FIX as SHARED_STORAGE_FIX
from cameo_actors.runtime._private.controller.checkpoints import CheckpointCoordinator
from cameo_actors.runtime._private.controller.gateway import Spawn, in_thread
from cameo_actors.runtime._private.controller.migrations import MigrationRunner
from cameo_actors.runtime._private.controller.plans import (
    Migration,
    MigrationKind,
    MigrationState,
    next_instance,
    plan,
    scale_plan,
)
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.recovery import Recovery, short_cause
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.controller.source_rescale import kafka_source
from cameo_actors.runtime._private.executor_api import ExecutorAPI
from cameo_actors.runtime._private.placement import Placement, is_keyed_step
from cameo_actors.runtime.boundary import (
    LIVE_STATES,
    MAX_ADD_EXECUTORS,
    STRATEGIES,
    ActivationId,
    DataflowInfo,
    ExecutorRemoval,
    MigrationInfo,
)
from cameo_actors.runtime.config import RuntimeConfig
from cameo_actors.runtime.exceptions import ReconfigFailed
from cameo_actors.runtime.interface import WAIT_TIMEOUT_S, ControlAPI, serves

logger = logging.getLogger(__name__)
#: Reconfigurations kept for `migrations()` (the running ones always).
MIGRATIONS_KEPT = 200
#: Lessees one keyed window may have.
MAX_LESSEES = 8
#: How long `rebalance` measures the executors' busy time.
REBALANCE_WINDOW_S = 1.0


class Reconfiguration:
    def __init__(self, config: RuntimeConfig, pool: Pool, registry: Registry,
                 checkpoints: CheckpointCoordinator, spawn: Spawn = in_thread,
                 recovery: Recovery | None = None) -> None:
        self.config, self.pool, self.registry, self.spawn = config, pool, registry, spawn
        self.checkpoints = checkpoints
        self.recovery = recovery  # what rescales a Kafka source (through a checkpoint)
        self.lock = pool.lock
        self.runner = MigrationRunner(config, pool, registry)
        #: reconfigurations by id (oldest first), and the one under way per dataflow
        self.migrations: dict[str, Migration] = {}
        self.migrating: dict[str, str] = {}
        self._removed = threading.Condition(self.lock)  # an executor's removal ended
        self._adding = threading.Lock()

    # -- operations on a keyed step ------------------------------------------------------
    @serves(ControlAPI.scale)
    def scale(self, name: str, step: str, parallelism: int, *, strategy: str = "batched",
              batch_bins: int | None = None, wait: bool = False,
              timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        """Give a keyed step `parallelism` instances while the dataflow runs (or a Kafka
        source, through a checkpoint: `_rescale_source`)."""
        with self.lock:
            spec = DataflowSpec.from_dict(self.registry.live(name)["spec"])
        if self.recovery is not None and kafka_source(spec, step):
            return self._rescale_source(name, spec, step, parallelism, wait, timeout_s)
        with self.lock:
            info, placement, where = self._keyed(name, step, strategy, batch_bins)
            bins = placement.bins
            if type(parallelism) is not int or not 1 <= parallelism <= bins:
                raise ReconfigError(where, f"a parallelism from 1 to {bins} (the pool's bins)",
                                    parallelism, f"ask for 1 to {bins} instances")
            executors = self.pool.usable() if self.config.isolation == "shared" \
                else [i for i in info["executors"] if i not in self.pool.dead]
            m = scale_plan(self._next_id(), placement, name, step, parallelism, executors,
                           self.pool.load, strategy, batch_bins)
            started = self._start(info, m)
        return self._ended(started, timeout_s) if wait else started

    def _rescale_source(self, name: str, spec: DataflowSpec, step: str, parallelism: int,
                        wait: bool, timeout_s: float) -> MigrationInfo:
        """Kafka source `step` given `parallelism` instances through a checkpoint
        (`Recovery.rescale`, `source_rescale`); over when this returns, `wait` or not."""
        assert self.recovery is not None
        where = f"dataflow {name!r}, step {step!r}"
        before = spec.step(step).parallelism
        if type(parallelism) is not int or not 1 <= parallelism <= MAX_PARALLELISM \
                or parallelism == before:
            raise ReconfigError(where, f"a parallelism from 1 to {MAX_PARALLELISM}, other than "
                                f"the source's {before}", parallelism,
                                "ask for another number of instances")
        if interval_s(spec, self.config) <= 0:
            raise ReconfigConflict(where, "a dataflow that takes checkpoints (a source "
                                   "rescales through one)", "checkpoints off",
                                   "deploy it again with checkpoints on, then rescale")
        with self.lock:
            running = self.migrating.get(name)
            if running is not None:
                raise ReconfigConflict(where, "no other migration of the dataflow under way",
                                       f"migration {running} is running",
                                       "wait for it to finish (cameo migrations) and retry")
            m = Migration(self._next_id(), name, step, MigrationKind.SCALE, "checkpoint",
                          self.registry.placements[name], [], {}, [], before, parallelism)
            self.migrating[name] = m.id
        try:
            error = self.recovery.rescale(name, step, parallelism, timeout_s)
        finally:
            with self.lock:
                self.migrating.pop(name, None)
        with self.lock:
            m.placement = self.registry.placements.get(name, m.placement)
            m.finish(error)
            self.migrations[m.id] = m
        if error and wait:
            raise ReconfigFailed(f"migration {m.id} (scale of {name}/{step}) failed: {error}",
                                 dict(m.info()))
        return m.info()

    @serves(ControlAPI.migrate)
    def migrate(self, name: str, step: str, *, bins: Sequence[int] | None = None,
                to_instance: int | None = None, instance: int | None = None,
                to_executor: int | None = None, strategy: str = "batched",
                batch_bins: int | None = None, wait: bool = False,
                timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        """Move bins of a keyed step to one of its instances, or one instance (all its bins)
        to another executor."""
        with self.lock:
            info, placement, where = self._keyed(name, step, strategy, batch_bins)
            table = placement.tables[step]
            instances = [a.instance for a in placement.of_step(step)]
            if bins is not None and to_instance is not None and instance is None:
                if to_instance not in instances:
                    raise ReconfigError(where, f"to_instance one of the step's instances {instances}",
                                        to_instance, "name an instance the step has (cameo status)")
                moved = sorted(set(bins)) if isinstance(bins, (list, tuple)) else None
                if not moved or any(type(b) is not int or not 0 <= b < placement.bins for b in moved):
                    raise ReconfigError(where, f"bins: a non-empty list of bin numbers from 0 to "
                                        f"{placement.bins - 1}", bins, "list the bins to move")
                owners = list(table.owners)
                for b in moved:
                    owners[b] = to_instance
                m = plan(self._next_id(), MigrationKind.MIGRATE, placement, name, step, owners,
                         {}, [], strategy, batch_bins)
            elif instance is not None and to_executor is not None and bins is None:
                if instance not in instances:
                    raise ReconfigError(where, f"instance one of the step's instances {instances}",
                                        instance, "name an instance the step has (cameo status)")
                self.pool.check_executor(to_executor, f"{where}: to_executor")
                aid = next(a for a in placement.of_step(step) if a.instance == instance)
                if placement.instances[aid] == to_executor:
                    raise ReconfigError(where, f"an executor other than {to_executor}, where "
                                        f"instance {instance} runs", to_executor,
                                        "name another executor")
                new = next_instance(placement, step)
                owners = [new if o == instance else o for o in table.owners]
                m = plan(self._next_id(), MigrationKind.MOVE_INSTANCE, placement, name, step,
                         owners, {new: to_executor}, [instance], strategy, batch_bins)
            else:
                raise ReconfigError(where, "either bins with to_instance, or instance with "
                                    "to_executor", {"bins": bins, "to_instance": to_instance,
                                                    "instance": instance, "to_executor": to_executor},
                                    "give bins and to_instance to move bins, or instance and "
                                    "to_executor to move an instance")
            started = self._start(info, m)
        return self._ended(started, timeout_s) if wait else started

    @serves(ControlAPI.lease)
    def lease(self, name: str, step: str, lessees: int, *, wait: bool = False,
              timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        """Give keyed window `step` `lessees` lessee instances (Dirigo): new ones go to the
        least loaded executors without an instance of the step; fewer: the newest end
        their streams (their last partials merged) and go."""
        with self.lock:
            info, placement, where = self._keyed(name, step, "batched", None, lessees=True)
            spec = DataflowSpec.from_dict(info["spec"])
            why = can_lease(spec.step(step))
            if why is not None:
                raise ReconfigError(where, "a tumbling or sliding window", spec.step(step).OP, why)
            if type(lessees) is not int or not 0 <= lessees <= MAX_LESSEES:
                raise ReconfigError(where, f"a count of lessees from 0 to {MAX_LESSEES}", lessees,
                                    "ask for fewer lessees (0 gives them all back)")
            current = placement.lessees_of(step)
            new: dict[int, int] = {}
            if lessees > len(current):
                taken = {placement.instances[a] for a in placement.of_step(step) + current}
                load = dict(self.pool.load)
                nxt = next_instance(placement, step)
                for k in range(lessees - len(current)):
                    ex = min(self.pool.usable(), key=lambda x: (x in taken, load.get(x, 0), x))
                    new[nxt + k] = ex
                    load[ex] = load.get(ex, 0) + 1
                    taken.add(ex)
                added = {ActivationId(name, step, i): ex for i, ex in new.items()}
                placement = replace(placement, instances={**placement.instances, **added},
                                    lessees=placement.lessees | set(added))
            retire = [a.instance for a in current[lessees:]]
            m = Migration(self._next_id(), name, step, MigrationKind.LEASE, "all_at_once",
                          placement, [], new, retire, len(current), lessees)
            return self._start(info, m)

    def _keyed(self, name: str, step: str, strategy: str, batch_bins: int | None,
               lessees: bool = False) -> tuple[DataflowInfo, Placement, str]:
        """The checks every operation on a keyed step makes before it changes anything."""
        info = self.registry.live(name)
        spec = DataflowSpec.from_dict(info["spec"])
        ids = [s.id for s in spec.steps]
        if step not in ids:
            raise ReconfigError(f"dataflow {name!r}", f"one of its steps {ids}", step,
                                "name a window, join or process step of the dataflow")
        where = f"dataflow {name!r}, step {step!r}"
        if not is_keyed_step(spec, spec.step(step)):
            raise ReconfigError(where, "a window or join on a keyed stream, or a process (only "
                                "those keep state by key, which can be split and moved)",
                                f"a {spec.step(step).OP} step on an unkeyed stream"
                                if spec.step(step).OP in ("window", "join")
                                else f"a {spec.step(step).OP} step",
                                "add key_by before the window to make it scalable, or scale "
                                "a keyed window or join")
        check_strategy(where, strategy)
        if batch_bins is not None and (type(batch_bins) is not int or batch_bins < 1):
            raise ReconfigError(where, "batch_bins an integer >= 1, or none", batch_bins,
                                "give the bins per epoch of a batched migration")
        running = self.migrating.get(name)
        if running is not None:
            raise ReconfigConflict(where, "no other migration of the dataflow under way",
                                   f"migration {running} is running",
                                   "wait for it to finish (cameo migrations) and retry")
        lent = self.registry.placements[name].lessees_of(step)
        if lent and not lessees:  # a lessee's partials are no key's whole state: none moves
            raise ReconfigConflict(where, "a step without lessees", [str(a) for a in lent],
                                   "give them back first (lease the step 0 lessees), then retry")
        return info, self.registry.placements[name], where

    # -- carrying one out ------------------------------------------------------------------
    def _next_id(self) -> str:
        self.registry.migration_seq += 1
        return f"m{self.registry.migration_seq}"

    def _start(self, info: DataflowInfo, m: Migration) -> MigrationInfo:
        """Register `m` and carry it out in its own thread."""
        self.migrations[m.id] = m
        for old in [k for k, v in self.migrations.items()
                    if v.state is not MigrationState.RUNNING][:-MIGRATIONS_KEPT]:
            del self.migrations[old]
        if not m.epochs and not m.new and not m.retire:
            m.finish()
            return m.info()
        self.migrating[m.dataflow] = m.id
        self.checkpoints.pause(m.dataflow)
        self.spawn(f"cameo-{m.id}", self._run, info, m)
        return m.info()

    def _run(self, info: DataflowInfo, m: Migration) -> None:
        try:
            # A checkpoint's cut and a routing switch do not mix: the one under way first.
            self.checkpoints.await_idle(m.dataflow)
            self.runner.carry_out(info, m)
            error = None
        except Exception as e:  # reported with the migration; the dataflow goes on
            logger.exception("migration %s of %s failed", m.id, m.dataflow)
            error = short_cause(e)
        with self.lock:
            self.migrating.pop(m.dataflow, None)
        self.checkpoints.resume(m.dataflow)  # the new placement's first checkpoint: at once
        self.registry.save()
        m.finish(error)  # last: a client that waited for it may start the next one

    @serves(ControlAPI.wait_migration)
    def wait_migration(self, migration_id: str,
                       timeout_s: float = WAIT_TIMEOUT_S) -> MigrationInfo:
        if migration_id not in self.migrations:
            raise ReconfigError("migration", f"one of {list(self.migrations)[-10:]}",
                                migration_id, "name a migration listed by migrations()")
        self.migrations[migration_id].over.wait(timeout_s)
        return self.migrations[migration_id].info()

    def _ended(self, started: MigrationInfo, timeout_s: float) -> MigrationInfo:
        """A started migration's record once it ended; raises if it failed or still runs."""
        info = self.wait_migration(started["id"], timeout_s)
        what = f"migration {info['id']} ({info['kind']} of {info['dataflow']}/{info['step']})"
        if info["state"] == "running":
            raise TimeoutError(f"{what} still under way after {timeout_s:g} s: "
                               f"{info['epochs_done']}/{info['epochs_total']} epochs done; "
                               "watch it with migrations()")
        if info["state"] != "done":
            raise ReconfigFailed(f"{what} failed: {info['error']}; the dataflow goes on",
                                 dict(info))
        return info

    @serves(ControlAPI.migrations)
    def list_migrations(self, name: str | None = None) -> list[MigrationInfo]:
        return [m.info() for m in list(self.migrations.values())
                if name is None or m.dataflow == name]

    # -- the pool ------------------------------------------------------------------------
    @serves(ControlAPI.rebalance)
    def rebalance(self, *, strategy: str = "batched", wait: bool = False,
                  timeout_s: float = WAIT_TIMEOUT_S) -> list[MigrationInfo]:
        """Move keyed instances from the busiest executors to the least busy ones (busy time
        measured over `REBALANCE_WINDOW_S`), at most one instance per dataflow and executor
        pair."""
        started = self._rebalance(strategy, REBALANCE_WINDOW_S)
        return [self._ended(m, timeout_s) for m in started] if wait else started

    def _rebalance(self, strategy: str, window_s: float) -> list[MigrationInfo]:
        check_strategy("pool", strategy)
        usable, gateway = self.pool.usable(), self.pool.gateway
        first = gateway.call_each(usable, ExecutorAPI.executor_stats)
        time.sleep(window_s)  # the measurement's window
        second = gateway.call_each(usable, ExecutorAPI.executor_stats)
        busy = {i: (b["busy_ms"] - a["busy_ms"]) / (window_s * 1000.0)
                for i, a, b in zip(usable, first, second, strict=True) if a and b}
        started: list[MigrationInfo] = []
        with self.lock:
            for _ in range(len(busy)):
                hot = max(busy, key=lambda i: busy[i])
                cold = min(busy, key=lambda i: busy[i])
                if busy[hot] - busy[cold] < 0.2:
                    break
                movable = [(n, a) for n, p in self.registry.placements.items()
                           if n not in self.migrating
                           and self.registry.dataflows[n]["state"] in LIVE_STATES
                           for a in p.on(hot) if a.step in p.tables]
                if not movable:
                    break
                name, aid = movable[0]
                share = busy[hot] / max(1, self.pool.load.get(hot, 1))
                started.append(self.migrate(name, aid.step, instance=aid.instance,
                                            to_executor=cold, strategy=strategy))
                busy[hot] -= share
                busy[cold] += share
        return started

    @serves(ControlAPI.add_executors)
    def add_executors(self, n: int = 1) -> list[int]:
        """Add `n` executors to the pool (on a multi-node cluster, the autoscaler is asked
        for the CPUs first); new dataflows and moved instances may go there."""
        if type(n) is not int or not 1 <= n <= MAX_ADD_EXECUTORS:
            raise ReconfigError("pool", f"a count of executors from 1 to {MAX_ADD_EXECUTORS}", n,
                                "add fewer executors per call")
        gateway = self.pool.gateway
        with self._adding:  # one at a time: new executors are named by their index
            start = self.pool.size()
            new = list(range(start, start + n))
            gateway.request_cpus(self.config.executor_cpus * (len(self.pool.usable()) + n))
            gateway.start(new)
            # Started before they join the pool (the registry is not held meanwhile): one
            # that cannot start (no room on the cluster) must never be given work.
            wait_s = self.config.recovery_timeout_s
            ready = gateway.started(new, wait_s)
            if ready < n:
                gateway.abandon(new)
                raise ReconfigError("pool", f"{n} new executors started within {wait_s:g} s",
                                    f"{ready} started", "the cluster has no room for "
                                    f"{n} x {self.config.executor_cpus:g} CPUs: add nodes (or let "
                                    "Ray's autoscaler add them), or ask for fewer; the pool is "
                                    "as it was")
            unseen = gateway.storage_unseen(new)
            if unseen:  # a node whose disk is its own: its executors could restore nothing
                gateway.abandon(new)
                raise ReconfigError("pool", "new executors that reach the pool's storage",
                                    f"folders that are their node's own ({unseen})",
                                    f"{SHARED_STORAGE_FIX}; the pool is as it was")
            with self.lock:
                self.pool.link()
        self.registry.save()
        return new

    @serves(ControlAPI.remove_executor)
    def remove_executor(self, index: int, *, strategy: str = "batched", wait: bool = False,
                        timeout_s: float = WAIT_TIMEOUT_S) -> ExecutorRemoval:
        """Move every keyed instance off executor `index`, then stop it. Refused (nothing
        changes) when it hosts what cannot move yet (sources, sinks, stateless steps)."""
        started = self._remove(index, strategy)
        if not wait:
            return started
        ended = self.wait_removed(index, timeout_s)
        if ended["state"] == "draining":
            raise TimeoutError(f"executor {index} still draining after {timeout_s:g} s; "
                               "watch migrations()")
        if ended["state"] == "kept":
            raise ReconfigFailed(f"executor {index} was not removed: {ended['error']}; it "
                                 "stays in the pool", dict(ended))
        return cast(ExecutorRemoval, {**started, **ended})

    def _remove(self, index: int, strategy: str) -> ExecutorRemoval:
        with self.lock:
            self.pool.check_executor(index, "pool: executor")
            if not [i for i in self.pool.usable() if i != index]:
                raise ReconfigConflict(f"executor {index}", "another executor to move its work to",
                                       "the last executor of the pool",
                                       "add an executor first (cameo pool add)")
            kept = self.registry.kept()
            fixed = sorted(str(a) for p in kept.values() for a in p.on(index)
                           if a.step not in p.tables)
            if fixed:
                raise ReconfigError(f"executor {index}", "only instances of keyed steps (windows, "
                                    "joins on keyed streams), which can move", fixed[:10],
                                    "cancel those dataflows first, or keep the executor")
            busy = sorted({n for n, p in self.registry.placements.items() if p.on(index)}
                          & set(self.migrating))
            if busy:
                raise ReconfigConflict(f"executor {index}", "no migration under way of the "
                                       "dataflows it hosts", busy, "wait for them and retry")
            self.pool.draining.add(index)
            self.pool.kept.pop(index, None)
            moving = [(n, a) for n, p in self.registry.placements.items() for a in p.on(index)]
        self.spawn(f"cameo-drain-{index}", self._drain, index, moving, strategy)
        return {"executor": index, "state": "draining", "moving": [str(a) for _, a in moving]}

    def _drain(self, index: int, moving: list[tuple[str, Any]], strategy: str) -> None:
        """Move each keyed instance off `index` (one after the other), then stop it."""
        try:
            for name, aid in moving:
                others = [i for i in self.pool.usable() if i != index]
                target = min(others, key=lambda i: (self.pool.load.get(i, 0), i))
                started = self.migrate(name, aid.step, instance=aid.instance,
                                       to_executor=target, strategy=strategy)
                m = self.migrations[started["id"]]
                m.over.wait(10 * self.config.epoch_timeout_s)
                if m.state is not MigrationState.DONE:
                    raise CameoError(f"moving {aid} failed: {m.error}")
        except Exception as e:  # the executor stays: something could not move
            logger.exception("removing executor %d failed", index)
            with self._removed:
                self.pool.kept[index] = short_cause(e)
                self.pool.draining.discard(index)
                self._removed.notify_all()
            return
        self.pool.gateway.call_each([index], ExecutorAPI.stop)
        self.pool.gateway.kill(index)
        with self._removed:
            self.pool.dead[index] = f"executor {index} removed by a client"
            self.pool.draining.discard(index)
            self._removed.notify_all()

    def wait_removed(self, index: int, timeout_s: float = WAIT_TIMEOUT_S) -> ExecutorRemoval:
        """Block until the removal of executor `index` ended (or `timeout_s` passed):
        {"executor", "state": "removed" | "draining" | "kept", "error"}."""
        pool = self.pool
        with self._removed:
            self._removed.wait_for(lambda: index not in pool.draining, timeout_s)
            state = "removed" if index in pool.dead else "draining" if index in pool.draining \
                else "kept"
            return {"executor": index, "state": state, "error": pool.kept.get(index)}

    def only_keyed_on(self, index: int) -> bool:
        """Whether executor `index` hosts nothing that cannot move (sources, sinks,
        stateless steps, lessees): it can be given back."""
        return not any(a.step not in p.tables or a in p.lessees
                       for p in self.registry.kept().values() for a in p.on(index))


def check_strategy(where: str, strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ReconfigError(where, f"a strategy in {list(STRATEGIES)}", strategy,
                            "choose one of them")
