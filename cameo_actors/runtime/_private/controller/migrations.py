"""Carrying out one reconfiguration of a keyed step, epoch by epoch (the executors'
side is `migration.py`): new instances created, routing switched version after
version (each version's bins move in-band while the dataflow runs), old instances
retired; or lessees added or ended (Dirigo)."""

from __future__ import annotations

import time

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.errors import CameoError
from cameo_actors.runtime._private.controller.plans import Migration, MigrationKind
from cameo_actors.runtime._private.controller.pool import Pool
from cameo_actors.runtime._private.controller.registry import Registry
from cameo_actors.runtime._private.executor_api import ExecutorAPI, Placed
from cameo_actors.runtime.boundary import LIVE_STATES, DataflowInfo
from cameo_actors.runtime.config import RuntimeConfig

#: How long one call waits on an executor for an epoch to be done (then it asks again,
#: so that a cancelled dataflow or a timeout is noticed).
EPOCH_WAIT_S = 1.0


class MigrationRunner:
    def __init__(self, config: RuntimeConfig, pool: Pool, registry: Registry) -> None:
        self.config, self.pool, self.registry = config, pool, registry
        self.gateway = pool.gateway

    def carry_out(self, info: DataflowInfo, m: Migration) -> None:
        """Do `m` to the end (raises what stopped it); the registry then has its placement."""
        if m.kind is MigrationKind.LEASE:
            self._lease(info, m)
        else:
            self._switch(info, m)
        with self.pool.lock:
            self.registry.placed(info, m.final_placement())
            if m.kind is not MigrationKind.LEASE:
                self.registry.rescaled(info, m.step, m.to_parallelism)

    def _hosts(self, m: Migration) -> list[int]:
        return sorted(set(m.placement.executors()) - set(self.pool.dead))

    def _lease(self, info: DataflowInfo, m: Migration) -> None:
        """Add lessees (hosted, then lent to), or end some: each upstream ends its stream
        to them in-band, each sends its last partials and ends, then they go."""
        name, step, hosts = m.dataflow, m.step, self._hosts(m)
        if m.new:
            new = [f"{name}/{step}/{i}" for i in m.new]
            placed = Placed(info["spec"], m.placement, info["deployment"], info["recoveries"])
            self.gateway.call(hosts, ExecutorAPI.add_lessees, placed, step, new)
        if m.retire:
            gone = [f"{name}/{step}/{i}" for i in m.retire]
            self.gateway.call(hosts, ExecutorAPI.unlease, name, step, gone)
            deadline = time.monotonic() + self.config.epoch_timeout_s
            while not all(self.gateway.gather_each(self.gateway.send_all(
                    hosts, ExecutorAPI.lessees_ended, name, gone, EPOCH_WAIT_S),
                    timeout_s=EPOCH_WAIT_S + 10.0)):
                if time.monotonic() > deadline:
                    raise CameoError(f"lessees {gone} did not end within "
                                     f"{self.config.epoch_timeout_s:g} s")
            self.gateway.call(hosts, ExecutorAPI.drop_lessees, name, gone)

    def _switch(self, info: DataflowInfo, m: Migration) -> None:
        """Create the new instances, switch epoch after epoch, retire the old instances."""
        name, step, hosts = m.dataflow, m.step, self._hosts(m)
        spec = DataflowSpec.from_dict(info["spec"])
        if m.new:
            new = [f"{name}/{step}/{i}" for i in m.new]
            placed = Placed(info["spec"], m.placement, info["deployment"], info["recoveries"])
            self.gateway.call(hosts, ExecutorAPI.add_instances, placed, new)
            with self.pool.lock:
                self.registry.placed(info, m.placement)
        inputs = set(spec.step(step).inputs)
        base = self._bytes_sent(m)  # the counters are per instance, over its life
        while m.epochs_done < len(m.epochs):
            table = m.next_table()
            moves = m.epochs[m.epochs_done]
            on_step = sorted({ex for a, ex in m.placement.instances.items() if a.step == step})
            upstream = sorted({ex for a, ex in m.placement.instances.items() if a.step in inputs})
            self.gateway.call(on_step, ExecutorAPI.prepare, name, step, table.version, moves)
            self.gateway.call(upstream, ExecutorAPI.reroute, name, step, table.version,
                              list(table.owners), m.instances())
            m.bytes_moved = self._await_epoch(info, m, on_step, table.version) - base
            m.epoch_done(table, len(moves))
            with self.pool.lock:
                self.registry.switched(name, m.placement)
        if m.retire:
            self.gateway.call(hosts, ExecutorAPI.retire, name, [f"{name}/{step}/{i}" for i in m.retire])

    def _bytes_sent(self, m: Migration) -> int:
        on_step = sorted({ex for a, ex in m.placement.instances.items() if a.step == m.step})
        parts = self.gateway.call(on_step, ExecutorAPI.epochs, m.dataflow, m.step)
        return sum(d["bytes_sent"] for part in parts for d in part.values())

    def _await_epoch(self, info: DataflowInfo, m: Migration, executors: list[int],
                     version: int) -> int:
        """Wait until every instance of the step finished `version`; returns bytes moved."""
        deadline = time.time() + self.config.epoch_timeout_s
        while True:
            if info["state"] not in LIVE_STATES:
                raise CameoError(f"dataflow {m.dataflow!r} ended during the migration "
                                 f"({info['state']})")
            parts = self.gateway.call(executors, ExecutorAPI.await_epoch, m.dataflow, m.step, version,
                                      EPOCH_WAIT_S)
            done = [d for part in parts for d in part.values()]
            if done and all(d["done"] >= version for d in done):
                return sum(d["bytes_sent"] for d in done)
            if not done:  # its parts are being freed: the state says why next time
                time.sleep(0.01)
            if time.time() > deadline:
                raise CameoError(f"epoch {version} of migration {m.id} did not finish within "
                                 f"{self.config.epoch_timeout_s:g} s")
