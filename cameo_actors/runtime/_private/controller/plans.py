"""Plans of live reconfiguration, pure: which bins move where, in which epochs.

An operation on a keyed step (scale it, move bins, move an instance) becomes a
`Migration`: the instances to create first, the routing versions to switch
through (each moving some bins: all at once, a batch, or one bin per epoch),
and the instances to retire at the end. The controller (or an in-process
test) carries it out, epoch by epoch, waiting for every instance of the step
to finish one before it starts the next (see `migration.py`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum

from cameo_actors.runtime._private.placement import Placement, RoutingTable
from cameo_actors.runtime.boundary import STRATEGIES, ActivationId, MigrationInfo

#: Epochs a batched migration aims for when no batch size is given.
BATCHED_EPOCHS = 8


def balanced_owners(owners: tuple[int, ...], instances: list[int]) -> list[int]:
    """A table over `instances` with even shares that moves as few bins as possible:
    an instance keeps its bins up to its share; the rest go to those below theirs."""
    bins, order = len(owners), sorted(instances)
    share = {i: bins // len(order) + (1 if k < bins % len(order) else 0) for k, i in enumerate(order)}
    kept: dict[int, int] = dict.fromkeys(order, 0)
    new = list(owners)
    loose: list[int] = []
    for b, o in enumerate(owners):
        if o in kept and kept[o] < share[o]:
            kept[o] += 1
        else:
            loose.append(b)
    for i in order:
        while kept[i] < share[i]:
            new[loose.pop()] = i
            kept[i] += 1
    return new


def epochs_of(moves: dict[int, tuple[int, int]], strategy: str, batch_bins: int | None
              ) -> list[dict[int, tuple[int, int]]]:
    """Moves cut into epochs: one (all_at_once), `batch_bins` bins each (batched), one bin each (fluid)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {list(STRATEGIES)}, got {strategy!r}")
    items = sorted(moves.items())
    if not items:
        return []
    if strategy == "all_at_once":
        size = len(items)
    elif strategy == "fluid":
        size = 1
    else:
        size = batch_bins or max(1, -(-len(items) // BATCHED_EPOCHS))
    return [dict(items[i:i + size]) for i in range(0, len(items), size)]


class MigrationKind(StrEnum):
    SCALE = "scale"
    MIGRATE = "migrate"  # bins to another instance
    MOVE_INSTANCE = "move_instance"  # an instance (all its bins) to another executor
    LEASE = "lease"  # lessees added or given back (Dirigo)


class MigrationState(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass
class Migration:
    """One reconfiguration of one keyed step of one dataflow, and its progress."""

    id: str
    dataflow: str
    step: str
    kind: MigrationKind
    strategy: str
    placement: Placement  # the placement as it will be once new instances exist
    epochs: list[dict[int, tuple[int, int]]]
    new: dict[int, int]  # instance number -> executor, created before the first epoch
    retire: list[int]  # instance numbers gone after the last epoch
    from_parallelism: int
    to_parallelism: int
    state: MigrationState = MigrationState.RUNNING
    epochs_done: int = 0
    bins_moved: int = 0
    bytes_moved: int = 0
    error: str | None = None
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    #: set once it is over (done or failed): what a client waiting for it waits on
    over: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    @property
    def table(self) -> RoutingTable:
        return self.placement.tables[self.step]

    def next_table(self) -> RoutingTable:
        """The table after the next epoch."""
        owners = list(self.table.owners)
        for b, (_, new) in self.epochs[self.epochs_done].items():
            owners[b] = new
        return RoutingTable(self.table.version + 1, tuple(owners))

    def instances(self) -> list[int]:
        """Instance numbers of the step while the migration runs (old and new)."""
        return sorted(a.instance for a in self.placement.of_step(self.step))

    def epoch_done(self, table: RoutingTable, moved: int) -> None:
        self.bins_moved += moved
        self.epochs_done += 1
        self.placement = replace(self.placement, tables={**self.placement.tables, self.step: table})

    def final_placement(self) -> Placement:
        gone = {ActivationId(self.dataflow, self.step, i) for i in self.retire}
        return replace(self.placement, instances={a: ex for a, ex in self.placement.instances.items()
                                                  if a not in gone},
                       retired=self.placement.retired | gone, lessees=self.placement.lessees - gone)

    def finish(self, error: str | None = None) -> None:
        self.state = MigrationState.FAILED if error else MigrationState.DONE
        self.error = error
        self.ended_at = time.time()
        if not error:
            self.placement = self.final_placement()
        self.over.set()

    def info(self) -> MigrationInfo:
        """What a client sees."""
        end = self.ended_at or time.time()
        return {"id": self.id, "dataflow": self.dataflow, "step": self.step, "kind": str(self.kind),
                "strategy": self.strategy, "state": str(self.state),
                "from_parallelism": self.from_parallelism, "to_parallelism": self.to_parallelism,
                "bins_total": sum(len(e) for e in self.epochs), "bins_moved": self.bins_moved,
                "epochs_total": len(self.epochs), "epochs_done": self.epochs_done,
                "bytes_moved": self.bytes_moved, "started_at": self.started_at,
                "ended_at": self.ended_at, "duration_s": round(end - self.started_at, 3),
                "error": self.error}


def plan(mid: str, kind: MigrationKind, placement: Placement, dataflow: str, step: str, owners: list[int],
         new: dict[int, int], retire: list[int], strategy: str, batch_bins: int | None) -> Migration:
    """A migration of `step` from its current table to `owners`, creating `new` first."""
    table = placement.tables[step]
    instances = dict(placement.instances)
    for i, ex in new.items():
        instances[ActivationId(dataflow, step, i)] = ex
    before = len(placement.of_step(step))
    return Migration(mid, dataflow, step, kind, strategy, replace(placement, instances=instances),
                     epochs_of(table.moves_to(owners), strategy, batch_bins), new, retire,
                     before, before + len(new) - len(retire))


def next_instance(placement: Placement, step: str) -> int:
    """A number no instance of `step` ever had."""
    used = [a.instance for a in placement.of_step(step)]
    used += [a.instance for a in placement.retired | placement.lessees if a.step == step]
    return max(used, default=-1) + 1


def scale_plan(mid: str, placement: Placement, dataflow: str, step: str, parallelism: int,
               executors: list[int], load: dict[int, int], strategy: str,
               batch_bins: int | None) -> Migration:
    """Scale `step` to `parallelism` instances: new ones on the least loaded executors
    (those without an instance of the step first); fewer: the newest instances go."""
    current = [a.instance for a in placement.of_step(step)]
    table = placement.tables[step]
    new: dict[int, int] = {}
    retire: list[int] = []
    if parallelism > len(current):
        has = {placement.instances[a] for a in placement.of_step(step)}
        load = dict(load)
        nxt = next_instance(placement, step)
        for k in range(parallelism - len(current)):
            ex = min(executors, key=lambda x: (x in has, load.get(x, 0), x))
            new[nxt + k] = ex
            load[ex] = load.get(ex, 0) + 1
            has.add(ex)
        after = current + list(new)
    else:
        retire = sorted(current)[parallelism:]
        after = sorted(current)[:parallelism]
    return plan(mid, MigrationKind.SCALE, placement, dataflow, step, balanced_owners(table.owners, after),
                new, retire, strategy, batch_bins)
