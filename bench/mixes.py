"""Tenant mixes of `python -m bench.cameo`'s "mix" and "random" scenarios: latency-sensitive
tenants of three shapes beside bulk tenants, each with its own target and weight, the mix
offered near the pool's capacity for it.

A mix is a tuple of `Tenant`s. Latency-sensitive tenants are offered a fixed rate in
batches every 10 ms; bulk tenants share the bulk rate the scenario sets (`tuned` finds
the one that takes the pool to the stated load) in proportion to their `share`.

- `ISSUE_MIX`: a filter, a projection and a keyed window (targets 50, 100 and 300 ms)
  beside two bulk tenants of equal weight and equal rate whose targets are 1 s and 4 s.
- `random_mix(seed)`: a mix drawn at random (kinds, targets, weights, rates, load), the
  same for the same seed: a hold-out no setting was tuned on.

Pure: no Ray (the runs are `bench.scenarios.mix`'s).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.harness.runner import Load
from bench.harness.tenants import SCHEMA, bulk
from bench.harness.workload import Workload
from cameo_actors import Dataflow, count

#: The shapes of latency-sensitive tenants, and bulk.
KINDS = ("filter", "project", "window", "bulk")
RUN_S = 3600.0  # workloads are played until the run stops them


@dataclass(frozen=True)
class Tenant:
    """One tenant of a mix: a dataflow of its own, `kind` its shape.

    `rate_eps`: a latency-sensitive tenant's events/s; `share`: a bulk tenant's part of
    the bulk rate (relative to the other bulk tenants' shares)."""

    name: str
    kind: str
    target_ms: float
    weight: float = 1.0
    rate_eps: float = 500.0
    share: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"tenant {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def sensitive(self) -> bool:
        return self.kind != "bulk"

    def flow(self) -> Dataflow:
        """Its dataflow, alone in its tenant."""
        if self.kind == "bulk":
            return bulk(self.name, self.name, self.weight, target_ms=self.target_ms)
        src = (Dataflow(self.name, latency_target_ms=self.target_ms, tenant=self.name,
                        weight=self.weight)
               .source("s", schema=SCHEMA, event_time="ts"))
        if self.kind == "filter":
            return src.filter("value >= 0").sink("o")
        if self.kind == "project":
            return src.map({"key": "key", "scaled": "value * 2"}).sink("o")
        return src.key_by("key").window(tumbling_ms=100).aggregate(n=count()).sink("o")

    def load(self, bulk_eps: float, bulk_shares: float, seed: int) -> Load:
        """Its dataflow and workload, bulk tenants taking `share / bulk_shares` of
        `bulk_eps` (batches every 100 ms over 200 keys), the others their own rate
        (batches every 10 ms over 10 keys)."""
        if self.kind == "bulk":
            rate = bulk_eps * self.share / bulk_shares
            return Load(self.flow(), Workload(rate, RUN_S, seed=seed, keys=200, period_s=0.1))
        return Load(self.flow(), Workload(self.rate_eps, RUN_S, seed=seed, keys=10, period_s=0.01),
                    latency_sensitive=True)


def loads(mix: tuple[Tenant, ...], bulk_eps: float) -> list[Load]:
    """Every tenant's `Load`, bulk ones sharing `bulk_eps` by their shares."""
    shares = sum(t.share for t in mix if not t.sensitive) or 1.0
    return [t.load(bulk_eps, shares, seed=40 + i) for i, t in enumerate(mix)]


ISSUE_MIX = (
    Tenant("filter-50", "filter", 50.0),
    Tenant("project-100", "project", 100.0),
    Tenant("window-300", "window", 300.0),
    Tenant("bulk-1s", "bulk", 1000.0),
    Tenant("bulk-4s", "bulk", 4000.0),
)
#: A random mix's load is drawn from here (of the pool's capacity for it).
RANDOM_LOADS = (0.7, 0.95)


def random_mix(seed: int) -> tuple[tuple[Tenant, ...], float]:
    """A mix drawn from `seed`, and the load to offer it at: one to three latency-sensitive
    tenants (a kind each, targets 20-300 ms, 200-800 events/s) and one to three bulk
    tenants (targets 1-6 s, weights 1-3, shares 0.5-1.5).

    >>> mix, load = random_mix(3)
    >>> mix == random_mix(3)[0], 0.7 <= load <= 0.95, any(t.kind == "bulk" for t in mix)
    (True, True, True)
    """
    rng = random.Random(seed)
    tenants = []
    for i in range(rng.randint(1, 3)):
        kind = rng.choice(KINDS[:3])
        lo = 100 if kind == "window" else 20  # a 100 ms window's result is due at its end
        target = float(rng.choice([t for t in (20, 50, 100, 150, 300) if t >= lo]))
        tenants.append(Tenant(f"{kind}-{int(target)}-{i}", kind, target,
                              rate_eps=float(rng.randrange(200, 801, 100))))
    for i in range(rng.randint(1, 3)):
        target = float(rng.choice((1000, 2000, 3000, 4000, 6000)))
        tenants.append(Tenant(f"bulk-{int(target) // 1000}s-{i}", "bulk", target,
                              weight=float(rng.choice((1, 1, 2, 3))),
                              share=round(rng.uniform(0.5, 1.5), 2)))
    return tuple(tenants), round(rng.uniform(*RANDOM_LOADS), 2)
