"""Guaranteed floors: each tenant's weighted share of an executor's time under overload.

Deadline order alone starves a loose target under overload: its deadlines
are always later than someone else's. The floor keeps a virtual clock per
tenant, as Linux's EEVDF does per task: running a message of cost c adds
`c / weight` to its tenant's finish tag `F`, and `V` follows the weighted mean
of the tags of the tenants with work here. `(F - V) * weight` is how much more
executor time (ms) the tenant took than its weighted share while it competed;
above `slack_ms` the tenant is *over its share* and demoted: the scheduler
runs its work only when no tenant within its share has any (demoted, not
dropped), in deadline order among the demoted. It is promoted again once the
others' service has brought it back within half the slack.

`V` never goes back (like CFS's min_vruntime): when a tenant with a debt runs
out of work the mean drops, and the others must not find themselves in debt
for it. A tenant that gets work after none starts at `F = max(F, V)`: idle
time banks no credit, and a debt is paid off only by the others' service (a
heavy tenant that drains its queue now and then is not forgiven each time).
When the executor runs out of work nobody was contended, and every debt is
cleared. So without contention nothing changes, and under it every tenant
with work gets at least its weighted share (max-min: what a light tenant
leaves goes to the others, by deadline order).
"""

from __future__ import annotations

import math
from collections.abc import Callable

_INF = math.inf
#: A tenant's debt is kept to at most this many slacks (see `charge`).
_DEBT_CAP = 2.0


class _Tenant:
    __slots__ = ("weight", "finish", "pending", "busy_ms", "demoted", "demotions")

    def __init__(self, weight: float) -> None:
        self.weight = weight
        self.finish = 0.0
        self.pending = 0  # messages queued or running here
        self.busy_ms = 0.0
        self.demoted = False
        self.demotions = 0


