"""Placement of operator instances on executors, and routing of events to them.

Keys hash into a fixed number of key groups; each instance of a keyed step
owns a contiguous range of groups, so scaling or migration later moves groups,
not keys. (Routing tables, versioned and switched at an epoch, will replace
`instance_of_group` here; `Activation.split` is their only caller.) The hash must be the same in every process (Python's own `hash` of
str is salted per process), so it is crc32 of a canonical encoding.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from cameo_actors.dataflow.spec import DataflowSpec
from cameo_actors.operators.base import Event
from cameo_actors.runtime.boundary import ActivationId

KEY_GROUPS = 128


def stable_hash(key: Any) -> int:
    if isinstance(key, str):
        return zlib.crc32(key.encode())
    return zlib.crc32(msgpack.packb(key, use_bin_type=True))


def key_group(key: Any) -> int:
    return stable_hash(key) % KEY_GROUPS


def instance_of_group(group: int, parallelism: int) -> int:
    """Instance i of p owns groups [i*G/p, (i+1)*G/p)."""
    return group * parallelism // KEY_GROUPS


def split_by_key(events: list[Event], key_fn: Callable[[Event], Any], parallelism: int
                 ) -> dict[int, list[Event]]:
    """Events -> {instance: events}, keeping order within each instance."""
    parts: dict[int, list[Event]] = {}
    for e in events:
        i = instance_of_group(key_group(key_fn(e)), parallelism)
        part = parts.get(i)
        if part is None:
            parts[i] = [e]
        else:
            part.append(e)
    return parts


@dataclass(frozen=True)
class Placement:
    """Which executor hosts each operator instance of one dataflow."""

    instances: dict[ActivationId, int]

    @property
    def hosts(self) -> dict[str, int]:
        """Activation id (text) -> executor index: what routing and clients look up."""
        return {str(a): ex for a, ex in self.instances.items()}

    def executors(self) -> set[int]:
        return set(self.instances.values())

    def on(self, executor: int) -> list[ActivationId]:
        """The instances placed on `executor`."""
        return [a for a, ex in self.instances.items() if ex == executor]


def place(spec: DataflowSpec, executors: Sequence[int], load: dict[int, int]) -> Placement:
    """Place one dataflow's instances on the given executors.

    Instance i of every step goes to the same executor (a chain of one
    instance each stays on one executor, so its hops are local enqueues);
    successive instances go to successive executors, starting at the least
    loaded one. `load` (instances per executor) is updated.
    """
    if not executors:
        raise ValueError("place: no executors to place on")
    order = sorted(executors, key=lambda x: (load.get(x, 0), x))
    instances: dict[ActivationId, int] = {}
    for step in spec.steps:
        for aid in ActivationId.of_step(spec.name, step.id, step.parallelism):
            ex = order[aid.instance % len(order)]
            instances[aid] = ex
            load[ex] = load.get(ex, 0) + 1
    return Placement(instances)
