"""Scheduling policies: plug-ins that turn (message, profile, now) into a sort key.

Policies decide, the `Scheduler` applies. A policy sees a message at a few
hooks along its path (Dirigo-style), reads the message, the activation's
profile and the `now_ms` it is handed, and returns a decision; it never
writes to the message, its context or the profile, never reads a clock and
never does I/O. The scheduler stamps the decision on the message and learns
the profile (costs, C_path, input watermarks). Only the policy's own state
may change (fair_share's virtual time, token_bucket's buckets), as Ray
Serve's autoscaling policy returns a decision plus its state.

- `stamp(msg, profile)` (a function, the same for every policy): the
  stamp `(t_MF, local priority, start deadline)` the scheduler writes into
  `msg.ctx` before it asks for the key.
- `on_arrival(msg, profile, now)` -> the message's sort key (default: `key()`).
- `before_execute(msg, profile, key, now)`: the message, keyed `key`, is about to run.
- `after_execute(msg, profile, key, cost, queue_delay, now)`: it ran; called
  before the scheduler learns C_OM from it, so the profile still holds the
  estimate the message was keyed with.
- `before_send(msg, profile, now, event_ms)` -> the `PriorityContext` of a
  message the activation emits while processing `msg` (ingest/event time
  carried forward).
- `on_feedback(profile, feedback, now)`: a downstream reported its path
  cost; called after the scheduler took it into C_path.

Keys: smaller = more urgent; the mechanism only compares them. A new policy
usually writes only `key()`, which is called exactly once per message (on
arrival), so a policy may keep state in it. A policy instance belongs to one
scheduler: `get_policy` builds a new one each call.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeAlias

from .context import Feedback, Message, PriorityContext, SortKey
from .exceptions import DuplicatePolicyError, UnknownPolicyError
from .profile import ActivationProfile
from .queues import LATE_SLACK_FLOOR

_INF = math.inf

#: What `stamp` decides: (frontier_ms t_MF, local_priority, start deadline_ms).
#: A plain tuple: it is built once per message on the hot path.
Stamp: TypeAlias = tuple[float, float, float]


def stamp(msg: Message, profile: ActivationProfile) -> Stamp:
    """The stamp of `msg` at `profile`'s activation: t_MF, local priority, start deadline.

    The start deadline is `t_MF + L - C_OM - C_path`. A finite `frontier_ms`
    set by the sender is kept, and so is the local priority then. Reads only:
    `Scheduler.enqueue` writes the result into `msg.ctx`.

    Example:
        >>> p = ActivationProfile("op", dataflow="d", tenant="t", latency_target_ms=100.0)
        >>> m = Message.ingress("op", [{}], dataflow="d", tenant="t", ingest_ms=5.0)
        >>> stamp(m, p), m.ctx.deadline_ms
        ((5.0, 0.0, 105.0), inf)
    """
    ctx = msg.ctx
    f = ctx.frontier_ms
    if f != f:  # NaN: not set by the sender
        f, lp = profile.frontier(msg)
    else:
        lp = ctx.local_priority
    return (
        f,
        lp,
        f
        + profile.latency_target_ms
        - profile.cost_ms(msg.upstream, msg.is_watermark)
        - profile.path_cost_ms,
    )


class Policy:
    """Base of all policies; subclasses implement `key` and may override hooks.

    Hooks read what they are given and return a decision (see the module
    docstring); the defaults key by `key()` and observe nothing.

    Example:
        >>> class Newest(Policy):  # a toy: newest data first
        ...     name = "newest"
        ...     def key(self, msg, profile, now_ms):
        ...         return -msg.ctx.ingest_ms
        >>> register_policy("newest", Newest, replace=True)
        >>> get_policy("newest").name
        'newest'
    """

    name: ClassVar[str] = "policy"
    #: Keys are start deadlines in physical ms: the scheduler then orders work whose
    #: deadline has passed by how late it is (`DeadlineRunQueue`), late work keeping at
    #: least `late_slack_floor` of its target as slack.
    deadline_keys: ClassVar[bool] = False
    late_slack_floor: float = LATE_SLACK_FLOOR

    def key(self, msg: Message, profile: ActivationProfile, now_ms: float) -> SortKey:
        """The sort key of `msg` at the activation described by `profile` (smaller first).

        `msg.ctx` already carries its stamp (`stamp`): frontier, local priority, deadline.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement key()")

    # -- hooks ------------------------------------------------------------------
    def on_arrival(self, msg: Message, profile: ActivationProfile, now_ms: float) -> SortKey:
        """The key the scheduler stamps on `msg` (`msg.key`) as it enters the mailbox."""
        return self.key(msg, profile, now_ms)

    def before_execute(
        self, msg: Message, profile: ActivationProfile, key: SortKey, now_ms: float
    ) -> None:
        """Called right before `msg`, keyed `key` by this policy, runs."""

    def after_execute(
        self,
        msg: Message,
        profile: ActivationProfile,
        key: SortKey,
        cost_ms: float,
        queue_delay_ms: float,
        now_ms: float,
    ) -> None:
        """Called after `msg` ran for `cost_ms`, having waited `queue_delay_ms`.

        The scheduler learns C_OM from the run right after this hook.
        """

    def before_send(
        self,
        msg: Message,
        profile: ActivationProfile,
        now_ms: float,
        event_ms: float | None = None,
    ) -> PriorityContext:
        """The context of a message emitted while processing `msg`.

        Ingest time (and event time, unless `event_ms` is given, e.g. a
        window's end) are carried forward; the receiver stamps the rest.
        """
        c = msg.ctx
        return PriorityContext(
            c.dataflow, c.tenant, c.ingest_ms, c.event_ms if event_ms is None else event_ms
        )

    def on_feedback(self, profile: ActivationProfile, feedback: Feedback, now_ms: float) -> None:
        """A downstream reported its path cost; the scheduler already took it into C_path."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class FifoPolicy(Policy):
    """First in, first out: by arrival on this scheduler (default) or by ingest time.

    Args:
        order: "arrival" or "ingest".

    Example:
        >>> get_policy("fifo", order="ingest")
        FifoPolicy(order='ingest')
    """

    name = "fifo"

    def __init__(self, *, order: str = "arrival") -> None:
        if order not in ("arrival", "ingest"):
            raise ValueError(f"fifo: expected order 'arrival' or 'ingest', got {order!r}")
        self.order = order
        self._by_ingest = order == "ingest"

    def key(self, msg: Message, profile: ActivationProfile, now_ms: float) -> SortKey:
        # Ties (same ingest ms) fall back to arrival in the queues' sequence numbers.
        return msg.ctx.ingest_ms if self._by_ingest else float(msg.seq)

    def __repr__(self) -> str:
        return f"FifoPolicy(order={self.order!r})"


class _DeadlinePolicy(Policy):
    """A policy whose keys are deadlines (`deadline_keys`): how late work is ordered.

    Args:
        late_slack_floor: late work's slack is its target less how late it is, never
            less than this share of its target (`DeadlineRunQueue`): 0.1 by default, so
            a backlog of a loose target catches up below capacity. 1.0 keeps late work
            behind all work due within one of its targets from now: late results are
            worth less than fresh ones, and a loose target's backlog may starve.
    """

    deadline_keys = True

    def __init__(self, *, late_slack_floor: float = LATE_SLACK_FLOOR) -> None:
        if isinstance(late_slack_floor, bool) or not isinstance(late_slack_floor, int | float) \
                or not 0 < late_slack_floor <= 1:
            raise ValueError(f"{self.name}: late_slack_floor must be in (0, 1], got {late_slack_floor!r}")
        self.late_slack_floor = float(late_slack_floor)

    def __repr__(self) -> str:
        floor = self.late_slack_floor
        return f"{type(self).__name__}({'' if floor == LATE_SLACK_FLOOR else f'late_slack_floor={floor}'})"


class EdfPolicy(_DeadlinePolicy):
    """Earliest deadline first: key = t_MF + L (the end-to-end deadline)."""

    name = "edf"

    def key(self, msg: Message, profile: ActivationProfile, now_ms: float) -> SortKey:
        return msg.ctx.frontier_ms + profile.latency_target_ms


class LeastLaxityPolicy(_DeadlinePolicy):
    """Cameo's default (least laxity): key = start deadline t_MF + L - C_OM - C_path."""

    name = "cameo"

    def key(self, msg: Message, profile: ActivationProfile, now_ms: float) -> SortKey:
        return msg.ctx.deadline_ms


