"""Executor cores wired in-process, without Ray: a transport that reorders batches
(as Ray may), and the checkpoint parts they persist, which outlive them. The
controller's own managers drive them through `gateway.py`."""

from __future__ import annotations

import random
from typing import Any

from cameo_actors.clock import FakeClock
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.runtime._private.checkpoint.parts import Content
from cameo_actors.runtime._private.exchange.ingest import unpack_ingest
from cameo_actors.runtime._private.exchange.wire import pack_events
from cameo_actors.runtime._private.executor.core import ExecutorCore
from cameo_actors.runtime._private.placement import Placement, place
from cameo_actors.runtime.config import RuntimeConfig

#: A persisted part of a checkpoint: (blob, a source's positions at its barrier).
StoredPart = tuple[list[bytes], dict[str, int]]


class InProcessCluster:
    """Cores that call each other directly; batches in transit are delivered in a random order.

    The parts persisted (`parts`) outlive the cores: `crash` hands them to a fresh
    cluster, as the ingress logs on disk (under `config.ingress_log_dir`) do.
    """

    def __init__(self, n: int, config: RuntimeConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.clock = FakeClock(1_000_000.0)
        self.rng = random.Random(seed)
        self.in_transit: list[tuple[int, bytes]] = []
        self.cores = [ExecutorCore(i, config, self._send, self.clock, persist=self._persist)
                      for i in range(n)]
        #: the clients' next ingest call per source activation (a client numbers its
        #: calls to each source on its own)
        self.seq: dict[tuple[str, str], int] = {}
        self.specs: dict[str, DataflowSpec] = {}
        self.placements: dict[str, Placement] = {}
        self.deployments: dict[str, str] = {}
        #: checkpoint storage: (dataflow, ckpt) -> activation -> its part
        self.parts: dict[tuple[str, int], dict[str, StoredPart]] = {}
        #: every persist call, in order: (dataflow, ckpt, activation)
        self.persisted: list[tuple[str, int, str]] = []
        self.restarts = 0  # cores restarted (`restart_core`)

    def _send(self, host: int, blob: bytes) -> None:
        self.in_transit.append((host, blob))

    def deploy(self, spec: DataflowSpec, bins: int = 4096, deployment: str = "",
               placement: Placement | None = None) -> dict[str, int]:
        placement = placement or place(spec, list(range(len(self.cores))), {}, bins)
        for c in self.cores:
            c.deploy(spec, placement, deployment)
        self._placed(spec, placement, deployment)
        return placement.hosts

    def _placed(self, spec: DataflowSpec, placement: Placement, deployment: str) -> None:
        self.specs[spec.name] = spec
        self.placements[spec.name] = placement
        self.deployments[spec.name] = deployment

    def ingest(self, hosts: dict[str, int], target: str, items: list[Any],
               client: str = "client") -> int:
        """The client's next call to source `target`; returns its sequence number."""
        key = (client, target)
        seq = self.seq.get(key, 0)
        self.seq[key] = seq + 1
        self.call(hosts[target], client, seq, target, items)
        return seq

    def call(self, host: int, client: str, seq: int, target: str, items: list[Any]) -> None:
        """One ingest call as the executor takes it: packed as a client packs it, written
        to the source's ingress log (if it has one) before the core gets it."""
        core = self.cores[host]
        act = core.hosting.activations.get(target)
        if act is None:
            return
        blob = pack_events(items)
        log = core.ingress_logs.get(target)
        if log is not None:
            log.append(client, seq, blob)
        core.ingress.ingest(client, seq, target, unpack_ingest(blob, act.step.id), self.clock.now_ms())

    def step(self) -> bool:
        """One slice on every core and one batch delivered; False if nothing happened."""
        self.clock.advance(0.1)
        ran = False
        for c in self.cores:
            worked = c.run_slice()
            worked |= c.idle_sources()
            c.flush_after_slice(worked)  # as the worker thread does: a busy one lingers
            ran |= worked
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

    def read(self, dataflow: str, offsets: dict[str, int], commit: bool = True
             ) -> list[dict[str, Any]]:
        """A reader's next results: each sink's log from `offsets` (updated) to its
        readable end; committed after, if `commit` (the reader persisted them)."""
        out = []
        for c in self.cores:
            outputs = c.egress.dataflows.get(dataflow)
            for aid in outputs.results if outputs is not None else ():
                rows = c.egress.read_results(dataflow, aid, offsets.get(aid, 0), None)
                offsets[aid] = offsets.get(aid, 0) + len(rows)
                out += [e for e, _, _ in rows]
                if commit:
                    c.egress.commit_results(dataflow, aid, offsets[aid])
        return out

    # -- playing the controller's part in checkpoints ------------------------------------
    def _persist(self, dataflow: str, ckpt: int, aid: str, content: Content,
                 positions: dict[str, int], bases: list[str]) -> None:
        self.persisted.append((dataflow, ckpt, aid))
        self.parts.setdefault((dataflow, ckpt), {})[aid] = (content.frames(), dict(positions))

    def checkpoint(self, dataflow: str, ckpt: int) -> int:
        """Start checkpoint `ckpt`: a barrier at every source; returns how many."""
        return sum(c.checkpointing.checkpoint(dataflow, ckpt) for c in self.cores)

    def sources(self, dataflow: str) -> list[str]:
        spec, placement = self.specs[dataflow], self.placements[dataflow]
        return [str(a) for s in spec.sources for a in placement.of_step(s.id)]

    def crash(self, seed: int | None = None) -> InProcessCluster:
        """Every process dies: what was in memory and in transit is lost; the ingress
        logs (closed: their files stay) and the checkpoint storage survive, and so do the
        clients with their call numbers. Returns a fresh cluster with the same config."""
        for c in self.cores:
            for log in c.ingress_logs.values():
                log.close()
        fresh = type(self)(len(self.cores), self.config, self.seed + 1 if seed is None else seed)
        fresh.clock.set(self.clock.now_ms())
        fresh.seq = self.seq
        fresh.parts, fresh.persisted = self.parts, self.persisted
        return fresh

    def restart_core(self, i: int) -> None:
        """Core `i` alone dies and comes back empty as a new incarnation (its ingress logs
        closed, their files kept); the others relink to it, so batches from or for the
        old one are dropped. The others keep what they hold: the survivors."""
        for log in self.cores[i].ingress_logs.values():
            log.close()
        core = ExecutorCore(i, self.config, self._send, self.clock, persist=self._persist)
        self.restarts += 1
        core.channels.incarnation = f"restart-{self.restarts}"
        core.channels.peers = {c.index: c.channels.incarnation for c in self.cores
                               if c.index != i}
        self.cores[i] = core
        for c in self.cores:
            if c.index != i:
                c.channels.relink(i, core.channels.incarnation)
