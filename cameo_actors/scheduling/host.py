"""What a scheduler hosts and how it is administered: activations added, reweighed,
removed, held and released, with their accounting by dataflow (the `DataflowProfile`
its activations share, the members that may hold each other's feedback) and by
tenant (the members whose largest weight is the tenant's on the floor).

`ActivationHost` is the scheduler's control plane: the executor calls it when its
plan or its credits change. `Scheduler` adds the per-message paths on top.
"""

from __future__ import annotations

from collections.abc import Iterator

from .activation import _HELD, _RUNNING_HELD, Activation
from .context import Message, SortKey
from .exceptions import DuplicateActivationError, UnknownActivationError
from .policies import Policy
from .profile import ActivationProfile, DataflowProfile, WindowTiming
from .run_queues import RunQueues
from .slices import SchedulerStats


class ActivationHost:
    """The hosted activations of one scheduler and their run queues.

    Args:
        policy: the scheduling policy (its kind of keys picks the run queues).
        alpha: EWMA weight of new cost samples in the profiles.
        floor_slack_ms: tenant floors' slack, None for off (see `Scheduler`).
    """

    def __init__(self, policy: Policy, alpha: float, floor_slack_ms: float | None) -> None:
        self.policy = policy
        self.alpha = alpha
        self.stats = SchedulerStats()
        self._acts: dict[str, Activation] = {}
        self._flows: dict[str, DataflowProfile] = {}
        self._members: dict[str, set[str]] = {}  # dataflow -> its hosted activation ids
        self._tenants: dict[str, set[str]] = {}  # tenant -> its hosted activation ids
        self._queues = RunQueues(policy, self._acts, self._tenants, self.stats, floor_slack_ms)
        self.floor = self._queues.floor
        self._backlog = 0

    # -- activations ------------------------------------------------------------
    def add_activation(
        self,
        activation_id: str,
        *,
        dataflow: str,
        tenant: str,
        latency_target_ms: float,
        weight: float = 1.0,
        window: WindowTiming | None = None,
    ) -> ActivationProfile:
        """Host a new activation; returns its profile.

        Args:
            activation_id: unique id on this scheduler (e.g. "df1/sum#2").
            dataflow: its dataflow id (activations of one dataflow share the lag estimate).
            tenant: the owning tenant.
            latency_target_ms: the dataflow's latency target L (inf: best effort).
            weight: the tenant's weight for fair_share.
            window: the window layout if the operator is windowed.

        Raises:
            DuplicateActivationError: the id is already hosted.
            TypeError, ValueError: a bad argument.
        """
        if activation_id in self._acts:
            raise DuplicateActivationError(
                f"add_activation: {activation_id!r} is already hosted. "
                "Fix: remove_activation() it first, or use a unique id."
            )
        flow = self._flows.get(dataflow)
        if flow is None and isinstance(dataflow, str):
            flow = DataflowProfile(dataflow, self.alpha)
        profile = ActivationProfile(
            activation_id,
            dataflow=dataflow,
            tenant=tenant,
            latency_target_ms=latency_target_ms,
            weight=weight,
            window=window,
            flow=flow,
            alpha=self.alpha,
        )
        self._acts[activation_id] = Activation(profile)
        self._flows[dataflow] = profile.flow
        self._members.setdefault(dataflow, set()).add(activation_id)
        self._tenants.setdefault(tenant, set()).add(activation_id)
        if self.floor is not None and profile.weight > self.floor.weight(tenant):
            self.floor.set_weight(tenant, profile.weight)
        return profile

    def set_weight(self, dataflow: str, weight: float) -> None:
        """Change the weight of a hosted dataflow's activations (and so of its tenant)."""
        tenants = set()
        for aid in self._members.get(dataflow, ()):
            profile = self._acts[aid].profile
            profile.weight = float(weight)
            tenants.add(profile.tenant)
        for tenant in tenants:
            self._reweigh(tenant)

    def _reweigh(self, tenant: str) -> None:
        """A tenant's weight on the floor: the largest of its hosted activations'."""
        if self.floor is not None:
            self.floor.set_weight(tenant, max(self._acts[a].profile.weight
                                              for a in self._tenants[tenant]))

    def remove_activation(self, activation_id: str) -> list[Message]:
        """Stop hosting an activation (cancel); returns its pending messages.

        Frees its mailbox and run-queue entry. Safe to call from inside
        `execute`, also for the activation that is running. Downstream
        feedback it gave upstream activations is forgotten.

        Raises:
            UnknownActivationError: the id is not hosted.
        """
        act = self._acts.pop(activation_id, None)
        if act is None:
            raise UnknownActivationError(activation_id, "remove_activation")
        self._queues.withdraw(act)  # a running slice ends at the next message boundary
        pending = act.mailbox.clear()
        self._backlog -= len(pending)
        self.stats.dropped += len(pending)
        tenant = act.tenant
        members_of_tenant = self._tenants[tenant]
        members_of_tenant.discard(activation_id)
        floor = self.floor
        if floor is not None:
            floor.dropped(tenant, len(pending))
            if not members_of_tenant:
                floor.forget(tenant)
            elif act.profile.weight >= floor.weight(tenant):  # it may have been the heaviest
                self._reweigh(tenant)
        if not members_of_tenant:
            del self._tenants[tenant]
        # Feedback only flows within a dataflow: only its members can hold a report.
        dataflow = act.profile.dataflow
        members = self._members[dataflow]
        members.discard(activation_id)
        for other in members:
            self._acts[other].profile.forget_downstream(activation_id)
        if not members:
            del self._members[dataflow]
            del self._flows[dataflow]
        return pending

    def __contains__(self, activation_id: object) -> bool:
        return activation_id in self._acts

    def __len__(self) -> int:
        """Number of hosted activations."""
        return len(self._acts)

    def activation_ids(self) -> Iterator[str]:
        """Ids of hosted activations."""
        return iter(list(self._acts))

    def profile(self, activation_id: str) -> ActivationProfile:
        """The profile (settings and learned costs) of a hosted activation."""
        return self._hosted(activation_id, "profile").profile

    def _hosted(self, activation_id: str, what: str) -> Activation:
        """The hosted activation; `what` names the caller in the error for unknown ids."""
        act = self._acts.get(activation_id)
        if act is None:
            raise UnknownActivationError(activation_id, what)
        return act

    def dataflow_profile(self, dataflow: str) -> DataflowProfile | None:
        """The shared per-dataflow observations (source lag), None if none hosted."""
        return self._flows.get(dataflow)

    # -- queues -------------------------------------------------------------------
    @property
    def backlog(self) -> int:
        """Messages waiting in all mailboxes."""
        return self._backlog

    def pending(self, activation_id: str) -> int:
        """Messages waiting in one activation's mailbox."""
        return len(self._hosted(activation_id, "pending").mailbox)

    def queued(self, activation_id: str) -> list[Message]:
        """One activation's pending messages, in the order it will run them (a copy)."""
        return self._hosted(activation_id, "queued").mailbox.messages()

    def urgent_key(self, activation_id: str) -> SortKey | None:
        """The most urgent key among one activation's pending messages (None if empty)."""
        return self._hosted(activation_id, "urgent_key").mailbox.urgent_key()

    def has_work(self) -> bool:
        """Whether `run_once` would run something now."""
        return self._queues.has_work()

    def peek(self) -> tuple[str, SortKey] | None:
        """(activation_id, key) that `run_once` would run next, or None."""
        return self._queues.peek()

    def tenant_shares(self) -> dict[str, dict[str, float | bool | int]]:
        """Per tenant with tenant floors on: weight, executor time taken, how far over (or
        under, < 0) its weighted share it stands, whether it is demoted; {} when off."""
        return {} if self.floor is None else self.floor.shares()

    # -- credits ------------------------------------------------------------------
    def hold(self, activation_id: str) -> None:
        """Keep an activation out of the run queue (its downstream has no credits left).

        Its mailbox still takes messages; a running slice ends at the next boundary.
        """
        act = self._acts.get(activation_id)
        if act is not None:
            self._queues.hold(act)

    def release(self, activation_id: str) -> None:
        """Let a held activation run again (credits came back)."""
        act = self._acts.get(activation_id)
        if act is not None:
            self._queues.release(act)

    def is_held(self, activation_id: str) -> bool:
        """Whether a hosted activation is held (False for unknown ids)."""
        act = self._acts.get(activation_id)
        return act is not None and act.state in (_HELD, _RUNNING_HELD)