class SjfPolicy(Policy):
    """Shortest job first: key = C_OM of the message (learned cost, 0 until measured)."""

    name = "sjf"

    def key(self, msg: Message, profile: ActivationProfile, now_ms: float) -> SortKey:
        return profile.cost_ms(msg.upstream, msg.is_watermark)


class FairSharePolicy(Policy):
    """Proportional share across tenants by weight (start-time fair queueing).

    Each message gets a virtual start tag `S = max(V, F_tenant)` and advances
    the tenant's finish tag `F_tenant = S + cost / weight`; the key is S. V is
    the start tag of the message that last began to run. Backlogged tenants
    thus receive service time in proportion to their weights, and an idle
    tenant banks no credit. Cost is the learned C_OM (`default_cost_ms` until
    known); the tag is corrected by the measured cost after each run.

    Args:
        weights: tenant -> weight; tenants not listed use their profile's weight.
        default_cost_ms: cost assumed for a message whose cost is not yet known.

    Example:
        >>> get_policy("fair_share", weights={"a": 1, "b": 2})
        FairSharePolicy(weights={'a': 1.0, 'b': 2.0})
    """

    name = "fair_share"

    def __init__(
        self, *, weights: Mapping[str, float] | None = None, default_cost_ms: float = 1.0
    ) -> None:
        self.weights: dict[str, float] = {}
        for t, w in (weights or {}).items():
            if isinstance(w, bool) or not isinstance(w, int | float) or not (0 < w < _INF):
                raise ValueError(f"fair_share: weight of tenant {t!r} must be > 0, got {w!r}")
            self.weights[t] = float(w)
        if not (0 < default_cost_ms < _INF):
            raise ValueError(f"fair_share: default_cost_ms must be > 0, got {default_cost_ms!r}")
        self.default_cost_ms = float(default_cost_ms)
        self.virtual_time = 0.0
        self._finish: dict[str, float] = {}

    def _weight(self, tenant: str, profile: ActivationProfile) -> float:
        return self.weights.get(tenant, profile.weight)

    def _cost(self, msg: Message, profile: ActivationProfile) -> float:
        return profile.cost_ms(msg.upstream, msg.is_watermark) or self.default_cost_ms

    def key(self, msg: Message, profile: ActivationProfile, now_ms: float) -> SortKey:
        tenant = msg.ctx.tenant
        cost = self._cost(msg, profile)
        start = self._finish.get(tenant, 0.0)
        if start < self.virtual_time:
            start = self.virtual_time
        self._finish[tenant] = start + cost / self._weight(tenant, profile)
        return start

    def before_execute(
        self, msg: Message, profile: ActivationProfile, key: SortKey, now_ms: float
    ) -> None:
        if key > self.virtual_time:
            self.virtual_time = key

    def after_execute(
        self,
        msg: Message,
        profile: ActivationProfile,
        key: SortKey,
        cost_ms: float,
        queue_delay_ms: float,
        now_ms: float,
    ) -> None:
        tenant = msg.ctx.tenant
        if tenant in self._finish:
            # Charge what the message really cost, not what was guessed at arrival
            # (the profile still holds that guess: the scheduler learns after this hook).
            est = self._cost(msg, profile)
            self._finish[tenant] += (cost_ms - est) / self._weight(tenant, profile)

    def __repr__(self) -> str:
        return f"FairSharePolicy(weights={self.weights})"


