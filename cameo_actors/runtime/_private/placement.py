"""Placement of operator instances on executors, routing tables, and routing of events.

Keys hash into `bins` bins (a power of two, 4096 by default: a pool setting).
A *keyed step* (a window, join or process whose inputs are keyed) has a versioned
routing table bin -> instance, held by every upstream activation; a new
version takes effect at an epoch marker each upstream sends in-band on every
channel (`activation.py`, `migration.py`), so scaling and migration move bins,
not keys (the hash and the state kept by bin: `cameo_actors.operators.bins`).

Instances of a step are numbered; after scaling, the numbers of a step need
not be 0..p-1 (a moved instance is a new number on its new executor), so every
neighbour list comes from the `Placement`, not from the step's parallelism.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cameo_actors.dataflow.spec import DataflowSpec, JoinStep, ProcessStep, Step, WindowStep
from cameo_actors.dataflow.streams import stream_key
from cameo_actors.operators.bins import DEFAULT_BINS
from cameo_actors.runtime.boundary import ActivationId


def is_keyed_step(spec: DataflowSpec, step: Step) -> bool:
    """A window, join or process on keyed input: routed by table, scalable, its state
    movable (a process's input is always keyed)."""
    return isinstance(step, (WindowStep, JoinStep, ProcessStep)) and all(
        stream_key(spec, i) is not None for i in step.inputs)


def even_owners(instances: Sequence[int], bins: int) -> list[int]:
    """Contiguous, even ranges of bins: instance k of the sorted list owns
    [k*B/p, (k+1)*B/p)."""
    order = sorted(instances)
    p = len(order)
    return [order[b * p // bins] for b in range(bins)]


@dataclass(frozen=True)
class RoutingTable:
    """Version `version` of a keyed step's bin -> instance map."""

    version: int
    owners: tuple[int, ...]

    def moves_to(self, owners: Sequence[int]) -> dict[int, tuple[int, int]]:
        """bin -> (old owner, new owner) for every bin `owners` gives to another instance."""
        return {b: (old, new) for b, (old, new) in enumerate(zip(self.owners, owners, strict=True))
                if old != new}

    def bins_of(self, instance: int) -> list[int]:
        return [b for b, o in enumerate(self.owners) if o == instance]


@dataclass(frozen=True)
class Placement:
    """Which executor hosts each operator instance of one dataflow, and the routing
    tables of its keyed steps."""

    instances: dict[ActivationId, int]
    tables: dict[str, RoutingTable] = field(default_factory=dict)
    bins: int = DEFAULT_BINS
    #: instances retired by scaling: their numbers are never used again (a message of
    #: the old one still in flight must not count for a new one)
    retired: frozenset[ActivationId] = frozenset()
    #: lessee instances of keyed windows (Dirigo, `lease.py`): in `instances` (they are
    #: hosted), never owners of bins nor in `of_step`; each is an extra input channel of
    #: its step's instances, which merge its partial aggregates
    lessees: frozenset[ActivationId] = frozenset()

    @property
    def hosts(self) -> dict[str, int]:
        """Activation id (text) -> executor index: what routing and clients look up."""
        return {str(a): ex for a, ex in self.instances.items()}

    def executors(self) -> set[int]:
        return set(self.instances.values())

    def on(self, executor: int) -> list[ActivationId]:
        """The instances placed on `executor`."""
        return [a for a, ex in self.instances.items() if ex == executor]

    def of_step(self, step: str) -> list[ActivationId]:
        """The instances of `step` (its lessees left out), by instance number."""
        return sorted((a for a in self.instances if a.step == step and a not in self.lessees),
                      key=lambda a: a.instance)

    def lessees_of(self, step: str) -> list[ActivationId]:
        return sorted((a for a in self.lessees if a.step == step), key=lambda a: a.instance)

    def to_dict(self) -> dict[str, Any]:
        """A JSON form (a checkpoint's manifest and the controller's registry keep it)."""
        return {"instances": [[a.dataflow, a.step, a.instance, ex]
                              for a, ex in self.instances.items()],
                "tables": {s: [t.version, list(t.owners)] for s, t in self.tables.items()},
                "bins": self.bins,
                "retired": [[a.dataflow, a.step, a.instance] for a in sorted(
                    self.retired, key=str)],
                "lessees": [[a.dataflow, a.step, a.instance] for a in sorted(
                    self.lessees, key=str)]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Placement:
        return cls({ActivationId(df, st, i): ex for df, st, i, ex in d["instances"]},
                   {s: RoutingTable(v, tuple(o)) for s, (v, o) in d["tables"].items()},
                   d["bins"], frozenset(ActivationId(df, st, i) for df, st, i in d["retired"]),
                   frozenset(ActivationId(df, st, i) for df, st, i in d.get("lessees", [])))


def moved_off(placement: Placement, gone: Collection[int], executors: Sequence[int],
              load: dict[int, int]) -> Placement:
    """`placement` with the instances of each executor in `gone` moved together (their
    hops stay local) to the least loaded of `executors`; `load` is updated. Routing
    tables name instances, not executors: they stay."""
    if not executors:
        raise ValueError("moved_off: no executors to move to")
    to: dict[int, int] = {}
    for ex in sorted(set(gone) & placement.executors()):
        to[ex] = min(executors, key=lambda x: (load.get(x, 0), x))
        load[to[ex]] = load.get(to[ex], 0) + len(placement.on(ex))
    return replace(placement, instances={a: to.get(ex, ex) for a, ex in placement.instances.items()})


def place(spec: DataflowSpec, executors: Sequence[int], load: dict[int, int],
          bins: int = DEFAULT_BINS, urgency: Mapping[int, float] | None = None) -> Placement:
    """Place one dataflow's instances on the given executors.

    Instance i of every step goes to the same executor (a chain of one
    instance each stays on one executor, so its hops are local enqueues);
    successive instances go to successive executors, starting at the least
    loaded one. `load` (instances per executor) is updated. Keyed steps get
    even routing tables, version 0.

    With `urgency` (per executor, the sum of 1 / latency target over the dataflows
    it hosts), the start is the least urgent executor among those loaded less than this
    dataflow's first instances above the least loaded: tight targets apart, since a
    message waits behind whatever else its executor receives and runs (docs/runtime.md,
    "Placement"), while no executor gets two dataflows' instances more than another.
    """
    if not executors:
        raise ValueError("place: no executors to place on")
    order = sorted(executors, key=lambda x: (load.get(x, 0), x))
    if urgency is not None:
        lightest, size = load.get(order[0], 0), len(spec.steps)
        near = [x for x in order if load.get(x, 0) - lightest < size]
        first = min(near, key=lambda x: (urgency.get(x, 0.0), load.get(x, 0), x))
        order = [first, *(x for x in order if x != first)]
    instances: dict[ActivationId, int] = {}
    tables: dict[str, RoutingTable] = {}
    for step in spec.steps:
        for aid in ActivationId.of_step(spec.name, step.id, step.parallelism):
            ex = order[aid.instance % len(order)]
            instances[aid] = ex
            load[ex] = load.get(ex, 0) + 1
        if is_keyed_step(spec, step):
            tables[step.id] = RoutingTable(0, tuple(even_owners(range(step.parallelism), bins)))
    return Placement(instances, tables, bins)
