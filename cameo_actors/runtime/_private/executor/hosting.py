"""Hosting: the activations an executor runs, and where every activation of the
dataflows it takes part in runs (for routing its outputs).

Deploying builds every operator first (a bad function path fails there) and
only then changes state, so a refused deploy leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.state_store import IN_MEMORY, StateBackend
from cameo_actors.operators.stateless import DEFAULT_MAX_STRING_CHARS
from cameo_actors.runtime._private.executor.activation import Activation
from cameo_actors.runtime._private.placement import Placement


@dataclass
class HostedDataflow:
    """What an executor keeps of one dataflow it hosts part of."""

    spec: DataflowSpec
    ids: list[str]  # the activations hosted here
    placed: list[str]  # every activation of the dataflow, here or elsewhere
    #: Spark input batches handed over: "<source>@<query id>" -> the last batch id whose
    #: events were all enqueued at the source before this mark (for checkpoint alignment).
    input_batches: dict[str, int] = field(default_factory=dict)
    #: names this deployment (a redeploy under the same name gets another): the folder
    #: of its checkpoints and ingress logs
    deployment: str = ""


class Hosting:
    def __init__(self, index: int, resolver: FunctionResolver, *,
                 max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
                 backend: StateBackend = IN_MEMORY) -> None:
        self.index = index
        self.resolver = resolver
        self.max_string_chars = max_string_chars  # the pool's, for every source built here
        self.backend = backend  # the pool's, where keyed state is kept
        self.activations: dict[str, Activation] = {}
        #: activation id -> executor index, for every activation of the dataflows hosted here
        self.hosts: dict[str, int] = {}
        self.dataflows: dict[str, HostedDataflow] = {}

    def build(self, spec: DataflowSpec, placement: Placement,
              only: set[str] | None = None) -> list[Activation]:
        """The activations `placement` puts here (those in `only`, if given), built but
        not yet hosted."""
        if only is None and spec.name in self.dataflows:
            raise ValueError(f"dataflow {spec.name!r} is already deployed on executor {self.index}")
        return [Activation(spec, aid, placement, self.resolver,
                           max_string_chars=self.max_string_chars, backend=self.backend)
                for aid in placement.on(self.index) if only is None or str(aid) in only]

    def add(self, spec: DataflowSpec, placement: Placement, built: list[Activation]) -> None:
        """Host `built`; `placement` says where every activation of the dataflow runs."""
        hosts = placement.hosts
        self.hosts.update(hosts)
        hosted = self.dataflows.get(spec.name)
        if hosted is None:
            self.dataflows[spec.name] = HostedDataflow(spec, [a.id for a in built], list(hosts))
        else:  # new instances of a running dataflow
            hosted.ids.extend(a.id for a in built)
            hosted.placed = list(dict.fromkeys([*hosted.placed, *hosts]))
        for act in built:
            self.activations[act.id] = act

    def forget(self, dataflow: str, ids: list[str]) -> list[str]:
        """Retired instances: no longer hosted or routed to. Returns those that were hosted here."""
        hosted = self.dataflows.get(dataflow)
        if hosted is None:
            return []
        gone = set(ids)
        here = [a for a in hosted.ids if a in gone]
        hosted.ids = [a for a in hosted.ids if a not in gone]
        hosted.placed = [a for a in hosted.placed if a not in gone]
        for aid in ids:
            self.activations.pop(aid, None)
            self.hosts.pop(aid, None)
        return here

    def remove(self, dataflow: str) -> HostedDataflow | None:
        hosted = self.dataflows.pop(dataflow, None)
        if hosted is not None:
            for aid in hosted.ids:
                del self.activations[aid]
            for aid in hosted.placed:
                self.hosts.pop(aid, None)
        return hosted

    def ids(self, dataflow: str) -> list[str]:
        return self.dataflows[dataflow].ids

    def mark_input_batch(self, dataflow: str, key: str, batch_id: int) -> None:
        """Record that every event of input batch `batch_id` (key "<source>@<query>") was
        enqueued here: runs on the worker thread after the ingests handed over before it."""
        batches = self.dataflows[dataflow].input_batches
        batches[key] = max(batch_id, batches.get(key, batch_id))
        # The write tasks of batches up to this one will not run again: their client
        # names ("spark/<query>/<batch>/<partition>", see spark_ingest) can go.
        query = key.partition("@")[2]
        prefix = f"spark/{query}/"
        for aid in self.dataflows[dataflow].ids:
            positions = self.activations[aid].positions
            for client in [c for c in positions if c.startswith(prefix)]:
                batch = client[len(prefix):].partition("/")[0]
                if batch.isdigit() and int(batch) < batch_id:
                    del positions[client]

    def input_batches(self, dataflow: str) -> dict[str, int]:
        return dict(self.dataflows[dataflow].input_batches)