class TokenBucketPolicy(Policy):
    """Per-tenant rate limit (events/s) in front of another policy.

    Each tenant has a bucket of `burst` events refilled at `rate` events/s.
    A data message that finds enough tokens takes them and keeps the inner
    policy's key as `(0, key)`; one that does not is over rate and is demoted
    to `(1, key)`, behind all in-rate work but still run when nothing in-rate
    waits (work conserving). A watermark is demoted while its tenant is over
    rate, so it cannot lift a demoted backlog through its activation's key.

    Args:
        rates: tenant -> events per second; others get `default_rate`.
        default_rate: events/s for unlisted tenants (inf: unlimited).
        burst: bucket size in events (one value or per tenant); default: 1 s of rate.
        inner: the policy that orders work within each class (name or instance).
        inner_params: parameters for `get_policy(inner, **inner_params)`.

    Example:
        >>> get_policy("token_bucket", rates={"bulk": 1000.0}, inner="edf")
        TokenBucketPolicy(rates={'bulk': 1000.0}, inner=EdfPolicy())
    """

    name = "token_bucket"

    def __init__(
        self,
        *,
        rates: Mapping[str, float] | None = None,
        default_rate: float = _INF,
        burst: float | Mapping[str, float] | None = None,
        inner: str | Policy = "cameo",
        inner_params: Mapping[str, Any] | None = None,
    ) -> None:
        self.rates: dict[str, float] = {}
        for t, r in (rates or {}).items():
            if isinstance(r, bool) or not isinstance(r, int | float) or not r > 0:
                raise ValueError(
                    f"token_bucket: rate of tenant {t!r} must be > 0 events/s, got {r!r}"
                )
            self.rates[t] = float(r)
        if not default_rate > 0:
            raise ValueError(
                f"token_bucket: default_rate must be > 0 events/s, got {default_rate!r}"
            )
        self.default_rate = float(default_rate)
        self._burst_of: Mapping[str, float] = {}
        self._burst_default: float | None = None
        if isinstance(burst, Mapping):
            self._burst_of = {t: float(b) for t, b in burst.items()}
            bad = [b for b in self._burst_of.values() if not b > 0]
        elif burst is not None:
            self._burst_default = float(burst)
            bad = [] if burst > 0 else [burst]
        else:
            bad = []
        if bad:
            raise ValueError(f"token_bucket: burst must be > 0 events, got {bad[0]!r}")
        self.inner = _resolve_policy(inner, inner_params, "token_bucket", "inner")
        # tenant -> [tokens, last refill ms, over rate?]
        self._buckets: dict[str, list[Any]] = {}

    def _bucket_size(self, tenant: str, rate: float) -> float:
        b = self._burst_of.get(tenant, self._burst_default)
        if b is not None:
            return b
        return max(rate, 1.0) if rate < _INF else _INF

    def _demoted(self, msg: Message, now_ms: float) -> int:
        tenant = msg.ctx.tenant
        rate = self.rates.get(tenant, self.default_rate)
        if rate == _INF:
            return 0
        b = self._buckets.get(tenant)
        cap = self._bucket_size(tenant, rate)
        if b is None:
            b = self._buckets[tenant] = [cap, now_ms, False]
        elif now_ms > b[1]:
            b[0] = min(cap, b[0] + rate * (now_ms - b[1]) / 1000.0)
            b[1] = now_ms
        if msg.is_watermark:
            return 1 if b[2] else 0
        need = msg.size if msg.size > 0 else 1
        if b[0] >= need:
            b[0] -= need
            b[2] = False
            return 0
        b[2] = True
        return 1

    def tokens(self, tenant: str) -> float:
        """Tokens left in `tenant`'s bucket at the last refill (inf if unlimited)."""
        b = self._buckets.get(tenant)
        return _INF if b is None else float(b[0])

    def key(self, msg: Message, profile: ActivationProfile, now_ms: float) -> SortKey:
        return (self._demoted(msg, now_ms), self.inner.key(msg, profile, now_ms))

    # Hooks delegate to the inner policy, which sees its own key (unwrapped).
    def on_arrival(self, msg: Message, profile: ActivationProfile, now_ms: float) -> SortKey:
        inner_key = self.inner.on_arrival(msg, profile, now_ms)
        return (self._demoted(msg, now_ms), inner_key)

    def before_execute(
        self, msg: Message, profile: ActivationProfile, key: SortKey, now_ms: float
    ) -> None:
        self.inner.before_execute(msg, profile, key[1], now_ms)

    def after_execute(
        self,
        msg: Message,
        profile: ActivationProfile,
        key: SortKey,
        cost_ms: float,
        queue_delay_ms: float,
        now_ms: float,
    ) -> None:
        self.inner.after_execute(msg, profile, key[1], cost_ms, queue_delay_ms, now_ms)

    def before_send(
        self,
        msg: Message,
        profile: ActivationProfile,
        now_ms: float,
        event_ms: float | None = None,
    ) -> PriorityContext:
        return self.inner.before_send(msg, profile, now_ms, event_ms)

    def on_feedback(self, profile: ActivationProfile, feedback: Feedback, now_ms: float) -> None:
        self.inner.on_feedback(profile, feedback, now_ms)

    def __repr__(self) -> str:
        return f"TokenBucketPolicy(rates={self.rates}, inner={self.inner!r})"


