"""Where an activation's outputs go: one `Route` per downstream step's port, built from
the placement (`route_to`), and the choices made per message (Dirigo's `lease_to`; a
lessee's partials back to their owners). Pure: no Ray."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.base import Event, Operator
from cameo_actors.operators.bins import stable_hash
from cameo_actors.operators.build import key_function
from cameo_actors.runtime._private.placement import Placement, is_keyed_step
from cameo_actors.runtime.boundary import ActivationId

#: The most keys a route remembers the owner of (then it starts again).
MEMO_KEYS = 65_536


@dataclass
class Route:
    """Where one output of an activation goes: a downstream step's port and instances.

    A keyed step's route has its routing table as `owners` (bin -> target id);
    `sole` is the target when one instance owns every bin (no hashing then).
    Out of a keyed step, events go to `prefer` (the downstream instance of the
    same number, on the same executor), or round robin for an instance added
    by scaling; watermarks and markers always go to every target.
    """

    step: str
    port: int
    targets: tuple[str, ...]
    key_fn: Callable[[Event], Any] | None = None
    owners: list[str] | None = None
    sole: str | None = None
    prefer: str | None = None
    #: the keyed step's lessees (in `targets` too, for watermarks and barriers): a part
    #: whose owner is behind goes to the least loaded of them instead
    lessees: tuple[str, ...] = ()
    #: key -> its owner by `owners`, for str and int keys seen lately (`owner_of`)
    memo: dict[Any, str] = field(default_factory=dict)

    def set_table(self, owners: list[str]) -> None:
        self.owners = owners
        self.sole = owners[0] if len(set(owners)) == 1 else None
        self.memo.clear()

    def owner_of(self, key: Any, mask: int) -> str:
        """The instance that owns `key`. A str or int key's owner is remembered: a dict
        lookup instead of encoding and hashing it again for each of its events (other
        keys are hashed each time: 1, 1.0 and True are one dict key but hash apart)."""
        cls = key.__class__
        if cls is str or cls is int:
            owner = self.memo.get(key)
            if owner is None:
                assert self.owners is not None
                owner = self.owners[stable_hash(key) & mask]
                if len(self.memo) >= MEMO_KEYS:
                    self.memo.clear()
                self.memo[key] = owner
            return owner
        assert self.owners is not None
        return self.owners[stable_hash(key) & mask]


def route_to(spec: DataflowSpec, placement: Placement, aid: ActivationId, lessee: bool,
             consumer: Any, port: int) -> Route:
    """Where activation `aid` sends to `consumer`'s `port`: its own instance (forward),
    the instance of its own number (a keyed step's output to an unkeyed step), the
    owners of keys by the consumer's routing table (with its lessees), or round robin."""
    step = spec.step(aid.step)
    instances = placement.of_step(consumer.id)
    if is_forward(spec, step, consumer):
        return Route(consumer.id, port, (str(ActivationId(spec.name, consumer.id, aid.instance)),))
    targets = tuple(str(a) for a in instances)
    if is_keyed_step(spec, step) and consumer.id not in placement.tables:
        same = str(ActivationId(spec.name, consumer.id, aid.instance))
        return Route(consumer.id, port, targets, prefer=same if same in targets else None)
    if consumer.id in placement.tables:
        table = placement.tables[consumer.id]
        lessees = () if lessee else tuple(str(a) for a in placement.lessees_of(consumer.id))
        key_fn = None if lessee else key_function(spec, step.id)
        route = Route(consumer.id, port, targets + lessees, key_fn, lessees=lessees)
        route.set_table([str(ActivationId(spec.name, consumer.id, i)) for i in table.owners])
        return route
    return Route(consumer.id, port, targets)


def is_forward(spec: DataflowSpec, upstream: Any, consumer: Any) -> bool:
    """Instance i feeds only instance i: same parallelism, and neither step keyed (a
    keyed step's instances change with scaling). Such hops stay on one executor
    (placement puts instance i of every step together) and keep their order, as
    Flink's forward edges do."""
    return upstream.parallelism == consumer.parallelism and not is_keyed_step(spec, consumer) \
        and not is_keyed_step(spec, upstream)


def lease_to(owner: str, n: int, lessees: tuple[str, ...], waiting: Callable[[str], float]
             ) -> str:
    """Dirigo's per-message choice: the owner, unless a lessee can start these `n` events
    sooner: then that lessee. `waiting`: the events each has before them. The owner is
    kept unless it is behind by more than the part (no lending for nothing); a lessee's
    partials merge exactly, so only time is at stake."""
    best, least = owner, waiting(owner)
    for lessee in lessees:
        w = waiting(lessee) + n
        if w < least:
            best, least = lessee, w
    return best


def partials_by_owner(route: Route, bins: int, op: Operator) -> list[tuple[str, list[Any]]]:
    """A lessee's partial rows, taken out of its operator, by the owner of each row's key
    (its one route is to its step's instances, by the step's table)."""
    assert route.owners is not None
    mask, owners = bins - 1, route.owners
    by_owner: dict[str, list[Any]] = {}
    for row in op.take_partials():  # type: ignore[attr-defined]
        by_owner.setdefault(owners[stable_hash(op.key_of_row(row)) & mask], []).append(row)  # type: ignore[attr-defined]
    return list(by_owner.items())
