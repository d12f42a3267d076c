"""Executor cores wired in-process, without Ray: a transport that reorders batches
(as Ray may), and a driver of live migrations that plays the controller."""

from __future__ import annotations

import random
from typing import Any

from cameo_actors.clock import FakeClock
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.runtime._private.core import ExecutorCore
from cameo_actors.runtime._private.rescale import Migration
from cameo_actors.runtime._private.routing import Placement, place
from cameo_actors.runtime.boundary import ActivationId
from cameo_actors.runtime.config import RuntimeConfig


class InProcessCluster:
    """Cores that call each other directly; batches in transit are delivered in a random order."""

    def __init__(self, n: int, config: RuntimeConfig, seed: int) -> None:
        self.clock = FakeClock(1_000_000.0)
        self.rng = random.Random(seed)
        self.in_transit: list[tuple[int, bytes]] = []
        self.cores = [ExecutorCore(i, config, self._send, self.clock) for i in range(n)]
        self.seq = [0] * n
        self.placements: dict[str, Placement] = {}

    def _send(self, host: int, blob: bytes) -> None:
        self.in_transit.append((host, blob))

    def deploy(self, spec: DataflowSpec, bins: int = 4096) -> dict[str, int]:
        placement = place(spec, list(range(len(self.cores))), {}, bins)
        for c in self.cores:
            c.deploy(spec, placement)
        self.placements[spec.name] = placement
        return placement.hosts

    def ingest(self, hosts: dict[str, int], target: str, items: list[Any]) -> None:
        h = hosts[target]
        self.cores[h].ingest("client", self.seq[h], target, items, self.clock.now_ms())
        self.seq[h] += 1

    def step(self) -> bool:
        """One slice on every core and one batch delivered; False if nothing happened."""
        self.clock.advance(0.1)
        ran = False
        for c in self.cores:
            ran |= c.run_slice()
            c.flush()
        if self.in_transit:
            host, blob = self.in_transit.pop(self.rng.randrange(len(self.in_transit)))
            self.cores[host].receive(blob)
            ran = True
        return ran

    def run(self) -> None:
        for _ in range(1_000_000):
            if not self.step():
                return
        raise AssertionError("the cluster did not go idle")

    def results(self, dataflow: str) -> list[dict[str, Any]]:
        out = []
        for c in self.cores:
            if dataflow in c.egress.dataflows:
                for aid in c.egress.dataflows[dataflow].results:
                    out += [e for e, _, _ in c.egress.read_results(dataflow, aid, 0, None)]
        return out

    # -- playing the controller's part in a migration ------------------------------------
    def start(self, spec: DataflowSpec, m: Migration) -> None:
        """Create the migration's new instances, then switch to its first epoch."""
        if m.new:
            new = [str(ActivationId(m.dataflow, m.step, i)) for i in m.new]
            for c in self.cores:
                c.add_instances(spec, m.placement, new)
        self._switch(m)

    def _switch(self, m: Migration) -> None:
        if m.epochs_done < len(m.epochs):
            table = m.next_table()
            moves = m.epochs[m.epochs_done]
            for c in self.cores:
                c.prepare(m.dataflow, m.step, table.version, moves)
            for c in self.cores:
                c.reroute(m.dataflow, m.step, table.version, list(table.owners), m.instances())

    def advance(self, m: Migration) -> bool:
        """If every instance finished the current epoch: the next one (or retire at the
        end). Returns whether the migration is over."""
        if m.state != "running":
            return True
        if m.epochs_done < len(m.epochs):
            version = m.table.version + 1
            done = [d["done"] for c in self.cores for d in c.epochs(m.dataflow, m.step).values()]
            if min(done) < version:
                return False
            m.epoch_done(m.next_table(), len(m.epochs[m.epochs_done]))
            if m.epochs_done < len(m.epochs):
                self._switch(m)
                return False
        gone = [str(ActivationId(m.dataflow, m.step, i)) for i in m.retire]
        for c in self.cores:
            c.retire(m.dataflow, gone)
            c.end_migration(m.dataflow, m.step)
        m.finish()
        self.placements[m.dataflow] = m.placement
        return True