class TenantFloor:
    """The tenants' virtual clocks and each one's standing against its share.

    `on_demote(tenant)` / `on_promote(tenant)` let the scheduler move the
    tenant's queued activations between its two run queues.

    Example:
        >>> moved = []
        >>> f = TenantFloor(10.0, on_demote=moved.append, on_promote=lambda t: None)
        >>> f.set_weight("a", 1.0); f.set_weight("b", 1.0)
        >>> f.queued("a"); f.queued("b")
        >>> for _ in range(3):  # a runs 3 x 8 ms while b waits: 12 ms over its half
        ...     f.queued("a"); f.charge("a", 8.0)
        >>> moved, f.over_share_ms("a")
        (['a'], 12.0)
    """

    __slots__ = ("slack_ms", "_tenants", "_weight_sum", "_weighted_finish", "_virtual",
                 "_demoted", "_on_demote", "_on_promote")

    def __init__(self, slack_ms: float, *, on_demote: Callable[[str], None],
                 on_promote: Callable[[str], None]) -> None:
        if isinstance(slack_ms, bool) or not isinstance(slack_ms, int | float) \
                or not 0 < slack_ms < _INF:
            raise ValueError(f"TenantFloor: slack_ms must be finite and > 0, got {slack_ms!r}")
        self.slack_ms = float(slack_ms)
        self._tenants: dict[str, _Tenant] = {}
        # Over the tenants with work: sum of weights and of weight * finish tag.
        self._weight_sum = 0.0
        self._weighted_finish = 0.0
        self._virtual = 0.0  # V: it only moves forward
        self._demoted: set[str] = set()
        self._on_demote = on_demote
        self._on_promote = on_promote

    def __repr__(self) -> str:
        return (f"TenantFloor(slack_ms={self.slack_ms}, tenants={len(self._tenants)}, "
                f"demoted={sorted(self._demoted)})")

    @property
    def virtual_ms(self) -> float:
        """V: the weighted mean tag of the tenants with work, never going back."""
        return self._advance_virtual()

    def _advance_virtual(self) -> float:
        if self._weight_sum > 0:
            mean = self._weighted_finish / self._weight_sum
            if mean > self._virtual:
                self._virtual = mean
        return self._virtual

    def weight(self, tenant: str) -> float:
        """A tenant's weight here (0 for one not known)."""
        t = self._tenants.get(tenant)
        return 0.0 if t is None else t.weight

    def set_weight(self, tenant: str, weight: float) -> None:
        """A tenant's weight (its dataflows' largest `scheduling.weight` here)."""
        t = self._tenants.get(tenant)
        if t is None:
            self._tenants[tenant] = _Tenant(weight)
            return
        if t.pending:
            self._leave(t)
            t.weight = weight
            self._join(t)
        t.weight = weight

    def forget(self, tenant: str) -> None:
        """The tenant has no activation here any more."""
        t = self._tenants.pop(tenant, None)
        if t is not None:
            if t.pending:
                self._leave(t)
            self._demoted.discard(tenant)

    def is_demoted(self, tenant: str) -> bool:
        return tenant in self._demoted

    def over_share_ms(self, tenant: str) -> float:
        """Executor time (ms) the tenant took above its weighted share (< 0: below)."""
        t = self._tenants[tenant]
        return (t.finish - self.virtual_ms) * t.weight

    def _join(self, t: _Tenant) -> None:
        self._weight_sum += t.weight
        self._weighted_finish += t.weight * t.finish

    def _leave(self, t: _Tenant) -> None:
        self._advance_virtual()  # before the mean loses this tenant
        self._weight_sum -= t.weight
        self._weighted_finish -= t.weight * t.finish
        if self._weight_sum <= 1e-12:  # the last one: no rounding left behind
            self._weight_sum = self._weighted_finish = 0.0

    # -- the scheduler's events -----------------------------------------------------
    def queued(self, tenant: str) -> None:
        """A message of `tenant` entered a mailbox."""
        t = self._tenants[tenant]
        if not t.pending:
            v = self.virtual_ms
            if t.finish < v:  # no credit for idle time
                t.finish = v
            self._join(t)
        t.pending += 1

    def dropped(self, tenant: str, n: int) -> None:
        """`n` queued messages of `tenant` were discarded (not run)."""
        t = self._tenants.get(tenant)
        if t is None or n <= 0:
            return
        t.pending -= n
        if not t.pending:
            self._leave(t)

    def charge(self, tenant: str, cost_ms: float) -> None:
        """A queued message of `tenant` ran for `cost_ms` (0 if it failed): advance its
        tag, then demote or promote whoever crossed the slack."""
        t = self._tenants.get(tenant)
        if t is None:  # it left during its own message
            return
        w = t.weight
        t.finish += cost_ms / w
        self._weighted_finish += cost_ms
        t.busy_ms += cost_ms
        v = self.virtual_ms
        # Debt is capped: time taken while the others could not run (held by backpressure,
        # yet counted as having work) must not starve this tenant for long afterwards.
        cap = _DEBT_CAP * self.slack_ms
        if (t.finish - v) * w > cap:
            capped = v + cap / w
            self._weighted_finish -= w * (t.finish - capped)
            t.finish = capped
        if not t.demoted and (t.finish - v) * w > self.slack_ms:
            t.demoted = True
            t.demotions += 1
            self._demoted.add(tenant)
            self._on_demote(tenant)
        t.pending -= 1
        if not t.pending:
            self._leave(t)
        if self._demoted:
            self._promote_within(self.slack_ms / 2)

    def idle(self) -> None:
        """Nothing is queued or running: nobody was contended, every debt is cleared."""
        v = self.virtual_ms
        for t in self._tenants.values():
            if t.finish > v:
                t.finish = v
        self._promote_within(_INF)

    def _promote_within(self, slack: float) -> None:
        v = self.virtual_ms
        for name in [n for n in self._demoted
                     if (self._tenants[n].finish - v) * self._tenants[n].weight <= slack]:
            self._tenants[name].demoted = False
            self._demoted.discard(name)
            self._on_promote(name)

    def shares(self) -> dict[str, dict[str, float | bool | int]]:
        """Per tenant: weight, executor time taken, standing against its share, demoted."""
        v = self.virtual_ms
        return {name: {"weight": t.weight, "busy_ms": t.busy_ms,
                       "over_share_ms": (t.finish - v) * t.weight,
                       "demoted": t.demoted, "demotions": t.demotions}
                for name, t in self._tenants.items()}