# -- registry ------------------------------------------------------------------
PolicyFactory = Callable[..., Policy]

_FACTORIES: dict[str, PolicyFactory] = {}


def register_policy(name: str, factory: PolicyFactory, *, replace: bool = False) -> None:
    """Make `get_policy(name, **params)` build policies with `factory(**params)`.

    Args:
        name: the policy's name (as used in configs and `Scheduler(policy=name)`).
        factory: a callable taking keyword parameters and returning a `Policy`
            (a `Policy` subclass works).
        replace: allow replacing an existing registration.

    Raises:
        TypeError: `name` is not a non-empty str or `factory` is not callable.
        DuplicatePolicyError: `name` is taken and `replace` is False.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_policy: expected a non-empty str name, got {name!r}")
    if not callable(factory):
        raise TypeError(f"register_policy({name!r}): factory must be callable, got {factory!r}")
    if name in _FACTORIES and not replace and _FACTORIES[name] is not factory:
        raise DuplicatePolicyError(
            f"register_policy: a policy named {name!r} exists ({_FACTORIES[name]!r}). "
            "Fix: choose another name, or pass replace=True."
        )
    _FACTORIES[name] = factory


def policy_names() -> list[str]:
    """Names `get_policy` knows, sorted."""
    return sorted(_FACTORIES)


def get_policy(name: str, **params: Any) -> Policy:
    """Build a new policy instance by name.

    Raises:
        UnknownPolicyError: no policy is registered under `name` (lists the known ones).
        TypeError: the policy does not take one of `params`, or the factory
            did not return a `Policy`.

    Example:
        >>> get_policy("llf").name
        'cameo'
        >>> get_policy("nope")
        Traceback (most recent call last):
        ...
        cameo_actors.scheduling.exceptions.UnknownPolicyError: unknown scheduling policy 'nope'; known policies: ...
    """
    factory = _FACTORIES.get(name) if isinstance(name, str) else None
    if factory is None:
        raise UnknownPolicyError(name, _FACTORIES)
    try:
        sig: inspect.Signature | None = inspect.signature(factory)
    except (TypeError, ValueError):  # some builtins have no signature: just call
        sig = None
    if sig is not None:
        try:
            sig.bind(**params)
        except TypeError as e:
            accepted = ", ".join(sig.parameters) or "none"
            raise TypeError(
                f"policy {name!r}: bad parameters {sorted(params)}: {e}. "
                f"Its parameters: {accepted}."
            ) from None
    policy = factory(**params)
    if not isinstance(policy, Policy):
        raise TypeError(
            f"policy {name!r}: factory returned {type(policy).__name__}, expected a Policy"
        )
    return policy


def _resolve_policy(
    policy: Policy | str, params: Mapping[str, Any] | None, owner: str, arg: str
) -> Policy:
    """`policy` itself if it is a `Policy`, else a new `get_policy(policy, **params)`.

    `owner` and `arg` name the caller and its argument in the error for params
    given with an instance (their `{arg}_params`).
    """
    if isinstance(policy, Policy):
        if params:
            raise ValueError(f"{owner}: {arg}_params only apply when {arg} is a name")
        return policy
    return get_policy(policy, **dict(params or {}))


for _name, _factory in (
    ("fifo", FifoPolicy),
    ("edf", EdfPolicy),
    ("cameo", LeastLaxityPolicy),
    ("llf", LeastLaxityPolicy),
    ("sjf", SjfPolicy),
    ("fair_share", FairSharePolicy),
    ("token_bucket", TokenBucketPolicy),
):
    register_policy(_name, _factory)
